from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agent.collectors import COLLECTORS, Collector, CollectorContext, SeriesErrors, build_collectors
from agent.collectors.cgroup_layout import CgroupDriver, CgroupVersion
from agent.collectors.cgroups import CgroupCollector
from agent.collectors.gpu import GpuCollector
from agent.collectors.infiniband import InfinibandCollector
from agent.collectors.netdev import NetdevCollector
from agent.collectors.node import NodeCollector
from agent.collectors.registry import close_collectors
from agent.collectors.system import system_usage
from agent.report import wants_window_quantiles
from agent.sampler import Sampler
from agent.series import (
    CPU_CFS_PERIODS,
    CPU_CFS_THROTTLED_PERIODS,
    CPU_CFS_THROTTLED_RATIO,
    CPU_USAGE_CORES,
    CPU_USAGE_SECONDS,
    MEMORY_ANON_USAGE_BYTES,
    NODE_CPU_CAPACITY_CORES,
    NODE_CPU_USAGE_CORES,
    NODE_CPU_USAGE_SECONDS,
    NODE_MEMORY_USAGE_BYTES,
    SYSTEM_CPU_USAGE_CORES,
    SYSTEM_MEMORY_USAGE_BYTES,
    BlockBuilder,
    Kind,
    Sample,
    SampleBlock,
    SeriesKey,
    block_of,
)
from agent.store import build_report
from common.api.pod import KubeQoSClass
from tests.fakes.cgroup_trees import CgroupValues, FakeCgroupTree, ProcValues, make_pod, write_proc


class Scripted:
    """A collector replaying one list of samples per call; sync or async."""

    def __init__(self, name: str, script: list[list[Sample]], *, is_async: bool = False) -> None:
        self._name, self._script, self._async = name, script, is_async
        self._errors = SeriesErrors()
        self._builder = BlockBuilder()

    @property
    def name(self) -> str:
        return self._name

    @property
    def errors(self) -> SeriesErrors:
        return self._errors

    @property
    def devices(self) -> Sequence[Any]:
        return ()

    def close(self) -> None:
        pass

    def collect(self, now: float):  # type: ignore[no-untyped-def]
        batch = self._script.pop(0)
        if isinstance(batch, Exception):
            raise batch
        block = block_of(batch, self._builder)
        if not self._async:
            return block

        async def later() -> SampleBlock:
            await asyncio.sleep(0)
            return block

        return later()


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def counter(metric: str, value: float, pod: str = "", container: str = "", source: str = "") -> Sample:
    return Sample(SeriesKey(metric, pod, container), value, Kind.COUNTER, source)


def gauge(metric: str, value: float, pod: str = "") -> Sample:
    return Sample(SeriesKey(metric, pod), value)


def latest_value(s: Sampler, key: SeriesKey) -> float | None:
    row = s.ring.row_of(key)
    if row is None:
        return None
    v = float(s.ring.values[row, s.ring.head])
    return None if math.isnan(v) else v


def test_rates_throttling_and_system_usage() -> None:
    clock = FakeClock()

    def cycle(node_cpu: float, pod_cpu: float, periods: float, throttled: float) -> list[Sample]:
        return [
            counter(NODE_CPU_USAGE_SECONDS, node_cpu),
            gauge(NODE_CPU_CAPACITY_CORES, 4.0),
            gauge(NODE_MEMORY_USAGE_BYTES, 1000.0),
            counter(CPU_USAGE_SECONDS, pod_cpu, "p1", source="p1"),
            counter(CPU_CFS_PERIODS, periods, "p1", source="p1"),
            counter(CPU_CFS_THROTTLED_PERIODS, throttled, "p1", source="p1"),
            gauge(MEMORY_ANON_USAGE_BYTES, 300.0, "p1"),
        ]

    collector = Scripted("fake", [cycle(100, 10, 50, 5), cycle(102.5, 11.5, 60, 7), cycle(104.5, 11.5, 60, 7)])
    s = Sampler([collector], clock=clock)
    asyncio.run(s.cycle())  # first samples: no rates, hence no system CPU either
    assert latest_value(s, SeriesKey(NODE_CPU_USAGE_CORES)) is None
    assert latest_value(s, SeriesKey(SYSTEM_CPU_USAGE_CORES)) is None
    assert latest_value(s, SeriesKey(SYSTEM_MEMORY_USAGE_BYTES)) == 700.0  # gauges need no history
    clock.t += 1.0
    asyncio.run(s.cycle())
    assert latest_value(s, SeriesKey(NODE_CPU_USAGE_CORES)) == pytest.approx(2.5)
    assert latest_value(s, SeriesKey(CPU_USAGE_CORES, "p1")) == pytest.approx(1.5)
    assert latest_value(s, SeriesKey(SYSTEM_CPU_USAGE_CORES)) == pytest.approx(1.0)  # 2.5 - 1.5
    assert latest_value(s, SeriesKey(CPU_CFS_THROTTLED_RATIO, "p1")) == pytest.approx(0.2)  # 2 of 10 periods
    assert SeriesKey(CPU_CFS_PERIODS, "p1") not in s.ring  # derivation input, not stored
    clock.t += 1.0
    asyncio.run(s.cycle())
    assert latest_value(s, SeriesKey(CPU_CFS_THROTTLED_RATIO, "p1")) == 0.0  # quota, but idle: not throttled
    assert s.latest[SeriesKey(CPU_USAGE_SECONDS, "p1")] == 11.5  # raw counters kept for export


