"""NodePorts: kube-scheduler's table (nodeports/node_ports_test.go) plus what its NodeInfo gives it for
free and Loadline's snapshot must do itself: ports released with the pod, nominated pods' ports,
preemption freeing a port."""

from __future__ import annotations

from typing import Any

import pytest

from common.api.scheduling import HostPort, parse_host_ports
from scheduler_plugin.framework.clock import FakeClock
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.explain import explain
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.schedule_one import scheduling_cycle
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.framework.status import Code
from scheduler_plugin.plugins.defaultpreemption import DECISION, PreemptionDecision
from scheduler_plugin.plugins.nodeports import REASON, NodePorts
from tests.objects import T0, node, pod
from tests.unit.scheduler.builders import default_framework

Obj = dict[str, Any]


def with_ports(obj: Obj, *specs: str, init: str | None = None) -> Obj:
    """Ports written as kube-scheduler's test does: "PROTOCOL/hostIP/hostPort"; `init`: put them on an init
    container, a sidecar ("Always") or not ("")."""
    ports = []
    for spec in specs:
        protocol, ip, port = spec.split("/")
        ports.append({"containerPort": int(port), "hostPort": int(port), "protocol": protocol, "hostIP": ip})
    if init is None:
        obj["spec"]["containers"][0]["ports"] = ports
    else:
        sidecar: Obj = {"name": "init", "ports": ports}
        if init:
            sidecar["restartPolicy"] = init
        obj["spec"]["initContainers"] = [sidecar]
    return obj


def fits(existing: list[str], wanted: list[str], *, init: str | None = None) -> bool | None:
    """Whether a pod with `wanted` fits next to a pod holding `existing`; None when PreFilter skipped."""
    snap = Snapshot.from_objects([node("n")], [with_ports(pod("old", node_name="n"), *existing)])
    plugin = NodePorts()
    incoming = PodInfo.from_dict(with_ports(pod("new"), *wanted, init=init))
    state = CycleState()
    _, status = plugin.pre_filter(state, incoming, snap)
    if status.is_skip():
        return None
    result = plugin.filter(state, incoming, snap, snap.node_indices())
    assert all(r.reason == REASON and r.code is Code.UNSCHEDULABLE for r in result.rejections)
    return result.feasible is None


