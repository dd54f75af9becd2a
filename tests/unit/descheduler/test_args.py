from __future__ import annotations

import pytest

from scheduler_plugin.descheduler.args import (
    DEFAULT_POOL_NAME,
    ArgsError,
    LowNodeLoadArgs,
    effective_detector_cache_timeout,
    parse_args,
    resolve_pools,
)
from scheduler_plugin.descheduler.durations import format_go_duration, parse_go_duration

BASE = {"lowThresholds": {"cpu": 45, "memory": 55}, "highThresholds": {"cpu": 75, "memory": 80}}


def problems(data: dict[str, object]) -> list[str]:
    with pytest.raises(ArgsError) as exc:
        parse_args(data)
    return exc.value.problems


def test_defaults_are_koordinators() -> None:
    args = parse_args(BASE)
    assert args.node_fit is True
    assert args.paused is False and args.dry_run is False
    assert args.number_of_nodes == 0
    assert args.node_metric_expiration_seconds == 180
    assert args.anomaly_condition.consecutive_abnormalities == 5
    assert args.anomaly_condition.consecutive_normalities == 3
    assert args.anomaly_condition.timeout == 60.0
    assert args.detector_cache_timeout == 300.0
    assert args.descheduling_interval == 60.0
    assert args.max_migrating_per_node == 2
    assert args.max_unavailable_per_workload is None
    assert args.evict_qps == 10.0 and args.evict_burst == 1
    assert args.evictable_namespaces.exclude == ["kube-system", "loadline-system"]
    assert args.evictable_namespaces.include == []


