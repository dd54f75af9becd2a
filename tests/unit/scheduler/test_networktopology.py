"""NetworkTopology: leaf-group planning (seed 004) as a formula and through the scheduler.

The cluster: eight InfiniBand leaf groups su0..su7 of 10 servers each; busy servers are
taken by existing pods, leaving free servers su0..su7 = 10, 8, 7, 6, 5, 4, 3, 2 (45 in
all) — the seed's su(m) ≥ su(m−1) ≥ … ≥ su(m−7). A job of n pods needs one whole
server per pod and is one gang of n.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from scheduler_plugin.framework.schedule_one import scheduling_cycle
from scheduler_plugin.framework.simulator import InProcessScheduler
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.networktopology import NetworkTopology
from scheduler_plugin.plugins.networktopology.formulas import plan_leaf_groups
from tests.objects import node, pod
from tests.unit.scheduler.builders import default_framework, gang_labels

LEAF = "example.com/ib-leaf-group"
FREE = {"su0": 10, "su1": 8, "su2": 7, "su3": 6, "su4": 5, "su5": 4, "su6": 3, "su7": 2}
GROUP_SIZE = 10

CONFIG: dict[str, Any] = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [{
        "plugins": {"multiPoint": {"enabled": [{"name": "NetworkTopology"}]}},
        "pluginConfig": [{"name": "NetworkTopology", "args": {"leafGroupLabelKey": LEAF}}],
    }],
}


# --------------------------------------------------------------------------- the formula
def test_plan_prefers_the_tightest_single_group() -> None:
    assert plan_leaf_groups(FREE, 1) == {"su7": 1}
    assert plan_leaf_groups(FREE, 2) == {"su7": 2}
    assert plan_leaf_groups(FREE, 3) == {"su6": 3}
    assert plan_leaf_groups(FREE, 5) == {"su4": 5}
    assert plan_leaf_groups(FREE, 9) == {"su0": 9}


def test_plan_spans_from_the_largest_group_down() -> None:
    assert plan_leaf_groups(FREE, 11) == {"su0": 10, "su1": 1}
    assert plan_leaf_groups(FREE, 20) == {"su0": 10, "su1": 8, "su2": 2}
    assert plan_leaf_groups(FREE, 45) == FREE


def test_plan_fails_when_the_cluster_is_too_small_and_breaks_ties_by_name() -> None:
    assert plan_leaf_groups(FREE, 46) is None
    assert plan_leaf_groups({"b": 4, "a": 4, "c": 0}, 3) == {"a": 3}
    assert plan_leaf_groups({"b": 4, "a": 4}, 6) == {"a": 4, "b": 2}
    assert plan_leaf_groups({}, 1) is None
    assert plan_leaf_groups(FREE, 0) == {}


# --------------------------------------------------------------------------- through the scheduler
def leaf_cluster() -> Snapshot:
    nodes, busy = [], []
    for group, free in FREE.items():
        for i in range(GROUP_SIZE):
            name = f"{group}-node{i}"
            nodes.append(node(name, cpu="8", memory="32Gi", labels={LEAF: group}))
            if i >= free:
                busy.append(pod(f"busy-{name}", cpu="8", memory="1Gi", node_name=name))
    # A node outside every leaf group, free: gang members must not land there.
    nodes.append(node("loner", cpu="8", memory="32Gi"))
    return Snapshot.from_objects(nodes=nodes, pods=busy)


def place_job(n: int) -> tuple[Counter[str], InProcessScheduler]:
    snap = leaf_cluster()
    fw, _, binder = default_framework(snap, CONFIG)
    assert isinstance(fw.plugins["NetworkTopology"], NetworkTopology)
    sim = InProcessScheduler(fw, binder=binder)
    for i in range(n):
        sim.add_pod(pod(f"job-{i}", cpu="8", memory="1Gi", labels=gang_labels("job", n)))
    asyncio.run(sim.run(max_virtual_seconds=120))
    groups = Counter(snap.node_by_name(name).labels.get(LEAF, "none") for name in sim.bound.values())  # type: ignore[union-attr]
    return groups, sim


def test_case_1_more_pods_than_free_servers_stays_pending() -> None:
    groups, sim = place_job(46)
    assert groups == Counter()
    assert len(sim.pending()) >= 46
    assert not any(key.startswith("default/job-") for key in sim.snapshot.records)  # nothing reserved either


@pytest.mark.parametrize("n", [1, 2])
def test_case_2_fits_the_smallest_group(n: int) -> None:
    groups, _ = place_job(n)
    assert groups == Counter({"su7": n})


@pytest.mark.parametrize(("n", "group"), [(3, "su6"), (5, "su4"), (6, "su3"), (7, "su2"), (8, "su1"), (10, "su0")])
def test_case_3_smallest_group_that_still_fits(n: int, group: str) -> None:
    groups, _ = place_job(n)
    assert groups == Counter({group: n})


@pytest.mark.parametrize(("n", "expected"), [
    (12, {"su0": 10, "su1": 2}),
    (20, {"su0": 10, "su1": 8, "su2": 2}),
    (45, FREE),
])
def test_case_4_fills_from_the_largest_group_down(n: int, expected: dict[str, int]) -> None:
    groups, sim = place_job(n)
    assert groups == Counter(expected)
    assert len(sim.bound) == n


def test_pods_outside_gangs_are_not_steered() -> None:
    snap = leaf_cluster()
    fw, _, binder = default_framework(snap, CONFIG)
    sim = InProcessScheduler(fw, binder=binder)
    sim.add_pod(pod("solo", cpu="8", memory="1Gi"))
    asyncio.run(sim.run())
    # Any idle node will do (they all score the same): the leaf groups do not matter to it.
    idle = {f"{group}-node{i}" for group, free in FREE.items() for i in range(free)} | {"loner"}
    assert sim.bound.keys() == {"default/solo"} and sim.bound["default/solo"] in idle


def test_plan_is_released_when_the_gang_is_rolled_back() -> None:
    snap = leaf_cluster()
    fw, clock, _ = default_framework(snap, CONFIG)
    plugin = fw.plugins["NetworkTopology"]
    assert isinstance(plugin, NetworkTopology)
    for i in range(3):
        snap.upsert_pod(pod(f"job-{i}", cpu="8", memory="1Gi", labels=gang_labels("job", 3)))
    scheduling_cycle(fw, snap.pods["default/job-0"])
    assert plugin.plans["default/job"].quota == {"su6": 2}
    clock.advance(61)  # Permit timeout: the gang lets go of everything
    assert "default/job" not in plugin.plans
    assert not any(k.startswith("default/job-") for k in snap.records)
