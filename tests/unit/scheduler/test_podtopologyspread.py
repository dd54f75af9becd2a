"""PodTopologySpread against kube-scheduler v1.36's tables (podtopologyspread/filtering_test.go TestSingleConstraint,
TestMultipleConstraints, TestPreFilterStateAddPod/RemovePod's shapes; scoring_test.go TestPodTopologySpreadScore,
TestPreScoreSkip): the same clusters, pods and expected codes and scores, our own code.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.framework.status import Code
from scheduler_plugin.plugins.podtopologyspread import PodTopologySpread, PodTopologySpreadArgs
from scheduler_plugin.plugins.podtopologyspread.plugin import (
    MAX_SPREAD_CONSTRAINTS,
    REASON_CONSTRAINTS_NOT_MATCH,
    REASON_NODE_LABEL_NOT_MATCH,
)
from scheduler_plugin.plugins.podtopologyspread.workloads import (
    ReplicaSetSelectors,
    ServiceSelectors,
    StatefulSetSelectors,
)
from tests.objects import node
from tests.unit.scheduler.placement_builders import a_pod, existing, expr, filter_verdicts, scores, selector, spread

Obj = dict[str, Any]
OK, NO, NOLABEL = "ok", "no", "nolabel"
CODES = {None: OK, (Code.UNSCHEDULABLE, REASON_CONSTRAINTS_NOT_MATCH): NO,
         (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, REASON_NODE_LABEL_NOT_MATCH): NOLABEL}
FOO, BAR = selector(expr("foo", "Exists")), selector(expr("bar", "Exists"))
TAINTED = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
HOST = "kubernetes.io/hostname"


def listed() -> PodTopologySpread:
    """defaultingType List, no default constraints (filtering_test.go's setup)."""
    return PodTopologySpread(PodTopologySpreadArgs(defaulting_type="List"))


def zoned(*names: str) -> list[Obj]:
    """node-a, node-b in zone1; node-x, node-y in zone2; each with its `node` label."""
    zone = {"a": "zone1", "b": "zone1", "x": "zone2", "y": "zone2", "c": "zone1", "d": "zone2"}
    return [node(f"node-{n}", labels={"zone": zone[n], "node": f"node-{n}"}) for n in names]


ABXY = zoned("a", "b", "x", "y")


def on(node_name: str, *labels: str, namespace: str = "default", terminating: bool = False) -> Obj:
    obj = a_pod(f"p-{node_name[-1]}", namespace=namespace, labels=dict.fromkeys(labels, ""), node_name=node_name)
    if terminating:
        obj["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return obj


def incoming(*constraints: Obj, labels: tuple[str, ...] = ("foo",), **kw: Any) -> Obj:
    return a_pod(labels=dict.fromkeys(labels, ""), constraints=constraints, **kw)


SPREAD_2103 = [on("node-a", "foo"), on("node-a", "foo"), on("node-b", "foo"), on("node-y", "foo"), on("node-y", "foo"),
               on("node-y", "foo")]
NODE_LABELLED = [node("node-a", labels={"node": "node-a", "foo": ""}), node("node-b", labels={"node": "node-b", "foo": ""}),
                 node("node-x", labels={"node": "node-x", "foo": ""}), node("node-y", labels={"node": "node-y"})]
NODE_TAINTED = [node("node-a", labels={"node": "node-a", "foo": ""}), node("node-b", labels={"node": "node-b", "foo": ""}),
                node("node-x", labels={"node": "node-x", "foo": ""}),
                node("node-y", labels={"node": "node-y"}, taints=TAINTED)]
ONE_ONE_ONE = [on("node-a", "foo"), on("node-b", "foo"), on("node-y", "foo")]
FOO_NODE_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [{"key": "foo", "operator": "In", "values": [""]}]}]}}}


def node_affinity(key: str, operator: str, *values: str) -> Obj:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]}]}}}


