"""Picking the BE cpuset: exclusions, LSR/LS pool shares, whole cores first, spread over NUMA nodes.

Topology: 16 logical CPUs, 2 NUMA nodes/sockets, 2 hyper-threads per core; CPU n is on core
n // 2 and NUMA node n // 8 (siblings 0/1, 2/3, ...).
"""

from __future__ import annotations

import pytest

from agent.qos.cpuset import Processor, be_allowed_cpus, pick_be_cpus
from common.cpulist import format_cpu_list, parse_cpu_list

CPUS = [Processor(cpu_id=n, core_id=n // 2, socket_id=n // 8, numa_node_id=n // 8) for n in range(16)]


def test_whole_cores_spread_over_numa_nodes() -> None:
    assert pick_be_cpus(4, CPUS) == [0, 1, 8, 9]


def test_odd_count_adds_a_single_cpu() -> None:
    assert pick_be_cpus(5, CPUS) == [0, 1, 2, 8, 9]


def test_reserved_and_lse_cpus_are_never_given_to_be() -> None:
    # allowed: 2-7 (numa 0, 6 CPUs) and 9-15 (numa 1, 7 CPUs); the larger bucket goes first.
    # CPU 9's sibling 8 is reserved, so numa 1's first whole core is 10/11.
    picked = pick_be_cpus(4, CPUS, reserved={8}, lse_cpus={0, 1})
    assert picked == [2, 3, 10, 11]


def test_lsr_and_ls_pools_share_in_proportion() -> None:
    # LSR pool 4 CPUs of 16: 4 * 4 // 16 = 1 from LSR, 3 from the shared pool
    assert pick_be_cpus(4, CPUS, lsr_cpus={12, 13, 14, 15}) == [0, 1, 2, 12]


def test_more_than_allowed_gives_everything_allowed() -> None:
    assert pick_be_cpus(20, CPUS, system_exclusive={15}) == list(range(15))


def test_nothing_allowed() -> None:
    assert pick_be_cpus(2, CPUS[:2], lse_cpus={0, 1}) == []


def test_restore_set_is_everything_but_exclusions() -> None:
    assert be_allowed_cpus(CPUS, reserved={0}, system_exclusive={1}, lse_cpus={2, 3}) == list(range(4, 16))


@pytest.mark.parametrize(
    ("cpus", "text"),
    [([0, 1, 2, 3, 8, 10, 11], "0-3,8,10-11"), ([5], "5"), ([], ""), ([3, 1, 2, 2], "1-3")],
)
def test_cpu_list_format(cpus: list[int], text: str) -> None:
    assert format_cpu_list(cpus) == text


def test_cpu_list_parse() -> None:
    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpu_list("") == []
    with pytest.raises(ValueError):
        parse_cpu_list("3-1")


def test_a_cpu_list_is_bounded_by_the_ids_linux_can_have() -> None:
    # Issue 29, example 1: `0-4294967295` expanded 4·10⁹ entries. Refused before expanding.
    from common.cpulist import MAX_CPU_ID, CpuListError

    assert parse_cpu_list(f"0-{MAX_CPU_ID}")[-1] == MAX_CPU_ID
    with pytest.raises(CpuListError, match="past 8191"):
        parse_cpu_list("0-4294967295")
    with pytest.raises(CpuListError):
        parse_cpu_list("1" * 5000)
