from __future__ import annotations

import math

import pytest

from agent.collectors.cgroup_stats import (
    BatchMiss,
    CfsStat,
    batch_cpu_stat,
    batch_ints,
    batch_memory_stat,
    parse_cpu_stat,
    parse_int,
    parse_keyed,
    parse_memory_stat,
    pick_keyed,
    working_set,
)
from agent.collectors.psi import batch_psi_values, parse_psi, psi_values

V1_CPU_STAT = b"nr_periods 120\nnr_throttled 7\nthrottled_time 350000000\nnr_bursts 0\nburst_time 0\n"
V2_CPU_STAT = (
    b"usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\ncore_sched.force_idle_usec 0\n"
    b"nr_periods 120\nnr_throttled 7\nthrottled_usec 350000\nnr_bursts 0\nburst_usec 0\n"
)
V1_MEMORY_STAT = (
    b"cache 100\nrss 200\ninactive_anon 1\nactive_anon 2\ninactive_file 3\nactive_file 4\nunevictable 5\n"
    b"hierarchical_memory_limit 9223372036854771712\ntotal_cache 1000\ntotal_rss 2000\n"
    b"total_inactive_anon 10\ntotal_active_anon 20\ntotal_inactive_file 30\ntotal_active_file 40\n"
    b"total_unevictable 50\n"
)
V2_MEMORY_STAT = (
    b"anon 300\nfile 700\nkernel 5\ninactive_anon 100\nactive_anon 200\ninactive_file 400\nactive_file 300\n"
    b"unevictable 7\nslab 1\n"
)


def test_cpu_times_leave_the_parser_in_nanoseconds() -> None:
    assert parse_cpu_stat(V1_CPU_STAT, 1).cfs == CfsStat(120, 7, 350_000_000)
    v2 = parse_cpu_stat(V2_CPU_STAT, 2)
    assert v2.usage_ns == 2_500_000_000  # usage_usec x 1000
    assert v2.cfs == CfsStat(120, 7, 350_000_000)  # throttled_usec x 1000
    assert parse_int(b"123456789\n") == 123_456_789  # v1 cpuacct.usage is already ns


def test_v2_cgroup_without_cpu_controller_has_no_cfs() -> None:
    stat = parse_cpu_stat(b"usage_usec 10\nuser_usec 5\nsystem_usec 5\n", 2)
    assert stat.usage_ns == 10_000 and stat.cfs is None


def test_memory_anon_usage_and_working_set() -> None:
    v1 = parse_memory_stat(V1_MEMORY_STAT, 1)
    assert (v1.anon_usage, v1.inactive_file) == (10 + 20 + 50, 30)  # hierarchical total_* keys
    v2 = parse_memory_stat(V2_MEMORY_STAT, 2)
    assert (v2.anon_usage, v2.inactive_file) == (100 + 200 + 7, 400)
    local_only = parse_memory_stat(V1_MEMORY_STAT.split(b"hierarchical")[0], 1)  # no use_hierarchy
    assert (local_only.anon_usage, local_only.inactive_file) == (1 + 2 + 5, 3)
    assert working_set(1000, 300) == 700 and working_set(100, 300) == 0


def reorder(data: bytes) -> bytes:
    return b"\n".join(reversed(data.strip().split(b"\n"))) + b"\n"


@pytest.mark.parametrize(("data", "version"), [(V1_CPU_STAT, 1), (V2_CPU_STAT, 2)])
def test_cpu_stat_general_path_agrees_with_the_fast_path(data: bytes, version: int) -> None:
    assert parse_cpu_stat(reorder(data), version) == parse_cpu_stat(data, version)


@pytest.mark.parametrize(("data", "version"), [(V1_MEMORY_STAT, 1), (V2_MEMORY_STAT, 2)])
def test_memory_stat_general_path_agrees_with_the_fast_path(data: bytes, version: int) -> None:
    assert parse_memory_stat(reorder(data), version) == parse_memory_stat(data, version)
    # no trailing newline on the last line
    assert parse_memory_stat(reorder(data).rstrip(b"\n"), version) == parse_memory_stat(data, version)