# TestSingleConstraint + TestMultipleConstraints: (name, incoming, nodes, existing, expected per node)
FILTER = [
    ("no existing pods", incoming(spread(1, "zone", match=FOO)), ABXY, [], [OK, OK, OK, OK]),
    ("no existing pods, the pod does not match itself", incoming(spread(1, "zone", match=BAR)), ABXY, [],
     [OK, OK, OK, OK]),
    ("pods of other namespaces do not count", incoming(spread(1, "zone", match=FOO)), ABXY,
     [on("node-a", "foo", namespace="ns1"), on("node-a", "foo", namespace="ns2"), on("node-x", "foo"),
      on("node-y", "foo")], [OK, OK, NO, NO]),
    ("no pod matches a null selector", incoming(spread(1, "zone")), ABXY,
     [on("node-x", "foo"), on("node-y", "foo")], [OK, OK, OK, OK]),
    ("3/3 across zones: all fit", incoming(spread(1, "zone", match=FOO)), ABXY,
     [*SPREAD_2103[:3], *SPREAD_2103[3:]], [OK, OK, OK, OK]),
    ("1/2 across zones, node-b lacks the zone label", incoming(spread(1, "zone", match=FOO)),
     [ABXY[0], node("node-b", labels={"zon": "zone1", "node": "node-b"}), ABXY[2], ABXY[3]],
     [on("node-a", "foo"), on("node-b", "foo"), on("node-x", "foo"), on("node-y", "foo")], [OK, NOLABEL, NO, NO]),
    ("no node has the key", incoming(spread(1, "rack", match=FOO)), zoned("a", "x"), [], [NOLABEL, NOLABEL]),
    ("2/1/0/3 across nodes: only node-x", incoming(spread(1, "node", match=FOO)), ABXY, SPREAD_2103,
     [NO, NO, OK, NO]),
    ("2/1/0/3, maxSkew 2: node-b and node-x", incoming(spread(2, "node", match=FOO)), ABXY, SPREAD_2103,
     [NO, OK, OK, NO]),
    ("2/1/0/3, the pod does not match itself", incoming(spread(1, "node", match=FOO), labels=("bar",)), ABXY,
     SPREAD_2103, [NO, OK, OK, NO]),
    ("node affinity: 2/~1~/~0~/3, node-a fits", incoming(spread(1, "node", match=FOO),
                                                        aff=node_affinity("node", "In", "node-a", "node-y")),
     ABXY, SPREAD_2103, [OK, OK, OK, NO]),
    ("terminating pods do not count", incoming(spread(1, "node", match=FOO)),
     [node("node-a", labels={"node": "node-a"}), node("node-b", labels={"node": "node-b"})],
     [on("node-a", "foo", terminating=True), on("node-b", "foo")], [OK, NO]),
    ("node affinity: 0/~2~/0/1, node-a fits", incoming(spread(1, "zone", match=FOO),
                                                      aff=node_affinity("node", "NotIn", "node-b")),
     ABXY, [on("node-b", "foo"), on("node-b", "foo"), on("node-y", "foo")], [OK, OK, NO, NO]),
    ("2/2/1, maxSkew 2, fewer domains than minDomains", incoming(spread(2, "node", match=FOO, min_domains=4)),
     [node(f"node-{n}", labels={"node": f"node-{n}"}) for n in "abc"],
     [on("node-a", "foo"), on("node-a", "foo"), on("node-b", "foo"), on("node-b", "foo"), on("node-c", "foo")],
     [NO, NO, OK]),
    ("2/2/1, maxSkew 2, more domains than minDomains", incoming(spread(2, "node", match=FOO, min_domains=2)),
     [node(f"node-{n}", labels={"node": f"node-{n}"}) for n in "abc"],
     [on("node-a", "foo"), on("node-a", "foo"), on("node-b", "foo"), on("node-b", "foo"), on("node-c", "foo")],
     [OK, OK, OK]),
    ("zones 2/1, maxSkew 2, fewer domains than minDomains", incoming(spread(2, "zone", match=FOO, min_domains=3)),
     ABXY, [on("node-a", "foo"), on("node-b", "foo"), on("node-y", "foo")], [NO, NO, OK, OK]),
    ("zones 2/1, maxSkew 2, more domains than minDomains", incoming(spread(2, "zone", match=FOO, min_domains=1)),
     ABXY, [on("node-a", "foo"), on("node-b", "foo"), on("node-y", "foo")], [OK, OK, OK, OK]),
    ("nodeAffinityPolicy Honor with a nodeSelector", incoming(spread(1, "node", match=FOO), node_selector={"foo": ""}),
     NODE_LABELLED, ONE_ONE_ONE, [NO, NO, OK, OK]),
    ("nodeAffinityPolicy Ignore with a nodeSelector", incoming(spread(1, "node", match=FOO, node_affinity_policy="Ignore"),
                                                               node_selector={"foo": ""}),
     NODE_LABELLED, ONE_ONE_ONE, [NO, NO, OK, NO]),
    ("nodeAffinityPolicy Honor with node affinity", incoming(spread(1, "node", match=FOO), aff=FOO_NODE_AFFINITY),
     NODE_LABELLED, ONE_ONE_ONE, [NO, NO, OK, OK]),
    ("nodeAffinityPolicy Ignore with node affinity", incoming(spread(1, "node", match=FOO,
                                                                     node_affinity_policy="Ignore"),
                                                              aff=FOO_NODE_AFFINITY),
     NODE_LABELLED, ONE_ONE_ONE, [NO, NO, OK, NO]),
    ("nodeTaintsPolicy Honor", incoming(spread(1, "node", match=FOO, node_taints_policy="Honor")), NODE_TAINTED,
     ONE_ONE_ONE, [NO, NO, OK, OK]),
    ("nodeTaintsPolicy Ignore", incoming(spread(1, "node", match=FOO)), NODE_TAINTED, ONE_ONE_ONE, [NO, NO, OK, NO]),
    # TestMultipleConstraints
    ("zone and node, [3/3, 2/1/0/3]", incoming(spread(1, "zone", match=FOO), spread(1, "node", match=FOO)), ABXY,
     SPREAD_2103, [NO, NO, OK, NO]),
    ("zone and node, [3/4, 2/1/0/4]", incoming(spread(1, "zone", match=FOO), spread(1, "node", match=FOO)), ABXY,
     [*SPREAD_2103, on("node-y", "foo")], [NO, NO, NO, NO]),
    ("different selectors, [1/0, 1/0/0/1]", incoming(spread(1, "zone", match=FOO), spread(1, "node", match=BAR),
                                                     labels=("foo", "bar")), ABXY,
     [on("node-a", "foo"), on("node-y", "bar")], [NO, NO, OK, NO]),
    ("different selectors, [1/0, 0/0/1/1]", incoming(spread(1, "zone", match=FOO), spread(1, "node", match=BAR),
                                                     labels=("foo", "bar")), ABXY,
     [on("node-a", "foo"), on("node-x", "bar"), on("node-y", "bar")], [NO, NO, NO, NO]),
    ("different selectors, [2/3, 1/0/0/1]", incoming(spread(1, "zone", match=FOO), spread(1, "node", match=BAR),
                                                     labels=("foo", "bar")), ABXY,
     [on("node-a", "foo"), on("node-a", "foo", "bar"), on("node-y", "foo"), on("node-y", "foo", "bar"),
      on("node-y", "foo")], [NO, OK, NO, NO]),
    ("different selectors, no self-match on zone", incoming(spread(1, "zone", match=FOO), spread(1, "node", match=BAR),
                                                            labels=("bar",)), ABXY,
     [on("node-a", "foo"), on("node-x", "bar"), on("node-y", "bar")], [OK, OK, NO, NO]),
    ("zone and node, node-x lacks the node label", incoming(spread(1, "zone", match=FOO), spread(1, "node", match=FOO)),
     [*zoned("a", "b"), node("node-x", labels={"zone": "zone2"}), zoned("y")[0]],
     [on("node-a", "foo"), on("node-y", "foo")], [NO, OK, NOLABEL, NO]),
    ("inclusion: zone honor/ignore, node ignore/ignore", incoming(
        spread(1, "zone", match=FOO), spread(1, "node", match=FOO, node_affinity_policy="Ignore"),
        node_selector={"foo": ""}),
     [node(f"node-{n}", labels={"zone": z, "node": f"node-{n}", "foo": ""}) for n, z in
      (("a", "zone1"), ("b", "zone1"), ("x", "zone2"))] + [zoned("y")[0]],
     [on("node-a", "foo"), on("node-b", "foo"), on("node-y", "foo")], [NO, NO, OK, NO]),
    ("inclusion: zone honor/honor, node honor/ignore", incoming(
        spread(1, "zone", match=FOO, node_taints_policy="Honor"), spread(1, "node", match=FOO)),
     [node(f"node-{n}", labels={"zone": z, "node": f"node-{n}", "foo": ""}) for n, z in
      (("a", "zone1"), ("b", "zone1"), ("x", "zone2"))]
     + [node("node-y", labels={"zone": "zone2", "node": "node-y"}, taints=TAINTED)],
     [on("node-a", "foo"), on("node-b", "foo"), on("node-y", "foo")], [NO, NO, OK, NO]),
    ("two constraints on zone, [3/3, 2/1]", incoming(spread(1, "zone", match=BAR), spread(1, "zone", match=FOO),
                                                     labels=("foo", "bar")), ABXY,
     [on("node-a", "foo", "bar"), on("node-a", "foo"), on("node-b", "foo", "bar"), on("node-y", "foo"),
      on("node-y", "foo", "bar"), on("node-y", "foo")], [NO, NO, OK, OK]),
    ("two constraints on zone, [3/4, 2/1]", incoming(spread(1, "zone", match=BAR), spread(1, "zone", match=FOO),
                                                     labels=("foo", "bar")), ABXY,
     [on("node-a", "foo", "bar"), on("node-a", "foo"), on("node-b", "foo", "bar"), on("node-y", "foo"),
      on("node-y", "foo", "bar"), on("node-y", "foo"), on("node-y", "foo")], [NO, NO, NO, NO]),
]


