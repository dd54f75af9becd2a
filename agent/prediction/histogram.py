"""Decaying histograms, many at once: the model of Koordinator's peak predictor, rows of one numpy array.

Koordinator's `pkg/util/histogram` (from the Vertical Pod Autoscaler) keeps one histogram object per model. Here a
`HistogramBank` keeps every model's histogram as one row of a 2-D array, so a training step adds one sample to every
model with one scatter-add and a prediction reads every model's percentile with one cumulative sum.

Semantics, as in `decaying_histogram.go` / `histogram.go` (their `_test.go` tables are mirrored in
tests/unit/agent/test_prediction_histogram.py):

- A sample of value v at time t adds `weight * 2^((t - reference) / halfLife)` to v's bucket: each half-life halves
  the weight of what came before. `reference` is per row, a multiple of the half-life; once t is more than 100
  half-lives past it, the row is renormalised (reference moved to t rounded to a half-life, weights scaled down).
- A bucket holding less than `epsilon` counts as empty for the first/last non-empty bucket; the total weight is
  kept separately. Percentile p returns the *end* of the first bucket (from the first non-empty one) whose running
  sum reaches p x total, at most the last non-empty bucket's end (the start of the last bucket if that is the
  last of the scheme); an empty histogram returns 0.
- A checkpoint of a row scales its buckets so the largest holds 10,000 (unsigned integers, near-zero buckets
  dropped) and keeps the total weight and reference; loading spreads the total back over those integers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]

MAX_DECAY_EXPONENT: Final = 100  # renormalise a row once its newest sample is 2^100 heavier than the reference
MAX_CHECKPOINT_WEIGHT: Final = 10_000  # the heaviest bucket of a checkpoint


class Buckets(Protocol):
    """A bucketing scheme: how many buckets, where a value falls, where a bucket starts."""

    @property
    def num_buckets(self) -> int: ...
    @property
    def epsilon(self) -> float: ...
    @property
    def starts(self) -> F64: ...
    def find(self, values: npt.ArrayLike) -> IntArray: ...
    def describe(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class LinearBuckets:
    """Buckets of `bucket_size` from 0; the last one starts at or above `max_value` and is unbounded."""

    max_value: float
    bucket_size: float
    epsilon: float
    num_buckets: int = field(init=False)
    starts: F64 = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_value <= 0 or self.bucket_size <= 0 or self.epsilon <= 0:
            raise ValueError("max_value, bucket_size and epsilon must all be positive")
        n = math.ceil(self.max_value / self.bucket_size) + 1
        object.__setattr__(self, "num_buckets", n)
        object.__setattr__(self, "starts", np.arange(n, dtype=np.float64) * self.bucket_size)

    def find(self, values: npt.ArrayLike) -> IntArray:
        index: F64 = np.nan_to_num(np.trunc(np.asarray(values, dtype=np.float64) / self.bucket_size), nan=0.0)
        return np.clip(index, 0, self.num_buckets - 1).astype(np.intp)

    def describe(self) -> dict[str, Any]:
        return {"kind": "linear", "maxValue": self.max_value, "bucketSize": self.bucket_size, "epsilon": self.epsilon}


@dataclass(frozen=True)
class ExponentialBuckets:
    """Bucket n >= 1 starts at `first_bucket_size * (ratio^n - 1) / (ratio - 1)`: each bucket `ratio` times as wide
    as the one before, the first `[0, first_bucket_size)`, the last starting at or above `max_value`."""

    max_value: float
    first_bucket_size: float
    ratio: float
    epsilon: float
    num_buckets: int = field(init=False)
    starts: F64 = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_value <= 0 or self.first_bucket_size <= 0 or self.epsilon <= 0 or self.ratio <= 1:
            raise ValueError("max_value, first_bucket_size and epsilon must be > 0, ratio > 1")
        r = self.ratio
        n = math.ceil(math.log(self.max_value * (r - 1) / self.first_bucket_size + 1) / math.log(r)) + 1
        object.__setattr__(self, "num_buckets", n)
        starts = [0.0] + [self.first_bucket_size * (math.pow(r, b) - 1) / (r - 1) for b in range(1, n)]
        object.__setattr__(self, "starts", np.asarray(starts, dtype=np.float64))

    def find(self, values: npt.ArrayLike) -> IntArray:
        v = np.nan_to_num(np.asarray(values, dtype=np.float64), nan=0.0, posinf=self.max_value * 2, neginf=0.0)
        r = self.ratio
        with np.errstate(invalid="ignore", divide="ignore"):
            index = np.trunc(np.log(np.maximum(v, 0.0) * (r - 1) / self.first_bucket_size + 1) / math.log(r))
        index = np.where(v < self.first_bucket_size, 0.0, index)
        return np.minimum(index, self.num_buckets - 1).astype(np.intp)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "exponential",
            "maxValue": self.max_value,
            "firstBucketSize": self.first_bucket_size,
            "ratio": self.ratio,
            "epsilon": self.epsilon,
        }


def _round_half_up(x: F64) -> F64:
    """Go's `int(math.Floor(x + 0.5))`, the rounding of the decay exponent."""
    return np.floor(x + 0.5)


