"""Fixed-size ring buffers of samples: one float32 row per series, one column per collect cycle.

Layout (series, slots), C-contiguous, so one series' history is contiguous and the per-window sort in
`aggregate` runs along rows (several times faster than the transposed layout). A shared
float64 ring holds the monotonic time of every column. Missing samples are NaN.

Memory is bounded: rows of series not written for `retention` seconds (the longest aggregation window, so
they can no longer contribute to any window) are freed and reused; `max_rows` caps the total whatever the
churn, evicting the longest-silent rows first.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Sequence

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]


RESERVE_BYTES = 256 * 2**20  # address space a ring takes ahead of its rows (not memory until rows are written)


def _reserve(rows: int, max_rows: int, slots: int) -> F32:
    """An uninitialised buffer of at least `rows` rows: max_rows if they fit in RESERVE_BYTES, else as many as fit."""
    fit = RESERVE_BYTES // (slots * np.dtype(np.float32).itemsize)
    return np.empty((min(max_rows, max(rows, fit)), slots), dtype=np.float32)


class SampleRing:
    def __init__(self, slots: int, *, initial_rows: int = 64, max_rows: int = 16384) -> None:
        if slots < 2:
            raise ValueError("a ring needs at least 2 slots")
        if not 1 <= initial_rows <= max_rows:
            raise ValueError("need 1 <= initial_rows <= max_rows")
        self.slots = slots
        self.max_rows = max_rows
        # Address space for up to max_rows is taken at once (np.empty: a page is resident only once a row on it
        # is written), and `values` is a view of its first `capacity` rows: growing within it is a wider view, not
        # a copy, so the process does not hold the old and the new ring at once (at 300 pods x 3 that copy was
        # +14 MiB of peak RSS, which the memory limit has to cover). The reservation is bounded so that very long
        # windows (many slots) do not ask the kernel for gigabytes; beyond it the ring grows by copying.
        self._buffer: F32 = _reserve(initial_rows, max_rows, slots)
        self.values: F32 = self._buffer[:initial_rows]
        self.values[:] = np.nan
        self.times: F64 = np.full(slots, np.nan, dtype=np.float64)
        # Monotonic time of the newest value of each row; +inf for free rows (never stale).
        self.last_written: F64 = np.full(initial_rows, np.inf, dtype=np.float64)
        self.head = -1  # column written last; -1 before the first column
        self.columns_written = 0
        self._row_of: dict[Hashable, int] = {}
        self._key_of: list[Hashable | None] = [None] * initial_rows
        self._free: list[int] = list(range(initial_rows))  # min-heap: low rows first keeps live rows dense
        self.rejected_samples = 0  # samples dropped because max_rows live series already exist
        self._high_water = 0
        # The rows of the last column's keys, reused while the next column has the same keys and no row was
        # allocated or freed since (the steady state: looking every key up again was ~10 % of a collect cycle).
        self._generation = 0  # bumped whenever a row is allocated or released
        self._cached: tuple[Sequence[Hashable], npt.NDArray[np.int64], int] | None = None

    # ----------------------------------------------------------------- registry
    @property
    def capacity(self) -> int:
        return int(self.values.shape[0])

    def __len__(self) -> int:
        return len(self._row_of)

    def __contains__(self, key: object) -> bool:
        return key in self._row_of

    def row_of(self, key: Hashable) -> int | None:
        return self._row_of.get(key)

    def keys(self) -> list[Hashable]:
        return list(self._row_of)

    def rows(self) -> dict[Hashable, int]:
        """A copy of key -> row, for consumers that must outlive the next write."""
        return dict(self._row_of)

    @property
    def high_water(self) -> int:
        """One past the highest row ever allocated; rows above it were never written (nor read)."""
        return self._high_water

    def _allocate(self, key: Hashable) -> int | None:
        if not self._free:
            if self.capacity < self.max_rows:
                # +25 % (at least 256 rows): doubling would leave up to half the ring idle
                self._grow(min(self.capacity + max(self.capacity // 4, 256), self.max_rows))
            elif not self._evict_silent():
                return None
        row = heapq.heappop(self._free)
        self._generation += 1
        self.values[row, :] = np.nan  # a reused (or never touched) row must not show stale or garbage data
        self._high_water = max(self._high_water, row + 1)
        self._row_of[key] = row
        self._key_of[row] = key
        return row

    def _grow(self, rows: int) -> None:
        old = self.capacity
        if rows > self._buffer.shape[0]:  # past the reservation: a larger one, and the rows so far copied over
            buffer = _reserve(rows, self.max_rows, self.slots)
            buffer[:old] = self.values
            self._buffer = buffer
        # rows above the high-water mark stay untouched, hence not resident, until allocated
        self.values = self._buffer[:rows]
        self.last_written = np.concatenate([self.last_written, np.full(rows - old, np.inf)])
        self._key_of.extend([None] * (rows - old))
        for row in range(old, rows):
            heapq.heappush(self._free, row)

    def _evict_silent(self) -> bool:
        """At max_rows: free the row that has been silent longest, if it missed the latest column."""
        live = np.fromiter(self._row_of.values(), dtype=np.int64, count=len(self._row_of))
        oldest = int(live[np.argmin(self.last_written[live])])
        newest_column_time = self.times[self.head] if self.head >= 0 else np.inf
        if not self.last_written[oldest] < newest_column_time:
            return False
        self._release(oldest)
        return True

    def _release(self, row: int) -> None:
        self._generation += 1
        key = self._key_of[row]
        if key is not None:
            del self._row_of[key]
        self._key_of[row] = None
        self.last_written[row] = np.inf
        heapq.heappush(self._free, row)

    def forget(self, keys: Iterable[Hashable]) -> int:
        """Drop series now (e.g. a deleted pod whose history nobody will ask for). Returns rows freed."""
        freed = 0
        for key in keys:
            row = self._row_of.get(key)
            if row is not None:
                self._release(row)
                freed += 1
        return freed

    def drop_stale(self, older_than: float) -> int:
        """Free the rows of series whose newest value is older than `older_than` (monotonic seconds)."""
        stale = np.flatnonzero(self.last_written < older_than)
        freed = 0
        for row in stale.tolist():
            if self._key_of[row] is not None:
                self._release(row)
                freed += 1
        return freed

    # ----------------------------------------------------------------- writing
    def append_column(self, now: float, keys: Sequence[Hashable], values: Sequence[float] | F64) -> None:
        """Write one collect cycle: a new column stamped `now`; series not in `keys` get NaN (a gap)."""
        if len(keys) != len(values):
            raise ValueError("keys and values differ in length")
        if self.head >= 0 and not now > self.times[self.head]:
            raise ValueError("column times must strictly increase (use a monotonic clock)")
        col = (self.head + 1) % self.slots
        self.values[: self._high_water, col] = np.nan
        self.times[col] = now
        self.head = col
        self.columns_written += 1
        if not keys:
            return
        cached = self._cached
        # Lists compare element by element with an identity shortcut: the sampler hands the same key objects
        # every cycle, so an unchanged column costs a pointer comparison per key.
        if cached is not None and cached[2] == self._generation and keys == cached[0]:
            idx = cached[1]
            self.last_written[idx] = now
            self.values[idx, col] = np.asarray(values, dtype=np.float32)
            return
        row_of = self._row_of
        rows = [row_of.get(key, -1) for key in keys]
        known = np.asarray(rows, dtype=np.int64)
        known = known[known >= 0]
        # Mark this cycle's known series as fresh before allocating new rows, so that eviction at max_rows
        # can only pick series that missed this column.
        self.last_written[known] = now
        kept = np.ones(len(rows), dtype=bool)
        for i, row in enumerate(rows):
            if row < 0:
                # re-check: the same new key may appear twice in one column (the later value wins)
                new_row = row_of.get(keys[i])
                if new_row is None:
                    new_row = self._allocate(keys[i])
                if new_row is None:
                    self.rejected_samples += 1
                    kept[i] = False
                else:
                    rows[i] = new_row
                    self.last_written[new_row] = now
        idx = np.asarray(rows, dtype=np.int64)[kept]
        self.values[idx, col] = np.asarray(values, dtype=np.float32)[kept]
        # a copy of the keys: a caller may reuse its list with other contents
        self._cached = (list(keys), idx, self._generation) if bool(kept.all()) else None

    # ----------------------------------------------------------------- reading
    def window_columns(self, now: float, duration: float) -> tuple[slice, ...]:
        """The newest columns stamped within [now - duration, now], oldest first, as at most two slices."""
        times = self.times
        with np.errstate(invalid="ignore"):
            inside = (times >= now - duration) & (times <= now)
        width = int(np.count_nonzero(inside))
        if width == 0:
            return ()
        # Columns are written in time order, so the ones inside the window end at the newest column not
        # after `now`; if `now` is older than the head, walk back from the head.
        end = self.head
        while times[end] > now:
            end = (end - 1) % self.slots
        start = end - width + 1
        if start >= 0:
            return (slice(start, end + 1),)
        return (slice(start % self.slots, self.slots), slice(0, end + 1))

    def nbytes(self) -> int:
        return int(self.values.nbytes + self.times.nbytes + self.last_written.nbytes)