@pytest.mark.parametrize(("pod_obj", "nodes", "pods", "expected"), [c[1:] for c in FILTER], ids=[c[0] for c in FILTER])
def test_filter(pod_obj: Obj, nodes: list[Obj], pods: list[Obj], expected: list[str]) -> None:
    snap = Snapshot.from_objects(nodes=nodes, pods=existing(pods))
    status, verdicts = filter_verdicts(listed(), snap, pod_obj)
    assert status.is_success()
    assert [CODES[v] for v in verdicts] == expected


def test_a_pod_without_hard_constraints_skips_the_filter() -> None:
    snap = Snapshot.from_objects(nodes=ABXY)
    status, _ = filter_verdicts(listed(), snap, incoming(spread(1, "zone", "ScheduleAnyway", match=FOO)))
    assert status.is_skip()
    status, _ = filter_verdicts(PodTopologySpread(PodTopologySpreadArgs()), snap, a_pod())  # system defaults: soft only
    assert status.is_skip()


def test_simulated_pods_count_only_on_their_node() -> None:
    """TestPreFilterStateAddPod/RemovePod's shapes: adding a matching pod on node-a raises zone1 (and moves the
    critical path when zone1 held the minimum); removing pods lowers their domain; a pod of another namespace
    changes nothing. Each change counts for its own node only (kube-scheduler's per-node copy of the state)."""
    snap = Snapshot.from_objects(nodes=ABXY, pods=existing([on("node-x", "foo"), on("node-y", "foo")]))
    pl, state = listed(), CycleState()
    info = PodInfo.from_dict(incoming(spread(1, "zone", match=FOO)))
    _, status = pl.pre_filter(state, info, snap)
    assert status.is_success()
    rows = {n: snap.node_by_name(n).index for n in ("node-a", "node-b", "node-x", "node-y")}  # type: ignore[union-attr]

    def verdicts(s: CycleState) -> list[str]:
        from tests.unit.scheduler.placement_builders import verdicts as raw
        return [CODES[v] for v in raw(pl, s, info, snap)]

    assert verdicts(state) == [OK, OK, NO, NO]  # zones 0/2
    sim = state.clone()
    other = PodInfo.from_dict(on("node-a", "foo", namespace="other"))
    pl.add_pods(sim, info, snap, np.asarray([rows["node-a"]], np.intp), [other])
    assert verdicts(sim) == [OK, OK, NO, NO], "another namespace's pod changes nothing"
    mine = PodInfo.from_dict(a_pod("new", labels={"foo": ""}))
    a = np.asarray([rows["node-a"]], np.intp)
    pl.add_pods(sim, info, snap, a, [mine])
    pl.add_pods(sim, info, snap, a, [mine])
    # node-a's own copy sees zones 2/2: 2 + 1 - 2 ≤ 1 fits; node-b's copy still sees 0/2
    assert verdicts(sim) == [OK, OK, NO, NO]
    pl.add_pods(sim, info, snap, a, [mine])
    # node-a's copy: zones 3/2, the minimum moved to zone2: 3 + 1 - 2 > 1
    assert verdicts(sim) == [NO, OK, NO, NO]
    pl.remove_pods(sim, info, snap, np.repeat(a, 3), [mine, mine, mine])
    assert verdicts(sim) == [OK, OK, NO, NO]
    assert verdicts(state) == [OK, OK, NO, NO], "the original state is unchanged"


