"""BE memory eviction, hand-computed (koordlet's memoryevict plugin).

Node: 200 GB. At 145 GB used, usage = int(145 * 100 / 200) = 72 %; with threshold 70 and the
default lower 68, release = 200 GB * (72 - 68) / 100 = 8 GB.
"""

from __future__ import annotations

import pytest

from agent.qos.memory_evict import (
    BEPodMemory,
    EvictCooldown,
    eviction_order,
    memory_pressure,
    memory_usage_percent,
    plan_memory_eviction,
    select_victims,
)

G = 1_000_000_000
CAPACITY = 200 * G


def be(name: str, priority: int | None, used: int) -> BEPodMemory:
    return BEPodMemory("batch", name, f"uid-{name}", priority, used)


P1 = be("p1", 5000, 3 * G)
P2 = be("p2", 5000, 6 * G)
P3 = be("p3", 3000, 1 * G)  # koord-free: lowest priority
P4 = be("z-unmeasured", 5000, 0)
P5 = be("a-unmeasured", 5000, 0)
PODS = [P1, P2, P3, P4, P5]


def test_usage_percent_truncates() -> None:
    assert memory_usage_percent(145 * G, CAPACITY) == 72
    assert memory_usage_percent(1_399, 2_000) == 69


def test_release_amount() -> None:
    pressure = memory_pressure(145 * G, CAPACITY, threshold_percent=70)
    assert (pressure.usage_percent, pressure.lower_percent, pressure.release_bytes) == (72, 68, 8 * G)
    # explicit lower percent: 200 GB * (72 - 60) / 100
    assert memory_pressure(145 * G, CAPACITY, 70, lower_percent=60).release_bytes == 24 * G


def test_trigger_is_at_or_above_threshold() -> None:
    assert not memory_pressure(139 * G, CAPACITY, 70).triggered  # 69 %
    assert memory_pressure(140 * G, CAPACITY, 70).release_bytes == 4 * G  # exactly 70 %: 2 % released


def test_inverted_band_or_no_capacity_releases_nothing() -> None:
    assert not memory_pressure(190 * G, CAPACITY, 70, lower_percent=75).triggered
    assert not memory_pressure(190 * G, CAPACITY, 70, lower_percent=70).triggered
    assert not memory_pressure(1, 0, 70).triggered


def test_order_priority_then_biggest_then_unmeasured_by_name_descending() -> None:
    assert eviction_order(PODS) == [P3, P2, P1, P4, P5]


def test_missing_priority_reads_as_zero() -> None:
    unset = be("unset", None, 1 * G)
    assert eviction_order([P3, unset])[0] is unset


def test_victims_until_released_covers_the_need() -> None:
    ordered = eviction_order(PODS)
    assert select_victims(ordered, 8 * G) == [P3, P2, P1]  # 1 + 6 = 7 < 8, + 3 = 10
    assert select_victims(ordered, 7 * G) == [P3, P2]
    assert select_victims(ordered, 0) == []
    assert select_victims(ordered, 24 * G) == [P3, P2, P1, P4, P5]  # everything, still short


def test_plan_and_projected_usage() -> None:
    plan = plan_memory_eviction(
        used_bytes=145 * G,
        capacity_bytes=CAPACITY,
        threshold_percent=70,
        lower_percent=None,
        candidates=PODS,
        cooldown=EvictCooldown(),
        now=100.0,
    )
    assert plan.victims == (P3, P2, P1)
    assert plan.released_bytes == 10 * G
    assert memory_usage_percent(145 * G - plan.released_bytes, CAPACITY) <= 68
    assert "72% >= threshold 70%" in plan.reason


def test_cooldown_blocks_the_next_round_for_four_seconds() -> None:
    cooldown = EvictCooldown().after_eviction(100.0)
    assert cooldown.active(103.9)
    assert not cooldown.active(104.0)
    plan = plan_memory_eviction(
        used_bytes=190 * G,
        capacity_bytes=CAPACITY,
        threshold_percent=70,
        lower_percent=None,
        candidates=PODS,
        cooldown=cooldown,
        now=102.0,
    )
    assert plan.victims == () and plan.pressure is None


@pytest.mark.parametrize("used", [0, 100 * G, 139 * G])
def test_no_victims_below_threshold(used: int) -> None:
    plan = plan_memory_eviction(
        used_bytes=used,
        capacity_bytes=CAPACITY,
        threshold_percent=70,
        lower_percent=None,
        candidates=PODS,
        cooldown=EvictCooldown(),
        now=0.0,
    )
    assert plan.victims == ()