@pytest.mark.parametrize(
    ("data", "version"),
    [
        (b"", 1),
        (b"nr_periods 1\nnr_throttled x\nthrottled_time 3\n", 1),
        (b"nr_periods 1\n", 1),
        (b"user_usec 1\n", 2),
        (b"usage_usec -4\n", 2),
        (b"\x00\xff garbage", 2),
    ],
)
def test_cpu_stat_garbage(data: bytes, version: int) -> None:
    with pytest.raises(ValueError):
        parse_cpu_stat(data, version)


@pytest.mark.parametrize(
    "data", [b"", b"total_rss 5\n", b"inactive_anon 1\nactive_anon two\nunevictable 0\ninactive_file 1\n"]
)
def test_memory_stat_garbage(data: bytes) -> None:
    with pytest.raises(ValueError):
        parse_memory_stat(data, 2)


def test_keyed_helpers() -> None:
    assert pick_keyed(b"a 1\nbb 2\nb 3\n", (b"b", b"a")) == (3, 1)  # "b" is not found inside "bb"
    with pytest.raises(KeyError):
        pick_keyed(b"a 1\n", (b"c",))
    assert parse_keyed(b"a 1\nb 2\n") == {b"a": 1, b"b": 2}
    with pytest.raises(ValueError):
        parse_keyed(b"a 1\nb\n")
    for bad in (b"", b"-1\n", b"12abc\n"):
        with pytest.raises(ValueError):
            parse_int(bad)