def test_removing_pods_lowers_their_domain() -> None:
    snap = Snapshot.from_objects(nodes=ABXY, pods=existing([on("node-x", "foo"), on("node-y", "foo")]))
    pl, state = listed(), CycleState()
    info = PodInfo.from_dict(incoming(spread(1, "zone", match=FOO)))
    pl.pre_filter(state, info, snap)
    x = snap.node_by_name("node-x")
    assert x is not None
    victim = next(r.pod for r in snap.records.values() if r.node_index == x.index)
    sim = state.clone()
    pl.remove_pods(sim, info, snap, np.asarray([x.index], np.intp), [victim])
    from tests.unit.scheduler.placement_builders import verdicts as raw
    # node-x's copy: zone2 at 1, zone1 at 0: 1 + 1 - 0 = 2 > 1 still; with both removed it fits
    assert [CODES[v] for v in raw(pl, sim, info, snap)] == [OK, OK, NO, NO]
    y = snap.node_by_name("node-y")
    assert y is not None
    other = next(r.pod for r in snap.records.values() if r.node_index == y.index)
    pl.remove_pods(sim, info, snap, np.asarray([x.index], np.intp), [other])
    assert [CODES[v] for v in raw(pl, sim, info, snap)] == [OK, OK, OK, NO]


def test_too_many_constraints_are_refused_with_a_reason() -> None:
    snap = Snapshot.from_objects(nodes=ABXY)
    constraints = [spread(1, f"key-{i}", match=FOO) for i in range(MAX_SPREAD_CONSTRAINTS + 1)]
    status, _ = filter_verdicts(listed(), snap, incoming(*constraints))
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert f"{MAX_SPREAD_CONSTRAINTS + 1} topologySpreadConstraints" in status.message


