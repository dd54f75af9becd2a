"""Koordinator's LoadAwareScheduling arithmetic as pure functions (koordinator pkg/scheduler/plugins/loadaware).

Kept apart from the plugin so tests can check them with hand-computed numbers. Scalars
for the estimator (per pod, once), numpy for the per-node filter and score, where arrays
are resource-major: shape (resources, nodes). Units: cpu in milli-cores, others by value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

from common.api import constants as c
from common.api.pod import PriorityClass

DEFAULT_MILLI_CPU_REQUEST = 250  # 0.25 core for a pod that requests and limits no cpu
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024  # 200 MiB

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

_TRANSLATED = {
    PriorityClass.BATCH: {c.RESOURCE_CPU: c.BATCH_CPU, c.RESOURCE_MEMORY: c.BATCH_MEMORY},
    PriorityClass.MID: {c.RESOURCE_CPU: c.MID_CPU, c.RESOURCE_MEMORY: c.MID_MEMORY},
}


def go_round(value: float) -> int:
    """Go's math.Round: halves away from zero (Python's round() goes to even)."""
    return math.floor(value + 0.5) if value >= 0 else -math.floor(-value + 0.5)


def go_round_array(values: FloatArray) -> FloatArray:
    """math.Round for arrays, exact at .5 (np.round rounds halves to even)."""
    magnitude = np.abs(values)
    rounded = np.floor(magnitude)
    rounded += (magnitude - rounded) >= 0.5
    return np.copysign(rounded, values)


def translate_resource(priority: PriorityClass, resource: str) -> str:
    """Batch pods are sized in kubernetes.io/batch-*, mid pods in kubernetes.io/mid-*."""
    return _TRANSLATED.get(priority, {}).get(resource, resource)


def estimate_resource(resource: str, request: int, limit: int, factor: int) -> int:
    """estimatedUsedByResource: max(limit, request) × factor/100 (Go rounding), capped at a set limit;
    250m cpu / 200Mi memory (also for batch-cpu/batch-memory) when neither is set."""
    quantity = limit if limit > request else request
    if quantity == 0:
        if resource in (c.RESOURCE_CPU, c.BATCH_CPU):
            return DEFAULT_MILLI_CPU_REQUEST
        if resource in (c.RESOURCE_MEMORY, c.BATCH_MEMORY):
            return DEFAULT_MEMORY_REQUEST
        return 0
    estimated = go_round(float(quantity) * float(factor) / 100)
    if limit > 0 and estimated > limit:
        estimated = limit
    return estimated


def estimate_pod(
    requests: Mapping[str, int], limits: Mapping[str, int], factors: Mapping[str, int], priority: PriorityClass
) -> dict[str, int]:
    """The default estimator: one estimate per scaling-factor resource, read under the pod's priority name."""
    out = {}
    for resource, factor in factors.items():
        real = translate_resource(priority, resource)
        out[resource] = estimate_resource(real, requests.get(real, 0), limits.get(real, 0), factor)
    return out


def not_yet_reflected(
    has_usage: bool, assigned_at: float, update_time: float | None, report_interval: float, deadline: float | None
) -> bool:
    """Is a pod's load missing from its node's NodeMetric, so its estimate must be added?

    True when koordlet reported no usage for it, when it was placed after the start of the
    last report interval (t > T − I), or while its forced-estimation deadline is after T.
    """
    if not has_usage or update_time is None:
        return True
    if assigned_at > update_time - report_interval:
        return True
    return deadline is not None and deadline > update_time


def usage_percent(estimated: IntArray, allocatable: IntArray) -> IntArray:
    """round(estimated / allocatable × 100) per resource; 0 where allocatable is 0 (never compared)."""
    safe = np.where(allocatable == 0, 1, allocatable).astype(np.float64)
    pct = go_round_array(estimated.astype(np.float64) / safe * 100)
    return np.where(allocatable == 0, 0, pct).astype(np.int64)


def threshold_limits(thresholds: IntArray) -> FloatArray:
    """The smallest usage % that exceeds each threshold after Go rounding: t + 0.5 (0 = off → +inf).

    For usage x ≥ 0, Go's round(x) > t  ⇔  round(x) ≥ t + 1  ⇔  x ≥ t + 0.5, so the
    filter compares x with these limits and needs no rounding step.
    """
    return np.where(thresholds == 0, np.inf, thresholds + 0.5)


def exceeds_limits(estimated: IntArray, allocatable: FloatArray, limits: FloatArray) -> BoolArray:
    """estimated / allocatable × 100 ≥ limit, computed in float64 exactly as Koordinator does.
    `allocatable` is +inf where unknown (0), which makes the usage 0 and never over."""
    over: BoolArray = estimated / allocatable * 100 >= limits
    return over


def exceeds_thresholds(estimated: IntArray, allocatable: IntArray, thresholds: IntArray) -> BoolArray:
    """Per resource: threshold set (≠ 0), allocatable known (≠ 0) and round(usage%) > threshold."""
    known = np.where(allocatable == 0, np.inf, allocatable.astype(np.float64))
    return exceeds_limits(estimated, known, threshold_limits(thresholds))


def least_used_score(used: IntArray, allocatable: IntArray) -> IntArray:
    """(allocatable − used) × 100 / allocatable (integer); 0 when over allocatable or allocatable is 0."""
    safe = np.where(allocatable == 0, 1, allocatable)
    score = (allocatable - used) * 100 // safe
    return np.where((allocatable == 0) | (used > allocatable), 0, score)


def most_used_score(used: IntArray, allocatable: IntArray) -> IntArray:
    """Bin-packing mirror of least_used_score: 100 − leastUsed (100 when over allocatable, 0 if unknown)."""
    return np.where(allocatable == 0, 0, 100 - least_used_score(used, allocatable))


def combine_scores(
    per_resource: IntArray, weights: IntArray, dominant_weight: int, most_used: bool = False
) -> IntArray:
    """(Σ s_r·w_r + dominant·D) / (Σ w_r + dominant), integer division; `per_resource` is (resources, nodes).

    D is the most constrained resource over the whole vector (also weight-0 resources):
    the smallest leastUsed score, or for MostUsed the largest mostUsed score.
    """
    weight_sum = int(weights.sum()) + dominant_weight
    if weight_sum == 0:
        return np.zeros(per_resource.shape[1], np.int64)
    total = np.zeros(per_resource.shape[1], np.int64)
    for j in np.flatnonzero(weights):
        total += per_resource[j] * weights[j]
    if dominant_weight > 0 and per_resource.shape[0] > 0:
        extreme = per_resource.max(axis=0) if most_used else per_resource.min(axis=0)
        total = total + dominant_weight * extreme
    combined: IntArray = total // weight_sum
    return combined
