"""Window aggregation over a `SampleRing`: avg and nearest-rank percentiles for every series at once.

Koordinator compatibility (koordlet `metriccache/util.go`, NodeMetric reporting):
- percentile p of n samples = the sorted sample at index `int(float32(n) * float32(p)) - 1`, clamped at 0;
  no interpolation. The product is computed in float32 exactly as koordlet's Go code does, so the rank
  matches bit for bit (float64 arithmetic on the float32 quantile, 0.95f = 0.94999998..., would pick one
  rank lower for e.g. n = 20).
- avg = arithmetic mean (accumulated in float64).
- cold start: a series whose first and last sample inside a window are less than half the window apart
  reports nothing for that window (NodeMetric's `{}`).

Vectorised, no Python loop per series: the window's columns are at most two slices of the ring, and every
narrower window is a suffix of a wider one, so sums are built narrowest first and extended. Each window is
sorted once along rows with NaN last, and per-row sample counts pick the rank. Rows without gaps (finite
sum) skip all mask work; rows with gaps get counts, first/last sample and NaN-skipping sums from one mask.
Rows are processed in blocks to keep temporaries small and cache-friendly; blocks may run on a thread pool
(numpy releases the GIL while sorting). Sorting dominates: it is the price of exact percentiles.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from agent.store.ring import SampleRing

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

QUANTILES: Final[tuple[tuple[str, float], ...]] = (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99))
DEFAULT_WINDOWS: Final[tuple[float, ...]] = (300.0, 600.0, 1800.0)
COLD_START_COVERAGE: Final = 0.5


def nearest_rank_index(count: npt.ArrayLike, q: float) -> I64:
    """koordlet's rank: `int(float32(n) * float32(q)) - 1`, clamped at 0 (floor(n*q)-th order statistic)."""
    if not 0.0 < q <= 1.0:
        raise ValueError(f"quantile must be in (0, 1], got {q}")
    product = np.asarray(count, dtype=np.float32) * np.float32(q)  # float32 * float32 stays float32
    return np.maximum(product.astype(np.int64) - 1, 0)


@dataclass(frozen=True)
class WindowStats:
    """Per-row results of one window; arrays are indexed by ring row."""

    duration: float
    count: I64  # samples inside the window
    span: F64  # seconds between the first and last sample inside the window (0 if < 2 samples)
    reported: npt.NDArray[np.bool_]  # has samples and passes the coverage (cold-start) rule
    avg: F64  # NaN where not reported
    quantiles: dict[str, F64]  # name -> values, NaN where not reported


def aggregate_windows(
    ring: SampleRing,
    now: float,
    durations: Sequence[float] = DEFAULT_WINDOWS,
    quantiles: Sequence[tuple[str, float]] = QUANTILES,
    *,
    min_coverage: float = COLD_START_COVERAGE,
    block_rows: int = 256,
    executor: Executor | None = None,
    quantile_rows: npt.NDArray[np.bool_] | None = None,
) -> list[WindowStats]:
    """Aggregate every series of `ring` over each window [now - d, now]; results in `durations` order.

    `quantile_rows` (bool per ring row) limits the sort to the series whose percentiles someone reads
    (e.g. node and pod series, not containers); the others still get count, coverage and avg.
    """
    for _, q in quantiles:
        nearest_rank_index(0, q)  # validate early, not in a worker
    rows = ring.high_water
    if quantile_rows is not None:  # pad/cut to the rows in use; rows not covered get no percentiles
        given = np.asarray(quantile_rows, dtype=np.bool_)[:rows]
        quantile_rows = np.zeros(rows, dtype=np.bool_)
        quantile_rows[: given.size] = given
    slices = {d: ring.window_columns(now, d) for d in durations}
    widths = {d: sum(s.stop - s.start for s in slices[d]) for d in durations}
    out = [_empty_stats(d, rows, quantiles) for d in durations]
    widest = max(durations, key=lambda d: widths[d], default=None)
    if widest is None or widths[widest] == 0 or rows == 0:
        return out
    col_slices = slices[widest]
    times = np.concatenate([ring.times[s] for s in col_slices])
    # Narrow windows first, so each window's sums extend the previous (narrower) one's.
    order = sorted(range(len(durations)), key=lambda i: widths[durations[i]])
    plan = [(out[i], widths[durations[i]]) for i in order]

    job = _Job(times, plan, tuple(quantiles), min_coverage, quantile_rows)

    def run(r0: int, r1: int) -> None:
        pieces = [ring.values[r0:r1, s] for s in col_slices]  # views, no copy
        _aggregate_block(job, pieces, r0, r1)

    starts = range(0, rows, block_rows)
    if executor is None:
        for r0 in starts:
            run(r0, min(r0 + block_rows, rows))
    else:
        futures = [executor.submit(run, r0, min(r0 + block_rows, rows)) for r0 in starts]
        for f in futures:
            f.result()
    return out


