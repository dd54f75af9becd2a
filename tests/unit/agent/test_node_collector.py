from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import psutil
import pytest

from agent.collectors.base import CollectorStats, SeriesErrors, run_collector
from agent.collectors.files import PseudoFileReader
from agent.collectors.node import NodeCollector
from agent.series import (
    NODE_CPU_CAPACITY_CORES,
    NODE_CPU_USAGE_SECONDS,
    NODE_MEMORY_TOTAL_BYTES,
    NODE_MEMORY_USAGE_BYTES,
    NODE_MEMORY_USAGE_WITH_PAGE_CACHE_BYTES,
    Kind,
    Sample,
)
from tests.fakes.cgroup_trees import ProcValues, Psi, write_proc


def by_metric(samples) -> dict[str, Sample]:
    return {s.key.metric: s for s in samples}


def test_cpu_cores_from_koordinator_tick_set(tmp_path: Path) -> None:
    v = ProcValues()
    write_proc(tmp_path, v)
    c = NodeCollector(tmp_path, clock_ticks=100)
    first = by_metric(c.collect(0.0))[NODE_CPU_USAGE_SECONDS]
    assert first.kind is Kind.COUNTER
    # +120 user, +10 nice, +40 system, +1000 idle, +300 iowait, +20 irq, +10 softirq, +500 steal in 1 s
    user, nice, system, idle, iowait, irq, softirq, steal, guest, guest_nice = v.cpu
    v.cpu = (
        user + 120,
        nice + 10,
        system + 40,
        idle + 1000,
        iowait + 300,
        irq + 20,
        softirq + 10,
        steal + 500,
        guest,
        guest_nice,
    )
    write_proc(tmp_path, v)
    second = by_metric(c.collect(1.0))[NODE_CPU_USAGE_SECONDS]
    # busy = user+nice+system+irq+softirq = 200 ticks = 2 s of CPU in 1 s; idle, iowait and steal excluded
    assert second.value - first.value == pytest.approx(2.0)


def test_negative_field_deltas_are_clamped(tmp_path: Path) -> None:
    v = ProcValues()
    write_proc(tmp_path, v)
    c = NodeCollector(tmp_path, clock_ticks=100)
    before = by_metric(c.collect(0.0))[NODE_CPU_USAGE_SECONDS].value
    cpu = list(v.cpu)
    cpu[0] += 100  # user +100
    cpu[6] -= 10  # softirq steps backwards (kernel accounting quirk): counts as 0, not -10
    v.cpu = tuple(cpu)
    write_proc(tmp_path, v)
    after = by_metric(c.collect(1.0))[NODE_CPU_USAGE_SECONDS].value
    assert after - before == pytest.approx(1.0)  # 100 ticks / 100 Hz, not 0.9
    cpu[6] += 10  # back to where it was: no double counting either
    v.cpu = tuple(cpu)
    write_proc(tmp_path, v)
    assert by_metric(c.collect(2.0))[NODE_CPU_USAGE_SECONDS].value == pytest.approx(after + 0.1)


def test_memory_and_capacity(tmp_path: Path) -> None:
    v = ProcValues(cpus=8, mem_total_kb=1000, mem_free_kb=200, mem_available_kb=700)
    write_proc(tmp_path, v)
    m = by_metric(NodeCollector(tmp_path).collect(0.0))
    assert m[NODE_CPU_CAPACITY_CORES].value == 8
    assert m[NODE_MEMORY_TOTAL_BYTES].value == 1000 * 1024
    assert m[NODE_MEMORY_USAGE_BYTES].value == (1000 - 700) * 1024  # MemTotal - MemAvailable
    assert m[NODE_MEMORY_USAGE_WITH_PAGE_CACHE_BYTES].value == (1000 - 200) * 1024  # MemTotal - MemFree


def test_memory_without_memavailable_uses_koordlet_estimate(tmp_path: Path) -> None:
    v = ProcValues(mem_total_kb=10_000, mem_free_kb=2_000, mem_available_kb=None)
    write_proc(tmp_path, v)
    m = by_metric(NodeCollector(tmp_path).collect(0.0))
    # available = MemFree + Active(file) 1000 + Inactive(file) 2000 + SReclaimable 300
    assert m[NODE_MEMORY_USAGE_BYTES].value == (10_000 - 5_300) * 1024


