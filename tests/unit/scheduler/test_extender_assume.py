"""Provisional placements: after prioritize the pod counts on the node kube-scheduler will most
likely pick, until its binding reaches the pod watch (then it moves to the real node) or a TTL ends.

Nodes have 4 cpu / 8Gi; an incoming `pod(cpu="1", memory="1Gi")` is estimated at 850m cpu.
"""

from __future__ import annotations

import json
from typing import Any

from prometheus_client import REGISTRY

from scheduler_plugin.extender.engine import ExtenderEngine
from scheduler_plugin.extender.profiles import extender_frameworks
from scheduler_plugin.extender.wire import ExtenderArgs, parse_args
from scheduler_plugin.framework.clock import FakeClock
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.loadaware.nodeload import NodeLoads
from tests.objects import T0, node, node_metric, pod

NOW = T0 + 10
Obj = dict[str, Any]


def outcome(name: str) -> float:
    return REGISTRY.get_sample_value("loadline_extender_provisional_placements_total", {"outcome": name}) or 0.0


def setup(pods: list[Obj] | None = None, **options: Any) -> tuple[ExtenderEngine, FakeClock]:
    snap = Snapshot.from_objects(
        nodes=[node("warm"), node("cold"), node("cold2")],
        stores={NodeLoads: [node_metric("warm", cpu="1000m", memory="2Gi"), node_metric("cold", cpu="200m", memory="1Gi"),
                      node_metric("cold2", cpu="200m", memory="1Gi")]},
        pods=pods or [],
    )
    clock = FakeClock(NOW)
    frameworks = extender_frameworks(None, snapshot=snap, clock=clock)
    return ExtenderEngine(frameworks, snap, default_profile=next(iter(frameworks)), **options), clock


def request(p: Obj, names: list[str]) -> ExtenderArgs:
    return parse_args(json.dumps({"Pod": p, "Nodes": None, "NodeNames": names}))


def test_the_scored_pod_weighs_on_our_favourite_node_for_the_next_pod() -> None:
    ext, _ = setup()
    assert ext.prioritize(request(pod("a"), ["warm", "cold"])) == {"warm": 0, "cold": 10}
    assert ext.snapshot.node_of("default/a") == "cold"
    # cold now carries a's estimate: for b it scores (52 + 70) / 2 = 61, still above warm's 59, so b goes
    # there too; for c cold is at 200 + 3 × 850 → cpu 31, memory 61 → 46 < 59: c goes to warm.
    ext.prioritize(request(pod("b"), ["warm", "cold"]))
    ext.prioritize(request(pod("c"), ["warm", "cold"]))
    assert ext.snapshot.node_of("default/c") == "warm"  # the pile-up on cold stopped


def test_ties_go_to_the_least_requested_node_as_kube_scheduler_would_break_them() -> None:
    # cold and cold2 have the same NodeMetric; cold2 already has a 2-cpu pod reflected in it (no extra load),
    # so kube-scheduler's LeastAllocated prefers cold.
    reflected = pod("old", cpu="2", node_name="cold2", scheduled_at=T0 - 600)
    ext, _ = setup([reflected])
    ext.snapshot.store(NodeLoads).upsert(node_metric("cold2", cpu="200m", memory="1Gi", pods=[
        {"namespace": "default", "name": "old", "podUsage": {"resources": {"cpu": "0", "memory": "0"}}}]))
    scores = ext.prioritize(request(pod("a"), ["cold2", "cold"]))
    assert scores == {"cold2": 7, "cold": 7}  # equal totals: no relative preference, absolute 75 → 7
    assert ext.snapshot.node_of("default/a") == "cold"


def test_the_binding_confirms_or_moves_the_stand_in() -> None:
    ext, _ = setup()
    confirmed, moved = outcome("confirmed"), outcome("moved")
    ext.prioritize(request(pod("a"), ["warm", "cold"]))
    ext.prioritize(request(pod("b"), ["warm", "cold"]))
    assert ext.snapshot.node_of("default/b") == "cold"
    # the pod watch delivers the bindings: a where we guessed, b elsewhere
    ext.snapshot.upsert_pod(pod("a", node_name="cold", scheduled_at=NOW))
    ext.snapshot.upsert_pod(pod("b", node_name="warm", scheduled_at=NOW))
    ext.filter(request(pod("c"), ["warm", "cold"]))  # any request settles
    assert ext.provisional is not None and len(ext.provisional) == 0
    assert ext.snapshot.node_of("default/a") == "cold"
    assert ext.snapshot.node_of("default/b") == "warm"
    assert not ext.snapshot.records["default/b"].assumed
    assert (outcome("confirmed") - confirmed, outcome("moved") - moved) == (1, 1)


def test_a_stand_in_without_binding_expires() -> None:
    ext, clock = setup(assume_seconds=5)
    expired = outcome("expired")
    ext.prioritize(request(pod("a"), ["warm", "cold"]))
    clock.advance(4)
    ext.filter(request(pod("x"), ["cold"]))
    assert ext.snapshot.node_of("default/a") == "cold"
    clock.advance(2)
    ext.filter(request(pod("x"), ["cold"]))
    assert ext.snapshot.node_of("default/a") is None
    assert "default/a" not in ext.snapshot.pods
    assert outcome("expired") - expired == 1


def test_a_pod_scheduled_again_does_not_count_against_itself() -> None:
    ext, _ = setup()
    first = ext.prioritize(request(pod("a"), ["warm", "cold"]))
    again = ext.prioritize(request(pod("a"), ["warm", "cold"]))
    assert first == again
    assert sum(1 for r in ext.snapshot.records.values() if r.pod.key == "default/a") == 1


def test_turned_off_nothing_is_assumed() -> None:
    ext, _ = setup(assume_seconds=0)
    ext.prioritize(request(pod("a"), ["warm", "cold"]))
    assert ext.provisional is None
    assert ext.snapshot.node_of("default/a") is None


def test_stand_ins_are_bounded_and_the_oldest_retires_first() -> None:
    # Issue 29: a flood of prioritize requests for made-up pods must not grow the snapshot without bound.
    ext, _ = setup()
    assert ext.provisional is not None
    ext.provisional.limit = 2
    evicted = outcome("evicted")
    for name in ("a", "b", "c"):
        ext.prioritize(request(pod(name), ["warm", "cold", "cold2"]))
    assert len(ext.provisional) == 2 and outcome("evicted") == evicted + 1
    assert "default/a" not in ext.snapshot.records
    assert {"default/b", "default/c"} <= set(ext.snapshot.records)