# --------------------------------------------------------------------------- scoring
def hosts(*names: str, **extra: dict[str, str]) -> list[Obj]:
    return [node(f"node-{n}", labels={HOST: f"node-{n}", **extra.get(n, {})}) for n in names]


def zone_hosts(*names: str) -> list[Obj]:
    zone = {"a": "zone1", "b": "zone1", "x": "zone2", "y": "zone2", "c": "zone2", "d": "zone2"}
    return [node(f"node-{n}", labels={"zone": zone[n], HOST: f"node-{n}"}) for n in names]


def pods_on(**counts: int) -> list[Obj]:
    return [on(f"node-{n}", "foo") for n, k in counts.items() for _ in range(k)]


def node_labelled(*names: str, taint: str = "", foo: str = "ab") -> list[Obj]:
    return [node(f"node-{n}", labels={"node": f"node-{n}", **({"foo": ""} if n in foo else {})},
                 taints=TAINTED if n == taint else None) for n in names]


# TestPodTopologySpreadScore: (name, incoming, all nodes, scored (candidate) node names, existing, expected scores)
SCORE = [
    ("hostname, no pods", incoming(spread(1, HOST, "ScheduleAnyway", match=FOO)), hosts("a", "b"), ["node-a", "node-b"],
     [], [100, 100]),
    ("hostname, one candidate", incoming(spread(1, HOST, "ScheduleAnyway", match=FOO)), hosts("a", "b"), ["node-a"],
     pods_on(a=2, b=1), [100]),
    ("hostname, same counts", incoming(spread(1, HOST, "ScheduleAnyway", match=FOO)), hosts("a", "b"),
     ["node-a", "node-b"], pods_on(a=1, b=1), [100, 100]),
    ("hostname 2/1/0/3", incoming(spread(1, HOST, "ScheduleAnyway", match=FOO)), hosts("a", "b", "c", "d"), None,
     pods_on(a=2, b=1, d=3), [20, 60, 100, 0]),
    ("hostname, null selector", incoming(spread(1, HOST, "ScheduleAnyway")), hosts("a", "b", "c", "d"), None,
     pods_on(a=2, b=1, d=3), [100, 100, 100, 100]),
    ("hostname 2/1/0/3, maxSkew 2", incoming(spread(2, HOST, "ScheduleAnyway", match=FOO)), hosts("a", "b", "c", "d"),
     None, pods_on(a=2, b=1, d=3), [33, 66, 100, 16]),
    ("hostname 4/3/2/1, maxSkew 3", incoming(spread(3, HOST, "ScheduleAnyway", match=FOO)), hosts("a", "b", "c", "d"),
     None, pods_on(a=4, b=3, c=2, d=1), [44, 66, 77, 100]),
    ("hostname 4/2/1/~3~", incoming(spread(1, HOST, "ScheduleAnyway", match=FOO)), hosts("a", "b", "x", "y"),
     ["node-a", "node-b", "node-x"], pods_on(a=4, b=2, x=1, y=3), [33, 83, 100]),
    ("hostname 4/?2?/1/~3~", incoming(spread(1, HOST, "ScheduleAnyway", match=FOO)),
     [*hosts("a"), node("node-b", labels={"n": "node-b"}), *hosts("x", "y")], ["node-a", "node-b", "node-x"],
     pods_on(a=4, b=2, x=1, y=3), [16, 0, 100]),
    ("zone, 4/2/1/~3~", incoming(spread(1, "zone", "ScheduleAnyway", match=FOO)), zone_hosts("a", "b", "x", "y"),
     ["node-a", "node-b", "node-x"], pods_on(a=4, b=2, x=1, y=3), [75, 75, 100]),
    ("zone and hostname, 2/~1~/2/~4~", incoming(spread(1, "zone", "ScheduleAnyway", match=FOO),
                                                spread(1, HOST, "ScheduleAnyway", match=FOO)),
     zone_hosts("a", "b", "x", "y"), ["node-a", "node-x"], pods_on(a=2, b=1, x=2, y=4), [100, 63]),
    ("existing pods of another namespace do not count", incoming(spread(1, HOST, "ScheduleAnyway", match=FOO)),
     hosts("a", "b"), None, [on("node-a", "foo", namespace="ns1"), *pods_on(a=1, b=2)], [100, 33]),
    ("terminating pods do not count", incoming(spread(1, HOST, "ScheduleAnyway", match=FOO)), hosts("a", "b"), None,
     [on("node-a", "foo", terminating=True), on("node-b", "foo")], [100, 0]),
    ("minDomains has no effect on ScheduleAnyway", incoming(spread(2, "node", "ScheduleAnyway", match=FOO,
                                                                   min_domains=10)),
     [node(f"node-{n}", labels={"node": f"node-{n}"}) for n in "abc"], None, pods_on(a=2, b=2, c=1), [75, 75, 100]),
    ("nodeAffinityPolicy Honor with a nodeSelector", incoming(spread(1, "node", "ScheduleAnyway", match=FOO),
                                                              node_selector={"foo": ""}),
     node_labelled("a", "b", "c"), None, pods_on(a=2, b=1, c=1), [0, 33, 100]),
    ("nodeAffinityPolicy Ignore with a nodeSelector", incoming(spread(1, "node", "ScheduleAnyway", match=FOO,
                                                                      node_affinity_policy="Ignore"),
                                                               node_selector={"foo": ""}),
     node_labelled("a", "b", "c"), None, pods_on(a=2, b=1, c=1), [66, 100, 100]),
    ("nodeAffinityPolicy Honor with node affinity", incoming(spread(1, "node", "ScheduleAnyway", match=FOO),
                                                             aff=FOO_NODE_AFFINITY),
     node_labelled("a", "b", "c"), None, pods_on(a=2, b=1, c=1), [0, 33, 100]),
    ("nodeTaintsPolicy Honor", incoming(spread(1, "node", "ScheduleAnyway", match=FOO, node_taints_policy="Honor")),
     node_labelled("a", "b", "c", taint="c", foo=""), None, pods_on(a=2, b=1, c=1), [0, 33, 100]),
    ("nodeTaintsPolicy Ignore", incoming(spread(1, "node", "ScheduleAnyway", match=FOO)),
     node_labelled("a", "b", "c", taint="c", foo=""), None, pods_on(a=2, b=1, c=1), [66, 100, 100]),
    ("matchLabelKeys ANDed with an empty selector", incoming(
        spread(1, "zone", "ScheduleAnyway", match={}, match_label_keys=["foo"]),
        spread(1, HOST, "ScheduleAnyway", match={}, match_label_keys=["bar"]), labels=("foo", "bar")),
     zone_hosts("a", "b", "c", "d"), None,
     [on("node-a", "foo"), on("node-b", "foo", "bar"), on("node-c", "foo"), on("node-c", "bar")], [60, 20, 60, 100]),
    ("matchLabelKeys ANDed with a selector", incoming(
        spread(1, "zone", "ScheduleAnyway", match=FOO),
        spread(1, HOST, "ScheduleAnyway", match=BAR, match_label_keys=["baz"]), labels=("foo", "bar", "baz")),
     zone_hosts("a", "b", "c", "d"), None,
     [on("node-a", "foo"), on("node-b", "foo", "bar", "baz"), on("node-c", "foo"), on("node-c", "bar"),
      on("node-c", "bar", "baz")], [60, 20, 60, 100]),
]


