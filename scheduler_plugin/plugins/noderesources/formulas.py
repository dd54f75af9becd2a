"""kube-scheduler's request-based node scores (noderesources/least_allocated.go, most_allocated.go,
balanced_allocation.go).

Integer arithmetic like the Go code where it has integers; `requested` already includes the incoming pod.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from scheduler_plugin.framework.interfaces import MAX_NODE_SCORE
from scheduler_plugin.framework.snapshot import BoolArray, IntArray

FloatArray = NDArray[np.float64]


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


def balanced_resource_score(requested: FloatArray, allocatable: FloatArray) -> IntArray:
    """kube-scheduler's balancedResourceScore per node (column): `(1 − std) × 100` truncated, std the
    standard deviation of the fractions requested/allocatable (each capped at 1) over the resources
    (rows) whose allocatable is not 0; with two such resources std = |f₀ − f₁| / 2, with one or
    none it is 0. Float64 operations in kube-scheduler's order, so the results are bit-identical."""
    counted = allocatable != 0
    every = bool(counted.all())
    fractions = np.minimum(requested / (allocatable if every else np.where(counted, allocatable, 1.0)), 1.0)
    resources = fractions.shape[0]
    if resources == 2 and every:  # the default (cpu, memory) on nodes that have both: no per-node bookkeeping
        std = np.abs((fractions[0] - fractions[1]) / 2)
    else:
        std = _standard_deviation(fractions, counted)
    out: IntArray = np.trunc((1 - std) * float(MAX_NODE_SCORE)).astype(np.int64)
    return out


def _standard_deviation(fractions: FloatArray, counted: BoolArray) -> FloatArray:
    """Per node over its counted resources, summed in resource order as the Go loop does."""
    resources, nodes = fractions.shape
    seen = np.zeros(nodes, np.int64)
    first = np.zeros(nodes)
    second = np.zeros(nodes)
    total = np.zeros(nodes)
    for r in range(resources):
        take = counted[r]
        first = np.where(take & (seen == 0), fractions[r], first)
        second = np.where(take & (seen == 1), fractions[r], second)
        total = np.where(take, total + fractions[r], total)
        seen += take
    mean = total / np.maximum(seen, 1)
    squares = np.zeros(nodes)
    for r in range(resources):
        deviation = fractions[r] - mean
        squares = np.where(counted[r], squares + deviation * deviation, squares)
    out: FloatArray = np.where(seen == 2, np.abs((first - second) / 2),
                               np.where(seen > 2, np.sqrt(squares / np.maximum(seen, 1)), 0.0))
    return out


def balanced_allocation_score(with_pod: IntArray, without_pod: IntArray) -> IntArray:
    """kube-scheduler's balancedResourceScorer: the balance after placing the pod, moved by how much
    the pod improves it: 50 + (50 + with − without) / 2 (both in 50..100, so 50..100 again)."""
    half = MAX_NODE_SCORE // 2
    out: IntArray = half + (half + with_pod - without_pod) // 2
    return out
