"""InterPodAffinity and PodTopologySpread through whole scheduling cycles of the default profile: the issue's
examples, preemption that removes the pod a rule is about (kube-scheduler's default_preemption_test.go cases),
nominated pods, the FitError message `explain` shows, and the snapshot's per-row counts kept current as pods
come, go and change (checked against counting from scratch)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import numpy as np

from scheduler_plugin.framework.clock import FakeClock
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.podmatch import MAX_COUNTED_FILTERS, PodFilter, PodMatchIndex
from scheduler_plugin.framework.schedule_one import scheduling_cycle
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.framework.status import Code
from scheduler_plugin.plugins.defaultpreemption import DECISION, PreemptionDecision
from tests.objects import T0, node, pod, rfc3339
from tests.unit.scheduler.builders import default_framework
from tests.unit.scheduler.placement_builders import a_pod, affinity, expr, selector, spread, term

Obj = dict[str, Any]
CONFIG = {"profiles": [{"schedulerName": "loadline-scheduler"}]}
HOST = "kubernetes.io/hostname"
LOW, MID, HIGH = 1, 100, 1000


def cluster(nodes: list[Obj], pods: tuple[Obj, ...] | list[Obj] = ()) -> tuple[Any, Snapshot]:
    snap = Snapshot.from_objects(nodes=nodes, pods=pods)
    fw, _, _ = default_framework(snap, CONFIG, FakeClock(T0 + 10))
    return fw, snap


def hostnamed(count: int, **labels: str) -> list[Obj]:
    return [node(f"n{i}", cpu="32", memory="64Gi", labels={HOST: f"n{i}", **labels}) for i in range(count)]


def test_six_anti_affinity_pods_on_ten_nodes_land_on_six_nodes() -> None:
    """The issue's first example: required anti-affinity on the hostname, six replicas, ten nodes."""
    fw, _ = cluster(hostnamed(10))
    anti = affinity(anti_required=[term(labels={"app": "web"}, topology=HOST)])
    placed = []
    for i in range(6):
        result = scheduling_cycle(fw, PodInfo.from_dict(pod(f"web-{i}", "100m", "64Mi", labels={"app": "web"},
                                                              affinity=anti)))
        assert result.status.is_success(), result.status.message
        placed.append(result.node_name)
    assert len(set(placed)) == 6