@pytest.mark.parametrize(("pod_obj", "nodes", "candidates", "pods", "expected"), [c[1:] for c in SCORE],
                         ids=[c[0] for c in SCORE])
def test_score(pod_obj: Obj, nodes: list[Obj], candidates: list[str] | None, pods: list[Obj],
               expected: list[int]) -> None:
    snap = Snapshot.from_objects(nodes=nodes, pods=existing(pods))
    status, found = scores(PodTopologySpread(PodTopologySpreadArgs()), snap, pod_obj, candidates)
    assert status.is_success()
    assert found == expected


def service(name: str, labels: dict[str, str] | None, namespace: str = "default") -> Obj:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": labels} if labels is not None else {}}


def test_system_default_constraints_spread_a_services_pods() -> None:
    """System defaulting, nodes without a zone, the pods selected by a Service: hostname maxSkew 3, same scores as
    one constraint (scoring_test.go "system defaulting, nodes don't have zone, pods match service")."""
    snap = Snapshot.from_objects(nodes=hosts("a", "b", "c", "d"), pods=existing(pods_on(a=4, b=3, c=2, d=1)),
                                 stores={ServiceSelectors: [service("svc", {"foo": ""})]})
    status, found = scores(PodTopologySpread(PodTopologySpreadArgs()), snap, a_pod(labels={"foo": ""}))
    assert status.is_success()
    assert found == [44, 66, 77, 100]


