"""Issue 12, the agent's side: every number read from /proc and /sys is range-checked where it is parsed.

Fixture trees hold what a corrupted or hostile filesystem could: values at and above 2^64, negative values,
NaN, 400-digit numbers, counters that go backwards or jump. Each must cost only its own series (dropped,
counted under its reason, logged once per series), never raise out of the collect cycle, and never reach the
NodeMetric as a huge or wrapped value.
"""

from __future__ import annotations

import asyncio
import logging
import math
from pathlib import Path

import pytest

from agent.collectors.base import MAX_LOGGED_SERIES, SeriesErrors
from agent.collectors.cgroup_layout import CgroupDriver, CgroupVersion
from agent.collectors.cgroup_stats import parse_cpu_stat, parse_int, parse_memory_stat
from agent.collectors.cgroups import CgroupCollector, PsiScope
from agent.collectors.checked import OutOfRangeError
from agent.collectors.ib_sysfs import parse_counter, parse_rate, parse_state
from agent.collectors.infiniband import IB_RECEIVED_BYTES_PER_SECOND, IB_RECEIVED_BYTES_TOTAL, InfinibandCollector
from agent.collectors.netdev import NetdevCollector, parse_counters
from agent.collectors.node import NodeCollector, parse_meminfo, parse_proc_stat
from agent.collectors.psi import psi_values
from agent.report import cpu_quantity, memory_quantity
from agent.sampler import Sampler
from agent.series import (
    CPU_USAGE_CORES,
    CPU_USAGE_SECONDS,
    MEMORY_ANON_USAGE_BYTES,
    MEMORY_WORKING_SET_BYTES,
    NODE_CPU_USAGE_SECONDS,
    NODE_MEMORY_TOTAL_BYTES,
    SeriesKey,
)
from common.api.pod import KubeQoSClass
from common.api.quantity import MAX_CONSUMER_UNITS
from tests.fakes.cgroup_trees import CgroupValues, FakeCgroupTree, ProcValues, make_pod, write_proc
from tests.fakes.infiniband import set_counters, write_hca, write_port
from tests.fakes.netdev import line
from tests.unit.agent.sampling import cycle, sampler_of
from tests.unit.agent.test_infiniband_collector import key as ib_key
from tests.unit.agent.test_netdev_collector import FakeLinks, write_net_dev

U64 = 2**64
HUGE = "9" * 400  # float() of it is inf; int / 1e9 of it raises OverflowError
V1, V2 = CgroupVersion.V1, CgroupVersion.V2


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


# ----------------------------------------------------------------------------------------------- parsers
@pytest.mark.parametrize("text", [str(U64), str(U64 + 1), "-1", HUGE, "-" + HUGE])
def test_single_value_files_refuse_what_the_kernel_cannot_write(text: str) -> None:
    with pytest.raises(OutOfRangeError):
        parse_int(text.encode())
    with pytest.raises(OutOfRangeError):
        parse_counter(text.encode())


def test_the_u64_range_itself_is_accepted() -> None:
    assert parse_int(str(U64 - 1).encode()) == U64 - 1
    assert parse_int(b"0\n") == 0
    assert parse_counter(str(U64 - 1).encode()) == U64 - 1


@pytest.mark.parametrize("version", [1, 2])
def test_cpu_and_memory_stat_refuse_out_of_range_numbers(version: int) -> None:
    key = b"usage_usec" if version == 2 else b"nr_periods"
    cpu = b"%s %s\nnr_periods 1\nnr_throttled 0\nthrottled_time 0\nthrottled_usec 0\n" % (key, HUGE.encode())
    with pytest.raises(OutOfRangeError):
        parse_cpu_stat(cpu, version)
    prefix = b"total_" if version == 1 else b""
    memory = b"cache 0\n" + b"".join(
        b"%s%s %d\n" % (prefix, k, U64 if k == b"active_anon" else 1)
        for k in (b"inactive_anon", b"active_anon", b"inactive_file", b"active_file", b"unevictable")
    )
    with pytest.raises(OutOfRangeError):
        parse_memory_stat(memory, version)


