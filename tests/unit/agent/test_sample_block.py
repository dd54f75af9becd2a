"""SampleBlock: a collector's samples as slots of a fixed layout, and the sampler's array path for them.

The main check replays one random scenario (gaps, counter resets, stalls, a restarted container, CFS throttling,
system usage) through the sampler and through `Reference`, the counter rules written out sample by sample.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

import numpy as np
import pytest

from agent.collectors import SeriesErrors
from agent.collectors.system import system_usage
from agent.sampler import Sampler
from agent.series import (
    CPU_CFS_PERIODS,
    CPU_CFS_THROTTLED_PERIODS,
    CPU_CFS_THROTTLED_RATIO,
    CPU_CFS_THROTTLED_SECONDS,
    CPU_USAGE_CORES,
    CPU_USAGE_SECONDS,
    MEMORY_ANON_USAGE_BYTES,
    MEMORY_WORKING_SET_BYTES,
    NODE_CPU_CAPACITY_CORES,
    NODE_CPU_USAGE_CORES,
    NODE_CPU_USAGE_SECONDS,
    NODE_MEMORY_USAGE_BYTES,
    SYSTEM_CPU_USAGE_CORES,
    SYSTEM_MEMORY_USAGE_BYTES,
    BlockLayout,
    Kind,
    Sample,
    SampleBlock,
    SeriesKey,
)

C, G = Kind.COUNTER, Kind.GAUGE
NAN = math.nan


def test_block_reads_as_the_samples_it_holds() -> None:
    a, b, c = SeriesKey("m", "p1"), SeriesKey("n", "p1"), SeriesKey("o", "p2")
    layout = BlockLayout((a, b, c), (G, C, G), ("", "src", ""))
    block = SampleBlock(layout, [1.0, NAN, 3.0])
    assert len(block) == 2
    assert list(block) == [Sample(a, 1.0), Sample(c, 3.0)]
    assert block[1] == Sample(c, 3.0) and block[-1:] == [Sample(c, 3.0)]
    assert block == [Sample(a, 1.0), Sample(c, 3.0)] and block != [Sample(a, 1.0)]
    assert SampleBlock(layout, [NAN] * 3) == [] and len(SampleBlock(layout, [NAN] * 3)) == 0
    with_counter = SampleBlock(layout, [NAN, 7.0, NAN])
    assert list(with_counter) == [Sample(b, 7.0, C, "src")]
    with pytest.raises(ValueError, match="3 slots"):
        SampleBlock(layout, [1.0])
    with pytest.raises(ValueError, match="differ in length"):
        BlockLayout((a,), (G, G), ("",))


class Replay:
    """Hands out the scripted samples of each cycle as a block of a layout that stays the same object until a
    counter's source changes (as the cgroup collector does on a container restart)."""

    devices: Sequence[object] = ()

    def close(self) -> None:
        pass

    def __init__(self, cycles: list[list[Sample]]) -> None:
        self._cycles = cycles
        self._count = len(cycles)
        self._layout: BlockLayout | None = None
        self.layouts = 0

    @property
    def name(self) -> str:
        return "replay"

    @property
    def errors(self) -> SeriesErrors:
        return SeriesErrors()

    def collect(self, now: float) -> SampleBlock:
        n = self._count - len(self._cycles)
        samples = self._cycles.pop(0)
        keys = sorted(UNIVERSE, key=lambda k: UNIVERSE[k].value + "".join(k))
        sources = tuple(source_of(k, n, self._count) if UNIVERSE[k] is C else "" for k in keys)
        layout = self._layout
        if layout is None or layout.sources != sources:
            layout = self._layout = BlockLayout(tuple(keys), tuple(UNIVERSE[k] for k in keys), sources)
            self.layouts += 1
        slot = {k: i for i, k in enumerate(layout.keys)}
        values = [NAN] * len(layout)
        for s in samples:
            values[slot[s.key]] = s.value
        return SampleBlock(layout, values)


PODS = ("p1", "p2", "p3")
UNIVERSE: dict[SeriesKey, Kind] = {
    SeriesKey(NODE_CPU_USAGE_SECONDS): C,
    SeriesKey(NODE_CPU_CAPACITY_CORES): G,
    SeriesKey(NODE_MEMORY_USAGE_BYTES): G,
}
for _pod in PODS:
    for _container in ("", "app"):
        UNIVERSE[SeriesKey(CPU_USAGE_SECONDS, _pod, _container)] = C
        UNIVERSE[SeriesKey(CPU_CFS_PERIODS, _pod, _container)] = C
        UNIVERSE[SeriesKey(CPU_CFS_THROTTLED_PERIODS, _pod, _container)] = C
        UNIVERSE[SeriesKey(CPU_CFS_THROTTLED_SECONDS, _pod, _container)] = C  # raw only: not rated
        UNIVERSE[SeriesKey(MEMORY_ANON_USAGE_BYTES, _pod, _container)] = G
        UNIVERSE[SeriesKey(MEMORY_WORKING_SET_BYTES, _pod, _container)] = G


def source_of(key: SeriesKey, n: int, cycles: int) -> str:
    """The counter's identity in cycle n: p2's app container restarts halfway."""
    if not key.pod:
        return ""
    restarted = key.pod == "p2" and key.container == "app" and n >= cycles // 2
    return f"{key.pod}/{key.container}{'#2' if restarted else ''}"


