"""SampleBlock: a collector's samples as slots of a fixed layout, and the sampler's array path for them.

The sampler must do exactly what it does for a list of `Sample`s: the main check replays one random scenario
(gaps, counter resets, stalls, a restarted container, CFS throttling, system usage) through both paths.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

import numpy as np
import pytest

from agent.collectors import SeriesErrors
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
    """Hands out the scripted samples of each cycle, either as the list or as a block of a layout that stays the
    same object until a counter's source changes (as the cgroup collector does on a container restart)."""

    def __init__(self, cycles: list[list[Sample]], *, as_block: bool) -> None:
        self._cycles = cycles
        self._count = len(cycles)
        self._as_block = as_block
        self._layout: BlockLayout | None = None
        self.layouts = 0

    @property
    def name(self) -> str:
        return "replay"

    @property
    def errors(self) -> SeriesErrors:
        return SeriesErrors()

    def collect(self, now: float) -> Sequence[Sample]:
        n = self._count - len(self._cycles)
        samples = self._cycles.pop(0)
        if not self._as_block:
            return samples
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


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_block_path_equals_the_sample_path(seed: int) -> None:
    cycles, times = scenario(seed, 40)
    clocks = [iter(times), iter(times)]
    now = [0.0, 0.0]

    def clock_of(i: int):  # type: ignore[no-untyped-def]
        return lambda: now[i]

    by_list = Sampler([Replay([list(c) for c in cycles], as_block=False)], clock=clock_of(0))
    replay = Replay([list(c) for c in cycles], as_block=True)
    by_block = Sampler([replay], clock=clock_of(1))
    compared = 0
    metrics: set[str] = set()
    for _ in cycles:
        now[0], now[1] = next(clocks[0]), next(clocks[1])
        a = asyncio.run(by_list.cycle())
        b = asyncio.run(by_block.cycle())
        assert (a.samples, a.stored) == (b.samples, b.stored)
        col_a = {k: by_list.ring.values[r, by_list.ring.head] for k, r in by_list.ring.rows().items()}
        col_b = {k: by_block.ring.values[r, by_block.ring.head] for k, r in by_block.ring.rows().items()}
        assert col_a.keys() == col_b.keys()
        for key, value in col_a.items():
            assert value == col_b[key] or (math.isnan(value) and math.isnan(col_b[key])), key
            if not math.isnan(value):
                compared += 1
                metrics.add(key.metric)
        assert by_list.latest == by_block.latest
    assert by_list.rates.drops == by_block.rates.drops
    drops = by_list.rates.drops
    assert drops.first and drops.reset and drops.stall  # the scenario exercised every rule
    assert replay.layouts == 2  # the restart made a new layout, whose other baselines carried over
    assert compared > 500
    assert {CPU_USAGE_CORES, CPU_CFS_THROTTLED_RATIO, SYSTEM_CPU_USAGE_CORES, SYSTEM_MEMORY_USAGE_BYTES} <= metrics
