"""Per-node renderings: NodeSLO spec, NodeMetric collect policy, batch strategy view."""

from __future__ import annotations

import json
from typing import Any

from manager.noderesource.model import BatchStrategy, CalculatePolicy
from manager.nodeslo.config import SLOControllerConfig, default_slo_controller_config, parse_slo_controller_config
from manager.nodeslo.render import (
    batch_strategy_for_node,
    colocation_for_node,
    node_metric_collect_policy,
    render_node_slo_spec,
)


def config(**keys: Any) -> SLOControllerConfig:
    result = parse_slo_controller_config({k.replace("_", "-"): json.dumps(v) for k, v in keys.items()})
    assert isinstance(result, SLOControllerConfig), result
    return result


def test_default_spec_has_koordinator_field_names_and_defaults() -> None:
    spec = render_node_slo_spec(default_slo_controller_config(), {})
    assert set(spec) == {"resourceUsedThresholdWithBE", "resourceQOSStrategy", "cpuBurstStrategy", "systemStrategy"}
    assert spec["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 65
    assert spec["resourceQOSStrategy"]["lsrClass"]["cpuQOS"]["groupIdentity"] == 2
    assert spec["cpuBurstStrategy"]["cfsQuotaBurstPeriodSeconds"] == -1
    assert spec["systemStrategy"] == {"totalNetworkBandwidth": "0"}


def test_host_applications_first_match_else_cluster_list() -> None:
    nginx = {
        "name": "nginx",
        "priority": "koord-prod",
        "qos": "LS",
        "cgroupPath": {"base": "CgroupRoot", "relativePath": "nginx/"},
    }
    yarn = {"name": "yarn", "priority": "koord-batch", "qos": "BE"}
    cfg = config(host_application_config={"applications": [nginx], "nodeConfigs": [{"nodeSelector": {"matchLabels": {"pool": "hadoop"}}, "applications": [yarn]}]})  # fmt: skip
    assert render_node_slo_spec(cfg, {})["hostApplications"] == [nginx]
    assert render_node_slo_spec(cfg, {"pool": "hadoop"})["hostApplications"] == [yarn]


def test_each_call_returns_an_independent_copy() -> None:
    cfg = default_slo_controller_config()
    first = render_node_slo_spec(cfg, {})
    first["resourceUsedThresholdWithBE"]["enable"] = True
    assert render_node_slo_spec(cfg, {})["resourceUsedThresholdWithBE"]["enable"] is False
    assert cfg.resource_threshold.cluster["enable"] is False


def test_collect_policy_follows_enabled_colocation() -> None:
    cfg = config(
        colocation_config={
            "enable": True,
            "metricAggregateDurationSeconds": 120,
            "metricReportIntervalSeconds": 30,
            "metricAggregatePolicy": {"durations": ["2m", "1h"]},
            "metricMemoryCollectPolicy": "usageWithPageCache",
        }
    )
    assert node_metric_collect_policy(colocation_for_node(cfg, {})) == {
        "aggregateDurationSeconds": 120,
        "reportIntervalSeconds": 30,
        "nodeAggregatePolicy": {"durations": ["2m0s", "1h0m0s"]},
        "nodeMemoryCollectPolicy": "usageWithPageCache",
    }


def test_collect_policy_is_the_default_when_colocation_is_disabled() -> None:
    cfg = config(colocation_config={"enable": False, "metricReportIntervalSeconds": 30})
    assert node_metric_collect_policy(colocation_for_node(cfg, {})) == {
        "aggregateDurationSeconds": 300,
        "reportIntervalSeconds": 60,
        "nodeAggregatePolicy": {"durations": ["5m0s", "10m0s", "30m0s"]},
        "nodeMemoryCollectPolicy": "usageWithoutPageCache",
    }


def test_colocation_disabled_for_one_node_pool() -> None:
    cfg = config(colocation_config={"enable": True, "nodeConfigs": [{"nodeSelector": {"matchLabels": {"pool": "db"}}, "enable": False}]})  # fmt: skip
    assert colocation_for_node(cfg, {}).enabled
    assert not colocation_for_node(cfg, {"pool": "db"}).enabled


def test_batch_strategy_view() -> None:
    cfg = config(
        colocation_config={
            "enable": True,
            "cpuReclaimThresholdPercent": 70,
            "memoryCalculatePolicy": "request",
            "batchCPUThresholdPercent": 80,
            "resourceDiffThreshold": 0.2,
        }
    )
    strategy = batch_strategy_for_node(cfg, colocation_for_node(cfg, {}))
    assert strategy == BatchStrategy(
        enable=True,
        cpu_reclaim_threshold_percent=70,
        memory_reclaim_threshold_percent=65,
        cpu_calculate_policy=CalculatePolicy.USAGE,
        memory_calculate_policy=CalculatePolicy.REQUEST,
        batch_cpu_threshold_percent=80,
        batch_memory_threshold_percent=None,
        degrade_time_minutes=15,
        update_time_threshold_seconds=300,
        resource_diff_threshold=0.2,
    )
    labelled = colocation_for_node(cfg, {"node.koordinator.sh/cpu-reclaim-ratio": "0.4"})
    assert batch_strategy_for_node(cfg, labelled).cpu_reclaim_threshold_percent == 40