def owned(kind: str, name: str, api_version: str = "apps/v1") -> Obj:
    obj = a_pod(labels={"foo": "bar", "baz": "sup"})
    obj["metadata"]["ownerReferences"] = [{"apiVersion": api_version, "kind": kind, "name": name, "uid": "u",
                                           "controller": True}]
    return obj


def test_pre_score_skips_without_soft_constraints_or_a_workload() -> None:
    """TestPreScoreSkip: no soft constraints with List defaulting; default constraints but the pod's ReplicaSet is
    not there (another one is), so the deduced selector is empty."""
    snap = Snapshot.from_objects(nodes=hosts("a", "b"))
    assert scores(listed(), snap, a_pod())[0].is_skip()
    args = PodTopologySpreadArgs(defaulting_type="List", default_constraints=[
        {"maxSkew": 2, "topologyKey": "planet", "whenUnsatisfiable": "ScheduleAnyway"}])
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs1", "namespace": "default"},
          "spec": {"selector": selector(expr("tar", "Exists"))}}
    snap = Snapshot.from_objects(nodes=[node("node-a", labels={"planet": "mars"})], stores={ReplicaSetSelectors: [rs]})
    assert scores(PodTopologySpread(args), snap, owned("ReplicaSet", "rs2"))[0].is_skip()
    # Its own ReplicaSet gives the selector: scored.
    snap.store(ReplicaSetSelectors).upsert(dict(rs, metadata={"name": "rs2", "namespace": "default"}))
    assert scores(PodTopologySpread(args), snap, owned("ReplicaSet", "rs2"))[0].is_success()


