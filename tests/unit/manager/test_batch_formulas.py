"""Batch resources against hand-computed numbers (koordinator
pkg/slo-controller/noderesource/plugins/util/util.go).

The common node: capacity 10 cores / 20 GB, allocatable 9 cores / 18 GB (kubelet reserved
1000m / 2 GB), defaults 60/65 -> safety margin 4000m / 7 GB.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from common.api.nodemetric_digest import NodeMetricDigest, digest_node_metric
from manager.noderesource.formulas import (
    calculate_batch_resources,
    charge_high_priority_pods,
    kubelet_reserved,
    node_reserved,
    safety_margin,
    scale_by_percent,
)
from manager.noderesource.model import (
    BatchStrategy,
    CalculatePolicy,
    NodeCapacity,
    PodOnNode,
    ResourcePair,
)
from manager.noderesource.reservation import parse_node_reservation, reservation_from_annotations
from tests.objects import MakeNodeMetric

G = 1_000_000_000
NOW = datetime(2026, 7, 24, 6, 52, 45, tzinfo=UTC)
NODE = NodeCapacity(capacity=ResourcePair(10_000, 20 * G), allocatable=ResourcePair(9_000, 18 * G))
ENABLED = BatchStrategy(enable=True)


def pod(name: str, priority: str, request: tuple[int, int], *, qos: str = "LS", phase: str = "Running") -> PodOnNode:
    return PodOnNode("default", name, phase, priority, qos, ResourcePair(*request))


Entry = tuple[str, str, tuple[int, int]]  # name, priority class, (milli-cores, bytes)


def usage(name: str, priority: str, used: tuple[int, int]) -> Entry:
    return (name, priority, used)


def node_metric(system: tuple[int, int], pods: Sequence[Entry] = (), host_apps: Sequence[Entry] = ()) -> NodeMetricDigest:
    """The NodeMetric the manager reads, built on the wire and digested as the controller does."""
    built = MakeNodeMetric("n1").updated(NOW).system(cpu=f"{system[0]}m", memory=str(system[1]))
    for name, priority, (cpu, memory) in pods:
        built.pod("default", name, f"{cpu}m", str(memory), priority=priority)
    for name, priority, (cpu, memory) in host_apps:
        built.host_app(name, f"{cpu}m", str(memory), priority=priority)
    return digest_node_metric(built.valid())


# A: prod, measured. B: prod, just scheduled (no metric yet). C: batch (ignored).
# D: prod but Succeeded, still in the metric. E: mid, only in the metric (pod gone). F: batch, only in the metric.
PODS = [
    pod("a", "koord-prod", (2_000, 4 * G)),
    pod("b", "koord-prod", (1_000, 2 * G), phase="Pending"),
    pod("c", "koord-batch", (3_000, 5 * G), qos="BE"),
    pod("d", "koord-prod", (300, 1 * G), phase="Succeeded"),
]
METRIC = node_metric(
    (500, 1 * G),
    pods=[
        usage("a", "koord-prod", (1_000, 3 * G)),
        usage("c", "koord-batch", (2_500, 4 * G)),
        usage("d", "koord-prod", (300, 1 * G)),
        usage("e", "koord-mid", (200, G // 2)),
        usage("f", "koord-batch", (400, 1 * G)),
    ],
)


def test_safety_margin_uses_reclaim_thresholds() -> None:
    assert safety_margin(NODE.capacity, ENABLED) == ResourcePair(4_000, 7 * G)  # 40 %, 35 %
    custom = BatchStrategy(enable=True, cpu_reclaim_threshold_percent=80, memory_reclaim_threshold_percent=100)
    assert safety_margin(NODE.capacity, custom) == ResourcePair(2_000, 0)


def test_scale_by_percent_truncates_like_go_float64() -> None:
    # 64 Gi * 0.35 = 24051816857.6 -> 24051816857 (int64() truncation), 8 cores * 0.4 = 3200m.
    assert scale_by_percent(68_719_476_736, 35) == 24_051_816_857
    assert scale_by_percent(8_000, 40) == 3_200


def test_node_reserved_is_max_of_kubelet_and_annotation() -> None:
    assert kubelet_reserved(NODE) == ResourcePair(1_000, 2 * G)
    annotated = NodeCapacity(NODE.capacity, NODE.allocatable, annotation_reserved=ResourcePair(3_000, 1 * G))
    assert node_reserved(annotated) == ResourcePair(3_000, 2 * G)
    # allocatable above capacity (misreported) never makes the reservation negative
    odd = NodeCapacity(ResourcePair(1_000, 1 * G), ResourcePair(2_000, 2 * G))
    assert kubelet_reserved(odd) == ResourcePair(0, 0)


def test_high_priority_charge_counts_missing_metric_and_dangling_pods() -> None:
    charge = charge_high_priority_pods(PODS, METRIC)
    # request: a + b (d is Succeeded, c is batch)
    assert charge.request == ResourcePair(3_000, 6 * G)
    # dangling: d (Succeeded, prod) + e (mid); f is batch and not charged
    assert charge.dangling_used == ResourcePair(500, G + G // 2)
    # used: a's usage + b's request + dangling
    assert charge.used == ResourcePair(1_000 + 1_000 + 500, 3 * G + 2 * G + G + G // 2)
    # maxUsageRequest: max(a) + b's request + dangling
    assert charge.max_used_request == ResourcePair(2_000 + 1_000 + 500, 4 * G + 2 * G + G + G // 2)


def test_usage_policy() -> None:
    result, breakdown = calculate_batch_resources(NODE, PODS, METRIC, ENABLED)
    # system used = max(500m/1G, kubelet reserved 1000m/2G) = 1000m/2G
    assert breakdown.system_used == ResourcePair(1_000, 2 * G)
    # cpu 10000 - 4000 - 1000 - 2500 ; memory 20G - 7G - 2G - 6.5G
    assert (result.cpu_milli, result.memory_bytes) == (2_500, 4_500_000_000)
    assert "batch-cpu 2500m" in breakdown.explain(result, ENABLED)


def test_request_policy_for_memory_uses_requests_and_reserved() -> None:
    strategy = BatchStrategy(enable=True, memory_calculate_policy=CalculatePolicy.REQUEST)
    result, _ = calculate_batch_resources(NODE, PODS, METRIC, strategy)
    # memory 20G - 7G - reserved 2G - requests 6G ; cpu stays on usage
    assert (result.cpu_milli, result.memory_bytes) == (2_500, 5 * G)


def test_request_policy_is_not_supported_for_cpu() -> None:
    strategy = BatchStrategy(enable=True, cpu_calculate_policy=CalculatePolicy.REQUEST)
    result, _ = calculate_batch_resources(NODE, PODS, METRIC, strategy)
    assert result.cpu_milli == 2_500  # falls back to usage, as Koordinator does


def test_max_usage_request_policy() -> None:
    strategy = BatchStrategy(
        enable=True,
        cpu_calculate_policy=CalculatePolicy.MAX_USAGE_REQUEST,
        memory_calculate_policy=CalculatePolicy.MAX_USAGE_REQUEST,
    )
    result, _ = calculate_batch_resources(NODE, PODS, METRIC, strategy)
    # cpu 10000 - 4000 - 1000 - 3500 ; memory 20G - 7G - 2G - 7.5G
    assert (result.cpu_milli, result.memory_bytes) == (1_500, 3_500_000_000)


def test_batch_threshold_percent_caps_but_never_raises() -> None:
    strategy = BatchStrategy(enable=True, batch_cpu_threshold_percent=20, batch_memory_threshold_percent=30)
    result, _ = calculate_batch_resources(NODE, PODS, METRIC, strategy)
    # cpu min(2500, 10000 * 20%) = 2000 ; memory min(4.5G, 6G) = 4.5G
    assert (result.cpu_milli, result.memory_bytes) == (2_000, 4_500_000_000)


def test_lse_pod_is_charged_its_cpu_request_and_its_memory_usage() -> None:
    pods = [pod("lse", "koord-prod", (2_000, 4 * G), qos="LSE")]
    metric = node_metric((500, 1 * G), [usage("lse", "koord-prod", (500, 1 * G))])
    result, _ = calculate_batch_resources(NODE, pods, metric, ENABLED)
    # cpu 10000 - 4000 - 1000 - 2000 (request) ; memory 20G - 7G - 2G - 1G (usage)
    assert (result.cpu_milli, result.memory_bytes) == (3_000, 10 * G)


def test_system_usage_with_high_priority_host_apps_beats_reservation() -> None:
    metric = node_metric(
        (1_500, 3 * G),
        host_apps=[
            usage("nginx", "koord-prod", (200, G // 2)),
            usage("yarn", "koord-batch", (1_000, 1 * G)),  # consumes batch, not charged
        ],
    )
    result, breakdown = calculate_batch_resources(NODE, [], metric, ENABLED)
    assert breakdown.system_used == ResourcePair(1_700, 3_500_000_000)
    assert (result.cpu_milli, result.memory_bytes) == (10_000 - 4_000 - 1_700, 9_500_000_000)


def test_annotation_reservation_raises_system_used() -> None:
    node = NodeCapacity(NODE.capacity, NODE.allocatable, annotation_reserved=ResourcePair(3_000, 1 * G))
    metric = node_metric((500, 1 * G))
    result, _ = calculate_batch_resources(node, [], metric, ENABLED)
    assert (result.cpu_milli, result.memory_bytes) == (3_000, 11 * G)


def test_result_is_clamped_at_zero() -> None:
    pods = [pod("huge", "koord-prod", (9_000, 19 * G))]
    metric = node_metric((0, 0), [usage("huge", "koord-prod", (9_000, 19 * G))])
    result, _ = calculate_batch_resources(NODE, pods, metric, ENABLED)
    assert (result.cpu_milli, result.memory_bytes) == (0, 0)


def test_resources_written_under_koordinator_names() -> None:
    result, _ = calculate_batch_resources(NODE, PODS, METRIC, ENABLED)
    assert result.as_resource_map() == {"kubernetes.io/batch-cpu": 2_500, "kubernetes.io/batch-memory": 4_500_000_000}


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        ('{"resources": {"cpu": "1500m", "memory": "1Gi"}}', ResourcePair(1_500, 1_073_741_824)),
        ('{"resources": {"cpu": "2"}, "reservedCPUs": "0-1,4"}', ResourcePair(3_000, 0)),
        ('{"reservedCPUs": "3"}', ResourcePair(1_000, 0)),
    ],
)
def test_reservation_annotation(annotation: str, expected: ResourcePair) -> None:
    assert parse_node_reservation(annotation) == expected


@pytest.mark.parametrize("annotation", ["{not json", '{"resources": {"cpu": "lots"}}', '{"reservedCPUs": "3-1"}', "[]"])
def test_unusable_reservation_annotation_is_ignored(annotation: str) -> None:
    assert reservation_from_annotations({"node.koordinator.sh/reservation": annotation}) is None


def test_absent_reservation_annotation() -> None:
    assert reservation_from_annotations({}) is None
    assert reservation_from_annotations(None) is None
