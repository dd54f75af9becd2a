"""Cumulative counter -> per-second rate for the counter slots of a block layout, with the rules that keep rates
sane on real nodes (the agent's only rate engine: `agent.sampler` runs it for every collector).

- The first sample of a series (or of a new source: a restarted container is a new counter) only sets the
  baseline; it yields no rate.
- A counter that goes backwards (reset, wrap, driver reload, cgroup recreated) drops that one sample and
  becomes the new baseline; a rate is never negative. A per-slot `max_rate` drops implausibly large
  rates (e.g. a counter reset and refilled within one interval).
- Time deltas come from the caller's monotonic clock. A sample arriving more than `max_gap_factor` x the
  nominal interval after the previous one (agent stalled, CPU starvation, suspend) is dropped instead of
  producing an average over the stall; it becomes the new baseline.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

DEFAULT_MAX_GAP_FACTOR = 3.0


@dataclass(slots=True)
class RateDrops:
    """Why samples produced no rate; plain counters for self-metrics."""

    first: int = 0
    reset: int = 0
    stall: int = 0
    not_advanced: int = 0  # same or earlier timestamp than the previous sample
    too_large: int = 0


class SlotRates:
    """The rules above for a fixed array of counter slots (the counters of one `BlockLayout`), updated with a
    few array operations per cycle instead of a dict lookup per counter. A slot's source is fixed by its
    layout; a new layout carries over the baselines of the (key, source) pairs it keeps, and a series absent
    from a layout starts again from a first sample."""

    def __init__(
        self,
        identities: Sequence[Hashable],
        max_gap: float,
        drops: RateDrops,
        max_rates: Sequence[float] | None = None,
    ) -> None:
        self.identities = list(identities)  # (key, source) per slot
        self.max_gap = max_gap
        self.drops = drops
        self.value: F64 = np.full(len(self.identities), np.nan)  # NaN: no baseline yet
        self.time: F64 = np.full(len(self.identities), np.nan)
        caps = np.asarray(max_rates if max_rates is not None else (), dtype=np.float64)
        self.max_rate: F64 | None = caps if caps.size and bool(np.isfinite(caps).any()) else None
        # Slots of the last update whose counter went backwards / whose rate was too large (for the caller
        # to name the series: the drops above are only totals).
        self.went_backwards: list[int] = []
        self.too_large: list[int] = []

    def carry_over(self, old: SlotRates) -> None:
        """Take the baselines of `old` for the identities both share."""
        where = {identity: i for i, identity in enumerate(old.identities)}
        pairs = [(i, j) for i, identity in enumerate(self.identities) if (j := where.get(identity)) is not None]
        if pairs:
            new, prev = np.array(pairs, dtype=np.int64).T
            self.value[new] = old.value[prev]
            self.time[new] = old.time[prev]

    def update(self, values: F64, now: float) -> F64:
        """Per-slot rates for cumulative `values` read at monotonic `now`; NaN where a slot has no rate. A NaN
        value (no reading) leaves that slot's baseline alone."""
        prev, prev_time = self.value, self.time
        present = ~np.isnan(values)
        first = present & np.isnan(prev)
        elapsed = now - prev_time
        with np.errstate(invalid="ignore"):
            advanced = present & ~first & (elapsed > 0)
            stalled = advanced & (elapsed > self.max_gap)
            reset = advanced & ~stalled & (values < prev)
            ok = advanced & ~stalled & ~reset
            rates = np.full(len(values), np.nan)
            np.divide(values - prev, elapsed, out=rates, where=ok)
        moved = first | advanced
        prev[moved] = values[moved]
        prev_time[moved] = now
        drops = self.drops
        drops.first += int(np.count_nonzero(first))
        drops.not_advanced += int(np.count_nonzero(present & ~first & ~advanced))
        drops.stall += int(np.count_nonzero(stalled))
        resets = int(np.count_nonzero(reset))
        drops.reset += resets
        self.went_backwards = np.flatnonzero(reset).tolist() if resets else []
        self.too_large = []
        if self.max_rate is not None:
            with np.errstate(invalid="ignore"):
                too_large = rates > self.max_rate
            if too_large.any():
                drops.too_large += int(np.count_nonzero(too_large))
                rates[too_large] = np.nan
                self.too_large = np.flatnonzero(too_large).tolist()
        return rates


def stall_limit(interval: float, factor: float = DEFAULT_MAX_GAP_FACTOR) -> float:
    """Largest gap between two readings that still gives a rate."""
    if not interval > 0 or not math.isfinite(interval):
        raise ValueError("interval must be positive")
    return factor * interval