def test_psi_when_present(tmp_path: Path) -> None:
    v = ProcValues(
        psi={
            "cpu": Psi(some_avg10=12.5, some_total_us=3_000_000, full_avg10=None),
            "io": Psi(some_avg10=1.0, some_total_us=10, full_avg10=0.25, full_total_us=4_000_000),
        }
    )
    write_proc(tmp_path, v)
    m = by_metric(NodeCollector(tmp_path).collect(0.0))
    assert m["node_pressure_cpu_some_avg10_ratio"].value == pytest.approx(0.125)
    assert m["node_pressure_cpu_waiting_seconds_total"].value == pytest.approx(3.0)
    assert m["node_pressure_cpu_waiting_seconds_total"].kind is Kind.COUNTER
    assert "node_pressure_cpu_full_avg10_ratio" not in m  # no full line: not supported, not an error
    assert m["node_pressure_io_stalled_seconds_total"].value == pytest.approx(4.0)
    assert "node_pressure_memory_some_avg10_ratio" not in m  # file absent


def test_no_psi_is_not_an_error(tmp_path: Path) -> None:
    write_proc(tmp_path, ProcValues(psi=None))
    c = NodeCollector(tmp_path)
    samples = c.collect(0.0)
    assert not any("pressure" in s.key.metric for s in samples)
    assert c.errors.total == 0


def test_garbage_in_one_file_keeps_the_others(tmp_path: Path) -> None:
    write_proc(tmp_path, ProcValues())
    (tmp_path / "stat").write_text("this is not /proc/stat\n")
    (tmp_path / "pressure" / "io").write_text("some avg10=banana total=1\n")
    c = NodeCollector(tmp_path)
    m = by_metric(c.collect(0.0))
    assert NODE_CPU_USAGE_SECONDS not in m and NODE_MEMORY_USAGE_BYTES in m
    assert "node_pressure_cpu_some_avg10_ratio" in m
    assert c.errors.by_reason == {SeriesErrors.GARBAGE: 2}


def test_vanished_proc_files_fail_the_collector_only_when_nothing_is_left(tmp_path: Path) -> None:
    write_proc(tmp_path, ProcValues(psi=None))
    # procfs files never vanish under a kept fd the way a cgroup does; on a plain fs an unlinked file stays
    # readable through its fd, so read fresh each time here
    c = NodeCollector(tmp_path, reader=PseudoFileReader(keep_open=False))
    stats = CollectorStats("node")
    (tmp_path / "stat").unlink()
    assert asyncio.run(run_collector(c, stats, 0.0))  # memory still there
    assert stats.last_success and c.errors.by_reason == {SeriesErrors.VANISHED: 1}
    (tmp_path / "meminfo").unlink()
    assert asyncio.run(run_collector(c, stats, 1.0)) == ()
    assert not stats.last_success and stats.failures == 1 and "nothing readable" in (stats.last_error or "")


def test_kept_open_fd_sees_fresh_contents(tmp_path: Path) -> None:
    v = ProcValues(mem_total_kb=1000, mem_free_kb=100, mem_available_kb=500)
    write_proc(tmp_path, v)
    c = NodeCollector(tmp_path)
    c.collect(0.0)
    # rewrite in place (same inode, like procfs regenerating): the kept fd must not serve stale bytes
    with open(tmp_path / "meminfo", "r+") as f:
        f.write(f.read().replace("MemAvailable:   500 kB", "MemAvailable:   250 kB"))
    assert by_metric(c.collect(1.0))[NODE_MEMORY_USAGE_BYTES].value == 750 * 1024


def test_sanity_against_the_real_proc() -> None:
    c = NodeCollector("/proc")
    first = by_metric(c.collect(time.monotonic()))
    t0 = time.monotonic()
    time.sleep(0.5)
    second = by_metric(c.collect(time.monotonic()))
    busy = second[NODE_CPU_USAGE_SECONDS].value - first[NODE_CPU_USAGE_SECONDS].value
    cores = busy / (time.monotonic() - t0)
    assert 0.0 <= cores <= os.cpu_count() + 0.1
    assert second[NODE_CPU_CAPACITY_CORES].value == os.cpu_count()
    vm = psutil.virtual_memory()
    assert second[NODE_MEMORY_TOTAL_BYTES].value == vm.total
    assert 0 < second[NODE_MEMORY_USAGE_BYTES].value <= second[NODE_MEMORY_USAGE_WITH_PAGE_CACHE_BYTES].value
    assert abs(second[NODE_MEMORY_USAGE_BYTES].value - (vm.total - vm.available)) < 0.05 * vm.total
    assert c.errors.total == 0
    if os.path.exists("/proc/pressure/cpu"):
        assert 0.0 <= second["node_pressure_cpu_some_avg10_ratio"].value <= 1.0
