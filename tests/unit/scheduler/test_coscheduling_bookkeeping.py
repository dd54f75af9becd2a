"""Coscheduling's per-gang bookkeeping is pruned: expired backoff/permit entries, and the
creation/failure times of gangs whose pods are all gone, while live gangs keep theirs."""

from __future__ import annotations

import asyncio

from scheduler_plugin.framework.interfaces import QueuedPodInfo
from scheduler_plugin.framework.runtime import Framework
from scheduler_plugin.framework.schedule_one import scheduling_cycle
from scheduler_plugin.framework.simulator import InProcessScheduler
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.framework.status import Code
from scheduler_plugin.plugins.coscheduling import Coscheduling
from scheduler_plugin.plugins.coscheduling.podgroups import PodGroups
from scheduler_plugin.plugins.coscheduling.state import GONE_GRACE_SECONDS, PRUNE_INTERVAL_SECONDS, GangState
from tests.objects import T0, node, pod, pod_group
from tests.unit.scheduler.builders import default_framework, gang_labels
from tests.unit.scheduler.test_coscheduling import CRD_LABEL, config

UNFIT = {"disk": "ssd"}  # no node has this label: a member with it fits nowhere


def coscheduling(fw: Framework) -> Coscheduling:
    plugin = fw.plugins["Coscheduling"]
    assert isinstance(plugin, Coscheduling)
    return plugin


def sort_key(plugin: Coscheduling, snap: Snapshot, key: str) -> tuple[int, float, str, str]:
    return plugin.sort_key(QueuedPodInfo(snap.pods[key], timestamp=T0, initial_attempt_timestamp=T0))


# --------------------------------------------------------------------------- the pure rule
def test_prune_drops_expired_backoff_and_permit_entries_only() -> None:
    state = GangState(backoff_until={"a": 99.0, "b": 100.0, "c": 101.0},
                      permitted_until={"a": 50.0, "d": 100.5})
    removed = state.prune(100.0, lambda key: True)
    # until ≤ now is what the hooks treat as "no entry"; later times still block / still permit
    assert state.backoff_until == {"c": 101.0}
    assert state.permitted_until == {"d": 100.5}
    assert removed == 3


def test_prune_keeps_a_live_gangs_times_however_old() -> None:
    state = GangState(first_seen={"live": 1.0}, last_failure={"live": 2.0})
    for now in (1e3, 1e6, 1e9):
        assert state.prune(now, lambda key: key == "live", grace_seconds=60) == 0
    assert state.first_seen == {"live": 1.0} and state.last_failure == {"live": 2.0}
    assert state.absent_since == {}


def test_prune_forgets_a_gone_gang_after_the_grace_period() -> None:
    state = GangState(first_seen={"gone": 1.0, "live": 5.0}, last_failure={"gone": 3.0, "failed-only": 4.0})
    live = {"live"}
    assert state.prune(1000.0, live.__contains__, grace_seconds=60) == 0  # first found gone: remembered, kept
    assert state.absent_since == {"gone": 1000.0, "failed-only": 1000.0}
    assert state.prune(1059.9, live.__contains__, grace_seconds=60) == 0
    assert state.first_seen == {"gone": 1.0, "live": 5.0}
    assert state.prune(1060.0, live.__contains__, grace_seconds=60) == 3  # gone's two entries + failed-only's
    assert state.first_seen == {"live": 5.0} and state.last_failure == {} and state.absent_since == {}


def test_a_gang_that_returns_within_the_grace_period_keeps_its_times_and_restarts_the_grace() -> None:
    state = GangState(first_seen={"g": 1.0}, last_failure={"g": 2.0})
    live: set[str] = set()
    state.prune(100.0, live.__contains__, grace_seconds=60)
    live.add("g")  # a replacement pod of the gang arrived
    state.prune(150.0, live.__contains__, grace_seconds=60)
    assert state.absent_since == {}
    live.clear()
    state.prune(170.0, live.__contains__, grace_seconds=60)  # gone again: the grace counts from here
    state.prune(229.0, live.__contains__, grace_seconds=60)
    assert state.first_seen == {"g": 1.0} and state.last_failure == {"g": 2.0}
    state.prune(230.0, live.__contains__, grace_seconds=60)
    assert state.size() == 0


# --------------------------------------------------------------------------- cadence
def test_the_plugin_sweeps_at_most_once_per_interval() -> None:
    snap = Snapshot.from_objects(nodes=[node("n0")])
    fw, clock, _ = default_framework(snap)
    plugin = coscheduling(fw)
    plugin.state.permitted_until["x"] = clock.now() - 1
    assert plugin.maybe_prune() == 1  # the first call sweeps
    plugin.state.permitted_until["y"] = clock.now() - 1
    clock.advance(PRUNE_INTERVAL_SECONDS - 1)
    assert plugin.maybe_prune() == 0 and "y" in plugin.state.permitted_until
    clock.advance(1)
    assert plugin.maybe_prune() == 1 and plugin.state.permitted_until == {}


