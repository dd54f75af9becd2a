"""The enforcer's usage view: the newest collect cycle of the agent's sample ring."""

from __future__ import annotations

import math

from agent.qos.usage import PodUsageSample, usage_from_sampler
from agent.sampler import Sampler
from agent.series import (
    CPU_USAGE_CORES,
    MEMORY_ANON_USAGE_BYTES,
    NODE_CPU_USAGE_CORES,
    NODE_MEMORY_USAGE_BYTES,
    SeriesKey,
)


def test_latest_column_node_and_pod_level_series_only() -> None:
    sampler = Sampler([], interval=1.0, windows=(10.0,))
    assert usage_from_sampler(sampler) is None  # nothing sampled yet
    sampler.ring.append_column(5.0, [SeriesKey(NODE_MEMORY_USAGE_BYTES)], [1e9])
    assert usage_from_sampler(sampler) is None  # first cycle: no CPU rate yet
    keys = [
        SeriesKey(NODE_CPU_USAGE_CORES),
        SeriesKey(NODE_MEMORY_USAGE_BYTES),
        SeriesKey(CPU_USAGE_CORES, "uid-a"),
        SeriesKey(MEMORY_ANON_USAGE_BYTES, "uid-a"),
        SeriesKey(CPU_USAGE_CORES, "uid-a", "container"),  # container level: ignored
        SeriesKey(MEMORY_ANON_USAGE_BYTES, "uid-b"),  # new pod, no CPU rate yet
    ]
    sampler.ring.append_column(6.0, keys, [1.5, 2e9, 0.25, 5e8, 9.0, 1e8])
    snap = usage_from_sampler(sampler)
    assert snap is not None
    assert (snap.taken_at, snap.node_cpu_cores, snap.node_memory_bytes) == (6.0, 1.5, 2_000_000_000)
    assert snap.pods["uid-a"] == PodUsageSample(0.25, 500_000_000)
    assert math.isnan(snap.pods["uid-b"].cpu_cores) and snap.pods["uid-b"].memory_bytes == 100_000_000
    assert set(snap.pods) == {"uid-a", "uid-b"}
