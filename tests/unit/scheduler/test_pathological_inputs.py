"""What the API server accepts but nobody should send: thousands of host ports, huge image lists, thousands of
containers and volumes. The answers stay right and the work stays linear in the input (NodePorts looks up only
the rows using a wanted port; ImageLocality adds per distinct image over the rows holding it); values no real
object carries are clamped or named as malformed, never a crash."""

from __future__ import annotations

from typing import Any

import pytest

from common.api.malformed import MalformedObjectError
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.images import MAX_IMAGE_SIZE_BYTES
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.imagelocality import ImageLocality
from scheduler_plugin.plugins.nodeports import NodePorts
from scheduler_plugin.plugins.podfieldguard import MAX_FIELDS_NAMED, refusal_message
from tests.objects import node, pod

Obj = dict[str, Any]


def with_host_ports(obj: Obj, first: int, count: int) -> Obj:
    obj["spec"]["containers"][0]["ports"] = [
        {"containerPort": p, "hostPort": p, "protocol": protocol} for p in range(first, first + count)
        for protocol in ("TCP", "UDP")
    ]
    return obj


def test_thousands_of_host_ports() -> None:
    nodes = [node(f"n{i}") for i in range(50)]
    # Every node holds 2 × 1,000 ports; n7 holds the one port the big pod's range shares with them.
    holders = [with_host_ports(pod(f"h{i}", node_name=f"n{i}"), 1 + 2000 * i, 1000) for i in range(50)]
    holders.append(with_host_ports(pod("clash", node_name="n7"), 40000, 1))
    snap = Snapshot.from_objects(nodes, holders)
    big = PodInfo.from_dict(with_host_ports(pod("big"), 30000, 30000))  # 60,000 host ports
    assert len(big.host_ports) == 60000
    plugin = NodePorts()
    state = CycleState()
    plugin.pre_filter(state, big, snap)
    result = plugin.filter(state, big, snap, snap.node_indices())
    assert result.feasible is not None
    assert [snap.node_name(int(r)) for r in snap.node_indices()[~result.feasible]] == ["n7", "n15", "n16", "n17",
                                                                                       "n18", "n19", "n20", "n21",
                                                                                       "n22", "n23", "n24", "n25",
                                                                                       "n26", "n27", "n28", "n29"]


def test_a_node_with_a_huge_image_list_and_a_pod_with_thousands_of_containers() -> None:
    crowded = node("crowded")
    crowded["status"]["images"] = [{"names": [f"reg/i{i}:v1", f"reg/i{i}@sha256:{i:064x}"], "sizeBytes": 50 << 20}
                                   for i in range(20000)]
    snap = Snapshot.from_objects([crowded, node("bare")])
    assert len(snap.images.states) == 40000
    many = pod("many")
    many["spec"]["containers"] = [{"name": f"c{i}", "image": f"reg/i{i}:v1"} for i in range(3000)]
    info = PodInfo.from_dict(many)
    scores = ImageLocality().score(CycleState(), info, snap, snap.node_indices())
    # Each image: 50 MiB × 1/2 of the nodes = 25 MiB; 3,000 of them between 23 MiB and 3,000 × 1,000 MiB.
    expected = 100 * (3000 * (25 << 20) - (23 << 20)) // (3000 * (1000 << 20) - (23 << 20))
    assert scores.tolist() == [expected, 0]


def test_image_sizes_beyond_any_real_image_are_clamped() -> None:
    odd = node("odd")
    odd["status"]["images"] = [{"names": ["a:1"], "sizeBytes": 2**63 - 1}, {"names": ["b:1"], "sizeBytes": -5},
                               {"names": ["c:1", 7, None]}]
    snap = Snapshot.from_objects([odd])
    sizes = {name: state.size for name, state in snap.images.states.items()}
    assert sizes == {"a:1": MAX_IMAGE_SIZE_BYTES, "b:1": 0, "c:1": 0}


@pytest.mark.parametrize(("status", "field"), [
    ({"images": [{"names": ["a"], "sizeBytes": "big"}]}, "status.images[0].sizeBytes"),
    ({"images": {"names": ["a"]}}, "status.images"),
    ({"images": [{"names": "a"}]}, "status.images[0].names"),
])
def test_malformed_image_lists_name_the_field(status: Obj, field: str) -> None:
    obj = node("n")
    obj["status"].update(status)
    with pytest.raises(MalformedObjectError, match=field.replace("[", r"\[").replace("]", r"\]")):
        Snapshot.from_objects([obj])


@pytest.mark.parametrize(("ports", "field"), [
    ([{"containerPort": 1, "hostPort": "80"}], "spec.containers[0].ports[0].hostPort"),
    ([{"containerPort": 1, "hostPort": True}], "spec.containers[0].ports[0].hostPort"),
    ({"hostPort": 80}, "spec.containers[0].ports"),
])
def test_malformed_ports_name_the_field(ports: Any, field: str) -> None:
    obj = pod("p")
    obj["spec"]["containers"][0]["ports"] = ports
    with pytest.raises(MalformedObjectError, match=field.replace("[", r"\[").replace("]", r"\]")):
        PodInfo.from_dict(obj)


def test_thousands_of_refused_fields_make_one_short_reason() -> None:
    obj = pod("p")
    rules = [{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [1]}}]
    obj["spec"]["initContainers"] = [{"name": f"i{i}", "image": "busybox", "restartPolicyRules": rules}
                                     for i in range(5000)]
    obj["spec"]["resourceClaims"] = [{"name": f"c{i}", "resourceClaimName": f"c{i}"} for i in range(5000)]
    obj["spec"]["schedulingGroup"] = {"podGroupName": "g"}
    obj["spec"]["hostUsers"], obj["spec"]["hostNetwork"] = False, True
    info = PodInfo.from_dict(obj)
    assert len(info.refused_fields) == 4  # one per refused row, at its first occurrence
    message = refusal_message(info.refused_fields)
    assert "and 1 more" in message and len(message) < 1000
    assert message.count("spec.") == MAX_FIELDS_NAMED + message.count("spec.schedulerName")
    assert "spec.initContainers[0].restartPolicyRules" in [f.path for f in info.refused_fields]