def test_anti_affinity_beyond_the_nodes_gives_kube_schedulers_reason() -> None:
    fw, _ = cluster(hostnamed(3))
    anti = affinity(anti_required=[term(labels={"app": "web"}, topology=HOST)])
    for i in range(3):
        assert scheduling_cycle(fw, PodInfo.from_dict(pod(f"web-{i}", "100m", "64Mi", labels={"app": "web"},
                                                            affinity=anti))).status.is_success()
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("web-3", "100m", "64Mi", labels={"app": "web"},
                                                        affinity=anti)), record=True)
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.status.message.startswith(
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. preemption: ")
    assert result.diagnosis is not None
    assert result.diagnosis.reasons_for_row(0) == [("InterPodAffinity", "node(s) didn't match pod anti-affinity rules")]
    assert "InterPodAffinity" in result.diagnosis.unschedulable_plugins


def test_ten_spread_pods_max_skew_one_put_one_on_each_node() -> None:
    """The issue's second example: maxSkew 1 on the hostname, DoNotSchedule, ten pods on ten nodes."""
    fw, _ = cluster(hostnamed(10))
    constraint = spread(1, HOST, match=selector(labels={"app": "s"}))
    placed = Counter()
    for i in range(10):
        result = scheduling_cycle(fw, PodInfo.from_dict(a_pod(f"s-{i}", labels={"app": "s"}, constraints=[constraint])))
        assert result.status.is_success(), result.status.message
        placed[result.node_name] += 1
    assert sorted(placed.values()) == [1] * 10


def test_required_affinity_follows_the_first_pod_into_its_zone() -> None:
    nodes = [node(f"n{i}", cpu="32", memory="64Gi", labels={HOST: f"n{i}", "zone": f"z{i % 3}"}) for i in range(9)]
    fw, snap = cluster(nodes)
    together = affinity(required=[term(labels={"app": "db"}, topology="zone")])
    zones = set()
    for i in range(5):
        result = scheduling_cycle(fw, PodInfo.from_dict(pod(f"db-{i}", "100m", "64Mi", labels={"app": "db"},
                                                             affinity=together)))
        assert result.status.is_success(), result.status.message
        info = snap.node_by_name(result.node_name or "")
        assert info is not None
        zones.add(info.labels["zone"])
    assert len(zones) == 1


def running(name: str, node_name: str, priority: int, cpu: str = "100m", **kw: Any) -> Obj:
    obj = a_pod(name, node_name=node_name, priority=priority, scheduled_at=T0 - 50, cpu=cpu, memory="100", **kw)
    obj["status"]["startTime"] = rfc3339(T0 - 50)
    return obj


def decision_of(result: Any) -> PreemptionDecision:
    assert result.state is not None
    decision = result.state.get(DECISION, PreemptionDecision)
    assert decision is not None
    return decision


def test_preemption_removes_the_pod_whose_anti_affinity_excludes_the_preemptor() -> None:
    """default_preemption_test.go "pod with anti-affinity is preempted": the low-priority pod on node1 rejects pods
    labelled foo on its hostname; evicting it alone makes room; node2 is full of a higher-priority pod."""
    nodes = [node("node1", cpu="4", memory="8Gi", labels={"hostname": "node1"}),
             node("node2", cpu="4", memory="8Gi", labels={"hostname": "node2"})]
    fw, _ = cluster(nodes, [
        running("p1.1", "node1", LOW, labels={"foo": ""},
                aff=affinity(anti_required=[term(expr("foo", "Exists"), topology="hostname")])),
        running("p1.2", "node1", MID), running("p1.3", "node1", HIGH), running("p2", "node2", HIGH, cpu="4"),
    ])
    incoming = a_pod("p", labels={"foo": ""}, priority=HIGH, cpu="100m", memory="100")
    result = scheduling_cycle(fw, PodInfo.from_dict(incoming))
    assert result.status.code is Code.UNSCHEDULABLE
    assert "1 node(s) didn't satisfy existing pods anti-affinity rules" in result.status.message
    assert result.nominated_node_name == "node1"
    decision = decision_of(result)
    assert [(c.node_name, [v.name for v in c.victims]) for c in decision.candidates] == [("node1", ["p1.1"])]


def test_preemption_for_topology_spread_constraints() -> None:
    """default_preemption_test.go TestPreempt "preemption for topology spread constraints": node-b's low-priority
    pod is the only victim that lets both constraints hold."""
    nodes = [node(name, cpu="32", memory="64Gi", labels={"hostname": name, "zone": zone})
             for name, zone in (("node-a", "zone1"), ("node-b", "zone1"), ("node-x", "zone2"))]
    foo = selector(expr("foo", "Exists"))
    fw, _ = cluster(nodes, [
        running("p-a1", "node-a", HIGH, labels={"foo": ""}), running("p-a2", "node-a", HIGH, labels={"foo": ""}),
        running("p-b1", "node-b", LOW, labels={"foo": ""}),
        running("p-x1", "node-x", HIGH, labels={"foo": ""}), running("p-x2", "node-x", HIGH, labels={"foo": ""}),
    ])
    incoming = a_pod("p", labels={"foo": ""}, priority=HIGH,
                     constraints=[spread(1, "zone", match=foo), spread(1, "hostname", match=foo)])
    result = scheduling_cycle(fw, PodInfo.from_dict(incoming))
    assert result.status.code is Code.UNSCHEDULABLE
    assert "3 node(s) didn't match pod topology spread constraints" in result.status.message
    assert result.nominated_node_name == "node-b"
    assert [(c.node_name, [v.name for v in c.victims]) for c in decision_of(result).candidates] == [
        ("node-b", ["p-b1"])]


def test_a_nominated_pod_counts_on_its_node_for_lower_priority_pods() -> None:
    """A higher-priority pod nominated to n0 (preemption made room there) counts there for anti-affinity, so a
    lower-priority replica goes elsewhere (kube-scheduler's RunFilterPluginsWithNominatedPods)."""
    fw, snap = cluster(hostnamed(2))
    anti = affinity(anti_required=[term(labels={"app": "web"}, topology=HOST)])
    waiting = PodInfo.from_dict(pod("web-high", "100m", "64Mi", labels={"app": "web"}, affinity=anti, priority=HIGH))
    snap.upsert_pod_info(waiting)
    snap.nominate(waiting.key, "n0")
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("web-low", "100m", "64Mi", labels={"app": "web"},
                                                        affinity=anti, priority=LOW)))
    assert result.node_name == "n1"