def test_procfs_parsers_refuse_out_of_range_numbers() -> None:
    with pytest.raises(OutOfRangeError):
        parse_proc_stat(f"cpu  1 2 3 4 5 6 {U64} 0 0 0\ncpu0 1 2 3 4 5 6 7 0 0 0\n".encode())
    with pytest.raises(OutOfRangeError):
        parse_proc_stat(b"cpu  1 2 3 4 5 -6 7 0 0 0\ncpu0 1 2 3 4 5 6 7 0 0 0\n")
    with pytest.raises(OutOfRangeError):  # in range as kB, not as bytes
        parse_meminfo(f"MemTotal: {U64 // 1024 + 1} kB\n".encode())
    with pytest.raises(OutOfRangeError):
        parse_meminfo(b"MemTotal: 100 kB\nMemAvailable: -5 kB\n")
    with pytest.raises(OutOfRangeError):
        parse_counters(f"1 2 3 4 5 6 7 8 {U64} 10 11 12 13 14 15 16".encode())
    with pytest.raises(OutOfRangeError):
        psi_values(f"some avg10=0.00 avg60=0.00 avg300=0.00 total={HUGE}\n".encode())
    with pytest.raises(OutOfRangeError):  # float() accepts "nan": the general path must refuse it
        psi_values(b"some avg10=nan avg60=0.00 avg300=0.00 total=5\n")
    with pytest.raises(OutOfRangeError):
        parse_state(f"{HUGE}: ACTIVE".encode())
    with pytest.raises(OutOfRangeError):
        parse_rate(f"{HUGE} Gb/sec (4X EDR)".encode())


def test_published_quantities_stay_in_the_consumers_range() -> None:
    assert cpu_quantity(1e16) is None and cpu_quantity(math.inf) is None
    assert memory_quantity(float(2**63)) is None and memory_quantity(math.nan) is None
    assert memory_quantity(float(MAX_CONSUMER_UNITS)) is not None
    q = cpu_quantity(2.5)
    assert q is not None and q.milli_value() == 2500


# ------------------------------------------------------------------------------------- collectors on trees
@pytest.mark.parametrize("version", [V1, V2], ids=["v1", "v2"])
def test_cgroup_garbage_costs_only_its_series_and_logs_once(
    tmp_path: Path, version: CgroupVersion, caplog: pytest.LogCaptureFixture
) -> None:
    tree = FakeCgroupTree(tmp_path, version, CgroupDriver.CGROUPFS)
    bad, good = make_pod(1, KubeQoSClass.GUARANTEED, containers=0), make_pod(2, KubeQoSClass.GUARANTEED, containers=0)
    tree.add_pod(bad, CgroupValues(cpu_ns=U64 * 1000 if version is V2 else U64))  # v2 writes usec = ns / 1000
    tree.add_pod(good)
    memory_file = "memory.usage_in_bytes" if version is V1 else "memory.current"
    (tree.path("memory", tree.pod_rel(bad)) / memory_file).write_text(f"{HUGE}\n")
    (tree.path("cpuacct", tree.pod_rel(bad)) / "cpu.pressure").write_text(
        f"some avg10=0.00 avg60=0.00 avg300=0.00 total={HUGE}\n"
    )
    c = CgroupCollector(lambda: [bad, good], tree.root, psi=PsiScope.PODS)
    caplog.set_level(logging.WARNING)
    for now in (0.0, 1.0, 2.0):  # the same garbage three cycles running
        got = {s.key: s.value for s in cycle(c, now)}
    bad_keys = {k for k in got if k.pod == bad.uid}
    assert SeriesKey(CPU_USAGE_SECONDS, bad.uid) not in bad_keys
    assert SeriesKey(MEMORY_WORKING_SET_BYTES, bad.uid) not in bad_keys
    assert SeriesKey(MEMORY_ANON_USAGE_BYTES, bad.uid) in bad_keys  # memory.stat itself was fine
    assert all(math.isfinite(v) and abs(v) < 2**63 for v in got.values())
    assert sampler_of(c).ring.row_of(SeriesKey(CPU_USAGE_CORES, good.uid)) is not None  # the healthy pod's rate
    # cpu (cpuacct.usage or cpu.stat) and the memory usage file every cycle, the PSI file (v2) every 2nd cycle
    # (PSI_UPDATE_SECONDS: held in between, and not re-counted)
    psi_files = 1 if version is V2 else 0
    assert c.errors.by_reason == {SeriesErrors.OUT_OF_RANGE: 3 * 2 + 2 * psi_files}
    logged = warnings(caplog)
    assert len(logged) == 2 + psi_files, logged  # once per series, not once per cycle
    assert all("out_of_range" in m and bad.uid.replace("-", "") in m.replace("-", "") for m in logged)


