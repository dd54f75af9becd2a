"""VolumeBinding's Score: how full a node's chosen volumes would be, by the configured shape
(volumebinding/scorer.go, helper.BuildBrokenLinearFunction); a pure function of numbers."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from scheduler_plugin.framework.interfaces import MAX_NODE_SCORE
from scheduler_plugin.plugins.volumebinding.args import MAX_CUSTOM_PRIORITY_SCORE, UtilizationShapePoint

MAX_UTILIZATION = 100


def broken_linear(shape: Sequence[tuple[int, int]], utilization: int) -> int:
    """The shape's score at a utilization (points as (utilization, score), score already 0..100)."""
    for i, (point_utilization, point_score) in enumerate(shape):
        if utilization <= point_utilization:
            if i == 0:
                return point_score
            prev_utilization, prev_score = shape[i - 1]
            # Go's integer division truncates toward zero; the product may be negative on a falling curve.
            numerator = (point_score - prev_score) * (utilization - prev_utilization)
            span = point_utilization - prev_utilization
            quotient = abs(numerator) // span
            return prev_score + (quotient if numerator >= 0 else -quotient)
    return shape[-1][1]


class VolumeScorer:
    """Score = the mean over storage classes of shape(requested / capacity in percent), rounded."""

    def __init__(self, shape: Sequence[UtilizationShapePoint]) -> None:
        scale = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
        self.shape = tuple((p.utilization, p.score * scale) for p in shape)

    def class_score(self, requested: int, capacity: int) -> int:
        if capacity == 0 or requested > capacity:
            return broken_linear(self.shape, MAX_UTILIZATION)
        return broken_linear(self.shape, requested * MAX_UTILIZATION // capacity)

    def score(self, by_class: Mapping[str, tuple[int, int]]) -> int:
        """`by_class`: storage class -> (requested bytes, capacity bytes)."""
        if not by_class:
            return 0
        total = sum(self.class_score(requested, capacity) for requested, capacity in by_class.values())
        return math.floor(total / len(by_class) + 0.5)  # Go's math.Round (half away from zero; scores are >= 0)