def test_system_cpu_waits_for_every_pod_rate() -> None:
    """A pod's first sample has no rate; counting it as 0 would inflate system usage for that cycle."""
    clock = FakeClock()

    def cycle(node: float, pods: dict[str, float]) -> list[Sample]:
        return [counter(NODE_CPU_USAGE_SECONDS, node)] + [
            counter(CPU_USAGE_SECONDS, v, uid, source=uid) for uid, v in pods.items()
        ]

    script = [
        cycle(10.0, {"a": 1.0}),
        cycle(12.0, {"a": 1.5}),
        cycle(14.0, {"a": 2.0, "b": 7.0}),  # "b" appears: no rate for it yet
        cycle(16.0, {"a": 2.5, "b": 7.25}),
    ]
    s = Sampler([Scripted("f", script)], clock=clock)
    seen = []
    for _ in range(4):
        asyncio.run(s.cycle())
        seen.append(latest_value(s, SeriesKey(SYSTEM_CPU_USAGE_CORES)))
        clock.t += 1.0
    assert seen[0] is None and seen[2] is None
    assert seen[1] == pytest.approx(1.5) and seen[3] == pytest.approx(2.0 - 0.5 - 0.25)


def test_failing_and_async_collectors_are_isolated() -> None:
    clock = FakeClock()
    broken = Scripted("broken", [RuntimeError("boom"), [gauge("g", 2.0)]])  # type: ignore[list-item]
    fine = Scripted("fine", [[gauge("h", 1.0)], [gauge("h", 2.0)]], is_async=True)
    s = Sampler([broken, fine], clock=clock)
    result = asyncio.run(s.cycle())
    assert result.stored == 1 and latest_value(s, SeriesKey("h")) == 1.0
    assert not s.stats["broken"].last_success and s.stats["broken"].failures == 1
    assert "boom" in (s.stats["broken"].last_error or "")
    assert s.stats["fine"].last_success and s.stats["fine"].last_duration_seconds >= 0
    clock.t += 1.0
    asyncio.run(s.cycle())
    assert s.stats["broken"].last_success and s.stats["broken"].runs == 2


def test_series_of_gone_pods_leave_after_the_longest_window() -> None:
    clock = FakeClock()
    script = [[gauge(MEMORY_ANON_USAGE_BYTES, 1.0, "gone")]] + [[] for _ in range(12)]
    s = Sampler([Scripted("f", script)], windows=(5.0, 10.0), clock=clock)
    for _ in range(13):
        asyncio.run(s.cycle())
        clock.t += 1.0
    assert SeriesKey(MEMORY_ANON_USAGE_BYTES, "gone") not in s.ring and len(s.ring) == 0


def test_system_usage_is_clamped() -> None:
    assert system_usage(4.0, [1.0, 0.5]) == 2.5
    assert system_usage(1.0, [0.7, 0.6]) == 0.0
    assert system_usage(10.0, [2.0], [3.0]) == 5.0


def test_registry_table() -> None:
    names = ["node", "cgroups", "gpu", "infiniband", "netdev"]
    assert [spec.name for spec in COLLECTORS] == names
    built = build_collectors(CollectorContext())
    try:
        assert [c.name for c in built] == names
        # each row builds its own source's collector (a swapped factory would still satisfy the Protocol)
        assert [type(c) for c in built] == [
            NodeCollector, CgroupCollector, GpuCollector, InfinibandCollector, NetdevCollector
        ]
        assert all(isinstance(c, Collector) for c in built)
    finally:
        close_collectors(built)
    assert [c.name for c in build_collectors(CollectorContext(), ["cgroups"])] == ["cgroups"]
    with pytest.raises(ValueError, match="fpga"):
        build_collectors(CollectorContext(), ["fpga"])


