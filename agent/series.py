"""What a sample is and how series are named inside the agent.

Collectors emit `Sample`s; the sampler turns counters into rates and writes gauges and rates into the
store. Names are internal (Prometheus names are chosen at export time); units are base units: seconds,
bytes, cores, ratios in 0..1.
"""

from __future__ import annotations

from enum import Enum
from typing import Final, NamedTuple


class SeriesKey(NamedTuple):
    """Identity of one series. Empty fields mean "not applicable" (node-level series have no pod)."""

    metric: str
    pod: str = ""  # pod UID
    container: str = ""  # container name (stable across restarts, unlike the container ID)
    device: str = ""  # GPU UUID, HCA port, ... for device series


class Kind(Enum):
    GAUGE = "gauge"
    COUNTER = "counter"  # cumulative, only ever grows except on reset; turned into a rate by the sampler


class Sample(NamedTuple):
    key: SeriesKey
    value: float
    kind: Kind = Kind.GAUGE
    # Identity of the thing behind a counter (container ID, cgroup path). When it changes the counter is a
    # different counter (container restarted) and the rate restarts from "first sample", like koordlet keying
    # its last CPU reading by container ID.
    source: str = ""


# --- node (from /proc) ---
NODE_CPU_USAGE_SECONDS: Final = "node_cpu_usage_seconds_total"  # counter, Koordinator's busy tick set
NODE_CPU_USAGE_CORES: Final = "node_cpu_usage_cores"  # rate of the above
NODE_CPU_CAPACITY_CORES: Final = "node_cpu_capacity_cores"
NODE_MEMORY_TOTAL_BYTES: Final = "node_memory_total_bytes"
NODE_MEMORY_USAGE_BYTES: Final = "node_memory_usage_bytes"  # MemTotal - MemAvailable (usageWithoutPageCache)
NODE_MEMORY_USAGE_WITH_PAGE_CACHE_BYTES: Final = "node_memory_usage_with_page_cache_bytes"  # MemTotal - MemFree

# --- pods and containers (from cgroups); pod-level when SeriesKey.container == "" ---
CPU_USAGE_SECONDS: Final = "cpu_usage_seconds_total"  # counter
CPU_USAGE_CORES: Final = "cpu_usage_cores"  # rate of the above
CPU_CFS_PERIODS: Final = "cpu_cfs_periods_total"  # counter
CPU_CFS_THROTTLED_PERIODS: Final = "cpu_cfs_throttled_periods_total"  # counter
CPU_CFS_THROTTLED_SECONDS: Final = "cpu_cfs_throttled_seconds_total"  # counter
CPU_CFS_THROTTLED_RATIO: Final = "cpu_cfs_throttled_ratio"  # d(throttled periods) / d(periods)
# Koordinator's pod/container "memory usage": inactive_anon + active_anon + unevictable, no page cache.
MEMORY_ANON_USAGE_BYTES: Final = "memory_anon_usage_bytes"
# kubelet/cAdvisor working set: usage - inactive_file, clamped at 0 (what eviction and `kubectl top` use).
MEMORY_WORKING_SET_BYTES: Final = "memory_working_set_bytes"

# --- system (node - sum of pods, clamped at 0) ---
SYSTEM_CPU_USAGE_CORES: Final = "system_cpu_usage_cores"
SYSTEM_MEMORY_USAGE_BYTES: Final = "system_memory_usage_bytes"

PSI_RESOURCES: Final = ("cpu", "memory", "io")


def psi_avg10_metric(resource: str, line: str, *, node: bool) -> str:
    """Kernel-smoothed 10 s stall share as a ratio, e.g. `node_pressure_cpu_some_avg10_ratio`."""
    return f"{'node_' if node else ''}pressure_{resource}_{line}_avg10_ratio"


def psi_total_metric(resource: str, line: str, *, node: bool) -> str:
    """Cumulative stall time (counter, seconds); cAdvisor/node_exporter call "some" waiting, "full" stalled."""
    word = "waiting" if line == "some" else "stalled"
    return f"{'node_' if node else ''}pressure_{resource}_{word}_seconds_total"


# Counters whose per-second rate is worth keeping in the store, and the name the rate is stored under.
STORED_RATES: Final[dict[str, str]] = {
    NODE_CPU_USAGE_SECONDS: NODE_CPU_USAGE_CORES,
    CPU_USAGE_SECONDS: CPU_USAGE_CORES,
}
# Counters rated only as inputs of derived series (not stored themselves).
DERIVATION_INPUTS: Final = frozenset({CPU_CFS_PERIODS, CPU_CFS_THROTTLED_PERIODS})