def test_cgroup_counter_going_backwards_or_jumping_gives_no_rate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    proc = tmp_path / "proc"
    write_proc(proc, ProcValues(cpus=4))
    tree = FakeCgroupTree(tmp_path / "cg", V1, CgroupDriver.CGROUPFS)
    pod = make_pod(1, KubeQoSClass.GUARANTEED, containers=0)
    tree.add_pod(pod, CgroupValues(cpu_ns=50 * 10**9))
    cgroups = CgroupCollector(lambda: [pod], tree.root)
    node = NodeCollector(proc, clock_ticks=100)
    clock = [0.0]
    sampler = Sampler([node, cgroups], clock=lambda: clock[0])
    cores = SeriesKey(CPU_USAGE_CORES, pod.uid)
    usage = tree.path("cpuacct", tree.pod_rel(pod)) / "cpuacct.usage"
    caplog.set_level(logging.WARNING)

    def step(ns: int) -> float | None:
        usage.write_text(f"{ns}\n")
        clock[0] += 1.0
        asyncio.run(sampler.cycle())
        ring = sampler.ring
        row = ring.row_of(cores)
        value = math.nan if row is None else float(ring.values[row, ring.head])
        return None if math.isnan(value) else value

    assert step(50 * 10**9) is None  # baseline
    assert step(51 * 10**9) == pytest.approx(1.0)
    before = sampler.ring.columns_written
    assert step(10 * 10**9) is None  # backwards: dropped, becomes the baseline
    assert step(10 * 10**9 + 5 * 10**8) == pytest.approx(0.5)
    assert step(10 * 10**9 + 5 * 10**8 + 2**62) is None  # 4.6e9 cores on a 4-CPU node: garbage
    assert step(10 * 10**9 + 5 * 10**8 + 2**62 + 10**9) == pytest.approx(1.0)
    assert sampler.ring.columns_written == before + 4  # every cycle still wrote its column
    stats = sampler.stats["cgroups"].series_errors
    assert stats[SeriesErrors.BACKWARDS] == 1 and stats[SeriesErrors.IMPLAUSIBLE] == 1
    logged = warnings(caplog)
    assert len(logged) == 2 and any("backwards" in m for m in logged) and any("implausible" in m for m in logged)
    assert all(f"pod={pod.uid}" in m for m in logged)


def test_node_collector_drops_only_the_bad_file(tmp_path: Path) -> None:
    write_proc(tmp_path, ProcValues())
    (tmp_path / "stat").write_text(f"cpu  1 2 3 4 5 6 {HUGE} 0 0 0\ncpu0 1 2 3 4 5 6 7 0 0 0\n")
    c = NodeCollector(tmp_path, clock_ticks=100)
    got = {s.key.metric: s.value for s in c.collect(0.0)}
    assert NODE_CPU_USAGE_SECONDS not in got and got[NODE_MEMORY_TOTAL_BYTES] == 16 * 1024**3
    (tmp_path / "meminfo").write_text(f"MemTotal: {U64} kB\nMemFree: 1 kB\n")
    got = {s.key.metric: s.value for s in c.collect(1.0)}
    assert NODE_MEMORY_TOTAL_BYTES not in got
    assert c.errors.by_reason == {SeriesErrors.OUT_OF_RANGE: 3}  # /proc/stat twice, meminfo once


def test_netdev_out_of_range_line_costs_only_its_interface(tmp_path: Path) -> None:
    write_net_dev(tmp_path, line("eth0", 1), line("eth1", U64), line("eth2", 5, tx=-3))
    c = NetdevCollector(tmp_path, list_links=FakeLinks([]))
    got = cycle(c, 0.0)
    assert {s.key.device for s in got} == {"eth0"}
    assert c.errors.by_reason == {SeriesErrors.OUT_OF_RANGE: 2}