def test_end_to_end_on_fake_trees(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    pv = ProcValues()
    write_proc(proc, pv)
    tree = FakeCgroupTree(tmp_path / "cgroup", CgroupVersion.V2, CgroupDriver.SYSTEMD)
    pods = [make_pod(i, KubeQoSClass.BURSTABLE) for i in range(3)]
    for p in pods:
        tree.add_pod(p)
    ctx = CollectorContext(proc_root=proc, cgroup_root=tree.root, pods=lambda: pods)
    clock = FakeClock()
    s = Sampler(build_collectors(ctx), windows=(10.0, 20.0), clock=clock)
    for i in range(25):
        cpu = list(pv.cpu)
        cpu[0] += 150 * i  # node: 1.5 cores busy
        write_proc(proc, ProcValues(cpu=tuple(cpu)))
        for p in pods:
            tree.write(tree.pod_rel(p), CgroupValues(cpu_ns=10**9 + i * 250_000_000))  # 0.25 cores each
        asyncio.run(s.cycle())
        clock.t += 1.0
    report = build_report(s.ring, clock.t - 1.0, (10.0, 20.0), wants_quantiles=wants_window_quantiles)
    node = report.usage(SeriesKey(NODE_CPU_USAGE_CORES), 20.0)
    assert node is not None and node["p99"] == pytest.approx(1.5)
    system = report.usage(SeriesKey(SYSTEM_CPU_USAGE_CORES), 10.0)
    assert system is not None and system["avg"] == pytest.approx(0.75)  # 1.5 - 3 x 0.25
    pod = report.usage(SeriesKey(CPU_USAGE_CORES, pods[0].uid), 10.0)
    assert pod is not None and pod["p50"] == pytest.approx(0.25)
    container = report.usage(SeriesKey(MEMORY_ANON_USAGE_BYTES, pods[0].uid, "c0"), 10.0)
    assert container is not None and container["avg"] > 0 and math.isnan(container["p50"])
    assert all(st.last_success for st in s.stats.values())


def test_node_cpu_is_never_above_the_cpus_there_are() -> None:
    """Busy ticks at tick granularity can read a little above capacity in one interval: the rate is capped."""
    clock = FakeClock()
    script = [
        [counter(NODE_CPU_USAGE_SECONDS, 100.0), gauge(NODE_CPU_CAPACITY_CORES, 2.0)],
        [counter(NODE_CPU_USAGE_SECONDS, 102.01), gauge(NODE_CPU_CAPACITY_CORES, 2.0)],
        [counter(NODE_CPU_USAGE_SECONDS, 103.51), gauge(NODE_CPU_CAPACITY_CORES, 2.0)],
    ]
    s = Sampler([Scripted("node", script)], clock=clock)
    asyncio.run(s.cycle())
    clock.t += 1.0
    asyncio.run(s.cycle())
    assert latest_value(s, SeriesKey(NODE_CPU_USAGE_CORES)) == 2.0  # 2.01 read, 2 CPUs
    clock.t += 1.0
    asyncio.run(s.cycle())
    assert latest_value(s, SeriesKey(NODE_CPU_USAGE_CORES)) == pytest.approx(1.5)


def test_container_series_can_stay_out_of_the_store() -> None:
    """The agent's pipelines keep only node, system and pod history; container values still reach the export."""
    clock = FakeClock()
    script = [
        [counter(CPU_USAGE_SECONDS, v, "p1", c, "s") for c in ("", "app")] + [gauge(MEMORY_ANON_USAGE_BYTES, 5.0, "p1")]
        for v in (1.0, 2.0)
    ]
    s = Sampler([Scripted("cg", script)], clock=clock, store_containers=False)
    for _ in range(2):
        asyncio.run(s.cycle())
        clock.t += 1.0
    assert {k.container for k in s.ring.rows()} == {""}
    assert latest_value(s, SeriesKey(CPU_USAGE_CORES, "p1")) == 1.0
    assert s.latest[SeriesKey(CPU_USAGE_SECONDS, "p1", "app")] == 2.0  # exported raw
