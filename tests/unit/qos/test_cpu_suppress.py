"""BE CPU suppress, cfsQuota steps and hysteresis, cpuset sizing (koordlet's cpusuppress plugin), hand-computed.

Node: 16 cores (16000m); for cfsQuota the 1 % bypass band is 16 * 100000 * 0.01 = 16000 µs
and the per-round increase limit 16 * 100000 * 0.1 = 160000 µs.
"""

from __future__ import annotations

import pytest

from agent.qos.formulas import (
    BE_MIN_CFS_QUOTA_US,
    HostAppCPUUsage,
    PodCPUUsage,
    be_cfs_quota_target,
    be_cpuset_size,
    be_suppress,
    capacity_cores,
    next_be_cfs_quota,
    parse_cpu_max,
    render_cpu_max,
)

CAPACITY = 16_000
PODS = [
    PodCPUUsage("ls", 4.0, best_effort=False),
    PodCPUUsage("be", 3.0, best_effort=True),
    PodCPUUsage("unknown", 0.5, best_effort=None),  # metrics without metadata: counted as non-BE
]
HOST_APPS = [HostAppCPUUsage("nginx", 0.2, best_effort=False), HostAppCPUUsage("batch-agent", 0.3, best_effort=True)]


def suppress(node_used: float, reserved_milli: int = 1_000, min_percent: int | None = None) -> int:
    return be_suppress(
        capacity_milli=CAPACITY,
        node_used_cores=node_used,
        node_reserved_milli=reserved_milli,
        pods=PODS,
        host_apps=HOST_APPS,
        threshold_percent=65,
        min_percent=min_percent,
    ).suppress_milli


def test_suppress_with_system_usage_above_reservation() -> None:
    # system = max(10.0 - 7.5 - 0.5, 1.0) = 2.0 ; 16000*65% - non-BE pods 4500 - non-BE apps 200 - 2000
    breakdown = be_suppress(
        capacity_milli=CAPACITY,
        node_used_cores=10.0,
        node_reserved_milli=1_000,
        pods=PODS,
        host_apps=HOST_APPS,
        threshold_percent=65,
    )
    assert (breakdown.pods_non_be_used_milli, breakdown.host_apps_non_be_used_milli) == (4_500, 200)
    assert breakdown.system_used_milli == 2_000
    assert breakdown.suppress_milli == 3_700
    assert "3700m" in breakdown.explain()


def test_node_reservation_is_the_floor_of_system_usage() -> None:
    # system = max(8.5 - 7.5 - 0.5, 1.0) = 1.0
    assert suppress(8.5) == 10_400 - 4_500 - 200 - 1_000
    # and negative unaccounted usage counts as 0 before the reservation
    assert suppress(5.0, reserved_milli=0) == 10_400 - 4_500 - 200


def test_min_percent_floor() -> None:
    assert suppress(10.0, min_percent=30) == 4_800  # 16000 * 30 % beats 3700
    assert suppress(10.0, min_percent=10) == 3_700  # 1600 does not


def test_quota_target_and_minimum() -> None:
    assert be_cfs_quota_target(3_700) == 370_000
    assert be_cfs_quota_target(10) == BE_MIN_CFS_QUOTA_US
    assert be_cfs_quota_target(-500) == BE_MIN_CFS_QUOTA_US


def test_first_write_from_unlimited_goes_straight_to_target() -> None:
    step = next_be_cfs_quota(suppress_milli=9_000, current_quota_us=-1, capacity_milli=CAPACITY)
    assert step.quota_us == 900_000


def test_change_below_one_percent_is_skipped() -> None:
    step = next_be_cfs_quota(suppress_milli=3_800, current_quota_us=370_000, capacity_milli=CAPACITY)
    assert step.quota_us is None and step.target_us == 380_000  # |10000| < 16000


def test_change_of_exactly_one_percent_is_applied() -> None:
    step = next_be_cfs_quota(suppress_milli=3_860, current_quota_us=370_000, capacity_milli=CAPACITY)
    assert step.quota_us == 386_000  # |16000| is not < 16000


def test_increase_within_step_limit() -> None:
    step = next_be_cfs_quota(suppress_milli=5_000, current_quota_us=370_000, capacity_milli=CAPACITY)
    assert step.quota_us == 500_000


def test_increase_is_limited_per_round() -> None:
    step = next_be_cfs_quota(suppress_milli=9_000, current_quota_us=370_000, capacity_milli=CAPACITY)
    assert (step.quota_us, step.target_us) == (530_000, 900_000)


def test_decrease_is_applied_at_once() -> None:
    step = next_be_cfs_quota(suppress_milli=1_000, current_quota_us=900_000, capacity_milli=CAPACITY)
    assert step.quota_us == 100_000


def test_minimum_is_enforced_even_within_the_bypass_band() -> None:
    step = next_be_cfs_quota(suppress_milli=-500, current_quota_us=10_000, capacity_milli=CAPACITY)
    assert step.quota_us == BE_MIN_CFS_QUOTA_US  # |8000| < 16000, but the target is the minimum


def test_capacity_cores_round_up() -> None:
    assert capacity_cores(15_500) == 16
    assert capacity_cores(16_000) == 16
    # 15.5 cores behaves like 16: bypass band 16000 µs
    assert next_be_cfs_quota(3_800, 370_000, 15_500).quota_us is None


def test_cpu_max_rendering_and_parsing() -> None:
    assert render_cpu_max(370_000) == "370000 100000"
    assert render_cpu_max(-1) == "max 100000"
    assert parse_cpu_max("max 100000\n") == (-1, 100_000)
    assert parse_cpu_max("50000 100000") == (50_000, 100_000)
    with pytest.raises(ValueError):
        parse_cpu_max("")


@pytest.mark.parametrize(
    ("suppress_milli", "current", "expected"),
    [
        (3_700, 8, 4),  # ceil(3.7) = 4, shrinking is immediate
        (500, 8, 2),  # at least 2 CPUs
        (-100, 8, 2),
        (12_000, 4, 6),  # growth limited to ceil(16 * 0.1) = 2 per round
        (6_000, 4, 6),
        (5_001, 4, 6),  # ceil(5.001) = 6
    ],
)
def test_cpuset_size(suppress_milli: int, current: int, expected: int) -> None:
    assert be_cpuset_size(suppress_milli, current_be_cpus=current, logical_cpus=16) == expected
