"""Classification of nodes into low / normal / high and the prod variants, plus the capacity the
low nodes can absorb and the order in which hot nodes are drained."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from scheduler_plugin.descheduler.thresholds import NodeThresholds
from scheduler_plugin.descheduler.usage import BoolArray, FloatArray, IntArray, NodeTable


@dataclass(slots=True)
class NodeClasses:
    """Boolean (N,) masks; every node is in exactly one of them or in none (normal)."""

    low: BoolArray  # under every low threshold, prod neither high nor low
    both_low: BoolArray  # under every low threshold and every prod low threshold
    high: BoolArray  # over some high threshold: a source of the node pass
    prod_low: BoolArray  # normal, and under every prod low threshold
    prod_high: BoolArray  # not high, but prod usage over some prod high threshold: source of the prod pass

    @property
    def normal(self) -> BoolArray:
        return ~(self.low | self.both_low | self.high | self.prod_low | self.prod_high)


def over_any(usage: FloatArray, thresholds: FloatArray) -> BoolArray:
    return np.asarray((usage > thresholds).any(axis=-1), dtype=np.bool_)


def under_all(usage: FloatArray, thresholds: FloatArray) -> BoolArray:
    return np.asarray((usage <= thresholds).all(axis=-1), dtype=np.bool_)


def classify(table: NodeTable, th: NodeThresholds, prod_enabled: bool) -> NodeClasses:
    # An unschedulable node cannot receive pods, so it is never "low".
    under_low = table.schedulable & under_all(table.usage, th.low)
    over_high = over_any(table.usage, th.high) & ~under_low
    if prod_enabled:
        prod_over = over_any(table.prod_usage, th.prod_high)
        prod_under = under_all(table.prod_usage, th.prod_low)
    else:
        # Without prod thresholds every prod threshold would be 100 % and every normal node would
        # count as prodLow; keep the prod classes empty so numberOfNodes means what it says.
        prod_over = np.zeros(len(table.nodes), dtype=np.bool_)
        prod_under = np.zeros(len(table.nodes), dtype=np.bool_)
    middle = ~under_low & ~over_high
    return NodeClasses(
        low=under_low & ~prod_over & ~prod_under,
        both_low=under_low & ~prod_over & prod_under,
        high=over_high,
        prod_low=middle & ~prod_over & prod_under,
        prod_high=(under_low | middle) & prod_over,
    )


def headroom_sum(rows: BoolArray, threshold: FloatArray, usage: FloatArray) -> FloatArray:
    """Σ over the selected nodes of (threshold − usage): what they can take before turning hot."""
    return np.asarray((threshold[rows] - usage[rows]).sum(axis=0), dtype=np.float64)


def usage_scores(usage: FloatArray, allocatable: FloatArray, weights: FloatArray) -> IntArray:
    """Koordinator's ResourceUsageScorer: per resource min(used, alloc)·1000 // alloc (0 when
    alloc is 0), then the weighted mean with integer division."""
    safe_alloc = np.where(allocatable > 0, allocatable, 1.0)
    per_resource = np.where(
        allocatable > 0, np.floor(np.minimum(usage, allocatable) * 1000.0 / safe_alloc), 0.0
    ).astype(np.int64)
    w = weights.astype(np.int64)
    total_w = int(w.sum())
    if total_w == 0:
        return np.zeros(usage.shape[0], dtype=np.int64)
    return np.asarray((per_resource * w).sum(axis=1) // total_w, dtype=np.int64)


def weight_vector(resources: tuple[str, ...], weights: Mapping[str, int]) -> FloatArray:
    # Resources without a configured weight (e.g. ``pods``) do not count in scores.
    return np.array([float(weights.get(r, 0)) for r in resources], dtype=np.float64)


def order_sources(rows: IntArray, names: list[str], scores: IntArray) -> list[int]:
    """Source rows, hottest first; ties by node name so a round is deterministic."""
    return sorted((int(r) for r in rows), key=lambda r: (-int(scores[r]), names[r]))
