"""The volume plugins in the default profile: whole scheduling cycles, preemption, and the queue's events."""

from __future__ import annotations

from typing import Any

from scheduler_plugin.framework import events
from scheduler_plugin.framework.clock import FakeClock
from scheduler_plugin.framework.interfaces import QueuedPodInfo
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.schedule_one import scheduling_cycle
from scheduler_plugin.plugins.defaultpreemption import DECISION, PreemptionDecision
from scheduler_plugin.plugins.storage import PersistentVolumes
from scheduler_plugin.server.queueing import EventInterests
from tests.objects import T0, node, pod, rfc3339
from tests.storage_objects import HOSTNAME, claim, csi_node, persistent_volume, storage_class, with_claims
from tests.unit.scheduler.builders import default_framework
from tests.unit.scheduler.volume_support import volume_snapshot

Obj = dict[str, Any]
LOW, HIGH = 1000, 9000


def running(name: str, node_name: str, *claims: str, priority: int = LOW) -> Obj:
    obj = with_claims(pod(name, "100m", "64Mi", node_name=node_name, priority=priority, scheduled_at=T0 - 60),
                      *claims)  # fmt: skip
    obj["status"]["startTime"] = rfc3339(T0 - 60)
    return obj


def test_a_statefulset_like_pod_goes_where_its_local_pv_is_and_reserves_it() -> None:
    nodes = [node(n, labels={HOSTNAME: n}) for n in ("a", "b", "c")]
    snap = volume_snapshot(nodes, classes=[storage_class("local")],
                           pvs=[persistent_volume("pv-b", "1Gi", storage_class="local", hostname="b")],
                           claims=[claim("data-web-0", storage_class="local"),
                                   claim("data-web-1", storage_class="local")])  # fmt: skip
    fw, _, _ = default_framework(snap, clock=FakeClock(T0))
    result = scheduling_cycle(fw, PodInfo.from_dict(with_claims(pod("web-0"), "data-web-0")))
    assert result.status.is_success() and result.node_name == "b"
    pv = snap.store(PersistentVolumes).get("pv-b")
    assert pv is not None and pv.claim_ref is not None and pv.claim_ref.name == "data-web-0"
    # The next replica finds no PV left: the first one's is assumed taken before its binding is written.
    second = scheduling_cycle(fw, PodInfo.from_dict(with_claims(pod("web-1"), "data-web-1")))
    assert second.status.is_rejected()
    assert second.status.message.startswith(
        "0/3 nodes are available: 3 node(s) didn't find available persistent volumes to bind.")


def test_preemption_evicts_the_pod_that_holds_a_read_write_once_pod_claim() -> None:
    nodes = [node(n, labels={HOSTNAME: n}) for n in ("a", "b")]
    rwop = claim("exclusive", storage_class="local", access_modes=["ReadWriteOncePod"], volume_name="pv",
                 bound=True)  # fmt: skip
    pv = persistent_volume("pv", storage_class="local", access_modes=["ReadWriteOncePod"], phase="Bound",
                           claim_ref=("default", "exclusive", "uid-pvc-default-exclusive"))  # fmt: skip
    snap = volume_snapshot(nodes, [running("holder", "a", "exclusive")], pvs=[pv], claims=[rwop],
                           classes=[storage_class("local")])  # fmt: skip
    fw, _, _ = default_framework(snap, clock=FakeClock(T0))
    result = scheduling_cycle(fw, PodInfo.from_dict(with_claims(pod("urgent", "100m", "64Mi", priority=HIGH),
                                                                "exclusive")))  # fmt: skip
    assert result.status.is_rejected()
    assert "2 node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode" in result.status.message
    assert result.nominated_node_name == "a"
    decision = result.state.get(DECISION, PreemptionDecision) if result.state is not None else None
    assert decision is not None and [v.name for v in decision.best.victims] == ["holder"]


def test_preemption_can_free_a_volume_slot_but_not_a_volume_zone() -> None:
    nodes = [node("a", labels={HOSTNAME: "a"})]
    csi = [persistent_volume(f"pv-{i}", csi=("csi.example.com", f"h{i}"), phase="Bound",
                             claim_ref=("default", f"c{i}", f"uid-pvc-default-c{i}")) for i in range(2)]  # fmt: skip
    claims = [claim(f"c{i}", volume_name=f"pv-{i}", bound=True) for i in range(2)]
    snap = volume_snapshot(nodes, [running("old", "a", "c0")], pvs=csi, claims=claims,
                           csi_nodes=[csi_node("a", {"csi.example.com": 1})])  # fmt: skip
    fw, _, _ = default_framework(snap, clock=FakeClock(T0))
    result = scheduling_cycle(fw, PodInfo.from_dict(with_claims(pod("new", "100m", "64Mi", priority=HIGH), "c1")))
    assert "1 node(s) exceed max volume count" in result.status.message
    assert result.nominated_node_name == "a"  # evicting "old" detaches its volume


def test_the_queue_wakes_pods_a_volume_plugin_rejected_on_storage_events_only() -> None:
    snap = volume_snapshot([node("a")])
    fw, _, _ = default_framework(snap, clock=FakeClock(T0))
    interests = EventInterests(fw.plugins.values())
    queued = QueuedPodInfo(PodInfo.from_dict(pod("p")), T0, unschedulable_plugins={"VolumeBinding"})
    for event in (events.PERSISTENT_VOLUME, events.PERSISTENT_VOLUME_CLAIM, events.STORAGE_CLASS, events.CSI_NODE,
                  events.NODE_ADD):  # fmt: skip
        assert interests.helps(event)(queued), event
    assert not interests.helps(events.NODE_METRIC)(queued)
    limited = QueuedPodInfo(PodInfo.from_dict(pod("q")), T0, unschedulable_plugins={"NodeVolumeLimits"})
    assert interests.helps(events.ASSIGNED_POD_DELETE)(limited) and interests.helps(events.VOLUME_ATTACHMENT)(limited)
    assert not interests.helps(events.STORAGE_CLASS)(limited)