def test_koordinator_document_loads_with_its_field_names() -> None:
    args = parse_args(
        {
            "apiVersion": "descheduler/v1alpha2",
            "kind": "LowNodeLoadArgs",
            "evictableNamespaces": {"exclude": ["kube-system", "koordinator-system"]},
            "useDeviationThresholds": False,
            "lowThresholds": {"cpu": 20, "memory": 30},
            "highThresholds": {"cpu": 50, "memory": 60},
            "prodHighThresholds": {"cpu": 40},
            "prodLowThresholds": {"cpu": 10},
            "resourceWeights": {"cpu": 2, "memory": 0},
            "anomalyCondition": {"timeout": "2m", "consecutiveAbnormalities": 3, "consecutiveNormalities": 2},
            "detectorCacheTimeout": "10m",
            "nodeMetricExpirationSeconds": 300,
            "podSelectors": [{"name": "web", "selector": {"matchLabels": {"app": "web"}}}],
            "nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]},
            "deschedulingInterval": "30s",
            "evictQPS": 5,
            "maxUnavailablePerWorkload": "20%",
        }
    )
    assert args.anomaly_condition.timeout == 120.0
    assert args.detector_cache_timeout == 600.0
    assert args.descheduling_interval == 30.0
    assert args.evict_qps == 5.0
    (pool,) = resolve_pools(args)
    assert pool.name == DEFAULT_POOL_NAME
    # A weight <= 0 becomes 1; cpu and memory always have weights.
    assert pool.resource_weights == {"cpu": 2, "memory": 1}
    assert pool.prod_enabled
    dumped = args.model_dump(by_alias=True)
    assert dumped["anomalyCondition"]["timeout"] == "2m0s"
    assert dumped["deschedulingInterval"] == "30s"
    assert parse_args(dumped) == args


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"lowThresholds": {"cpu": 80}, "highThresholds": {"cpu": 75}}, "lowThresholds.cpu: 80 must be <="),
        ({**BASE, "prodHighThresholds": {"cpu": 90}}, "prodHighThresholds.cpu: 90 must be <= highThresholds.cpu"),
        (
            {**BASE, "prodHighThresholds": {"cpu": 50}, "prodLowThresholds": {"cpu": 60}},
            "prodLowThresholds.cpu: 60 must be <= prodHighThresholds.cpu",
        ),
        ({"highThresholds": {"cpu": 175}}, "highThresholds.cpu: 175 must be a percentage between 0 and 100"),
        ({"highThresholds": {"memory": -1}}, "highThresholds.memory: -1 must be a percentage"),
        ({**BASE, "numberOfNodes": -1}, "numberOfNodes:"),
        ({**BASE, "anomalyCondition": {"consecutiveAbnormalities": 0}}, "anomalyCondition.consecutiveAbnormalities:"),
        ({**BASE, "anomalyCondition": {"consecutiveNormalities": 0}}, "anomalyCondition.consecutiveNormalities:"),
        ({**BASE, "anomalyCondition": {"timeout": "soon"}}, "anomalyCondition.timeout:"),
        ({**BASE, "evictableNamespaces": {"include": ["a"], "exclude": ["b"]}}, "evictableNamespaces: only one of"),
        ({**BASE, "maxMigratingPerNode": 0}, "maxMigratingPerNode:"),
        ({**BASE, "nodeMetricExpirationSeconds": 0}, "nodeMetricExpirationSeconds:"),
        ({**BASE, "deschedulingInterval": "0s"}, "deschedulingInterval: must be greater than 0"),
        ({**BASE, "maxUnavailablePerWorkload": "150%"}, "maxUnavailablePerWorkload:"),
        ({**BASE, "evictQPS": 0}, "evictQPS:"),
        (
            {**BASE, "podSelectors": [{"selector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}]},
            "podSelectors[0].selector.matchExpressions[0]",
        ),
        ({**BASE, "nodePools": [{"name": "gpu", "lowThresholds": {"cpu": 90}}]}, "nodePools[0].lowThresholds.cpu: 90"),
        ({**BASE, "unknownField": 1}, "unknownField: Extra inputs are not permitted"),
        ({}, "highThresholds: no thresholds configured"),
    ],
)
def test_invalid_args_name_the_field(data: dict[str, object], expected: str) -> None:
    assert any(expected in p for p in problems(data)), problems(data)


def test_deviation_mode_does_not_require_low_below_high() -> None:
    # low/high are distances below/above the mean there, not a window.
    args = parse_args({"useDeviationThresholds": True, "lowThresholds": {"cpu": 20}, "highThresholds": {"cpu": 10}})
    assert args.use_deviation_thresholds


def test_pools_inherit_unset_fields_and_follow_the_top_level_pool() -> None:
    args = parse_args(
        {
            **BASE,
            "resourceWeights": {"cpu": 3},
            "nodePools": [
                {"name": "batch", "nodeSelector": {"matchLabels": {"pool": "batch"}}, "highThresholds": {"cpu": 90}},
                {"nodeSelector": {"matchLabels": {"pool": "x"}}, "useDeviationThresholds": True},
            ],
        }
    )
    default, batch, unnamed = resolve_pools(args)
    assert default.name == DEFAULT_POOL_NAME and default.node_selector is None
    assert batch.high_thresholds == {"cpu": 90}
    assert batch.low_thresholds == {"cpu": 45, "memory": 55}  # inherited
    assert batch.resource_weights["cpu"] == 3
    assert not batch.use_deviation_thresholds
    assert unnamed.name == "nodePools[1]" and unnamed.use_deviation_thresholds


def test_only_pools_means_no_default_pool() -> None:
    args = parse_args({"nodePools": [{"name": "a", "highThresholds": {"cpu": 70}}]})
    assert [p.name for p in resolve_pools(args)] == ["a"]
    assert resolve_pools(args)[0].resource_names == ("cpu", "memory")


def test_detector_cache_timeout_is_raised_to_the_interval() -> None:
    args = parse_args({**BASE, "detectorCacheTimeout": "1m", "deschedulingInterval": "2m"})
    assert effective_detector_cache_timeout(args) == 120.0


def test_args_are_immutable() -> None:
    args = parse_args(BASE)
    with pytest.raises(ValueError, match="frozen"):
        args.dry_run = True  # type: ignore[misc]
    assert isinstance(args, LowNodeLoadArgs)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1m", 60.0), ("5m0s", 300.0), ("1h30m", 5400.0), ("500ms", 0.5), ("1.5s", 1.5), ("0", 0.0), ("90s", 90.0)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1", "1x", "m", "1m garbage"])
def test_bad_go_durations(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_go_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"), [(60, "1m0s"), (300, "5m0s"), (0.5, "500ms"), (3725, "1h2m5s"), (30, "30s")]
)
def test_format_go_durations(seconds: float, text: str) -> None:
    assert format_go_duration(seconds) == text
