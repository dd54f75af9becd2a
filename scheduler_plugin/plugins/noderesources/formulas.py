"""kube-scheduler's request-based node scores (noderesources/least_allocated.go, most_allocated.go).

All integer arithmetic like the Go code; `requested` already includes the incoming pod.
"""

from __future__ import annotations

import numpy as np

from scheduler_plugin.framework.interfaces import MAX_NODE_SCORE
from scheduler_plugin.framework.snapshot import IntArray


def least_requested_score(requested: IntArray, capacity: IntArray) -> IntArray:
    """(capacity − requested) × 100 / capacity; 0 when over capacity or capacity is 0."""
    safe = np.where(capacity == 0, 1, capacity)
    score = (capacity - requested) * MAX_NODE_SCORE // safe
    return np.where((capacity == 0) | (requested > capacity), 0, score)


def most_requested_score(requested: IntArray, capacity: IntArray) -> IntArray:
    """requested × 100 / capacity, with requested capped at capacity; 0 when capacity is 0."""
    safe = np.where(capacity == 0, 1, capacity)
    score = np.minimum(requested, capacity) * MAX_NODE_SCORE // safe
    return np.where(capacity == 0, 0, score)