def test_psi_parsing() -> None:
    fast = b"some avg10=2.50 avg60=1.00 avg300=0.10 total=1500000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n"
    reading = parse_psi(fast)
    assert reading.some_avg10_ratio == pytest.approx(0.025) and reading.some_total_seconds == 1.5
    assert reading.full_avg10_ratio == 0.0 and reading.full_total_seconds == pytest.approx(7e-6)
    assert parse_psi(b"some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").full_avg10_ratio is None
    # the general path (odd spacing, reordered lines, no final newline) agrees with the fast one
    assert parse_psi(b"full avg10=0.00 avg60=0 avg300=0 total=7\nsome  avg10=2.50 total=1500000") == reading
    bad_inputs = (
        b"",
        b"full avg10=1.00 avg60=0.00 avg300=0.00 total=2\n",
        b"some avg10=abc total=1\n",
        b"some avg10=101.00 avg60=0.00 avg300=0.00 total=1\n",
        b"some avg10=-1.0 total=1\n",
        b"x y\n",
    )
    for bad in bad_inputs:
        with pytest.raises(ValueError):
            parse_psi(bad)
        with pytest.raises(ValueError):
            psi_values(bad)
    # the per-cgroup form: the same numbers as a flat tuple, NaN without a `full` line, on both paths
    assert psi_values(fast) == tuple(reading)
    assert psi_values(b"full avg10=0.00 avg60=0 avg300=0 total=7\nsome  avg10=2.50 total=1500000") == tuple(reading)
    some_only = psi_values(b"some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    assert some_only[:2] == (0.0, 0.0) and math.isnan(some_only[2]) and math.isnan(some_only[3])
    with pytest.raises(ValueError):
        psi_values(b"some avg10=1.00 avg60=0.00 avg300=0.00 total=1\nfull avg10=100.50 avg60=0.00 avg300=0.00 total=1\n")


def test_cfs_quota() -> None:
    from agent.collectors.cgroup_stats import parse_cfs_quota

    assert parse_cfs_quota(b"-1\n") is None
    assert parse_cfs_quota(b"50000\n") == 50000
    for bad in (b"", b"max\n", b"0\n", b"-2\n"):
        with pytest.raises(ValueError):
            parse_cfs_quota(bad)


# ---------------------------------------------------------------------------------------------- batches
V2_CPU_NO_CORE_SCHED = V2_CPU_STAT.replace(b"core_sched.force_idle_usec 0\n", b"")
V2_CPU_NO_CFS = b"usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n"
V2_CPU_EXTRA_KEY = V2_CPU_STAT.replace(b"system_usec 500000\n", b"system_usec 500000\nnew_key 1\n")
BIG = 2**53 + 1  # not a float: the sums must be exact in integers before the conversion, as one by one


@pytest.mark.parametrize(
    ("datas", "version"),
    [
        ([V1_CPU_STAT, V1_CPU_STAT.replace(b"120", b"0")], 1),
        ([V2_CPU_STAT, V2_CPU_NO_CORE_SCHED, V2_CPU_NO_CFS, V2_CPU_EXTRA_KEY, b"usage_usec %d\n" % BIG], 2),
        ([], 2),
    ],
)
def test_batch_cpu_stat_is_parse_cpu_stat(datas: list[bytes], version: int) -> None:
    rows = batch_cpu_stat(datas, version).tolist()
    for data, row in zip(datas, rows, strict=True):
        one = parse_cpu_stat(data, version)
        assert row[0] == (one.usage_ns if one.usage_ns is not None else -1)
        assert row[1:] == (list(one.cfs) if one.cfs is not None else [-1, -1, -1])


@pytest.mark.parametrize(
    ("data", "version"),
    [
        (b"nr_periods 1\nnr_throttled x\nthrottled_time 3\n", 1),
        (b"usage_usec -4\n", 2),
        (b"usage_usec 1\nuser_usec 1\nsystem_usec 1\nnr_periods 1\nnr_throttled x\nthrottled_usec 3\n", 2),
        (b"usage_usec 12345678901234567890\n", 2),  # 20 digits: one by one, range-checked there
        (b"usage_usec 9999999999999999\n", 2),  # ns beyond int64
        (reorder(V2_CPU_STAT), 2),
    ],
)
def test_batch_cpu_stat_misses_what_it_cannot_parse_exactly(data: bytes, version: int) -> None:
    with pytest.raises(BatchMiss):
        batch_cpu_stat([V1_CPU_STAT if version == 1 else V2_CPU_STAT, data], version)


def test_batch_memory_stat_and_ints_are_their_one_by_one_parsers() -> None:
    big_v2 = V2_MEMORY_STAT.replace(b"inactive_anon 100", b"inactive_anon %d" % BIG)
    for datas, version in (([V1_MEMORY_STAT], 1), ([V2_MEMORY_STAT, big_v2], 2)):
        assert batch_memory_stat(datas, version).tolist() == [list(parse_memory_stat(d, version)) for d in datas]
    for bad in (reorder(V2_MEMORY_STAT), b"", V2_MEMORY_STAT.replace(b"400", b"4" * 19)):
        with pytest.raises(BatchMiss):
            batch_memory_stat([V2_MEMORY_STAT, bad], 2)
    datas = [b"123456789\n", b"%d\n" % BIG, b"0\n"]
    assert batch_ints(datas).tolist() == [parse_int(d) for d in datas]
    for bad in (b"", b"-1\n", b"-5\n", b"12abc\n", b"%d\n" % 2**64):
        with pytest.raises(BatchMiss):
            batch_ints([b"1\n", bad])


def test_batch_psi_values_are_psi_values() -> None:
    full = b"some avg10=2.50 avg60=1.00 avg300=0.10 total=1500000\nfull avg10=0.30 avg60=0.00 avg300=0.00 total=7\n"
    some_only = b"some avg10=0.07 avg60=0.00 avg300=0.00 total=123456789012345\n"
    rows = batch_psi_values([full, some_only])
    assert rows[0].tolist() == list(psi_values(full))
    assert rows[1, :2].tolist() == list(psi_values(some_only)[:2]) and math.isnan(rows[1, 2]) and math.isnan(rows[1, 3])
    assert batch_psi_values([]).shape == (0, 4)
    for bad in (b"", b"some avg10=101.00 avg60=0.00 avg300=0.00 total=1\n", b"full avg10=1.00 total=2\n"):
        with pytest.raises(BatchMiss):
            batch_psi_values([full, bad])
