"""The latest usage the QoS enforcer acts on, and how to read it from the agent's sample ring.

koordlet's suppress and evict strategies (koordinator pkg/koordlet/qosmanager/plugins/) use the *last* sample,
not window averages: they must react within a collect interval or two.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agent.qos.formulas import HostAppCPUUsage
from agent.sampler import Sampler
from agent.series import (
    CPU_USAGE_CORES,
    MEMORY_ANON_USAGE_BYTES,
    NODE_CPU_USAGE_CORES,
    NODE_MEMORY_USAGE_BYTES,
    SeriesKey,
)


@dataclass(frozen=True, slots=True)
class PodUsageSample:
    cpu_cores: float  # NaN when the pod's first CPU sample has no rate yet
    memory_bytes: int  # Koordinator's pod memory usage (anon + unevictable, no page cache)


@dataclass(frozen=True, slots=True)
class UsageSnapshot:
    taken_at: float  # time.monotonic() of the samples
    node_cpu_cores: float
    node_memory_bytes: int
    pods: Mapping[str, PodUsageSample] = field(default_factory=dict)  # by pod UID
    host_apps: Sequence[HostAppCPUUsage] = ()


def usage_from_sampler(sampler: Sampler) -> UsageSnapshot | None:
    """The newest column of the sampler's ring; None before the node CPU rate exists (second cycle)."""
    ring = sampler.ring
    if ring.head < 0:
        return None
    column = ring.values[:, ring.head]

    def value(key: SeriesKey) -> float:
        row = ring.row_of(key)
        return float(column[row]) if row is not None else math.nan

    node_cpu = value(SeriesKey(NODE_CPU_USAGE_CORES))
    node_memory = value(SeriesKey(NODE_MEMORY_USAGE_BYTES))
    if math.isnan(node_cpu) or math.isnan(node_memory):
        return None
    pods: dict[str, PodUsageSample] = {}
    for key, row in ring.rows().items():
        if not isinstance(key, SeriesKey) or not key.pod or key.container or key.device:
            continue
        if key.metric not in (CPU_USAGE_CORES, MEMORY_ANON_USAGE_BYTES):
            continue
        current = pods.get(key.pod, PodUsageSample(math.nan, 0))
        sample = float(column[row])
        if math.isnan(sample):
            continue
        if key.metric == CPU_USAGE_CORES:
            pods[key.pod] = PodUsageSample(sample, current.memory_bytes)
        else:
            pods[key.pod] = PodUsageSample(current.cpu_cores, int(sample))
    return UsageSnapshot(float(ring.times[ring.head]), node_cpu, int(node_memory), pods)