@pytest.mark.parametrize(("existing", "wanted", "init", "expected"), [
    ([], [], None, None),  # no ports: PreFilter skips
    (["UDP/127.0.0.1/9090"], ["UDP/127.0.0.1/8080"], None, True),  # other port
    (["UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/8080"], None, False),  # same udp port
    (["TCP/127.0.0.1/8080"], ["TCP/127.0.0.1/8080"], None, False),  # same tcp port
    (["TCP/127.0.0.2/8080"], ["TCP/127.0.0.1/8080"], None, True),  # different host ip
    (["TCP/127.0.0.1/8080"], ["UDP/127.0.0.1/8080"], None, True),  # different protocol
    (["UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"], None, False),  # second udp port
    (["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"], ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"], None, False),
    (["TCP/127.0.0.1/8001"], ["TCP/0.0.0.0/8001"], None, False),  # a wanted 0.0.0.0 conflicts with any IP
    (["TCP/127.0.0.1/8001"], ["TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"], None, False),
    (["TCP/0.0.0.0/8001"], ["TCP/127.0.0.1/8001"], None, False),  # a held 0.0.0.0 conflicts with any IP
    (["TCP/0.0.0.0/8001"], ["UDP/127.0.0.1/8001"], None, True),  # second different protocol
    (["TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"], ["UDP/127.0.0.1/8001"], None, False),
    (["TCP/0.0.0.0/8001"], ["TCP/0.0.0.0/8001"], "", None),  # a plain init container's port: skipped
    (["TCP/0.0.0.0/8001"], ["TCP/0.0.0.0/8001"], "Always", False),  # a sidecar's port counts
])
def test_kube_scheduler_table(existing: list[str], wanted: list[str], init: str | None, expected: bool | None) -> None:
    assert fits(existing, wanted, init=init) is expected


def test_ports_are_sanitised_and_deduplicated_like_host_port_info() -> None:
    spec = {"containers": [
        {"name": "a", "ports": [{"containerPort": 80, "hostPort": 80}, {"containerPort": 81}]},
        {"name": "b", "ports": [{"containerPort": 80, "hostPort": 80, "protocol": "TCP", "hostIP": "0.0.0.0"},
                                {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
                                {"containerPort": 1, "hostPort": 0}]},
    ]}
    assert parse_host_ports(spec) == (HostPort("TCP", 80, "0.0.0.0"), HostPort("UDP", 53, "10.0.0.1"))


def test_ports_are_released_with_the_pod_and_the_node() -> None:
    snap = Snapshot.from_objects([node("a"), node("b")], [with_ports(pod("old", node_name="a"), "TCP/0.0.0.0/80")])
    a, b = snap.node_by_name("a"), snap.node_by_name("b")
    assert a is not None and b is not None
    assert snap.host_ports.ports_of_row(a.index) == [HostPort("TCP", 80, "0.0.0.0")]
    snap.remove_pod("default/old")
    assert not snap.host_ports
    snap.upsert_pod(with_ports(pod("old2", node_name="b"), "TCP/0.0.0.0/80"))
    snap.remove_node("b")
    assert not snap.host_ports


def test_two_pods_with_one_port_never_share_a_node() -> None:
    snap = Snapshot.from_objects([node("a"), node("b")])
    fw, _, _ = default_framework(snap)
    placed = [scheduling_cycle(fw, PodInfo.from_dict(with_ports(pod(f"p{i}", "100m"), "TCP/0.0.0.0/8080")))
              for i in range(3)]
    assert sorted(r.node_name or "" for r in placed[:2]) == ["a", "b"]
    third = placed[2]
    assert third.status.code is Code.UNSCHEDULABLE
    # `loadline explain` names the plugin and kube-scheduler's reason per node.
    third_again = scheduling_cycle(fw, PodInfo.from_dict(with_ports(pod("p3", "100m"), "TCP/0.0.0.0/8080")), record=True)
    assert [e.line() for e in explain(third_again, snap)] == [f"a: rejected by NodePorts: {REASON}",
                                                              f"b: rejected by NodePorts: {REASON}"]
    assert third.status.message == (
        f"0/2 nodes are available: 2 {REASON}. "
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    )


def test_a_nominated_pod_holds_its_ports_for_lower_priorities() -> None:
    snap = Snapshot.from_objects([node("a")])
    fw, _, _ = default_framework(snap)
    nominated = PodInfo.from_dict(with_ports(pod("nominated", "100m", priority=100), "TCP/0.0.0.0/8080"))
    snap.upsert_pod_info(nominated)
    snap.nominate(nominated.key, "a")
    lower = scheduling_cycle(fw, PodInfo.from_dict(with_ports(pod("lower", "100m", priority=1), "TCP/0.0.0.0/8080")))
    assert lower.status.code is Code.UNSCHEDULABLE and REASON in lower.status.message
    other_port = scheduling_cycle(fw, PodInfo.from_dict(with_ports(pod("other", "100m", priority=1), "TCP/0.0.0.0/81")))
    assert other_port.node_name == "a"
    equal = scheduling_cycle(fw, PodInfo.from_dict(with_ports(pod("equal", "100m", priority=100), "TCP/0.0.0.0/8080")))
    assert equal.status.code is Code.UNSCHEDULABLE  # nominated pods of at least the pod's priority count
    higher = scheduling_cycle(fw, PodInfo.from_dict(with_ports(pod("higher", "100m", priority=101),
                                                               "TCP/0.0.0.0/8080")))
    assert higher.node_name == "a"


def test_preemption_evicts_the_pod_holding_the_port() -> None:
    """Only a port is in the way: the victim is the lower-priority pod holding it, not its neighbour."""
    pods = [
        with_ports(pod("holder", "100m", node_name="a", priority=1, scheduled_at=T0), "TCP/0.0.0.0/8080"),
        pod("neighbour", "100m", node_name="a", priority=1, scheduled_at=T0),
    ]
    snap = Snapshot.from_objects([node("a")], pods)
    fw, _, _ = default_framework(snap, clock=FakeClock(T0 + 10))
    result = scheduling_cycle(fw, PodInfo.from_dict(with_ports(pod("prod", "100m", priority=1000),
                                                              "TCP/127.0.0.1/8080")))
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.nominated_node_name == "a"
    assert result.state is not None
    decision = result.state.get(DECISION, PreemptionDecision)
    assert decision is not None
    assert [v.name for v in decision.best.victims] == ["holder"]
    assert snap.host_ports.ports_of_row(0) == [HostPort("TCP", 8080, "0.0.0.0")]  # the snapshot is untouched