def scenario(seed: int, cycles: int) -> tuple[list[list[Sample]], list[float]]:
    """Per cycle: the samples and the clock. Counters grow, sometimes reset; some reads are missing; the
    clock stalls once; p2's app container restarts (new source) halfway."""
    rng = np.random.default_rng(seed)
    totals = {k: float(rng.uniform(0, 100)) for k, kind in UNIVERSE.items() if kind is C}
    out: list[list[Sample]] = []
    clock, times = 1000.0, []
    for n in range(cycles):
        clock += 5.0 if n == cycles // 3 else 1.0  # one stall (> 3 intervals)
        times.append(clock)
        samples = []
        for key, kind in UNIVERSE.items():
            if rng.random() < 0.1:
                continue  # this read failed
            source = source_of(key, n, cycles)
            if kind is G:
                samples.append(Sample(key, float(rng.uniform(0, 1e9))))
                continue
            if key.metric == CPU_CFS_THROTTLED_PERIODS:
                periods = totals[key._replace(metric=CPU_CFS_PERIODS)]
                totals[key] = min(totals[key] + float(rng.integers(0, 5)), periods)
            elif rng.random() < 0.05:
                totals[key] = float(rng.uniform(0, 10))  # reset
            else:
                totals[key] += float(rng.uniform(0, 10)) * float(rng.random() > 0.2)  # sometimes idle
            samples.append(Sample(key, totals[key], C, source))
        out.append(samples)
    return out, times


class Reference:
    """The sampler's rules, one sample at a time: rates (first sample, new source, stall, reset), the CFS
    throttling ratio, system usage. The oracle the array path is checked against."""

    def __init__(self, max_gap: float = 3.0) -> None:
        self.max_gap = max_gap
        self.last: dict[SeriesKey, tuple[float, float, str]] = {}
        self.drops = {"first": 0, "reset": 0, "stall": 0}

    def rate(self, key: SeriesKey, value: float, now: float, source: str) -> float | None:
        last = self.last.get(key)
        self.last[key] = (value, now, source)
        if last is None or last[2] != source:
            self.drops["first"] += 1
            return None
        previous, then, _ = last
        if now - then > self.max_gap:
            self.drops["stall"] += 1
            return None
        if value < previous:
            self.drops["reset"] += 1
            return None
        return (value - previous) / (now - then)

    def column(self, samples: list[Sample], now: float) -> dict[SeriesKey, float]:
        out: dict[SeriesKey, float] = {}
        rates: dict[SeriesKey, float | None] = {}
        for key, value, kind, source in samples:
            if kind is G:
                out[key] = value
            elif key.metric in (CPU_USAGE_SECONDS, NODE_CPU_USAGE_SECONDS, CPU_CFS_PERIODS, CPU_CFS_THROTTLED_PERIODS):
                rates[key] = self.rate(key, value, now, source)
        for key, rate in rates.items():
            if rate is None:
                continue
            if key.metric == CPU_USAGE_SECONDS:
                out[key._replace(metric=CPU_USAGE_CORES)] = rate
            elif key.metric == NODE_CPU_USAGE_SECONDS:
                out[SeriesKey(NODE_CPU_USAGE_CORES)] = rate
            elif key.metric == CPU_CFS_PERIODS:
                throttled = rates.get(key._replace(metric=CPU_CFS_THROTTLED_PERIODS))
                if throttled is not None:
                    ratio = min(throttled / rate, 1.0) if rate > 0 else 0.0
                    out[key._replace(metric=CPU_CFS_THROTTLED_RATIO)] = ratio
        pod_cpu = [r for k, r in rates.items() if k.metric == CPU_USAGE_SECONDS and not k.container]
        node_cpu = rates.get(SeriesKey(NODE_CPU_USAGE_SECONDS))
        if node_cpu is not None and None not in pod_cpu:
            capacity = out.get(SeriesKey(NODE_CPU_CAPACITY_CORES))
            used = system_usage(node_cpu, [r for r in pod_cpu if r is not None])
            out[SeriesKey(SYSTEM_CPU_USAGE_CORES)] = min(used, capacity) if capacity else used
        node_memory = out.get(SeriesKey(NODE_MEMORY_USAGE_BYTES))
        if node_memory is not None:
            pods = [v for k, v in out.items() if k.metric == MEMORY_ANON_USAGE_BYTES and k.pod and not k.container]
            out[SeriesKey(SYSTEM_MEMORY_USAGE_BYTES)] = system_usage(node_memory, pods)
        return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampler_follows_the_counter_rules_sample_by_sample(seed: int) -> None:
    cycles, times = scenario(seed, 40)
    now = [0.0]
    replay = Replay([list(c) for c in cycles])
    sampler = Sampler([replay], clock=lambda: now[0])
    reference = Reference()
    compared = 0
    metrics: set[str] = set()
    for samples, at in zip(cycles, times, strict=True):
        now[0] = at
        result = asyncio.run(sampler.cycle())
        expected = reference.column(samples, at)
        ring = sampler.ring
        got = {k: float(ring.values[r, ring.head]) for k, r in ring.rows().items()}
        got = {k: v for k, v in got.items() if not math.isnan(v)}
        assert got.keys() == expected.keys()
        for key, value in expected.items():
            assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
            compared += 1
            metrics.add(key.metric)
        assert result.samples == len(samples) and result.stored == len(expected)
        assert sampler.latest == {s.key: s.value for s in samples}  # raw values kept for export
    drops = sampler.drops
    assert (drops.first, drops.reset, drops.stall) == tuple(reference.drops.values())
    assert drops.first and drops.reset and drops.stall  # the scenario exercised every rule
    assert replay.layouts == 2  # the restart made a new layout, whose other baselines carried over
    assert compared > 500
    assert {CPU_USAGE_CORES, CPU_CFS_THROTTLED_RATIO, SYSTEM_CPU_USAGE_CORES, SYSTEM_MEMORY_USAGE_BYTES} <= metrics