# --------------------------------------------------------------------------- the per-row counts
def brute_counts(snap: Snapshot, flt: PodFilter) -> list[int]:
    out = [0] * snap.num_slots
    for record in snap.records.values():
        if flt.matches(record.pod):
            out[record.node_index] += 1
    return out


def test_pod_match_counts_stay_equal_to_counting_from_scratch() -> None:
    rng = random.Random(7)
    snap = Snapshot.from_objects(nodes=[node(f"n{i}") for i in range(6)])
    apps = ["a", "b", "c"]
    filters = [
        PodFilter(((None, selector_of(app="a")),)),
        PodFilter(((frozenset({"ns1"}), selector_of(app="b")),), skip_deleting=True),
        PodFilter(((None, selector_of(app="a")), (None, selector_of(tier="x")))),
        PodFilter(((None, selector_of_exprs(expr("app", "NotIn", "a"))),)),  # unanchored
        PodFilter(((None, selector_of_exprs(expr("tier", "Exists"))),)),
    ]
    for flt in filters[:2]:
        snap.pod_matches.counts(flt)  # built early: kept current from here on
    names: list[str] = []
    for step in range(400):
        action = rng.random()
        if action < 0.5 or not names:
            name = f"p{step}"
            labels = {"app": rng.choice(apps)} | ({"tier": "x"} if rng.random() < 0.5 else {})
            snap.upsert_pod(a_pod(name, namespace=rng.choice(["ns1", "ns2"]), labels=labels,
                                  node_name=f"n{rng.randrange(6)}"))
            names.append(name)
        elif action < 0.7:
            victim = names.pop(rng.randrange(len(names)))
            key = next(k for k in list(snap.pods) if k.endswith("/" + victim))
            snap.remove_pod(key)
        elif action < 0.9:
            chosen = rng.choice(names)
            key = next(k for k in list(snap.pods) if k.endswith("/" + chosen))
            obj = dict(snap.pods[key].raw)
            meta = dict(obj["metadata"])
            meta["labels"] = {"app": rng.choice(apps)}
            if rng.random() < 0.3:
                meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
            snap.upsert_pod(dict(obj, metadata=meta))  # a relabelled (or terminating) bound pod
        elif step % 50 == 0:
            snap.remove_node("n5")
            snap.upsert_node(node("n5"))
        if step % 40 == 0:
            for flt in filters:
                assert snap.pod_matches.counts(flt).tolist() == brute_counts(snap, flt), (step, flt)
    for flt in filters:
        assert snap.pod_matches.counts(flt).tolist() == brute_counts(snap, flt)


def selector_of(**labels: str) -> Any:
    from common.api.scheduling import LabelSelector
    return LabelSelector(tuple(sorted(labels.items())))


def selector_of_exprs(*exprs: Obj) -> Any:
    from common.api.scheduling import parse_label_selector
    return parse_label_selector({"matchExpressions": list(exprs)}, "test")


