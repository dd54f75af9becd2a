"""Coscheduling: queue order, PreFilter checks, Permit wait/allow-all, timeout and PostFilter rollback,
and the seed's deadlock (two gangs of 4, room for 6) at the framework level."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from common.api.malformed import MalformedObjectError
from scheduler_plugin.framework.clock import FakeClock
from scheduler_plugin.framework.interfaces import QueuedPodInfo
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.queue import SchedulingQueue
from scheduler_plugin.framework.runtime import Framework
from scheduler_plugin.framework.schedule_one import scheduling_cycle
from scheduler_plugin.framework.simulator import InProcessScheduler
from scheduler_plugin.framework.snapshot import CPU, Snapshot
from scheduler_plugin.framework.status import Code, Status
from scheduler_plugin.plugins.coscheduling import Coscheduling
from scheduler_plugin.plugins.coscheduling.podgroups import PodGroups
from tests.objects import T0, node, pod, pod_group
from tests.unit.scheduler.builders import default_framework, gang_labels

Obj = dict[str, Any]
CRD_LABEL = "scheduling.x-k8s.io/pod-group"


def gang_pods(group: str, count: int, min_available: int, cpu: str = "2", created: float = T0, **kw: Any) -> list[Obj]:
    return [pod(f"{group}-{i}", cpu=cpu, memory="1Gi", labels=gang_labels(group, min_available), created=created, **kw)
            for i in range(count)]


def config(**coscheduling_args: Any) -> Obj:
    profile: Obj = {"pluginConfig": [{"name": "Coscheduling", "args": coscheduling_args}]}
    return {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration", "profiles": [profile]}


def cluster(nodes: int, cpu: str = "4") -> Snapshot:
    return Snapshot.from_objects(nodes=[node(f"n{i}", cpu=cpu, memory="64Gi") for i in range(nodes)])


def bound_per_gang(sim: InProcessScheduler) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key in sim.bound:
        gang = key.split("/")[1].rsplit("-", 1)[0]
        counts[gang] = counts.get(gang, 0) + 1
    return counts


def held_per_gang(snap: Snapshot) -> dict[str, int]:
    """Pods holding a node (bound or assumed/waiting), per gang."""
    counts: dict[str, int] = {}
    for key in snap.records:
        gang = key.split("/")[1].rsplit("-", 1)[0]
        counts[gang] = counts.get(gang, 0) + 1
    return counts


def cycle(fw: Framework, snap: Snapshot, name: str) -> Any:
    return scheduling_cycle(fw, snap.pods[f"default/{name}"])


# --------------------------------------------------------------------------- QueueSort
def test_queue_sort_keeps_gangs_together() -> None:
    snap = Snapshot.from_objects(
        nodes=[node("n0")],
        stores={PodGroups: [pod_group("early", 2, created=T0 - 100), pod_group("late", 2, created=T0 + 100)]},
        pods=[
            pod("late-b", labels={CRD_LABEL: "late"}, created=T0 - 500),
            pod("early-a", labels={CRD_LABEL: "early"}, created=T0 + 900),
            pod("lone", created=T0),
            pod("late-a", labels={CRD_LABEL: "late"}),
            pod("early-b", labels={CRD_LABEL: "early"}),
            pod("vip", priority=1000),
        ],
    )
    fw, _, _ = default_framework(snap)
    plugin = fw.plugins["Coscheduling"]
    assert isinstance(plugin, Coscheduling)

    def queued(name: str, when: float) -> QueuedPodInfo:
        return QueuedPodInfo(snap.pods[f"default/{name}"], timestamp=when, initial_attempt_timestamp=when)

    items = [queued("late-b", T0), queued("lone", T0), queued("early-a", T0), queued("late-a", T0 + 1),
             queued("vip", T0 + 50), queued("early-b", T0 + 2)]
    order = sorted(items, key=lambda q: sum(plugin.less(o, q) for o in items))
    # priority first; then gang creation (early T0−100 < lone pod's first attempt T0 < late T0+100); members adjacent
    assert [q.pod.name for q in order] == ["vip", "early-a", "early-b", "lone", "late-a", "late-b"]


# --------------------------------------------------------------------------- PreFilter
def test_prefilter_rejects_gang_with_too_few_pods() -> None:
    snap = cluster(2)
    for p in gang_pods("g", 2, 3):
        snap.upsert_pod(p)
    fw, _, _ = default_framework(snap)
    result = cycle(fw, snap, "g-0")
    assert result.status.message.startswith(
        "0/2 nodes are available: pre-filter pod g-0 cannot find enough sibling pods, current pods number: 2, "
        "minMember of group: 3."
    )


def test_prefilter_rejects_missing_podgroup_and_resource_gap() -> None:
    snap = Snapshot.from_objects(
        nodes=[node("n0", cpu="4", memory="8Gi")],
        stores={PodGroups: [pod_group("big", 2, min_resources={"cpu": "6", "memory": "1Gi"})]},
        pods=[pod("orphan", labels={CRD_LABEL: "nope"}),
              pod("big-0", labels={CRD_LABEL: "big"}), pod("big-1", labels={CRD_LABEL: "big"})],
    )
    fw, _, _ = default_framework(snap)
    assert "PodGroup default/nope not found" in cycle(fw, snap, "orphan").status.message
    # minResources cpu 6 against 4 free → gap of 2000 milli-cpu
    assert "PodGroup default/big: resource gap: {'cpu': 2000}" in cycle(fw, snap, "big-0").status.message


def test_prefilter_counts_gated_siblings() -> None:
    snap = cluster(2)
    for p in gang_pods("g", 2, 2):
        snap.upsert_pod(p)
    snap.upsert_pod(pod("g-2", labels=gang_labels("g", 3), gates=["wait-for-data"]))
    for key in list(snap.pods):
        snap.upsert_pod({**snap.pods[key].raw, "metadata": {**snap.pods[key].raw["metadata"],
                                                             "labels": gang_labels("g", 3)}})
    fw, _, _ = default_framework(snap)
    assert "1 sibling pods are gated" in cycle(fw, snap, "g-0").status.message


# --------------------------------------------------------------------------- Permit
def test_permit_waits_for_min_member_then_allows_all() -> None:
    snap = cluster(3)
    for p in gang_pods("g", 3, 3):
        snap.upsert_pod(p)
    fw, _, _ = default_framework(snap)
    first = cycle(fw, snap, "g-0")
    assert first.status.code is Code.WAIT
    assert set(first.state.pods_to_activate) == {"default/g-1", "default/g-2"}
    second = cycle(fw, snap, "g-1")
    assert second.status.code is Code.WAIT and len(fw.waiting_pods) == 2
    third = cycle(fw, snap, "g-2")
    assert third.status.is_success()
    assert len(fw.waiting_pods) == 0
    assert first.waiting is not None and first.waiting.result is not None and first.waiting.result.is_success()


def test_timeout_rejects_the_whole_gang_and_releases_every_reservation() -> None:
    snap = Snapshot.from_objects(nodes=[node("n0"), node("n1"), node("n2")],
                                 stores={PodGroups: [pod_group("g", 3, timeout=30)]},
                                 pods=[pod(f"g-{i}", labels={CRD_LABEL: "g"}) for i in range(3)])
    fw, clock, _ = default_framework(snap)
    outcomes: list[Any] = []
    fw.add_permit_listener(outcomes.append)
    cycle(fw, snap, "g-0")
    clock.advance(10)
    cycle(fw, snap, "g-1")
    assert held_per_gang(snap) == {"g": 2}
    clock.advance(20)  # g-0 has waited 30 s
    assert held_per_gang(snap) == {}
    assert snap.requested[CPU].sum() == 0
    messages = {o.pod.name: o.status.message for o in outcomes}
    assert messages["g-0"] == 'pod "g-0" rejected while waiting on permit: rejected due to timeout after waiting 30s at plugin Coscheduling'
    assert messages["g-1"] == 'pod "g-1" rejected while waiting on permit: rejection in Unreserve'


def test_postfilter_rejects_waiting_siblings_when_a_member_fits_nowhere() -> None:
    snap = cluster(3)
    for p in gang_pods("g", 2, 3):
        snap.upsert_pod(p)
    snap.upsert_pod(pod("g-2", labels=gang_labels("g", 3), node_selector={"disk": "ssd"}))
    fw, _, _ = default_framework(snap)
    cycle(fw, snap, "g-0")
    cycle(fw, snap, "g-1")
    assert held_per_gang(snap) == {"g": 2}
    result = cycle(fw, snap, "g-2")
    assert result.status.message == (
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. "
        "PodGroup default/g gets rejected due to Pod g-2 is unschedulable even after PostFilter, "
        "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    )
    assert held_per_gang(snap) == {} and len(fw.waiting_pods) == 0


def test_nearly_complete_gang_keeps_waiting_and_backoff_blocks_failed_gangs() -> None:
    snap = Snapshot.from_objects(nodes=[node("big", cpu="64", memory="256Gi")])
    for p in gang_pods("g", 20, 20, cpu="1")[:19]:
        snap.upsert_pod(p)
    snap.upsert_pod(pod("g-19", cpu="1", labels=gang_labels("g", 20), node_selector={"disk": "ssd"}))
    fw, _, _ = default_framework(snap, config(podGroupBackoffSeconds=30))
    for i in range(19):
        cycle(fw, snap, f"g-{i}")
    result = cycle(fw, snap, "g-19")
    # (20 − 19) / 20 = 5% ≤ podGroupRejectPercentage 10%: the siblings keep their places
    assert result.status.message.endswith(
        "PodGroup default/g keeps waiting: 19/20 placed, preemption: 0/1 nodes are available: "
        "1 Preemption is not helpful for scheduling.")
    assert held_per_gang(snap) == {"g": 19}

    snap2 = cluster(3)
    for p in gang_pods("h", 2, 3):
        snap2.upsert_pod(p)
    snap2.upsert_pod(pod("h-2", labels=gang_labels("h", 3), node_selector={"disk": "ssd"}))
    fw2, clock2, _ = default_framework(snap2, config(podGroupBackoffSeconds=30))
    cycle(fw2, snap2, "h-0")
    cycle(fw2, snap2, "h-1")
    cycle(fw2, snap2, "h-2")
    assert "podGroup default/h failed recently" in cycle(fw2, snap2, "h-0").status.message
    clock2.advance(31)
    assert cycle(fw2, snap2, "h-0").status.code is Code.WAIT


# --------------------------------------------------------------------------- the seed's deadlock
def run(sim: InProcessScheduler, seconds: float = 600) -> None:
    asyncio.run(sim.run(max_virtual_seconds=seconds))


def test_two_gangs_of_four_on_room_for_six_queue_sorted() -> None:
    snap = cluster(3)  # 3 nodes × 4 cpu, pods of 2 cpu: room for 6
    fw, _, binder = default_framework(snap)
    sim = InProcessScheduler(fw, binder=binder)
    for p in gang_pods("a", 4, 4, created=T0) + gang_pods("b", 4, 4, created=T0 + 1):
        sim.add_pod(p)
    run(sim)
    assert bound_per_gang(sim) == {"a": 4}
    assert held_per_gang(snap) == {"a": 4}  # gang b holds nothing, not even a waiting reservation
    assert not any(e.kind in ("waiting", "bound") and "/b-" in e.pod for e in sim.events)
    assert sorted(sim.pending()) == [f"default/b-{i}" for i in range(4)]


def test_two_gangs_interleaved_by_a_plain_priority_queue() -> None:
    """Without gang-aware queue order the gangs interleave; PostFilter/Unreserve still resolve it."""
    snap = cluster(3)
    plain_queue = {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "profiles": [{"plugins": {"queueSort": {"enabled": [{"name": "PrioritySort"}], "disabled": [{"name": "*"}]}}}],
    }
    clock = FakeClock()
    fw, _, binder = default_framework(snap, plain_queue, clock=clock)
    sim = InProcessScheduler(fw, binder=binder)
    a, b = gang_pods("a", 4, 4), gang_pods("b", 4, 4)
    for pa, pb in zip(a, b, strict=True):
        sim.add_pod(pa)
        clock.advance(0.001)
        sim.add_pod(pb)
        clock.advance(0.001)
    run(sim)
    bound = bound_per_gang(sim)
    assert sorted(bound.values()) == [4]  # exactly one gang bound, completely
    loser = "b" if "a" in bound else "a"
    assert loser not in held_per_gang(snap)
    waits = [e.pod for e in sim.events if e.kind == "waiting"]
    assert any(f"/{loser}-" in k for k in waits)  # the loser did reserve, then was rolled back
    assert any(e.kind == "rejected-in-permit" and f"/{loser}-" in e.pod for e in sim.events)


def test_two_gangs_without_the_capacity_check_never_split_three_three() -> None:
    snap = cluster(3)
    fw, _, binder = default_framework(snap, config(implicitMinResources=False, permitWaitingTimeSeconds=20))
    sim = InProcessScheduler(fw, binder=binder, cycle_seconds=0.01)
    for p in gang_pods("a", 4, 4, created=T0) + gang_pods("b", 4, 4, created=T0 + 1):
        sim.add_pod(p)
    worst_split: list[dict[str, int]] = []
    original = sim.schedule_one

    def watched() -> Any:
        result = original()
        worst_split.append(held_per_gang(snap))
        return result

    sim.schedule_one = watched  # type: ignore[method-assign]
    run(sim, seconds=60)
    assert bound_per_gang(sim) == {"a": 4}
    # b keeps trying (its members reserve the 2 free slots, then get rolled back), but never binds,
    # and the cluster never holds 3 + 3.
    assert all(split.get("a", 0) in (0, 4) or split.get("a", 0) + split.get("b", 0) <= 6 for split in worst_split)
    assert not any(split.get("b", 0) >= 3 for split in worst_split)
    # b retried under the queue's backoff and then rested in the unschedulable pool: no retry
    # path skips the backoff (a gang sibling's activation used to, re-trying b without end).
    b_attempts = [e for e in sim.events if "/b-" in e.pod and e.kind in ("waiting", "unschedulable")]
    assert 4 <= len(b_attempts) <= 60


def test_gang_of_four_pending_on_room_for_three_then_binds_when_room_appears() -> None:
    snap = cluster(3, cpu="2")  # room for 3 pods of 2 cpu
    fw, _, binder = default_framework(snap)
    sim = InProcessScheduler(fw, binder=binder)
    for p in gang_pods("g", 4, 4):
        sim.add_pod(p)
    run(sim, seconds=60)
    assert sim.bound == {} and held_per_gang(snap) == {}
    sim.add_node(node("n3", cpu="2", memory="64Gi"))
    run(sim, seconds=60)
    assert bound_per_gang(sim) == {"g": 4}
    assert sorted(sim.bound.values()) == ["n0", "n1", "n2", "n3"]


def test_koordinator_annotation_gang_waiting_time() -> None:
    annotations = {"gang.scheduling.koordinator.sh/name": "k", "gang.scheduling.koordinator.sh/min-available": "2",
                   "gang.scheduling.koordinator.sh/waiting-time": "5s"}
    snap = cluster(2)
    snap.upsert_pod(pod("k-0", annotations=annotations))
    snap.upsert_pod(pod("k-1", annotations=annotations, node_selector={"x": "y"}))
    fw, clock, _ = default_framework(snap, config(podGroupRejectPercentage=100))
    assert cycle(fw, snap, "k-0").status.code is Code.WAIT
    cycle(fw, snap, "k-1")  # fits nowhere; 50% missing ≤ 100%: k-0 keeps waiting
    assert held_per_gang(snap) == {"k": 1}
    clock.advance(5)
    assert held_per_gang(snap) == {}


def test_pod_info_gang_spec_error_is_reported() -> None:
    bad = pod("bad", labels={"pod-group.scheduling.sigs.k8s.io/name": "x"})  # no min-available
    snap = cluster(1)
    snap.upsert_pod(bad)
    fw, _, _ = default_framework(snap)
    message = cycle(fw, snap, "bad").status.message
    assert "invalid gang spec" in message and "min-available" in message
    assert PodInfo.from_dict(bad).gang is None


def test_activation_of_a_pod_still_backing_off_sends_it_to_backoff_not_active() -> None:
    clock = FakeClock(T0)
    queue = SchedulingQueue(lambda a, b: a.pod.key < b.pod.key, clock)
    queue.add(PodInfo.from_dict(pod("x")))
    info = queue.pop()
    assert info is not None and info.attempts == 1
    queue.add_unschedulable(info, queue.scheduling_cycle, Status.unschedulable("no room"))
    assert queue.where(info.pod.key) == "unschedulable"
    queue.activate([info.pod.key])  # a gang sibling asks for it at once
    assert queue.where(info.pod.key) == "backoff" and queue.pop() is None
    clock.advance(1.0)  # initial backoff: 1 s after the failure
    assert queue.pop() is info
    assert queue.pending_attempts() == []


def test_pod_groups_of_both_api_groups_share_a_name_and_deleting_one_falls_back_to_the_other() -> None:
    groups = Snapshot().store(PodGroups)
    current = pod_group("g", 2)
    legacy = {**pod_group("g", 5), "apiVersion": "scheduling.sigs.k8s.io/v1alpha1"}
    groups.upsert(current)
    groups.upsert(legacy)
    found = groups.get("default/g")
    assert len(groups) == 1 and found is not None and found.min_member == 5  # the object seen last wins
    groups.remove(legacy)
    found = groups.get("default/g")
    assert found is not None and found.min_member == 2
    broken = pod_group("g", 3)
    broken["spec"]["minMember"] = "three"
    with pytest.raises(MalformedObjectError):
        groups.upsert(broken)
    found = groups.get("default/g")
    assert found is not None and found.min_member == 2  # the last readable version stays
    groups.remove(current)
    assert groups.get("default/g") is None and len(groups) == 0