def test_infiniband_out_of_range_counter_is_dropped_and_backwards_counted(tmp_path: Path) -> None:
    write_hca(tmp_path)
    d = write_port(tmp_path, counters={"port_rcv_data": 1000})
    c = InfinibandCollector(tmp_path)
    cycle(c, 0.0)
    set_counters(d, port_rcv_data=10)  # below the last reading: backwards (a reset, or garbage)
    got = {s.key: s for s in cycle(c, 1.0)}
    assert ib_key(IB_RECEIVED_BYTES_PER_SECOND) not in got
    set_counters(d, port_rcv_data=U64 + 5)
    got = {s.key: s for s in cycle(c, 2.0)}
    assert ib_key(IB_RECEIVED_BYTES_TOTAL) not in got
    assert c.errors.by_reason[SeriesErrors.OUT_OF_RANGE] == 1
    assert c.errors.by_reason[SeriesErrors.BACKWARDS] == 1


def test_log_lines_are_bounded(caplog: pytest.LogCaptureFixture) -> None:
    errors = SeriesErrors("cgroups")
    caplog.set_level(logging.WARNING)
    for i in range(MAX_LOGGED_SERIES + 50):
        errors.bad_value(f"/sys/fs/cgroup/x{i}/memory.current", OutOfRangeError("too big"))
        errors.bad_value(f"/sys/fs/cgroup/x{i}/memory.current", OutOfRangeError("too big"))
    assert errors.by_reason == {SeriesErrors.OUT_OF_RANGE: 2 * (MAX_LOGGED_SERIES + 50)}
    assert len(warnings(caplog)) == MAX_LOGGED_SERIES + 1  # the last says further ones are only counted


# ---------------------------------------------------------------------------------------------- the daemon
def test_the_agent_keeps_serving_over_a_hostile_tree_and_publishes_nothing_huge(tmp_path: Path) -> None:
    """The whole agent (standalone, in process) over /proc and cgroup trees holding out-of-range values: it keeps
    cycling and serving, counts what it refused in /metrics, and its NodeMetric holds only representable values."""
    import aiohttp

    from agent.main import NodeAgent
    from common.api.quantity import Quantity, consumer_units
    from tests.unit.agent.test_standalone import INTERVAL, settings

    write_proc(tmp_path / "proc", ProcValues())
    (tmp_path / "proc" / "meminfo").write_text(f"MemTotal: {U64} kB\nMemFree: 1 kB\nMemAvailable: 1 kB\n")
    tree = FakeCgroupTree(tmp_path / "cgroup", V2, CgroupDriver.SYSTEMD)
    bad, good = make_pod(1, KubeQoSClass.BURSTABLE, containers=1), make_pod(2, KubeQoSClass.BURSTABLE, containers=1)
    tree.add_pod(bad, CgroupValues(cpu_ns=U64 * 1000))
    tree.add_pod(good)
    (tree.path("memory", tree.pod_rel(bad)) / "memory.current").write_text(f"{HUGE}\n")

    async def scenario() -> tuple[str, dict[str, object]]:
        agent = NodeAgent(settings(tmp_path, node_name="box"), standalone=True)
        await agent.start()
        try:
            assert agent.exporter is not None
            base = f"http://127.0.0.1:{agent.exporter.port}"
            await asyncio.sleep(6 * INTERVAL)
            async with aiohttp.ClientSession() as session:
                async with session.get(f"{base}/healthz") as response:
                    assert response.status == 200
                async with session.get(f"{base}/metrics") as response:
                    text = await response.text()
                async with session.get(f"{base}/nodemetric") as response:
                    body = await response.json()
            return text, body
        finally:
            await agent.stop()

    text, body = asyncio.run(scenario())

    def errors(collector: str) -> float:
        name = "loadline_agent_collector_series_errors_total"
        lines = [ln for ln in text.splitlines() if ln.startswith(name) and f'collector="{collector}"' in ln]
        return sum(float(ln.rsplit(" ", 1)[1]) for ln in lines if 'reason="out_of_range"' in ln)

    assert errors("node") >= 3 and errors("cgroups") >= 6  # every cycle, not once
    assert "loadline_node_memory_total_bytes " not in text  # the refused meminfo published nothing
    status = body["status"]
    assert isinstance(status, dict)
    quantities = []

    def walk(value: object, resource: str = "") -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, k if k in ("cpu", "memory") else resource)
        elif isinstance(value, list):
            for v in value:
                walk(v, resource)
        elif isinstance(value, str | int) and resource:
            quantities.append((resource, Quantity.parse(value)))

    walk(status.get("nodeMetric"))
    walk(status.get("podsMetric"))
    assert quantities  # the good pod, at least
    for resource, q in quantities:
        assert 0 <= consumer_units(resource, q) <= MAX_CONSUMER_UNITS