def test_kept_filters_are_bounded_least_recently_used_first() -> None:
    snap = Snapshot.from_objects(nodes=[node("n0")], pods=[a_pod("x", labels={"app": "0"}, node_name="n0")])
    index: PodMatchIndex = snap.pod_matches
    first = PodFilter(((None, selector_of(app="0")),))
    index.counts(first)
    for i in range(1, MAX_COUNTED_FILTERS + 5):
        index.counts(PodFilter(((None, selector_of(app=str(i))),)))
    assert len(index) == MAX_COUNTED_FILTERS
    # The evicted first filter is rebuilt from the accounted pods when asked again.
    assert index.counts(first).tolist() == [1]
    snap.upsert_pod(a_pod("y", labels={"app": "0"}, node_name="n0"))
    assert index.counts(first).tolist() == [2]


def test_carried_terms_follow_their_pods() -> None:
    anti = affinity(anti_required=[term(labels={"app": "web"}, topology=HOST)])
    snap = Snapshot.from_objects(nodes=hostnamed(2), pods=[
        a_pod("w0", labels={"app": "web"}, node_name="n0", aff=anti),
        a_pod("w1", labels={"app": "web"}, node_name="n0", aff=anti),
        a_pod("w2", labels={"app": "web"}, node_name="n1", aff=anti)])
    carried = list(snap.pod_matches.carried("required_anti_affinity"))
    assert len(carried) == 1 and carried[0].total == 3
    assert carried[0].counts[:2].tolist() == [2, 1]
    for key in [k for k in snap.pods]:
        snap.remove_pod(key)
    assert not snap.pod_matches.has_carried("required_anti_affinity")
    assert np.asarray(brute_counts(snap, PodFilter(((None, selector_of(app="web")),)))).sum() == 0


def test_explain_shows_each_nodes_reason_and_the_scores() -> None:
    """`loadline explain` renders `framework.explain`: the rejected nodes with these plugins' reasons, the scored
    ones with their PodTopologySpread/InterPodAffinity scores."""
    from scheduler_plugin.framework.explain import explain

    fw, snap = cluster(hostnamed(3))
    anti = affinity(anti_required=[term(labels={"app": "web"}, topology=HOST)])
    assert scheduling_cycle(fw, PodInfo.from_dict(pod("web-0", "100m", "64Mi", labels={"app": "web"},
                                                      affinity=anti))).status.is_success()
    taken = {r.node_index for r in snap.records.values()}
    incoming = a_pod("web-1", labels={"app": "web"}, aff=anti,
                     constraints=[spread(1, HOST, "ScheduleAnyway", match=selector(labels={"app": "web"}))])
    result = scheduling_cycle(fw, PodInfo.from_dict(incoming), record=True)
    lines = {e.node: e for e in explain(result, snap)}
    rejected = snap.node_name(next(iter(taken)))
    assert lines[rejected].rejected_by == "InterPodAffinity"
    assert lines[rejected].reasons == ["node(s) didn't match pod anti-affinity rules"]
    scored = [e for e in lines.values() if e.total is not None]
    assert len(scored) == 2 and all(e.scores["PodTopologySpread"][2] == 2 for e in scored)


def test_pathological_selectors_decide_right() -> None:
    """What the API server accepts but no one should write: 5,000 namespaces, an In of 5,000 values, 200
    requirements, on 500 nodes with 2,000 pods. Matching uses sets and compiled selectors (0.4 s for this first
    cycle on a host at load 17, most of it counting the 2,000 pods once); the verdict is right: only the node
    without a matching pod fits."""
    fw, _ = cluster(hostnamed(500), [a_pod(f"x{i}", namespace=f"ns{i % 50}", labels={"app": f"a{i}", "k": "v"},
                                              node_name=f"n{i % 499}") for i in range(2000)])
    requirements = [expr("app", "In", *[f"a{i}" for i in range(5000)])]
    requirements += [expr(f"absent-{i}", "DoesNotExist") for i in range(200)]
    huge = term(*requirements, topology=HOST, namespaces=[f"ns{i}" for i in range(5000)])
    incoming = a_pod("big", labels={"app": "other"}, aff=affinity(anti_required=[huge]))
    result = scheduling_cycle(fw, PodInfo.from_dict(incoming))
    assert result.status.is_success(), result.status.message
    assert result.node_name == "n499"  # the only node without a pod the selector matches


