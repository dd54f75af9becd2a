"""Koordinator's LoadAwareScheduling arithmetic (koordinator pkg/scheduler/plugins/loadaware), checked with hand-computed numbers."""

from __future__ import annotations

import numpy as np
import pytest

from common.api.pod import PriorityClass
from scheduler_plugin.plugins.loadaware.args import LoadAwareSchedulingArgs
from scheduler_plugin.plugins.loadaware.formulas import (
    combine_scores,
    estimate_pod,
    estimate_resource,
    exceeds_thresholds,
    go_round,
    go_round_array,
    least_used_score,
    most_used_score,
    not_yet_reflected,
    usage_percent,
)

GI = 1024**3
MI = 1024**2


def a(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


@pytest.mark.parametrize(("value", "expected"), [(0.5, 1), (1.5, 2), (2.5, 3), (8.5, 9), (64.5, 65), (-2.5, -3), (2.49, 2)])
def test_go_round_is_half_away_from_zero(value: float, expected: int) -> None:
    assert go_round(value) == expected
    assert go_round_array(np.array([value]))[0] == expected


@pytest.mark.parametrize(("resource", "requested", "limit", "factor", "expected"), [
    ("cpu", 1000, 0, 85, 850),  # 1000m × 85%
    ("cpu", 10, 0, 85, 9),  # 8.5 → 9 (Go rounds halves up; Python's round would give 8)
    ("cpu", 1000, 2000, 85, 1700),  # the limit is larger: 2000m × 85%
    ("cpu", 0, 0, 85, 250),  # nothing set: 250m
    ("kubernetes.io/batch-cpu", 0, 0, 85, 250),
    ("memory", 2 * GI, 0, 70, 1503238554),  # 2147483648 × 0.7 = 1503238553.6 → 1503238554
    ("memory", 0, 0, 70, 200 * MI),  # nothing set: 200Mi
    ("kubernetes.io/batch-memory", 0, 0, 70, 200 * MI),
    ("nvidia.com/gpu", 0, 0, 100, 0),  # other resources default to 0
    ("memory", 4 * GI, 1 * GI, 100, 1 * GI),  # request above limit (invalid pod): capped at the limit
])
def test_estimate_resource(resource: str, requested: int, limit: int, factor: int, expected: int) -> None:
    assert estimate_resource(resource, requested, limit, factor) == expected


def test_estimate_pod_translates_names_by_priority_class() -> None:
    factors = {"cpu": 85, "memory": 70}
    batch_requests = {"kubernetes.io/batch-cpu": 1000, "kubernetes.io/batch-memory": GI}
    # A batch pod is sized by its batch-* requests: 850m and round(1073741824 × 0.7) = 751619277.
    assert estimate_pod(batch_requests, {}, factors, PriorityClass.BATCH) == {"cpu": 850, "memory": 751619277}
    # A batch pod that only asks for plain cpu/memory is estimated at the defaults (Koordinator's behaviour).
    assert estimate_pod({"cpu": 4000, "memory": 8 * GI}, {}, factors, PriorityClass.BATCH) == {"cpu": 250, "memory": 200 * MI}
    # Prod and classless pods use the names as they are.
    assert estimate_pod({"cpu": 4000}, {}, factors, PriorityClass.PROD) == {"cpu": 3400, "memory": 200 * MI}
    assert estimate_pod({"cpu": 4000}, {}, factors, PriorityClass.NONE)["cpu"] == 3400


def test_usage_percent_rounds_like_go_and_thresholds_are_strictly_greater() -> None:
    allocatable = a(4000, 4000, 4000, 0)
    estimated = a(2580, 2620, 2600, 999)
    # 64.5 → 65, 65.5 → 66, 65.0 → 65; allocatable 0 is never compared
    assert usage_percent(estimated, allocatable).tolist() == [65, 66, 65, 0]
    thresholds = a(64, 65, 65, 1)
    # 65 > 64 (numpy's half-to-even rounding would say 64 and let it pass), 66 > 65, 65 = 65 passes
    assert exceeds_thresholds(estimated, allocatable, thresholds).tolist() == [True, True, False, False]
    assert not exceeds_thresholds(estimated, allocatable, a(0, 0, 0, 0)).any()  # 0 disables a resource


def test_least_and_most_used_scores() -> None:
    # (resources, nodes). cpu: (4000 − 1000) × 100 / 4000 = 75; memory: (8Gi − 3Gi) × 100 / 8Gi = 62 (62.5 floored)
    used = np.array([[1000, 5000, 0], [3 * GI, 9 * GI, 0]], np.int64)
    alloc = np.array([[4000, 4000, 0], [8 * GI, 8 * GI, 8 * GI]], np.int64)
    assert least_used_score(used, alloc).tolist() == [[75, 0, 0], [62, 0, 100]]
    assert most_used_score(used, alloc).tolist() == [[25, 100, 0], [38, 100, 0]]


def test_combine_scores_with_weights_and_dominant_resource() -> None:
    per_resource = np.array([[75], [62]], np.int64)  # (resources, nodes)
    # (75 + 62) / 2 = 68 (68.5 floored)
    assert combine_scores(per_resource, a(1, 1), 0).tolist() == [68]
    # weights 2:1 → (150 + 62) / 3 = 70 (70.67 floored)
    assert combine_scores(per_resource, a(2, 1), 0).tolist() == [70]
    # dominant weight 1 adds the smallest score: (75 + 62 + 62) / 3 = 66 (66.33 floored)
    assert combine_scores(per_resource, a(1, 1), 1).tolist() == [66]
    # the dominant term also sees weight-0 resources: (75·1 + 0·10 + 1·10) / 2 = 42
    assert combine_scores(np.array([[75], [10]], np.int64), a(1, 0), 1).tolist() == [42]
    # MostUsed takes the largest instead
    assert combine_scores(np.array([[25], [38]], np.int64), a(1, 1), 1, most_used=True).tolist() == [33]
    assert combine_scores(per_resource, a(0, 0), 0).tolist() == [0]


@pytest.mark.parametrize(("has_usage", "assigned", "deadline", "expected"), [
    (False, 0.0, None, True),  # koordlet has no usage for the pod yet
    (True, 1000.0 - 61, None, False),  # placed before the last report interval: its usage is in the metric
    (True, 1000.0 - 59, None, True),  # placed within the last interval (t > T − I)
    (True, 1000.0 + 5, None, True),  # placed after the report
    (True, 1000.0 - 500, 1000.0 + 1, True),  # forced estimation still running at T
    (True, 1000.0 - 500, 999.0, False),
])
def test_not_yet_reflected(has_usage: bool, assigned: float, deadline: float | None, expected: bool) -> None:
    assert not_yet_reflected(has_usage, assigned, 1000.0, 60.0, deadline) is expected


def test_args_defaults_and_resource_vector() -> None:
    args = LoadAwareSchedulingArgs()
    assert args.resource_weights == {"cpu": 1, "memory": 1}
    assert args.usage_thresholds == {"cpu": 65, "memory": 95}
    assert args.estimated_scaling_factors == {"cpu": 85, "memory": 70}
    assert args.node_metric_expiration_seconds == 180 and args.filter_expired_node_metrics
    custom = LoadAwareSchedulingArgs.model_validate({
        "usageThresholds": {"cpu": 70},
        "estimatedScalingFactors": {"cpu": 90, "kubernetes.io/batch-cpu": 100},
        "dominantResourceWeight": 1,
        "resourceWeights": {},
        "supportedResources": ["nvidia.com/gpu"],
    })
    assert custom.usage_thresholds == {"cpu": 70}  # a set map is not merged with the defaults
    assert custom.resource_weights == {}  # no defaults once dominantResourceWeight is set
    assert custom.estimated_scaling_factors == {"cpu": 90, "kubernetes.io/batch-cpu": 100, "memory": 70}
    assert custom.resource_vector() == ["cpu", "kubernetes.io/batch-cpu", "memory", "nvidia.com/gpu"]
