"""Per-node threshold quantities from percentages, including deviation mode.

Static mode: a resource missing from a threshold map gets 100 %. Deviation mode: thresholds are
distances from the pool's mean usage (low = mean − low, high = mean + high, clamped to 0..100);
a resource whose low threshold is 0 or missing is ignored (its thresholds become the full
allocatable), as in Koordinator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from scheduler_plugin.descheduler.args import ResolvedPool
from scheduler_plugin.descheduler.usage import FloatArray, NodeTable

MAX_PERCENT = 100.0


@dataclass(slots=True)
class ThresholdTable:
    """(N, R) arrays aligned with a NodeTable; ``*_pct`` are the effective percentages per node."""

    low: FloatArray
    high: FloatArray
    prod_low: FloatArray
    prod_high: FloatArray
    high_pct: FloatArray
    prod_high_pct: FloatArray


def quantity(pct: FloatArray, allocatable: FloatArray) -> FloatArray:
    # Same float steps and truncation as Koordinator's int64(threshold * 0.01 * capacity), so a
    # usage sitting exactly on a threshold classifies identically.
    return np.trunc(pct * 0.01 * allocatable)


def mean_usage_percent(usage: FloatArray, allocatable: FloatArray) -> FloatArray:
    """Mean over nodes of usage/allocatable·100 per resource; nodes with 0 allocatable add 0."""
    n = usage.shape[0]
    if n == 0:
        return np.zeros(usage.shape[1], dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(allocatable > 0, usage / allocatable * 100.0, 0.0)
    return np.asarray(pct.sum(axis=0) / n, dtype=np.float64)


def _static_pct(thresholds: Mapping[str, float], resources: tuple[str, ...]) -> FloatArray:
    return np.array([thresholds.get(r, MAX_PERCENT) for r in resources], dtype=np.float64)


def _deviation_pct(
    low: Mapping[str, float],
    high: Mapping[str, float],
    mean_pct: FloatArray,
    resources: tuple[str, ...],
) -> tuple[FloatArray, FloatArray]:
    low_dev = np.array([low.get(r, 0.0) for r in resources], dtype=np.float64)
    high_dev = np.array([high.get(r, 0.0) for r in resources], dtype=np.float64)
    ignored = low_dev == 0.0
    low_pct = np.where(ignored, MAX_PERCENT, np.clip(mean_pct - low_dev, 0.0, MAX_PERCENT))
    high_pct = np.where(ignored, MAX_PERCENT, np.clip(mean_pct + high_dev, 0.0, MAX_PERCENT))
    return low_pct, high_pct


def compute_thresholds(table: NodeTable, pool: ResolvedPool) -> ThresholdTable:
    resources = table.resources
    alloc = table.allocatable
    n = alloc.shape[0]
    if pool.use_deviation_thresholds:
        low_pct, high_pct = _deviation_pct(
            pool.low_thresholds, pool.high_thresholds, mean_usage_percent(table.usage, alloc), resources
        )
        prod_low_pct, prod_high_pct = _deviation_pct(
            pool.prod_low_thresholds,
            pool.prod_high_thresholds,
            mean_usage_percent(table.prod_usage, alloc),
            resources,
        )
    else:
        low_pct = _static_pct(pool.low_thresholds, resources)
        high_pct = _static_pct(pool.high_thresholds, resources)
        prod_low_pct = _static_pct(pool.prod_low_thresholds, resources)
        prod_high_pct = _static_pct(pool.prod_high_thresholds, resources)

    def per_node(pct: FloatArray) -> FloatArray:
        return np.broadcast_to(pct, (n, len(resources))).copy()

    return ThresholdTable(
        low=quantity(per_node(low_pct), alloc),
        high=quantity(per_node(high_pct), alloc),
        prod_low=quantity(per_node(prod_low_pct), alloc),
        prod_high=quantity(per_node(prod_high_pct), alloc),
        high_pct=per_node(high_pct),
        prod_high_pct=per_node(prod_high_pct),
    )