# --------------------------------------------------------------------------- queueing hints
def hinted(pending: Obj, plugin: str, event: str, changed: Obj | None, old: Obj | None) -> bool:
    """Whether the event moves `pending`, parked by `plugin`, through the scheduler's EventInterests."""
    from scheduler_plugin.framework.interfaces import QueuedPodInfo
    from scheduler_plugin.plugins.registry import frameworks_from_config
    from scheduler_plugin.server.queueing import EventInterests

    fw = frameworks_from_config(None, snapshot=Snapshot())["loadline-scheduler"]
    info = QueuedPodInfo(PodInfo.from_dict(pending), 0.0, unschedulable_plugins={plugin})
    parsed = [None if o is None else PodInfo.from_dict(o) for o in (changed, old)]
    return EventInterests(fw.plugins.values()).helps(event, *parsed)(info)


def test_queueing_hints_are_kube_schedulers() -> None:
    """isSchedulableAfterPodChange of both plugins: a pod parked by required anti-affinity is not moved by every
    pod bound elsewhere (kube-scheduler's QueueSkip), only by what can undo its rejection."""
    from scheduler_plugin.framework.events import ASSIGNED_POD_ADD, ASSIGNED_POD_DELETE, ASSIGNED_POD_UPDATE

    anti = affinity(anti_required=[term(labels={"app": "web"}, topology=HOST)])
    apart = a_pod("web-9", labels={"app": "web"}, aff=anti)
    web, other = a_pod("w", labels={"app": "web"}, node_name="n0"), a_pod("o", labels={"app": "db"}, node_name="n0")
    ipa = "InterPodAffinity"
    assert not hinted(apart, ipa, ASSIGNED_POD_ADD, web, None)  # a bound pod never undoes anti-affinity
    assert hinted(apart, ipa, ASSIGNED_POD_DELETE, None, web)  # the pod it avoids left
    assert not hinted(apart, ipa, ASSIGNED_POD_DELETE, None, other)
    assert hinted(apart, ipa, ASSIGNED_POD_UPDATE, other, web)  # relabelled away from its terms
    guarded = a_pod("g", labels={"app": "db"}, node_name="n0", aff=affinity(anti_required=[
        term(labels={"app": "web"}, topology=HOST)]))
    assert hinted(a_pod("p", labels={"app": "web"}), ipa, ASSIGNED_POD_DELETE, None, guarded)  # its anti-affinity
    together = a_pod("t", labels={"app": "x"}, aff=affinity(required=[term(labels={"app": "db"}, topology=HOST)]))
    assert hinted(together, ipa, ASSIGNED_POD_ADD, other, None)
    assert not hinted(together, ipa, ASSIGNED_POD_ADD, web, None)
    assert hinted(apart, "NodeResourcesFit", ASSIGNED_POD_DELETE, None, other)  # no hint: every registered event

    spread_pod = a_pod("s", labels={"app": "web"}, constraints=[spread(1, HOST, match=selector(labels={"app": "web"}))])
    pts = "PodTopologySpread"
    assert hinted(spread_pod, pts, ASSIGNED_POD_ADD, web, None)
    assert not hinted(spread_pod, pts, ASSIGNED_POD_ADD, other, None)
    assert hinted(spread_pod, pts, ASSIGNED_POD_DELETE, None, web)
    assert not hinted(spread_pod, pts, ASSIGNED_POD_DELETE, None, a_pod("w", namespace="x", labels={"app": "web"},
                                                                       node_name="n0"))
    assert hinted(spread_pod, pts, ASSIGNED_POD_UPDATE, other, web)
    assert not hinted(spread_pod, pts, ASSIGNED_POD_UPDATE, web, web)
