"""What a sample is and how series are named inside the agent.

Collectors emit one `SampleBlock` per cycle (built with a `BlockBuilder` when they do not keep a layout of
their own); the sampler turns counters into rates and writes gauges and rates into the store. Names are
internal (Prometheus names are chosen at export time); units are base units: seconds, bytes, cores, ratios
in 0..1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Final, NamedTuple, overload

import numpy as np
import numpy.typing as npt


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


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class BlockLayout:
    """The fixed series of a `SampleBlock`: one slot per series, the same object for as long as the collector's
    set of series is unchanged, so the sampler can plan per layout instead of per sample."""

    keys: tuple[SeriesKey, ...]
    kinds: tuple[Kind, ...]
    sources: tuple[str, ...]
    # Per slot, for counters whose collector declares a rate (network, InfiniBand): the key the sampler stores
    # and exports the per-second rate under, or None; and the largest plausible rate (larger ones are dropped
    # as garbage). Empty: no declared rates (the CPU counters' rates follow `STORED_RATES`).
    rate_keys: tuple[SeriesKey | None, ...] = ()
    max_rates: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if not len(self.keys) == len(self.kinds) == len(self.sources):
            raise ValueError("keys, kinds and sources differ in length")
        if self.rate_keys and not len(self.rate_keys) == len(self.max_rates) == len(self.keys):
            raise ValueError("rate_keys and max_rates must have one entry per slot")

    def __len__(self) -> int:
        return len(self.keys)


MISSING: Final = math.nan  # the value of a slot with no sample this cycle


class SampleBlock(Sequence[Sample]):
    """One cycle of a collector's samples as values in the slots of a `BlockLayout`, NaN where a series has no
    sample (read failed, cgroup not there yet, no CFS quota). Hundreds of cgroups every second make one
    `Sample` per value the dominant cost; a block is read by the sampler as arrays and turned into `Sample`s
    only for whoever iterates it (export, tests), skipping the empty slots. The values are a list or a float64
    array (a collector that fills its slots with array operations hands its array over, not copied); neither is
    changed once in a block."""

    __slots__ = ("_array", "_samples", "layout", "values")

    def __init__(self, layout: BlockLayout, values: list[float] | npt.NDArray[np.float64]) -> None:
        if len(values) != len(layout):
            raise ValueError(f"{len(values)} values for a layout of {len(layout)} slots")
        self.layout = layout
        self.values = values
        self._array: npt.NDArray[np.float64] | None = None
        self._samples: list[Sample] | None = None

    def array(self) -> npt.NDArray[np.float64]:
        if self._array is None:
            self._array = np.asarray(self.values, dtype=np.float64)
        return self._array

    def value_list(self) -> list[float]:
        """The values as Python floats (a list: iterating an array element by element is slow and yields numpy
        scalars)."""
        values = self.values
        return values.tolist() if isinstance(values, np.ndarray) else values

    def samples(self) -> list[Sample]:
        if self._samples is None:
            layout = self.layout
            self._samples = [
                Sample(key, value, kind, source)
                for key, value, kind, source in zip(
                    layout.keys, self.value_list(), layout.kinds, layout.sources, strict=True
                )
                if not math.isnan(value)
            ]
        return self._samples

    def __len__(self) -> int:
        """Slots holding a sample (counted on the array: no `Sample`s are built for it)."""
        if self._samples is not None:
            return len(self._samples)
        return int(np.count_nonzero(~np.isnan(self.array())))

    def __iter__(self) -> Iterator[Sample]:
        return iter(self.samples())

    def __eq__(self, other: object) -> bool:
        """Equal to any block or list/tuple holding the same samples in the same order."""
        if isinstance(other, SampleBlock):
            return self.samples() == other.samples()
        if isinstance(other, list | tuple):
            return self.samples() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable contents, like a list

    @overload
    def __getitem__(self, index: int) -> Sample: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Sample]: ...
    def __getitem__(self, index: int | slice) -> Sample | Sequence[Sample]:
        return self.samples()[index]


class BlockBuilder:
    """Builds a collector's `SampleBlock` sample by sample. The layout object is kept for as long as a cycle
    adds the same series in the same order (the sampler plans once per layout), and replaced when they change
    (an interface or port appeared, a container restarted)."""

    __slots__ = ("_keys", "_kinds", "_layout", "_max_rates", "_rate_keys", "_sources", "_values")

    def __init__(self) -> None:
        self._layout = BlockLayout((), (), ())
        self._reset()

    def _reset(self) -> None:
        self._keys: list[SeriesKey] = []
        self._kinds: list[Kind] = []
        self._sources: list[str] = []
        self._values: list[float] = []
        self._rate_keys: list[SeriesKey | None] = []
        self._max_rates: list[float] = []

    def add(
        self,
        key: SeriesKey,
        value: float,
        kind: Kind = Kind.GAUGE,
        source: str = "",
        *,
        rate: SeriesKey | None = None,
        max_rate: float = math.inf,
    ) -> None:
        """One sample; `rate` asks the sampler for this counter's per-second rate under that key."""
        self._keys.append(key)
        self._kinds.append(kind)
        self._sources.append(source)
        self._values.append(value)
        self._rate_keys.append(rate)
        self._max_rates.append(max_rate)

    def extend(self, samples: Iterable[Sample]) -> None:
        for key, value, kind, source in samples:
            self.add(key, value, kind, source)

    def finish(self) -> SampleBlock:
        """The block of everything added since the last `finish`."""
        layout = self._layout
        keys, kinds, sources = tuple(self._keys), tuple(self._kinds), tuple(self._sources)
        declared = any(r is not None for r in self._rate_keys)
        rate_keys = tuple(self._rate_keys) if declared else ()
        max_rates = tuple(self._max_rates) if declared else ()
        if (
            keys != layout.keys
            or kinds != layout.kinds
            or sources != layout.sources
            or rate_keys != layout.rate_keys
            or max_rates != layout.max_rates
        ):
            layout = self._layout = BlockLayout(keys, kinds, sources, rate_keys, max_rates)
        block = SampleBlock(layout, self._values)
        self._reset()
        return block


def block_of(samples: Iterable[Sample], builder: BlockBuilder | None = None) -> SampleBlock:
    """`samples` as a block (tests, one-off callers); pass a kept `builder` to reuse its layout."""
    builder = builder or BlockBuilder()
    builder.extend(samples)
    return builder.finish()


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