def _empty_stats(duration: float, rows: int, quantiles: Sequence[tuple[str, float]]) -> WindowStats:
    return WindowStats(
        duration=duration,
        count=np.zeros(rows, dtype=np.int64),
        span=np.zeros(rows, dtype=np.float64),
        reported=np.zeros(rows, dtype=np.bool_),
        avg=np.full(rows, np.nan),
        quantiles={name: np.full(rows, np.nan) for name, _ in quantiles},
    )


def _columns(
    pieces: Sequence[npt.NDArray[np.float32]], lo: int, hi: int, rows: npt.NDArray[np.intp] | None = None
) -> list[npt.NDArray[np.float32]]:
    """Logical columns [lo, hi) of the window held as consecutive pieces, as views (or row-picked copies)."""
    out = []
    offset = 0
    for piece in pieces:
        width = piece.shape[1]
        a, b = max(lo - offset, 0), min(hi - offset, width)
        if a < b:
            part = piece[:, a:b]
            out.append(part if rows is None else part[rows])
        offset += width
    return out


def _copy_columns(
    pieces: Sequence[npt.NDArray[np.float32]], lo: int, hi: int, rows: npt.NDArray[np.intp] | None = None
) -> npt.NDArray[np.float32]:
    parts = _columns(pieces, lo, hi, rows)
    if len(parts) == 1:
        return parts[0].copy() if rows is None else parts[0]  # row picking already copied
    return np.concatenate(parts, axis=1)


@dataclass(frozen=True)
class _Job:
    times: F64  # column times of the widest window, oldest first
    plan: Sequence[tuple[WindowStats, int]]  # (output, width in columns), ascending width
    quantiles: tuple[tuple[str, float], ...]
    min_coverage: float
    quantile_rows: npt.NDArray[np.bool_] | None


def _aggregate_block(job: _Job, pieces: Sequence[npt.NDArray[np.float32]], r0: int, r1: int) -> None:
    times, quantiles = job.times, job.quantiles
    full_width = int(times.shape[0])
    rows = r1 - r0
    if not quantiles:
        wants = np.zeros(rows, dtype=np.bool_)
    elif job.quantile_rows is None:
        wants = np.ones(rows, dtype=np.bool_)
    else:
        wants = job.quantile_rows[r0:r1]
    total = np.zeros(rows, dtype=np.float64)
    prev_lo = full_width
    for stats, width in job.plan:  # ascending width: each window extends the previous one into the past
        if width == 0:
            continue
        lo = full_width - width
        t = times[lo:]
        # Sums build on the previous (narrower) window's. A row without gaps has a finite sum, n = width and
        # spans the whole window; only rows whose sum is NaN ("gappy") need masks. In steady state that is a
        # minority, but one missed cycle makes every row gappy for a whole window, so that path is fast too.
        for part in _columns(pieces, lo, prev_lo):
            total = total + part.sum(axis=1, dtype=np.float64)
        prev_lo = lo
        sums = total.copy()
        n = np.full(rows, width, dtype=np.int64)
        span = np.full(rows, t[-1] - t[0])
        picks = {name: np.full(rows, np.nan) for name, _ in quantiles}
        gappy = np.isnan(total)

        clean = np.flatnonzero(~gappy & wants)
        if clean.size:
            ordered = _copy_columns(pieces, lo, full_width, None if clean.size == rows else clean)
            ordered.sort(axis=1)
            _pick(ordered, n[clean], quantiles, picks, clean)

        holes = np.flatnonzero(gappy)
        if holes.size:
            block = _copy_columns(pieces, lo, full_width, holes)
            missing = np.isnan(block)
            n_h = width - np.count_nonzero(missing, axis=1)
            n[holes] = n_h
            span[holes] = _spans(missing, n_h, t)
            want_h = wants[holes]
            if want_h.all():
                block.sort(axis=1)  # NaN sorts last, so the first n entries of each row are its samples
                _pick(block, n_h, quantiles, picks, holes)
                missing = np.isnan(block)  # same count per row, now at the end
            elif want_h.any():
                some = block[want_h]
                some.sort(axis=1)
                _pick(some, n_h[want_h], quantiles, picks, holes[want_h])
            np.copyto(block, 0.0, where=missing)
            sums[holes] = block.sum(axis=1, dtype=np.float64)

        reported = (n > 0) & (span >= job.min_coverage * stats.duration)
        stats.count[r0:r1] = n
        stats.span[r0:r1] = span
        stats.reported[r0:r1] = reported
        stats.avg[r0:r1] = np.where(reported, sums / np.maximum(n, 1), np.nan)
        for name, values in picks.items():
            stats.quantiles[name][r0:r1] = np.where(reported, values, np.nan)


