"""`RowDelta`: what a simulated change of pods (PreFilter AddPod/RemovePod) did to per-node sums.

Plugins whose Filter reads sums over a node's pods (requested resources, estimated load)
keep one in their cycle state while the framework simulates: the snapshot stays as it is,
and the Filter adds `take(rows)` to what it reads from the snapshot. Row-major (`rows ×
vector`), so adding many pods at once is one `np.add.at`; a cloned cycle state copies it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.snapshot import IndexArray, IntArray


class RowDelta:
    __slots__ = ("values",)

    def __init__(self, values: IntArray) -> None:
        self.values = values

    @classmethod
    def zeros(cls, rows: int, width: int) -> RowDelta:
        return cls(np.zeros((rows, width), np.int64))

    def clone(self) -> RowDelta:
        return RowDelta(self.values.copy())

    def add(self, rows: IndexArray, vectors: NDArray[np.int64], sign: int = 1) -> None:
        """Add `sign × vectors[i]` to row `rows[i]` (rows may repeat); widens for longer vectors."""
        if vectors.shape[1] > self.values.shape[1]:
            wider = np.zeros((self.values.shape[0], vectors.shape[1]), np.int64)
            wider[:, : self.values.shape[1]] = self.values
            self.values = wider
        if rows.size and int(rows.max()) >= self.values.shape[0]:
            taller = np.zeros((int(rows.max()) + 1, self.values.shape[1]), np.int64)
            taller[: self.values.shape[0]] = self.values
            self.values = taller
        width = vectors.shape[1]
        np.add.at(self.values[:, :width], rows, vectors if sign > 0 else -vectors)

    def take(self, rows: IndexArray, width: int) -> IntArray:
        """(width, len(rows)): the change of each of the first `width` vector entries per row, resource-major."""
        block = self.values.take(rows, axis=0)
        if block.shape[1] < width:
            block = np.pad(block, ((0, 0), (0, width - block.shape[1])))
        out: IntArray = block[:, :width].T
        return out


def stack(vectors: Sequence[IntArray]) -> IntArray:
    """Vectors of possibly different lengths (resources appended later) as one zero-padded matrix."""
    width = max((len(v) for v in vectors), default=0)
    if all(len(v) == width for v in vectors) and vectors:
        return np.stack(vectors)
    out = np.zeros((len(vectors), width), np.int64)
    for i, vector in enumerate(vectors):
        out[i, : len(vector)] = vector
    return out


def row_delta(state: CycleState, key: str, rows: int, width: int) -> RowDelta:
    """The cycle's RowDelta under `key`, created (zeros) on first use."""
    delta = state.get(key, RowDelta)
    if delta is None:
        delta = RowDelta.zeros(rows, width)
        state.write(key, delta)
    return delta