def test_a_bound_gang_keeps_its_times_until_its_pods_are_deleted() -> None:
    snap = Snapshot.from_objects(nodes=[node("n0", cpu="8")])
    fw, clock, binder = default_framework(snap)
    plugin = coscheduling(fw)
    sim = InProcessScheduler(fw, binder=binder)
    for i in range(2):
        sim.add_pod(pod(f"g-{i}", labels=gang_labels("g", 2)))
    asyncio.run(sim.run(max_virtual_seconds=1))
    assert sorted(sim.bound) == ["default/g-0", "default/g-1"]
    assert plugin.state.first_seen == {"default/g": T0}
    for _ in range(5):  # running for days: the pods still exist, so do the gang's times
        clock.advance(86_400)
        plugin.maybe_prune()
    assert plugin.state.first_seen == {"default/g": T0}
    for i in range(2):
        snap.remove_pod(f"default/g-{i}")
    clock.advance(PRUNE_INTERVAL_SECONDS)
    plugin.maybe_prune()
    assert "default/g" in plugin.state.first_seen  # gone, but within the grace period
    clock.advance(GONE_GRACE_SECONDS)
    plugin.maybe_prune()
    assert plugin.state.size() == 0


# --------------------------------------------------------------------------- through the hooks
def test_a_thousand_short_lived_gangs_leave_no_bookkeeping_behind_and_live_gangs_keep_theirs() -> None:
    snap = Snapshot.from_objects(nodes=[node(f"n{i}", cpu="64", memory="256Gi") for i in range(4)],
                                 stores={PodGroups: [pod_group("q", 2, timeout=100_000)]})
    fw, clock, binder = default_framework(snap, config(podGroupBackoffSeconds=5))
    plugin = coscheduling(fw)

    # Gang p (labels only) stays pending throughout. Its first member is seen and then replaced,
    # so recomputing its creation time now would give a later one; and it has failed once.
    snap.upsert_pod(pod("p-old", labels=gang_labels("p", 2), created=T0 - 1000))
    sort_key(plugin, snap, "default/p-old")
    snap.remove_pod("default/p-old")
    snap.upsert_pod(pod("p-0", labels=gang_labels("p", 2), created=T0 + 500))
    snap.upsert_pod(pod("p-1", labels=gang_labels("p", 2), created=T0 + 500, node_selector=UNFIT))
    clock.advance(1000)
    assert scheduling_cycle(fw, snap.pods["default/p-0"]).status.code is Code.WAIT
    assert "gets rejected" in scheduling_cycle(fw, snap.pods["default/p-1"]).status.message
    # Gang q (PodGroup, scheduleTimeoutSeconds 100000) passed its capacity check and waits in Permit.
    for i in range(2):
        snap.upsert_pod(pod(f"q-{i}", labels={CRD_LABEL: "q"}))
    assert scheduling_cycle(fw, snap.pods["default/q-0"]).status.code is Code.WAIT
    p_key, q_key = sort_key(plugin, snap, "default/p-0"), sort_key(plugin, snap, "default/q-1")
    assert p_key[1] == T0 + 1000  # queued by its failure time, not its (first-seen) creation T0 − 1000
    assert plugin.state.first_seen["default/p"] == T0 - 1000  # recomputing it now would give T0 + 500
    q_permitted = plugin.state.permitted_until["default/q"]

    # 1,000 jobs, two a second (q's Permit wait, capped at 15 minutes, outlasts them): each a gang of 2 that is placed and bound (even) or fails in
    # PostFilter and backs off (odd), and is deleted once done.
    sim = InProcessScheduler(fw, binder=binder)
    sizes: list[int] = []
    failed = 0

    async def churn() -> None:
        nonlocal failed
        for i in range(1000):
            name = f"job{i}"
            keys = []
            for m in range(2):
                selector = UNFIT if i % 2 and m == 1 else None
                info = sim.add_pod(pod(f"{name}-{m}", labels=gang_labels(name, 2), created=clock.now(),
                                       node_selector=selector))
                keys.append(info.key)
            await sim.run(max_virtual_seconds=0.5)
            failed += f"default/{name}" in plugin.state.last_failure
            for key in keys:
                snap.remove_pod(key)
                sim.queue.delete(key)
            clock.advance(0.5)
            sizes.append(plugin.state.size())

    asyncio.run(churn())
    assert len(sim.bound) == 1000 and failed == 500  # the churn did what it says
    # Only the gangs gone within the last interval + grace + interval are remembered, with at most
    # four entries each (creation, failure, gone-since, and a backoff for 5 s); without pruning, 1,500+.
    assert max(sizes) <= 4 * 2 * (2 * PRUNE_INTERVAL_SECONDS + GONE_GRACE_SECONDS) + 10
    clock.advance(PRUNE_INTERVAL_SECONDS)
    sort_key(plugin, snap, "default/p-0")  # any hook sweeps, at most once per interval: the last jobs are gone…
    clock.advance(GONE_GRACE_SECONDS)
    sort_key(plugin, snap, "default/p-0")  # …and, a grace period later, forgotten
    assert set(plugin.state.first_seen) == {"default/p", "default/q"}
    assert set(plugin.state.last_failure) == {"default/p"}
    assert plugin.state.backoff_until == {} and plugin.state.absent_since == {}
    assert plugin.state.permitted_until == {"default/q": q_permitted}  # not expired: still skips the check
    # The live gangs queue exactly where they did, and q still waits on its own timeout.
    assert sort_key(plugin, snap, "default/p-0") == p_key
    assert sort_key(plugin, snap, "default/q-1") == q_key
    assert fw.waiting_pods.get("default/q-0") is not None
