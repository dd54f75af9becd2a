"""slo-controller-config parsing: Koordinator's defaults and validation errors naming key and field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from manager.nodeslo.config import (
    ConfigError,
    SLOControllerConfig,
    default_slo_controller_config,
    parse_slo_controller_config,
)


def parse(**keys: Any) -> SLOControllerConfig | list[ConfigError]:
    return parse_slo_controller_config({k.replace("_", "-"): json.dumps(v) for k, v in keys.items()})


def ok(**keys: Any) -> SLOControllerConfig:
    result = parse(**keys)
    assert isinstance(result, SLOControllerConfig), result
    return result


def errors(**keys: Any) -> list[tuple[str, str | None]]:
    result = parse(**keys)
    assert isinstance(result, list), "expected the config to be refused"
    return [(e.key, e.field) for e in result]


# --- defaults -------------------------------------------------------------------------
def test_absent_configmap_gives_koordinator_defaults() -> None:
    config = parse_slo_controller_config(None)
    assert isinstance(config, SLOControllerConfig)
    colocation = config.colocation.cluster
    assert colocation["enable"] is False
    assert colocation["cpuReclaimThresholdPercent"] == 60
    assert colocation["memoryReclaimThresholdPercent"] == 65
    assert colocation["cpuCalculatePolicy"] == colocation["memoryCalculatePolicy"] == "usage"
    assert colocation["degradeTimeMinutes"] == 15
    assert colocation["updateTimeThresholdSeconds"] == 300
    assert colocation["resourceDiffThreshold"] == 0.1
    assert colocation["metricAggregateDurationSeconds"] == 300
    assert colocation["metricReportIntervalSeconds"] == 60
    assert colocation["metricAggregatePolicy"] == {"durations": ["5m0s", "10m0s", "30m0s"]}
    assert colocation["metricMemoryCollectPolicy"] == "usageWithoutPageCache"
    assert "batchCPUThresholdPercent" not in colocation  # unset: no cap
    assert config.resource_threshold.cluster == {
        "enable": False,
        "cpuSuppressThresholdPercent": 65,
        "cpuSuppressPolicy": "cpuset",
        "memoryEvictThresholdPercent": 70,
        "cpuEvictPolicy": "evictByRealLimit",
    }
    assert config.cpu_burst.cluster == {
        "policy": "none",
        "cpuBurstPercent": 1000,
        "cfsQuotaBurstPercent": 300,
        "cfsQuotaBurstPeriodSeconds": -1,
        "sharePoolThresholdPercent": 50,
    }
    assert config.system.cluster == {"totalNetworkBandwidth": "0"}
    be = config.resource_qos.cluster["beClass"]
    assert be["cpuQOS"] == {"enable": False, "groupIdentity": -1}
    assert be["memoryQOS"]["wmarkMinAdj"] == 50
    assert be["resctrlQOS"]["catRangeEndPercent"] == 30
    assert config.resource_qos.cluster["lsClass"]["memoryQOS"]["wmarkMinAdj"] == -25
    assert config == default_slo_controller_config()


def test_missing_or_empty_keys_take_defaults() -> None:
    config = parse_slo_controller_config({"colocation-config": "", "resource-threshold-config": ""})
    assert isinstance(config, SLOControllerConfig)
    assert config == default_slo_controller_config()


def test_chart_config_enables_with_defaults_for_the_rest() -> None:
    config = ok(colocation_config={"enable": True}, resource_threshold_config={"clusterStrategy": {"enable": True}})
    assert config.colocation.cluster["enable"] is True
    assert config.colocation.cluster["cpuReclaimThresholdPercent"] == 60
    assert config.resource_threshold.cluster["enable"] is True
    assert config.resource_threshold.cluster["cpuSuppressThresholdPercent"] == 65


# --- Go decoding rules ---------------------------------------------------------------------
def test_field_names_match_case_insensitively_and_unknown_fields_are_ignored() -> None:
    config = ok(resource_threshold_config={"clusterStrategy": {"CPUEvictTimeWindowSeconds": 60, "fromTheFuture": 1}})
    assert config.resource_threshold.cluster["cpuEvictTimeWindowSeconds"] == 60
    assert "fromTheFuture" not in config.resource_threshold.cluster


def test_python_field_names_are_not_wire_names() -> None:
    config = ok(resource_threshold_config={"clusterStrategy": {"cpu_suppress_threshold_percent": 10}})
    assert config.resource_threshold.cluster["cpuSuppressThresholdPercent"] == 65


def test_durations_are_rendered_as_go_prints_them() -> None:
    config = ok(colocation_config={"metricAggregatePolicy": {"durations": ["5m", "90s", "1h"]}})
    assert config.colocation.cluster["metricAggregatePolicy"] == {"durations": ["5m0s", "1m30s", "1h0m0s"]}


@pytest.mark.parametrize("value", ["65", 65.0, True, None])
def test_wrong_json_types_are_refused_like_go_unmarshal(value: Any) -> None:
    result = parse(resource_threshold_config={"clusterStrategy": {"cpuSuppressThresholdPercent": value}})
    if value is None:  # JSON null is "not set" for a Go pointer
        assert isinstance(result, SLOControllerConfig)
    else:
        assert isinstance(result, list)
        assert [(e.key, e.field) for e in result] == [
            ("resource-threshold-config", "clusterStrategy.cpuSuppressThresholdPercent")
        ]


# --- validation: key and field named ---------------------------------------------------------
def test_broken_json_names_the_key() -> None:
    result = parse_slo_controller_config({"system-config": '{"clusterStrategy": {'})
    assert isinstance(result, list)
    assert len(result) == 1
    assert (result[0].key, result[0].field) == ("system-config", None)
    assert "invalid JSON" in str(result[0])


def test_percent_above_100_names_key_and_field() -> None:
    result = parse(resource_threshold_config={"clusterStrategy": {"cpuSuppressThresholdPercent": 150}})
    assert isinstance(result, list)
    assert str(result[0]) == (
        "resource-threshold-config: clusterStrategy.cpuSuppressThresholdPercent:"
        " Input should be less than or equal to 100 (got 150)"
    )


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"metricReportIntervalSeconds": -1}, "metricReportIntervalSeconds"),
        ({"metricAggregateDurationSeconds": 0}, "metricAggregateDurationSeconds"),
        ({"degradeTimeMinutes": 0}, "degradeTimeMinutes"),
        ({"updateTimeThresholdSeconds": -300}, "updateTimeThresholdSeconds"),
        ({"resourceDiffThreshold": 0}, "resourceDiffThreshold"),
        ({"resourceDiffThreshold": 1.5}, "resourceDiffThreshold"),
        ({"cpuReclaimThresholdPercent": -1}, "cpuReclaimThresholdPercent"),
        ({"midCPUThresholdPercent": 101}, "midCPUThresholdPercent"),
        ({"batchMemoryThresholdPercent": -5}, "batchMemoryThresholdPercent"),
        ({"cpuCalculatePolicy": "request"}, "cpuCalculatePolicy"),
        ({"metricAggregatePolicy": {"durations": ["-5m"]}}, "metricAggregatePolicy.durations[0]"),
        ({"metricAggregatePolicy": {"durations": ["5 minutes"]}}, "metricAggregatePolicy.durations[0]"),
        # issue 29, example 2: 168h sized every agent's ring to ~605,000 samples per series
        ({"metricAggregatePolicy": {"durations": ["5m0s", "168h0m0s"]}}, "metricAggregatePolicy.durations[1]"),
        ({"metricAggregatePolicy": {"durations": [f"{m}m" for m in range(1, 10)]}}, "metricAggregatePolicy.durations"),
        ({"metricAggregateDurationSeconds": 604800}, "metricAggregateDurationSeconds"),
        (
            {"nodeConfigs": [{"name": "a", "metricAggregatePolicy": {"durations": ["2h"]}}]},
            "nodeConfigs[0].metricAggregatePolicy.durations[0]",
        ),
        (
            {"nodeConfigs": [{"name": "a"}, {"name": "b", "cpuReclaimThresholdPercent": -5}]},
            "nodeConfigs[1].cpuReclaimThresholdPercent",
        ),
    ],
)
def test_colocation_bounds(config: dict[str, Any], field: str) -> None:
    assert errors(colocation_config=config) == [("colocation-config", field)]


def test_colocation_bounds_that_koordinator_leaves_open_are_accepted() -> None:
    # resourceDiffThreshold may be exactly 1, batch caps and reclaim thresholds may exceed 100
    ok(
        colocation_config={
            "resourceDiffThreshold": 1,
            "batchCPUThresholdPercent": 150,
            "cpuReclaimThresholdPercent": 120,
        }
    )


@pytest.mark.parametrize(
    ("key", "config", "field"),
    [
        ("resource-qos-config", {"clusterStrategy": {"beClass": {"memoryQOS": {"wmarkMinAdj": -30}}}}, "clusterStrategy.beClass.memoryQOS.wmarkMinAdj"),
        ("resource-qos-config", {"clusterStrategy": {"lsClass": {"cpuQOS": {"groupIdentity": 3}}}}, "clusterStrategy.lsClass.cpuQOS.groupIdentity"),
        ("resource-qos-config", {"nodeStrategies": [{"beClass": {"resctrlQOS": {"mbaPercent": 120}}}]}, "nodeStrategies[0].beClass.resctrlQOS.mbaPercent"),
        ("cpu-burst-config", {"clusterStrategy": {"cfsQuotaBurstPercent": 50}}, "clusterStrategy.cfsQuotaBurstPercent"),
        ("cpu-burst-config", {"clusterStrategy": {"sharePoolThresholdPercent": 101}}, "clusterStrategy.sharePoolThresholdPercent"),
        ("cpu-burst-config", {"clusterStrategy": {"policy": "sometimes"}}, "clusterStrategy.policy"),
        ("system-config", {"clusterStrategy": {"watermarkScaleFactor": 401}}, "clusterStrategy.watermarkScaleFactor"),
        ("system-config", {"nodeStrategies": [{"totalNetworkBandwidth": "fast"}]}, "nodeStrategies[0].totalNetworkBandwidth"),
        ("resource-threshold-config", {"clusterStrategy": {"cpuEvictTimeWindowSeconds": 0}}, "clusterStrategy.cpuEvictTimeWindowSeconds"),
        ("resource-threshold-config", {"clusterStrategy": {"cpuSuppressPolicy": "throttle"}}, "clusterStrategy.cpuSuppressPolicy"),
        ("resource-threshold-config", {"nodeStrategies": [{"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}]}, "nodeStrategies[0].nodeSelector.matchExpressions[0]"),
        ("resource-threshold-config", {"nodeStrategies": [{"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}]}, "nodeStrategies[0].nodeSelector.matchExpressions[0].operator"),
        # issue 29: selector keys and values are label keys and values (bounded as on the nodes they match)
        ("resource-threshold-config", {"nodeStrategies": [{"nodeSelector": {"matchExpressions": [{"key": "k" * 100_000, "operator": "Exists"}]}}]}, "nodeStrategies[0].nodeSelector.matchExpressions[0]"),
        ("resource-threshold-config", {"nodeStrategies": [{"nodeSelector": {"matchLabels": {"pool": "v" * 64}}}]}, "nodeStrategies[0].nodeSelector"),
    ],
)  # fmt: skip
def test_strategy_bounds(key: str, config: dict[str, Any], field: str) -> None:
    assert errors(**{key.replace("-", "_"): config}) == [(key, field)]


def test_allocatable_evict_thresholds_may_exceed_100() -> None:
    ok(resource_threshold_config={"clusterStrategy": {"memoryAllocatableEvictThresholdPercent": 110, "memoryAllocatableEvictLowerPercent": 100}})  # fmt: skip


def test_inverted_band_in_merged_node_strategy_is_refused() -> None:
    # cluster threshold 70 (default) + node lower 75 would never evict: refused, naming the node entry
    found = errors(resource_threshold_config={"nodeStrategies": [{"memoryEvictLowerPercent": 75}]})
    assert found == [("resource-threshold-config", "nodeStrategies[0].memoryEvictLowerPercent")]
    found = errors(resource_qos_config={"clusterStrategy": {"beClass": {"resctrlQOS": {"catRangeStartPercent": 40}}}})
    assert found == [("resource-qos-config", "clusterStrategy.beClass.resctrlQOS.catRangeStartPercent")]


def test_every_problem_of_every_key_is_reported() -> None:
    result = parse_slo_controller_config(
        {
            "colocation-config": json.dumps({"degradeTimeMinutes": -1, "resourceDiffThreshold": 2}),
            "resource-threshold-config": json.dumps({"clusterStrategy": {"memoryEvictThresholdPercent": 170}}),
            "cpu-burst-config": "not json",
        }
    )
    assert isinstance(result, list)
    assert sorted((e.key, e.field) for e in result) == [
        ("colocation-config", "degradeTimeMinutes"),
        ("colocation-config", "resourceDiffThreshold"),
        ("cpu-burst-config", None),
        ("resource-threshold-config", "clusterStrategy.memoryEvictThresholdPercent"),
    ]


def test_non_object_value_is_refused() -> None:
    assert errors(colocation_config=[1, 2]) == [("colocation-config", None)]


@pytest.mark.parametrize(
    "text",
    [
        '{"enable": true, "cpuReclaimThresholdPercent": ' + "9" * 5000 + "}",  # int beyond Python's 4300 digits
        "[" * 1000 + "]" * 1000,  # arrays nested 1,000 deep
        '{"nodeConfigs": [' + "{" * 0 + "[" * 990 + "]" * 990 + "]}",
        '{"degradeTimeMinutes": 10000000000000}',  # past what a Go time.Duration holds
        '{"cpuReclaimThresholdPercent": 1e400}',
        '{"cpuReclaimThresholdPercent": 9223372036854775808}',  # int64 + 1
    ],
)
def test_every_unusable_config_is_refused_never_raised(text: str) -> None:
    result = parse_slo_controller_config({"colocation-config": text})
    assert isinstance(result, list) and result and all(e.key == "colocation-config" for e in result)