def test_default_selector_merges_services_and_the_controller() -> None:
    from scheduler_plugin.plugins.podtopologyspread.workloads import default_selector

    ss = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": "default"},
          "spec": {"selector": selector(expr("tier", "In", "db"), labels={"foo": "bar"})}}
    snap = Snapshot.from_objects(stores={
        ServiceSelectors: [service("a", {"foo": "bar"}), service("b", {"baz": "sup"}), service("c", {"other": "x"}),
                           service("d", None), service("e", {"foo": "bar"}, namespace="elsewhere")],
        StatefulSetSelectors: [ss]})
    found = default_selector(PodInfo.from_dict(owned("StatefulSet", "db")), snap)
    assert found is not None
    assert dict(found.match_labels) == {"foo": "bar", "baz": "sup"}
    assert {(r.key, r.operator, r.values) for r in found.match_expressions} == {
        ("foo", "In", ("bar",)), ("tier", "In", ("db",))}
    assert default_selector(PodInfo.from_dict(a_pod(labels={"x": "y"})), snap) is None


def test_args_validation() -> None:
    with pytest.raises(ValidationError, match="System is invalid"):
        PodTopologySpreadArgs(default_constraints=[{"maxSkew": 1, "topologyKey": "zone",
                                                    "whenUnsatisfiable": "DoNotSchedule"}])
    with pytest.raises(ValidationError, match="must not define a selector"):
        PodTopologySpreadArgs(defaulting_type="List", default_constraints=[
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}])
    with pytest.raises(ValidationError, match="Duplicate"):
        PodTopologySpreadArgs(defaulting_type="List", default_constraints=[
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
            {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}])
    with pytest.raises(ValidationError):
        PodTopologySpreadArgs(defaulting_type="List", default_constraints=[
            {"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}])
    assert [c.max_skew for c in PodTopologySpreadArgs().constraints] == [3, 5]
