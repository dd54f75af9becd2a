"""InterPodAffinity against kube-scheduler v1.36's tables (interpodaffinity/filtering_test.go, scoring_test.go):
the same clusters, pods and expected statuses and scores, our own code. Go's empty namespace is "default" here
(PodInfo's default); the cases of labels the API server would refuse ("{{.bad-value.}}") are left out.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.status import Code
from scheduler_plugin.plugins.interpodaffinity import InterPodAffinity, InterPodAffinityArgs
from scheduler_plugin.plugins.interpodaffinity.plugin import (
    REASON_AFFINITY,
    REASON_ANTI_AFFINITY,
    REASON_EXISTING_ANTI_AFFINITY,
)
from scheduler_plugin.plugins.interpodaffinity.terms import MAX_POD_AFFINITY_TERMS
from tests.objects import node
from tests.unit.scheduler.placement_builders import (
    a_pod,
    affinity,
    expr,
    filter_verdicts,
    nodes_with,
    scores,
    snapshot_of,
    term,
    verdicts,
)

Obj = dict[str, Any]
AFF = (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, REASON_AFFINITY)
ANTI = (Code.UNSCHEDULABLE, REASON_ANTI_AFFINITY)
EXISTING = (Code.UNSCHEDULABLE, REASON_EXISTING_ANTI_AFFINITY)
SKIP = "skip"

SERVICE_SCAN = {"service": "securityscan"}
SECURITY_S1 = {"security": "S1"}
NODE1 = {"node1": {"region": "r1", "zone": "z11"}}


def plugin(**args: Any) -> InterPodAffinity:
    return InterPodAffinity(InterPodAffinityArgs(**args))


def aff_in(key: str, topology: str, *values: str) -> Obj:
    return term(expr(key, "In", *values), topology=topology)


def exists(key: str, topology: str) -> Obj:
    return term(expr(key, "Exists"), topology=topology)


def team_selector(team: str) -> Obj:
    return {"matchExpressions": [expr("team", "In", team)]}


SCAN_ON_NODE1 = a_pod("scan", labels=SERVICE_SCAN, node_name="node1")

# TestRequiredAffinitySingleNode: (name, incoming pod, existing pods, expected verdict on node1 | SKIP)
SINGLE_NODE = [
    ("no required pod affinity: nothing to check", a_pod(), [], SKIP),
    ("affinity In matches the existing pod", a_pod(labels=SECURITY_S1, aff=affinity(
        required=[aff_in("service", "region", "securityscan", "value2")])), [SCAN_ON_NODE1], None),
    ("affinity NotIn matches the existing pod", a_pod(labels=SECURITY_S1, aff=affinity(
        required=[term(expr("service", "NotIn", "securityscan3", "value3"), topology="region")])),
     [SCAN_ON_NODE1], None),
    ("affinity does not match a pod in another namespace", a_pod(labels=SECURITY_S1, aff=affinity(
        required=[term(expr("service", "In", "securityscan", "value2"), topology="region",
                       namespaces=["DiffNameSpace"])])),
     [a_pod("x", namespace="ns", labels=SERVICE_SCAN, node_name="node1")], AFF),
    ("affinity selector does not match the existing pod", a_pod(labels=SERVICE_SCAN, aff=affinity(
        required=[aff_in("service", "", "antivirusscan", "value2") | {"topologyKey": "region"}])),
     [SCAN_ON_NODE1], AFF),
    ("several operators, all terms matched by the existing pod", a_pod(labels=SECURITY_S1, aff=affinity(required=[
        term(expr("service", "Exists"), expr("wrongkey", "DoesNotExist"), topology="region"),
        term(expr("service", "In", "securityscan"), expr("service", "NotIn", "WrongValue"), topology="region"),
    ])), [SCAN_ON_NODE1], None),
    ("requirements are ANDed: one does not match", a_pod(labels=SECURITY_S1, aff=affinity(required=[
        term(expr("service", "Exists"), expr("wrongkey", "DoesNotExist"), topology="region"),
        term(expr("service", "In", "securityscan2"), expr("service", "NotIn", "WrongValue"), topology="region"),
    ])), [SCAN_ON_NODE1], AFF),
    ("affinity and anti-affinity both satisfied", a_pod(labels=SECURITY_S1, aff=affinity(
        required=[aff_in("service", "region", "securityscan", "value2")],
        anti_required=[aff_in("service", "node", "antivirusscan", "value2")])), [SCAN_ON_NODE1], None),
    ("affinity, anti-affinity and the existing pod's anti-affinity satisfied", a_pod(labels=SECURITY_S1, aff=affinity(
        required=[aff_in("service", "region", "securityscan", "value2")],
        anti_required=[aff_in("service", "node", "antivirusscan", "value2")])),
     [a_pod("e", labels=SERVICE_SCAN, node_name="node1",
            aff=affinity(anti_required=[aff_in("service", "node", "antivirusscan", "value2")]))], None),
    ("affinity satisfied, anti-affinity not", a_pod(labels=SECURITY_S1, aff=affinity(
        required=[aff_in("service", "region", "securityscan", "value2")],
        anti_required=[aff_in("service", "zone", "securityscan", "value2")])), [SCAN_ON_NODE1], ANTI),
    ("the existing pod's anti-affinity is not satisfied", a_pod(labels=SERVICE_SCAN, aff=affinity(
        required=[aff_in("service", "region", "securityscan", "value2")],
        anti_required=[aff_in("service", "node", "antivirusscan", "value2")])),
     [a_pod("e", labels=SERVICE_SCAN, node_name="node1",
            aff=affinity(anti_required=[aff_in("service", "zone", "securityscan", "value2")]))], EXISTING),
    ("the pod matches its own affinity but an existing pod (on an unknown node) matches too",
     a_pod(labels=SERVICE_SCAN, aff=affinity(
         required=[term(expr("service", "NotIn", "securityscan", "value2"), topology="region")])),
     [a_pod("x", labels=SERVICE_SCAN, node_name="node2")], AFF),
    ("the existing pod's anti-affinity applies to a pod without any", a_pod(labels=SERVICE_SCAN),
     [a_pod("e", labels=SERVICE_SCAN, node_name="node1",
            aff=affinity(anti_required=[aff_in("service", "zone", "securityscan", "value2")]))], EXISTING),
    ("the existing pod's anti-affinity does not match: nothing to check", a_pod(labels=SERVICE_SCAN),
     [a_pod("e", labels=SERVICE_SCAN, node_name="node1",
            aff=affinity(anti_required=[term(expr("service", "NotIn", "securityscan", "value2"), topology="zone")]))],
     SKIP),
    ("anti-affinity matches the existing pod, not the other way round", a_pod(labels=SERVICE_SCAN, aff=affinity(
        anti_required=[exists("service", "region"), exists("security", "region")])),
     [a_pod("e", labels=SECURITY_S1, node_name="node1", aff=affinity(anti_required=[exists("security", "zone")]))],
     ANTI),
    ("symmetry a1: partial matches both ways", a_pod(labels=SERVICE_SCAN, aff=affinity(
        anti_required=[exists("service", "zone"), exists("security", "zone")])),
     [a_pod("e", labels=SECURITY_S1, node_name="node1", aff=affinity(anti_required=[exists("security", "zone")]))],
     ANTI),
    ("symmetry a2: partial matches both ways", a_pod(labels=SECURITY_S1, aff=affinity(
        anti_required=[exists("security", "zone")])),
     [a_pod("e", labels=SERVICE_SCAN, node_name="node1",
            aff=affinity(anti_required=[exists("service", "zone"), exists("security", "zone")]))], EXISTING),
    ("symmetry b1", a_pod(labels={"abc": "", "xyz": ""}, aff=affinity(
        anti_required=[exists("abc", "zone"), exists("def", "zone")])),
     [a_pod("e", labels={"def": "", "xyz": ""}, node_name="node1",
            aff=affinity(anti_required=[exists("abc", "zone"), exists("def", "zone")]))], ANTI),
    ("symmetry b2", a_pod(labels={"def": "", "xyz": ""}, aff=affinity(
        anti_required=[exists("abc", "zone"), exists("def", "zone")])),
     [a_pod("e", labels={"abc": "", "xyz": ""}, node_name="node1",
            aff=affinity(anti_required=[exists("abc", "zone"), exists("def", "zone")]))], ANTI),
    ("affinity with a namespaceSelector", a_pod(labels=SECURITY_S1, aff=affinity(required=[
        term(expr("service", "In", "securityscan", "value2"), topology="region",
             namespace_selector=team_selector("team1"))])),
     [a_pod("x", namespace="subteam1.team1", labels=SERVICE_SCAN, node_name="node1")], None),
    ("affinity with a namespaceSelector that does not select the pod's namespace", a_pod(labels=SECURITY_S1,
     aff=affinity(required=[term(expr("service", "In", "securityscan", "value2"), topology="region",
                                 namespace_selector=team_selector("team1"))])),
     [a_pod("x", namespace="subteam1.team2", labels=SERVICE_SCAN, node_name="node1")], AFF),
    ("anti-affinity with a matching namespaceSelector", a_pod(namespace="subteam1.team1", labels=SECURITY_S1,
     aff=affinity(anti_required=[term(expr("service", "In", "securityscan", "value2"), topology="zone",
                                      namespace_selector=team_selector("team1"))])),
     [a_pod("x", namespace="subteam2.team1", labels=SERVICE_SCAN, node_name="node1")], ANTI),
    ("anti-affinity with an empty namespaceSelector: every namespace", a_pod(namespace="subteam1.team1",
     labels=SECURITY_S1, aff=affinity(anti_required=[
         term(expr("service", "In", "securityscan", "value2"), topology="zone", namespace_selector={})])),
     [a_pod("x", namespace="subteam2.team1", labels=SERVICE_SCAN, node_name="node1")], ANTI),
    ("anti-affinity with a namespaceSelector that does not select", a_pod(namespace="subteam1.team1",
     labels=SECURITY_S1, aff=affinity(anti_required=[
         term(expr("service", "In", "securityscan", "value2"), topology="zone",
              namespace_selector=team_selector("team1"))])),
     [a_pod("x", namespace="subteam1.team2", labels=SERVICE_SCAN, node_name="node1")], None),
]


@pytest.mark.parametrize(("incoming", "pods", "expected"), [c[1:] for c in SINGLE_NODE],
                         ids=[c[0] for c in SINGLE_NODE])
def test_required_affinity_single_node(incoming: Obj, pods: list[Obj], expected: Any) -> None:
    snap = snapshot_of(nodes_with(NODE1), pods)
    status, found = filter_verdicts(plugin(), snap, incoming)
    if expected == SKIP:
        assert status.is_skip()
        return
    assert status.is_success()
    assert found == [expected]


CHINA, CHINA_AZ1, INDIA = {"region": "China"}, {"region": "China", "az": "az1"}, {"region": "India"}


def hosts(*zones: str, key: str = "zone", region: str = "r1") -> dict[str, dict[str, str]]:
    return {f"node{chr(65 + i)}": {"region": region, key: z, "hostname": f"node{chr(65 + i)}"}
            for i, z in enumerate(zones)}


# TestRequiredAffinityMultipleNodes: (name, incoming, existing, nodes, expected per node | SKIP)
MULTIPLE_NODES = [
    ("nodes of the matching pod's region fit", a_pod(aff=affinity(required=[aff_in("foo", "region", "bar")])),
     [a_pod("p1", labels={"foo": "bar"}, node_name="node1")],
     {"node1": CHINA, "node2": CHINA_AZ1, "node3": INDIA}, [None, None, AFF]),
    ("the first pod of a group fits anywhere its own terms' keys are",
     a_pod(labels={"foo": "bar", "service": "securityscan"}, aff=affinity(required=[
         aff_in("foo", "zone", "bar"), aff_in("service", "zone", "securityscan")])),
     [a_pod("p1", labels={"foo": "bar"}, node_name="nodeA")],
     {"nodeA": {"zone": "az1", "hostname": "h1"}, "nodeB": {"zone": "az2", "hostname": "h2"}}, [None, None]),
    ("the first pod of a group needs nodes with the topology keys",
     a_pod(labels={"foo": "bar", "service": "securityscan"}, aff=affinity(required=[
         aff_in("foo", "zone", "bar"), aff_in("service", "zone", "securityscan")])),
     [a_pod("p1", labels={"foo": "bar"}, node_name="nodeA")],
     {"nodeA": {"zoneLabel": "az1", "hostname": "h1"}, "nodeB": {"zoneLabel": "az2", "hostname": "h2"}},
     [AFF, AFF]),
    ("anti-affinity covers the whole region", a_pod(aff=affinity(anti_required=[aff_in("foo", "region", "abc")])),
     [a_pod("p", labels={"foo": "abc"}, node_name="nodeA")], hosts("r1", "r1", key="x"), [ANTI, ANTI]),
    ("anti-affinity: any term matching is enough", a_pod(aff=affinity(anti_required=[
        aff_in("foo", "region", "abc"), aff_in("service", "zone", "securityscan")])),
     [a_pod("p", labels={"foo": "abc", "service": "securityscan"}, node_name="nodeA")], hosts("z1", "z2"),
     [ANTI, ANTI]),
    ("anti-affinity: another region fits", a_pod(aff=affinity(anti_required=[aff_in("foo", "region", "abc")])),
     [a_pod("p", labels={"foo": "abc"}, node_name="nodeA")],
     {"nodeA": CHINA, "nodeB": CHINA_AZ1, "nodeC": INDIA}, [ANTI, ANTI, None]),
    ("anti-affinity in the pod's namespace only; the other namespace's pod does not select it",
     a_pod(namespace="NS1", labels={"foo": "123"}, aff=affinity(anti_required=[aff_in("foo", "region", "bar")])),
     [a_pod("p", namespace="NS1", labels={"foo": "bar"}, node_name="nodeA"),
      a_pod("q", namespace="NS2", node_name="nodeC", aff=affinity(anti_required=[aff_in("foo", "region", "123")]))],
     {"nodeA": CHINA, "nodeB": CHINA_AZ1, "nodeC": INDIA}, [ANTI, ANTI, None]),
    ("an existing pod's term with a key no node has constrains nothing", a_pod(labels={"foo": ""}),
     [a_pod("p", node_name="nodeA", aff=affinity(anti_required=[exists("foo", "invalid-node-label")]))],
     hosts("z1", "z1"), SKIP),
    ("the incoming pod's term with a key no node has constrains nothing",
     a_pod(aff=affinity(anti_required=[exists("foo", "invalid-node-label")])),
     [a_pod("p", labels={"foo": ""}, node_name="nodeA")], hosts("z1", "z1"), [None, None]),
    ("the existing pods' terms each exclude a domain", a_pod(labels={"foo": "", "bar": ""}),
     [a_pod("p", node_name="nodeA", aff=affinity(anti_required=[exists("foo", "zone")])),
      a_pod("q", node_name="nodeA", aff=affinity(anti_required=[exists("bar", "region")]))],
     hosts("z1", "z2"), [EXISTING, EXISTING]),
    ("the incoming pod's terms each exclude a domain",
     a_pod(aff=affinity(anti_required=[exists("foo", "zone"), exists("bar", "region")])),
     [a_pod("p", labels={"foo": ""}, node_name="nodeA"), a_pod("q", labels={"bar": ""}, node_name="nodeB")],
     hosts("z1", "z2"), [ANTI, ANTI]),
    ("existing pod: a term counts only when its key exists", a_pod(labels={"foo": "", "bar": ""}),
     [a_pod("p", node_name="nodeA", aff=affinity(anti_required=[
         exists("foo", "invalid-node-label"), exists("bar", "zone")]))], hosts("z1", "z2"), [EXISTING, None]),
    ("incoming pod: a term counts only when its key exists",
     a_pod(aff=affinity(anti_required=[exists("foo", "invalid-node-label"), exists("bar", "zone")])),
     [a_pod("podA", labels={"foo": "", "bar": ""}, node_name="nodeA")], hosts("z1", "z2"), [ANTI, None]),
    ("existing pod: region and zone terms", a_pod(labels={"foo": "", "bar": ""}),
     [a_pod("p", node_name="nodeA", aff=affinity(anti_required=[exists("foo", "region"), exists("bar", "zone")]))],
     hosts("z1", "z2"), [EXISTING, EXISTING]),
    ("incoming pod: region and zone terms", a_pod(aff=affinity(anti_required=[
        exists("foo", "region"), exists("bar", "zone")])),
     [a_pod("p", labels={"foo": "", "bar": ""}, node_name="nodeA")], hosts("z1", "z2"), [ANTI, ANTI]),
    ("existing pods on nodeA and nodeB each have a matching term: only nodeC", a_pod(labels={"foo": "", "bar": ""}),
     [a_pod("p", node_name="nodeA", aff=affinity(anti_required=[exists("foo", "zone"), exists("labelA", "zone")])),
      a_pod("q", node_name="nodeB", aff=affinity(anti_required=[exists("bar", "zone"), exists("labelB", "zone")]))],
     hosts("z1", "z2", "z3"), [EXISTING, EXISTING, None]),
    ("affinity: one pod matching all terms, keys checked after", a_pod(aff=affinity(required=[
        exists("foo", "region"), exists("bar", "zone")])),
     [a_pod("pod1", labels={"foo": "", "bar": ""}, node_name="nodeA")], hosts("z1", "z1"), [None, None]),
    ("affinity: the terms must be matched by the same pod", a_pod(aff=affinity(required=[
        exists("foo", "region"), exists("bar", "zone")])),
     [a_pod("pod1", labels={"foo": ""}, node_name="nodeA"), a_pod("pod2", labels={"bar": ""}, node_name="nodeB")],
     hosts("z1", "z2"), [AFF, AFF]),
]


@pytest.mark.parametrize(("incoming", "pods", "nodes", "expected"), [c[1:] for c in MULTIPLE_NODES],
                         ids=[c[0] for c in MULTIPLE_NODES])
def test_required_affinity_multiple_nodes(incoming: Obj, pods: list[Obj], nodes: dict[str, dict[str, str]],
                                          expected: Any) -> None:
    snap = snapshot_of(nodes_with(nodes), pods)
    status, found = filter_verdicts(plugin(), snap, incoming)
    if expected == SKIP:
        assert status.is_skip()
        return
    assert status.is_success()
    assert found == expected


def test_add_and_remove_pod_count_only_on_their_own_node() -> None:
    """TestPreFilterStateAddRemovePod's shape: adding a pod that the incoming pod's anti-affinity matches makes its
    node (and only it: kube-scheduler evaluates each node on its own copy of the state) infeasible; removing it
    again restores the node. Removing an existing pod whose anti-affinity excludes the incoming pod frees its
    node, which preemption relies on."""
    nodes = nodes_with({"nodeA": {"zone": "z1", "hostname": "nodeA"}, "nodeB": {"zone": "z2", "hostname": "nodeB"}})
    victim = a_pod("victim", labels={"app": "db"}, node_name="nodeA",
                   aff=affinity(anti_required=[term(labels={"app": "web"}, topology="zone")]))
    snap = snapshot_of(nodes, [victim])
    incoming = PodInfo.from_dict(a_pod(labels={"app": "web"}, aff=affinity(
        anti_required=[term(labels={"app": "cache"}, topology="zone")])))
    pl, state = plugin(), CycleState()
    _, status = pl.pre_filter(state, incoming, snap)
    assert status.is_success()
    assert verdicts(pl, state, incoming, snap) == [EXISTING, None]

    placed = snap.records[next(k for k in snap.records if k.startswith("default/victim"))].pod
    row_a, row_b = snap.node_by_name("nodeA"), snap.node_by_name("nodeB")
    assert row_a is not None and row_b is not None
    sim = state.clone()
    pl.remove_pods(sim, incoming, snap, np.asarray([row_a.index], np.intp), [placed])
    assert verdicts(pl, sim, incoming, snap) == [None, None]
    assert verdicts(pl, state, incoming, snap) == [EXISTING, None], "the original state is unchanged"

    cache = PodInfo.from_dict(a_pod("cache", labels={"app": "cache"}))
    pl.add_pods(sim, incoming, snap, np.asarray([row_b.index], np.intp), [cache])
    assert verdicts(pl, sim, incoming, snap) == [None, ANTI]
    pl.remove_pods(sim, incoming, snap, np.asarray([row_b.index], np.intp), [cache])
    assert verdicts(pl, sim, incoming, snap) == [None, None]


def test_pod_over_the_term_limit_is_refused_with_a_reason() -> None:
    terms = [exists(f"k{i}", "zone") for i in range(MAX_POD_AFFINITY_TERMS + 1)]
    snap = snapshot_of(nodes_with(NODE1), [])
    status, _ = filter_verdicts(plugin(), snap, a_pod(aff=affinity(anti_required=terms)))
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert f"{MAX_POD_AFFINITY_TERMS + 1} pod affinity/anti-affinity terms" in status.message


# --------------------------------------------------------------------------- scoring (TestPreferredAffinity)
def in_(key: str, *values: str, topology: str) -> Obj:
    return term(expr(key, "In", *values), topology=topology)


STAY_WITH_S1_IN_REGION = affinity(preferred=[(5, in_("security", "S1", topology="region"))])
STAY_WITH_S2_IN_REGION = affinity(preferred=[(6, in_("security", "S2", topology="region"))])
AFFINITY3 = affinity(preferred=[
    (8, term(expr("security", "NotIn", "S1"), expr("security", "In", "S2"), topology="region")),
    (2, term(expr("security", "Exists"), expr("wrongkey", "DoesNotExist"), topology="region")),
])
HARD_AFFINITY = affinity(required=[
    in_("security", "S1", "value2", topology="region"),
    term(expr("security", "Exists"), expr("wrongkey", "DoesNotExist"), topology="region"),
])
AWAY_FROM_S1_IN_AZ = affinity(anti_preferred=[(5, in_("security", "S1", topology="az"))])
AWAY_FROM_S2_IN_AZ = affinity(anti_preferred=[(5, in_("security", "S2", topology="az"))])
STAY_S1_AWAY_S2 = affinity(preferred=[(8, in_("security", "S1", topology="region"))],
                           anti_preferred=[(5, in_("security", "S2", topology="az"))])
NS_SELECTED = term(expr("security", "In", "S1"), topology="region", namespaces=["subteam2.team2"],
                   namespace_selector=team_selector("team1"))
AFFINITY_NS_SELECTOR = affinity(preferred=[(5, NS_SELECTED)])
ANTI_AFFINITY_NS_SELECTOR = affinity(anti_preferred=[(5, NS_SELECTED)])
S1, S2 = {"security": "S1"}, {"security": "S2"}
AZ1, AZ2 = {"az": "az1"}, {"az": "az2"}


def on(node_name: str, labels: dict[str, str] | None = None, aff: Obj | None = None, namespace: str = "default") -> Obj:
    return a_pod("e", namespace=namespace, labels=labels, node_name=node_name, aff=aff)


MAX = 100
PREFERRED = [
    ("no affinity anywhere: skipped", a_pod(labels=S1), [], {"node1": CHINA, "node2": INDIA, "node3": AZ1}, SKIP),
    ("matching pods in the node's region", a_pod(labels=S1, aff=STAY_WITH_S1_IN_REGION),
     [on("node1", S1), on("node2", S2), on("node3", S1)], {"node1": CHINA, "node2": INDIA, "node3": AZ1},
     [MAX, 0, 0]),
    ("every node of the matching region scores the same", a_pod(aff=STAY_WITH_S1_IN_REGION), [on("node1", S1)],
     {"node1": CHINA, "node2": CHINA_AZ1, "node3": INDIA}, [MAX, MAX, 0]),
    ("the region with more matching pods scores higher", a_pod(labels=S1, aff=STAY_WITH_S2_IN_REGION),
     [on("node1", S2), on("node1", S2), on("node2", S2), on("node3", S2), on("node4", S2), on("node5", S2)],
     {"node1": CHINA, "node2": INDIA, "node3": CHINA, "node4": CHINA, "node5": INDIA}, [MAX, 0, MAX, MAX, 0]),
    ("operators and partial matches", a_pod(labels=S1, aff=AFFINITY3),
     [on("node1", S1), on("node2", S2), on("node3", S1)], {"node1": CHINA, "node2": INDIA, "node3": AZ1},
     [20, MAX, 0]),
    ("symmetry: existing pods' preferred affinity", a_pod(labels=S2),
     [on("node1", S1, STAY_WITH_S1_IN_REGION), on("node2", S2, STAY_WITH_S2_IN_REGION)],
     {"node1": CHINA, "node2": INDIA, "node3": AZ1}, [0, MAX, 0]),
    ("symmetry with a namespaceSelector", a_pod(namespace="subteam1.team1", labels=S1),
     [on("node1", S1, AFFINITY_NS_SELECTOR), on("node2", S2, STAY_WITH_S2_IN_REGION)],
     {"node1": CHINA, "node2": INDIA, "node3": AZ1}, [MAX, 0, 0]),
    ("anti-affinity symmetry with a namespaceSelector", a_pod(namespace="subteam1.team1", labels=S1),
     [on("node1", S1, ANTI_AFFINITY_NS_SELECTOR), on("node2", S2, STAY_WITH_S2_IN_REGION)],
     {"node1": CHINA, "node2": INDIA, "node3": AZ1}, [0, MAX, MAX]),
    ("symmetry: existing pods' required affinity (hardPodAffinityWeight)", a_pod(labels=S1),
     [on("node1", S1, HARD_AFFINITY), on("node2", S2, HARD_AFFINITY)], {"node1": CHINA, "node2": INDIA, "node3": AZ1},
     [MAX, MAX, 0]),
    ("anti-affinity: a node without matching pods scores high", a_pod(labels=S1, aff=AWAY_FROM_S1_IN_AZ),
     [on("node1", S1), on("node2", S2)], {"node1": AZ1, "node2": CHINA}, [0, MAX]),
    ("anti-affinity: a node without the key scores high", a_pod(labels=S1, aff=AWAY_FROM_S1_IN_AZ),
     [on("node1", S1), on("node2", S1)], {"node1": AZ1, "node2": CHINA}, [0, MAX]),
    ("anti-affinity: more matching pods score lower", a_pod(labels=S1, aff=AWAY_FROM_S1_IN_AZ),
     [on("node1", S1), on("node1", S1), on("node2", S2)], {"node1": AZ1, "node2": INDIA}, [0, MAX]),
    ("anti-affinity symmetry", a_pod(labels=S2),
     [on("node1", S1, AWAY_FROM_S2_IN_AZ), on("node2", S2, AWAY_FROM_S1_IN_AZ)], {"node1": AZ1, "node2": AZ2},
     [0, MAX]),
    ("affinity and anti-affinity", a_pod(labels=S1, aff=STAY_S1_AWAY_S2), [on("node1", S1), on("node2", S1)],
     {"node1": CHINA, "node2": AZ1}, [MAX, 0]),
    ("affinity and anti-affinity, same labels", a_pod(labels=S1, aff=STAY_S1_AWAY_S2),
     [on("node1", S1), on("node1", S1), on("node2", S1), on("node3", S1), on("node3", S1), on("node4", S1),
      on("node5", S1)],
     {"node1": CHINA_AZ1, "node2": INDIA, "node3": CHINA, "node4": CHINA, "node5": INDIA}, [MAX, 0, MAX, MAX, 0]),
    ("affinity, anti-affinity and symmetry", a_pod(labels=S1, aff=STAY_S1_AWAY_S2),
     [on("node1", S1), on("node2", S2), on("node3", aff=STAY_S1_AWAY_S2), on("node4", aff=AWAY_FROM_S1_IN_AZ)],
     {"node1": CHINA, "node2": AZ1, "node3": INDIA, "node4": AZ2}, [MAX, 0, MAX, 0]),
    ("nodes of a region without pods with affinity", a_pod(labels=S1),
     [on("node1", S1), on("node2", aff=STAY_S1_AWAY_S2)], {"node1": CHINA, "node2": CHINA}, [0, 0]),
    ("affinity with pods in namespaces the selector selects", a_pod(namespace="subteam1.team1", labels=S1,
                                                                    aff=AFFINITY_NS_SELECTOR),
     [on("node1", S1, namespace="subteam1.team1"), on("node1", S1, namespace="subteam1.team1"),
      on("node1", S1, namespace="subteam1.team2"), on("node2", S1, namespace="subteam2.team1")],
     {"node1": CHINA, "node2": INDIA}, [MAX, 0]),
    ("affinity with pods in the selected and the listed namespaces", a_pod(namespace="subteam1.team1", labels=S1,
                                                                           aff=AFFINITY_NS_SELECTOR),
     [on("node1", S1, namespace="subteam1.team1"), on("node1", S1, namespace="subteam1.team1"),
      on("node1", S1, namespace="subteam2.team2"), on("node2", S1, namespace="subteam2.team1")],
     {"node1": CHINA, "node2": INDIA}, [MAX, 0]),
    ("anti-affinity with pods in namespaces the selector selects", a_pod(namespace="subteam1.team1", labels=S1,
                                                                         aff=ANTI_AFFINITY_NS_SELECTOR),
     [on("node1", S1, namespace="subteam1.team1"), on("node1", S1, namespace="subteam1.team1"),
      on("node1", S1, namespace="subteam1.team2"), on("node2", S1, namespace="subteam2.team1")],
     {"node1": CHINA, "node2": INDIA}, [0, MAX]),
    ("do not ignore preferred terms of existing pods", a_pod(labels=S2),
     [on("node1", S1, STAY_S1_AWAY_S2), on("node2", S2, STAY_WITH_S2_IN_REGION)], {"node1": CHINA, "node2": INDIA},
     [0, MAX]),
]


@pytest.mark.parametrize(("incoming", "pods", "nodes", "expected"), [c[1:] for c in PREFERRED],
                         ids=[c[0] for c in PREFERRED])
def test_preferred_affinity(incoming: Obj, pods: list[Obj], nodes: dict[str, dict[str, str]], expected: Any) -> None:
    snap = snapshot_of(nodes_with(nodes), pods)
    status, found = scores(plugin(), snap, incoming)
    if expected == SKIP:
        assert status.is_skip()
        return
    assert status.is_success()
    assert found == expected


def test_ignore_preferred_terms_of_existing_pods() -> None:
    snap = snapshot_of(nodes_with({"node1": CHINA, "node2": INDIA}),
                       [on("node1", S1, STAY_S1_AWAY_S2), on("node2", S2, STAY_WITH_S2_IN_REGION)])
    status, _ = scores(plugin(ignore_preferred_terms_of_existing_pods=True), snap, a_pod(labels=S2))
    assert status.is_skip()


HARD_NS = affinity(required=[term(expr("service", "In", "S1"), topology="region",
                                  namespaces=["default", "subteam2.team2"], namespace_selector=team_selector("team1"))])
SYMMETRIC_NODES = {"node1": CHINA, "node2": INDIA, "node3": AZ1}


@pytest.mark.parametrize(("namespace", "weight", "expected"), [
    ("default", 1, [MAX, MAX, 0]),  # with default weight
    ("default", 0, SKIP),  # with zero weight
    ("subteam1.team2", 1, SKIP),  # with no matching namespace
    ("subteam1.team1", 1, [MAX, MAX, 0]),  # with matching NamespaceSelector
    ("subteam2.team2", 1, [MAX, MAX, 0]),  # with matching Namespaces
])
def test_preferred_affinity_with_hard_pod_affinity_symmetric_weight(namespace: str, weight: int,
                                                                    expected: Any) -> None:
    snap = snapshot_of(nodes_with(SYMMETRIC_NODES), [on("node1", aff=HARD_NS), on("node2", aff=HARD_NS)])
    status, found = scores(plugin(hard_pod_affinity_weight=weight), snap,
                           a_pod(namespace=namespace, labels={"service": "S1"}))
    if expected == SKIP:
        assert status.is_skip()
        return
    assert found == expected


def test_no_nodes_to_score() -> None:
    snap = snapshot_of([], [])
    status, _ = scores(plugin(), snap, a_pod(labels=S2))
    assert status.is_skip()


def test_namespace_relabelled_changes_what_a_selector_selects() -> None:
    """The incoming pod's namespaceSelector is resolved against the namespaces' current labels (memoised until
    a namespace changes)."""
    from scheduler_plugin.plugins.interpodaffinity.namespaces import Namespaces
    from tests.unit.scheduler.placement_builders import namespace

    snap = snapshot_of(nodes_with({"node1": CHINA, "node2": INDIA}), [on("node1", S1, namespace="subteam1.team2")])
    incoming = a_pod(namespace="subteam1.team1", aff=affinity(required=[
        term(expr("security", "In", "S1"), topology="region", namespace_selector=team_selector("team1"))]))
    _, before = filter_verdicts(plugin(), snap, incoming)
    assert before == [AFF, AFF]
    snap.store(Namespaces).upsert(namespace("subteam1.team2", team="team1"))
    _, after = filter_verdicts(plugin(), snap, incoming)
    assert after == [None, AFF]


def test_a_node_added_later_joins_the_counts() -> None:
    """Rows added after the counts were built (a new node, its pods) are counted."""
    snap = snapshot_of(nodes_with({"node1": CHINA}), [on("node1", S1)])
    incoming = a_pod(aff=affinity(anti_required=[in_("security", "S1", topology="region")]))
    _, found = filter_verdicts(plugin(), snap, incoming)
    assert found == [ANTI]
    for i in range(2, 40):
        snap.upsert_node(node(f"node{i}", labels={"region": f"r{i}"}))
    snap.upsert_pod(a_pod("late", labels=S1, node_name="node39"))
    _, found = filter_verdicts(plugin(), snap, incoming)
    assert found[0] == ANTI and found[-1] == ANTI and found[1:-1] == [None] * 37