class HistogramBank:
    """`rows` decaying histograms over one bucketing scheme and half-life; row i is one model.

    Rows are cleared (`clear`) rather than freed: the caller (`agent.prediction.models`) owns which row is which.
    Times are seconds (any epoch, the same for every call); references start at 0, so the first sample of a row
    always renormalises it to its own time, as Koordinator's zero `time.Time` does.
    """

    def __init__(self, buckets: Buckets, half_life_seconds: float, rows: int = 0) -> None:
        if half_life_seconds <= 0:
            raise ValueError("half_life_seconds must be positive")
        self.buckets = buckets
        self.half_life = float(half_life_seconds)
        n = buckets.num_buckets
        self.weights: F64 = np.zeros((rows, n), dtype=np.float64)
        self.total: F64 = np.zeros(rows, dtype=np.float64)
        self.reference: F64 = np.zeros(rows, dtype=np.float64)

    @property
    def rows(self) -> int:
        return int(self.total.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.weights.nbytes + self.total.nbytes + self.reference.nbytes)

    def resize(self, rows: int) -> None:
        """Grow (new rows empty) or shrink (rows past `rows` dropped) the bank."""
        old = self.rows
        if rows == old:
            return
        keep = min(rows, old)
        weights = np.zeros((rows, self.buckets.num_buckets), dtype=np.float64)
        weights[:keep] = self.weights[:keep]
        total, reference = np.zeros(rows), np.zeros(rows)
        total[:keep], reference[:keep] = self.total[:keep], self.reference[:keep]
        self.weights, self.total, self.reference = weights, total, reference

    def clear(self, rows: npt.ArrayLike) -> None:
        idx = np.asarray(rows, dtype=np.intp)
        self.weights[idx] = 0.0
        self.total[idx] = 0.0
        self.reference[idx] = 0.0

    # ------------------------------------------------------------------------------------------------ writing
    def _shift_reference(self, rows: IntArray, new_reference: F64) -> None:
        """Move the rows' references to `new_reference` rounded to a half-life; weights scale by 2^-k for k
        half-lives moved (relative weights, and so percentiles, are unchanged)."""
        hl = self.half_life
        new_reference = _round_half_up(new_reference / hl) * hl
        exponent = _round_half_up((self.reference[rows] - new_reference) / hl)
        scale = np.ldexp(1.0, exponent.astype(np.int64))
        self.weights[rows] *= scale[:, None]
        self.total[rows] *= scale
        self.reference[rows] = new_reference

    def add(self, rows: npt.ArrayLike, values: npt.ArrayLike, times: npt.ArrayLike, weight: float = 1.0) -> None:
        """One sample per entry: `values[i]` at `times[i]` into row `rows[i]` (rows may repeat; times in order)."""
        if weight < 0:
            raise ValueError("sample weight must be non-negative")
        r = np.atleast_1d(np.asarray(rows, dtype=np.intp))
        if r.size == 0:
            return
        v, t = np.asarray(values, dtype=np.float64), np.asarray(times, dtype=np.float64)
        if v.shape != r.shape:
            v = np.full(r.shape, v) if v.ndim == 0 else np.broadcast_to(v, r.shape)
        if t.shape != r.shape:
            t = np.full(r.shape, t) if t.ndim == 0 else np.broadcast_to(t, r.shape)
        if np.unique(r).size != r.size:  # repeated rows: one at a time, so each renormalisation sees the last
            for i in range(r.size):
                self.add(r[i : i + 1], v[i : i + 1], t[i : i + 1], weight)
            return
        hl = self.half_life
        late = t > self.reference[r] + hl * MAX_DECAY_EXPONENT
        if late.any():
            self._shift_reference(r[late], t[late])
        factor = weight * np.exp2((t - self.reference[r]) / hl)
        buckets = self.buckets.find(v)
        self.weights[r, buckets] += factor
        self.total[r] += factor

    # ------------------------------------------------------------------------------------------------ reading
    def percentiles(self, rows: npt.ArrayLike, percentile: float) -> F64:
        """Percentile (0..1) of each row in `rows`; 0.0 for an empty row."""
        r = np.atleast_1d(np.asarray(rows, dtype=np.intp))
        if r.size == 0:
            return np.zeros(0)
        w = self.weights[r]
        n = self.buckets.num_buckets
        heavy = w >= self.buckets.epsilon
        nonempty = heavy.any(axis=1)
        first = heavy.argmax(axis=1)
        last = n - 1 - heavy[:, ::-1].argmax(axis=1)
        cols = np.arange(n)
        from_first = cols[None, :] >= first[:, None]
        running = np.cumsum(np.where(from_first, w, 0.0), axis=1)
        threshold = percentile * self.total[r]
        # Koordinator's loop: buckets first..last-1 in order, stop at the first whose running sum reaches the
        # threshold; if none does, the last non-empty bucket.
        reached = (running >= threshold[:, None]) & from_first & (cols[None, :] < last[:, None])
        bucket = np.where(reached.any(axis=1), reached.argmax(axis=1), last)
        starts = self.buckets.starts
        value = np.where(bucket < n - 1, starts[np.minimum(bucket + 1, n - 1)], starts[bucket])
        return np.where(nonempty, value, 0.0)

    def is_empty(self, row: int) -> bool:
        return not bool((self.weights[row] >= self.buckets.epsilon).any())

    # ------------------------------------------------------------------------------------------------ checkpoints
    def save(self, row: int) -> dict[str, Any]:
        """A row as Koordinator's HistogramCheckpoint: `{referenceTimestamp, bucketWeights, totalWeight}`."""
        w = self.weights[row]
        heavy = np.flatnonzero(w >= self.buckets.epsilon)
        out: dict[str, Any] = {"referenceTimestamp": float(self.reference[row]), "totalWeight": float(self.total[row])}
        weights: dict[str, int] = {}
        if heavy.size:
            span = w[heavy[0] : heavy[-1] + 1]
            ratio = MAX_CHECKPOINT_WEIGHT / float(span.max())
            scaled = np.floor(span * ratio + 0.5).astype(np.int64)
            for offset in np.flatnonzero(scaled > 0):
                weights[str(int(heavy[0] + offset))] = int(scaled[offset])
        out["bucketWeights"] = weights
        return out

    def load(self, row: int, checkpoint: Any) -> None:
        """Add a checkpoint's weights to `row` (cleared first). Raises ValueError on anything malformed; the row is
        then left empty."""
        self.clear([row])
        if not isinstance(checkpoint, dict):
            raise ValueError("a histogram checkpoint must be an object")
        total = checkpoint.get("totalWeight", 0.0)
        reference = checkpoint.get("referenceTimestamp", 0.0)
        weights = checkpoint.get("bucketWeights") or {}
        if not isinstance(total, (int, float)) or isinstance(total, bool) or not math.isfinite(total) or total < 0:
            raise ValueError(f"totalWeight {total!r} is not a non-negative number")
        if not isinstance(reference, (int, float)) or isinstance(reference, bool) or not math.isfinite(reference):
            raise ValueError(f"referenceTimestamp {reference!r} is not a number")
        if not isinstance(weights, dict):
            raise ValueError("bucketWeights must be an object")
        parsed: list[tuple[int, int]] = []
        for key, value in weights.items():
            try:
                bucket = int(key)
            except (TypeError, ValueError):
                raise ValueError(f"bucket {key!r} is not an integer") from None
            if not 0 <= bucket < self.buckets.num_buckets:
                raise ValueError(f"bucket {bucket} is outside 0..{self.buckets.num_buckets - 1}")
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 2**32 - 1:
                raise ValueError(f"bucket {bucket} weight {value!r} is not an unsigned 32-bit integer")
            parsed.append((bucket, value))
        summed = sum(value for _, value in parsed)
        self.reference[row] = float(reference)
        if summed == 0:
            return
        ratio = float(total) / summed
        for bucket, value in parsed:
            self.weights[row, bucket] += value * ratio
        self.total[row] = float(total)


__all__ = ["MAX_CHECKPOINT_WEIGHT", "Buckets", "ExponentialBuckets", "HistogramBank", "LinearBuckets"]
