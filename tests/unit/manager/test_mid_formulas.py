"""Mid resources against Koordinator's table (pkg/slo-controller/noderesource/plugins/midresource/plugin_test.go,
v1.8.0, TestPluginCalculate and TestPlugin_isDegradeNeeded), and the `prediction` batch policy by hand.

Koordinator's test node: capacity 100 cores / 210G, allocatable 100 cores / 200G (kubelet reserves 10G of memory);
pods: podA koord-prod LS requesting 20 cores / 40G, podB koord-batch BE requesting 15 cores / 30G."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from common.api.nodemetric_digest import NodeMetricDigest, digest_node_metric
from manager.noderesource.formulas import calculate_batch_resources
from manager.noderesource.mid import MidResources, MidStrategy, mid_outcome, mid_strategy_from_colocation
from manager.noderesource.model import (
    BatchStrategy,
    BatchVerdict,
    CalculatePolicy,
    NodeCapacity,
    PodOnNode,
    ResourcePair,
)
from manager.nodeslo.config import DEFAULT_COLOCATION_STRATEGY
from tests.objects import MakeNodeMetric

G = 1_000_000_000
NOW = datetime(2026, 7, 24, 6, 52, 45, tzinfo=UTC)
NODE = NodeCapacity(capacity=ResourcePair(100_000, 210 * G), allocatable=ResourcePair(100_000, 200 * G))
PODS = [
    PodOnNode("test", "podA", "Running", "koord-prod", "LS", ResourcePair(20_000, 40 * G)),
    PodOnNode("test", "podB", "Running", "koord-batch", "BE", ResourcePair(15_000, 30 * G)),
]


def metric(
    *,
    node_usage: tuple[str, str] | None = None,
    pods: Sequence[tuple[str, str, str]] = (),
    reclaimable: tuple[str, str] | bool | None = None,
    host_app: tuple[str, str, str] | None = None,
    age: timedelta = timedelta(seconds=20),
    node_metric_info: bool = True,
) -> NodeMetricDigest:
    built = MakeNodeMetric("test-node").updated(NOW - age)
    if node_usage is not None:
        built.node_usage(*node_usage)
    for name, cpu, memory in pods:
        built.pod("test", name, cpu, memory)
    if host_app is not None:
        built.host_app("test-host-application", host_app[0], host_app[1], priority=host_app[2])
    if isinstance(reclaimable, tuple):
        built.prod_reclaimable(*reclaimable)
    status: dict[str, Any] = built.status()
    if not node_metric_info:
        status["nodeMetric"] = {}
    if reclaimable is True:
        status["prodReclaimableMetric"] = {}  # &ReclaimableMetric{}: present, nothing in it
    return digest_node_metric({"metadata": {"name": "test-node"}, "status": status})


def strategy(**fields: Any) -> MidStrategy:
    """A merged colocation strategy (defaults + the test's fields), read as the manager reads it."""
    return mid_strategy_from_colocation({**DEFAULT_COLOCATION_STRATEGY, "enable": True, **fields})


USED = [("podA", "10", "20G"), ("podB", "15", "20G")]
USED2 = [("podA", "5", "10G"), ("podB", "15", "30G")]


@pytest.mark.parametrize(
    ("case", "fields", "nm", "expected"),
    [
        (
            "calculate correctly when node metric is valid",
            {"degradeTimeMinutes": 10, "midStaticCPUReservedPercent": 10, "midStaticMemoryReservedPercent": 10},
            metric(node_usage=("20", "45G"), pods=USED, reclaimable=("10", "15G")),
            MidResources(10_000, 15 * G),  # min(min(10000, 80000) + 80000 x 0, 100000 x 1)
        ),
        (
            "calculate correctly where the prod reclaimable exceeds the mid threshold",
            {
                "degradeTimeMinutes": 10,
                "midCPUThresholdPercent": 10,
                "midMemoryThresholdPercent": 20,
                "midUnallocatedPercent": 10,
                "midStaticCPUReservedPercent": 10,
                "midStaticMemoryReservedPercent": 10,
            },
            metric(node_usage=("30", "50G"), pods=USED2, reclaimable=("15", "30G")),
            MidResources(10_000, 42 * G),  # cpu min(15000 + 8000, 10000); memory min(30G + 16G, 42G)
        ),
        (
            "calculate correctly when prod reclaimable is nil",
            {"degradeTimeMinutes": 10},
            metric(node_usage=("30", "50G"), pods=USED2, reclaimable=True),
            MidResources(0, 0),
        ),
        (
            "calculate correctly when set reserved resource in static mode: not exceed",
            {
                "degradeTimeMinutes": 10,
                "midStaticCPUReservedPercent": 10,
                "midStaticMemoryReservedPercent": 10,
                "midReclaimMode": "static",
                "midCPUThresholdPercent": 10,
                "midMemoryThresholdPercent": 20,
                "midUnallocatedPercent": 10,
            },
            metric(node_usage=("30", "50G"), pods=USED2, reclaimable=("15", "30G")),
            MidResources(10_000, 21 * G),  # min(capacity x 10 %, capacity x 10 % / 20 %)
        ),
        (
            "calculate correctly when set reserved resource in static mode: exceed",
            {
                "degradeTimeMinutes": 10,
                "midStaticCPUReservedPercent": 100,
                "midStaticMemoryReservedPercent": 100,
                "midReclaimMode": "static",
                "midCPUThresholdPercent": 10,
                "midMemoryThresholdPercent": 20,
                "midUnallocatedPercent": 10,
            },
            metric(node_usage=("30", "50G"), pods=USED2, reclaimable=("15", "30G")),
            MidResources(10_000, 42 * G),
        ),
        (
            "calculate correctly where node metrics is invalid",
            {"degradeTimeMinutes": 10},
            metric(reclaimable=("20", "20G"), node_metric_info=False),
            MidResources(0, 0),  # no nodeUsage: nothing counts as unused
        ),
        (
            "calculate correctly where the prod reclaimable exceeds the node free resource",
            {"degradeTimeMinutes": 10},
            metric(
                node_usage=("90", "200G"),
                pods=[("podA", "10", "20G"), ("podB", "15", "20G")],
                reclaimable=("20", "20G"),
            ),
            MidResources(10_000, 10 * G),  # min(20000, unused 10000); min(20G, unused 10G)
        ),
        (
            "including product host application usage",
            {"degradeTimeMinutes": 10, "midUnallocatedPercent": 10},
            metric(node_usage=("30", "50G"), pods=USED2, reclaimable=True, host_app=("5", "15G", "koord-prod")),
            # Koordinator's case has midUnallocatedPercent 0 (result 0) and shows Unallocated 75000 / 155G in its
            # message; 10 % of it makes the term visible here: 7500, 15.5G
            MidResources(7_500, 15_500_000_000),
        ),
        (
            "including mid host application usage",
            {"degradeTimeMinutes": 10, "midUnallocatedPercent": 10},
            metric(node_usage=("30", "50G"), pods=USED2, reclaimable=True, host_app=("5", "15G", "koord-mid")),
            MidResources(8_000, 16 * G),  # Unallocated 80000 / 160G: a mid host app is not system usage here
        ),
        (
            "including batch host application usage",
            {"degradeTimeMinutes": 10, "midUnallocatedPercent": 10},
            metric(node_usage=("30", "50G"), pods=USED2, reclaimable=True, host_app=("2", "10G", "koord-batch")),
            MidResources(8_000, 16 * G),
        ),
    ],
)
def test_koordinator_table(case: str, fields: dict[str, Any], nm: NodeMetricDigest, expected: MidResources) -> None:
    outcome = mid_outcome(NODE, PODS, nm, strategy(**fields), NOW)
    assert outcome.verdict is BatchVerdict.CALCULATED, case
    assert outcome.resources == expected, case


def test_unallocated_term_of_the_valid_case() -> None:
    """Koordinator's message for 'node metric is valid': Unallocated 80000 milli-cores / 160G."""
    outcome = mid_outcome(
        NODE,
        PODS,
        metric(node_usage=("20", "45G"), pods=USED, reclaimable=("10", "15G")),
        strategy(degradeTimeMinutes=10),
        NOW,
    )
    assert outcome.breakdown is not None
    assert outcome.breakdown.unallocated == ResourcePair(80_000, 160 * G)
    assert outcome.breakdown.node_unused == ResourcePair(80_000, 165 * G)
    assert "prodReclaimable 10000" in outcome.breakdown.explain(MidResources(10_000, 15 * G))


@pytest.mark.parametrize(
    ("case", "nm", "verdict"),
    [
        ("empty NodeMetric should degrade", None, BatchVerdict.NODE_METRIC_MISSING),
        (
            "outdated NodeMetric status should degrade",
            metric(node_usage=("20", "40Gi"), age=timedelta(minutes=11)),
            BatchVerdict.NODE_METRIC_EXPIRED,
        ),
        (
            "NodeMetric without prod reclaimable does not degrade",
            metric(node_usage=("20", "40Gi")),
            BatchVerdict.CALCULATED,
        ),
        (
            "valid NodeMetric status should not degrade",
            metric(node_usage=("20", "40Gi"), reclaimable=("10", "20Gi")),
            BatchVerdict.CALCULATED,
        ),
    ],
)
def test_degrade(case: str, nm: NodeMetricDigest | None, verdict: BatchVerdict) -> None:
    outcome = mid_outcome(NODE, PODS, nm, strategy(degradeTimeMinutes=10), NOW)
    assert outcome.verdict is verdict, case
    assert (outcome.resources is None) == (verdict is not BatchVerdict.CALCULATED)


def test_colocation_disabled_removes_them() -> None:
    outcome = mid_outcome(NODE, PODS, metric(node_usage=("20", "45G")), MidStrategy(enable=False), NOW)
    assert outcome.verdict is BatchVerdict.COLOCATION_DISABLED and outcome.resources is None


def test_strategy_defaults_are_koordinators() -> None:
    s = strategy()
    assert (s.cpu_threshold_percent, s.memory_threshold_percent, s.unallocated_percent) == (100, 100, 0)
    assert (s.static_cpu_reserved_percent, s.static_memory_reserved_percent, s.static_mode) == (0, 0, False)
    assert s.degrade_time_minutes == 15


# ------------------------------------------------------------------ the "prediction" batch policy
PRED_NODE = NodeCapacity(capacity=ResourcePair(16_000, 64 * G), allocatable=ResourcePair(16_000, 64 * G))
PRED_PODS = [
    PodOnNode("default", "web", "Running", "koord-prod", "LS", ResourcePair(8_000, 32 * G)),
    PodOnNode("default", "cache", "Running", "koord-mid", "LS", ResourcePair(0, 0)),
]


def predicted(web_cpu: str, *, peak: tuple[str, str] | None) -> NodeMetricDigest:
    built = MakeNodeMetric("n").updated(NOW).node_usage("4", "20G").system("1", "4G")
    built.pod("default", "web", web_cpu, "10G", priority="koord-prod")
    built.pod("default", "cache", "500m", "2G", priority="koord-mid")
    status: dict[str, Any] = built.status()
    if peak is not None:
        status["prodPeakMetric"] = {"resource": {"resources": {"cpu": peak[0], "memory": peak[1]}}}
    return digest_node_metric({"metadata": {"name": "n"}, "status": status})


PREDICTION = BatchStrategy(
    enable=True, cpu_calculate_policy=CalculatePolicy.PREDICTION, memory_calculate_policy=CalculatePolicy.PREDICTION
)
USAGE = BatchStrategy(enable=True)


def test_prediction_charges_the_peak_not_the_window() -> None:
    """capacity 16 cores - 40 % margin = 9600m. usage: - system 1000 - web 2000 - cache 500 = 6100.
    prediction: - max(system + HP used = 3500, peak 5000 + cache 500 = 5500) = 4100, whatever web does below it."""
    for web in ("2", "1", "3500m"):
        got, breakdown = calculate_batch_resources(PRED_NODE, PRED_PODS, predicted(web, peak=("5", "20G")), PREDICTION)
        assert got.cpu_milli == 4_100, web
    assert "prodPeakOrNodeReserved 5000m + podMidUsed 500m" in breakdown.explain(got, PREDICTION)
    usage, _ = calculate_batch_resources(PRED_NODE, PRED_PODS, predicted("2", peak=("5", "20G")), USAGE)
    assert usage.cpu_milli == 6_100


def test_prediction_never_above_usage() -> None:
    """A burst beyond the prediction: the window's charge wins (web at 6 cores: 9600 - 1000 - 6000 - 500 = 2100)."""
    got, _ = calculate_batch_resources(PRED_NODE, PRED_PODS, predicted("6", peak=("5", "20G")), PREDICTION)
    assert got.cpu_milli == 2_100


def test_prediction_without_a_peak_is_usage() -> None:
    got, breakdown = calculate_batch_resources(PRED_NODE, PRED_PODS, predicted("2", peak=None), PREDICTION)
    usage, _ = calculate_batch_resources(PRED_NODE, PRED_PODS, predicted("2", peak=None), USAGE)
    assert got == usage
    assert "no prodPeakMetric" in breakdown.explain(got, PREDICTION)


def test_prediction_is_a_valid_policy_in_the_configmap() -> None:
    from manager.nodeslo.schema import ColocationStrategy

    parsed = ColocationStrategy.model_validate(
        {"cpuCalculatePolicy": "prediction", "memoryCalculatePolicy": "prediction"}
    )
    assert parsed.cpu_calculate_policy == "prediction"
    with pytest.raises(ValueError):
        ColocationStrategy.model_validate({"cpuCalculatePolicy": "guess"})