def _pick(
    ordered: npt.NDArray[np.float32],
    n: I64,
    quantiles: Sequence[tuple[str, float]],
    picks: dict[str, F64],
    rows: npt.NDArray[np.intp],
) -> None:
    """Nearest-rank picks from rows sorted with NaN last, `n` samples each, into picks[name][rows]."""
    picker = np.arange(ordered.shape[0])
    for name, q in quantiles:
        picks[name][rows] = ordered[picker, nearest_rank_index(n, q)]


def _spans(missing: npt.NDArray[np.bool_], n: I64, t: F64) -> F64:
    """Seconds between each row's first and last sample. Only rows missing an edge sample need a search."""
    spans = np.full(missing.shape[0], t[-1] - t[0])
    edge = np.flatnonzero(missing[:, 0] | missing[:, -1])
    if edge.size:
        present = ~missing[edge]
        first = present.argmax(axis=1)
        last = present.shape[1] - 1 - present[:, ::-1].argmax(axis=1)
        spans[edge] = np.where(n[edge] > 0, t[last] - t[first], 0.0)
    return spans


def average_window(ring: SampleRing, now: float, duration: float, *, min_coverage: float = 0.0) -> WindowStats:
    """Plain average over [now - duration, now] (NodeMetric `nodeUsage` over aggregateDurationSeconds)."""
    return aggregate_windows(ring, now, (duration,), (), min_coverage=min_coverage)[0]


@dataclass(frozen=True)
class AggregateReport:
    """Aggregates of all series at one instant, detached from later ring writes."""

    now: float
    rows: dict[Hashable, int]
    windows: dict[float, WindowStats]

    def usage(self, key: Hashable, duration: float) -> dict[str, float] | None:
        """{"avg": .., "p50": .., ...} for one series and window, or None (no data / cold start)."""
        row = self.rows.get(key)
        stats = self.windows[duration]
        if row is None or row >= stats.reported.shape[0] or not stats.reported[row]:
            return None
        result = {"avg": float(stats.avg[row])}
        result.update({name: float(v[row]) for name, v in stats.quantiles.items()})
        return result


def build_report(
    ring: SampleRing,
    now: float,
    durations: Sequence[float] = DEFAULT_WINDOWS,
    *,
    wants_quantiles: Callable[[Hashable], bool] | None = None,
    executor: Executor | None = None,
    rows: dict[Hashable, int] | None = None,
) -> AggregateReport:
    """Aggregate all windows; `wants_quantiles(key)` False skips the sort for that series (avg only). `rows`: the
    ring's `rows()` when the caller has taken them already."""
    rows = ring.rows() if rows is None else rows
    if not durations:
        return AggregateReport(now=now, rows=rows, windows={})
    mask = None
    if wants_quantiles is not None:
        mask = np.zeros(ring.high_water, dtype=np.bool_)
        mask[[row for key, row in rows.items() if wants_quantiles(key)]] = True
    stats = aggregate_windows(ring, now, durations, executor=executor, quantile_rows=mask)
    return AggregateReport(now=now, rows=rows, windows={s.duration: s for s in stats})
