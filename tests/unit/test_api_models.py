"""API models read and write exactly what the API server stores (Koordinator's shapes)."""

from __future__ import annotations

import copy
import math
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from common.api.malformed import MalformedObjectError
from common.api.nodemetric import NodeMemoryCollectPolicy, NodeMetric
from common.api.nodemetric_digest import Staleness, digest_node_metric, report_staleness
from common.api.nodeslo import CPUSuppressPolicy, NodeSLO
from common.api.podgroup import PodGroup, PodGroupPhase, digest_pod_group
from common.api.quantity import Quantity
from common.api.wire import GoDuration
from tests.examples import KOORDINATOR_NODEMETRIC, NODESLO, PODGROUPS


def _load(text: str) -> dict[str, Any]:
    return dict(yaml.safe_load(text))


@pytest.mark.parametrize(
    ("model", "text"),
    [(NodeMetric, KOORDINATOR_NODEMETRIC), (NodeSLO, NODESLO)] + [(PodGroup, t) for t in PODGROUPS],
)
def test_reference_objects_round_trip_without_loss(model: Any, text: str) -> None:
    wire = _load(text)
    assert model.from_wire(wire).to_wire() == wire


_MAPS = {"resources", "labels", "extensions"}  # maps of values, not structs


def _plant_unknown_fields(obj: Any, marker: str, parent: str = "") -> None:
    """Add a field a newer Koordinator might write to every struct below obj."""
    if isinstance(obj, dict):
        for key, value in list(obj.items()):
            _plant_unknown_fields(value, marker, key)
        if parent not in _MAPS:
            obj[marker] = {"fromNewerKoordinator": [1, "two"]}
    elif isinstance(obj, list):
        for value in obj:
            _plant_unknown_fields(value, marker, parent)


def test_unknown_fields_survive_read_modify_write() -> None:
    wire = _load(KOORDINATOR_NODEMETRIC)
    _plant_unknown_fields(wire["status"], "zzFuture")
    wire["spec"]["metricCollectPolicy"]["zzFuture"] = 7
    nm = NodeMetric.from_wire(wire)
    assert nm.status is not None and nm.status.node_metric is not None and nm.status.node_metric.node_usage is not None
    nm.status.node_metric.node_usage.resources = {"cpu": Quantity.from_milli(100), "memory": Quantity.from_int(1 << 30)}
    out = nm.to_wire()
    expected = copy.deepcopy(wire)
    expected["status"]["nodeMetric"]["nodeUsage"]["resources"] = {"cpu": "100m", "memory": "1Gi"}
    assert out == expected
    assert out["spec"]["metricCollectPolicy"]["zzFuture"] == 7


def test_values_parse_to_koordinator_units() -> None:
    nm = NodeMetric.from_wire(_load(KOORDINATOR_NODEMETRIC))
    assert nm.status and nm.status.node_metric and nm.status.node_metric.node_usage
    usage = nm.status.node_metric.node_usage.resources or {}
    assert usage["cpu"].milli_value() == 3512
    assert usage["memory"].value() == 20498764 * 1024
    device = (nm.status.pods_metric or [])[0].pod_usage.devices[0]  # type: ignore[union-attr,index]
    assert device.type == "gpu" and device.health is False
    assert (device.resources or {})["koordinator.sh/gpu-memory"].value() == 4 << 30
    assert nm.status.update_time == datetime(2026, 7, 24, 6, 52, 45, tzinfo=UTC)


@pytest.mark.parametrize(
    ("bad", "needle"),
    [("abc", "'abc'"), ("1.1.1", "'1.1.1'"), ("-5", "-5"), (math.nan, "nan"), (math.inf, "inf")],
)
def test_bad_usage_names_field_and_value(bad: Any, needle: str) -> None:
    wire = _load(KOORDINATOR_NODEMETRIC)
    wire["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] = bad
    with pytest.raises(ValidationError) as err:
        NodeMetric.from_wire(wire)
    text = str(err.value)
    assert "status.nodeMetric.nodeUsage.resources.cpu" in text
    assert needle in text.lower() or needle in text


def test_created_objects_emit_go_always_fields() -> None:
    from common.api.nodemetric import DeviceInfo, NodeMetricInfo, NodeMetricStatus, ResourceMap
    from common.api.wire import ObjectMeta

    nm = NodeMetric(
        metadata=ObjectMeta(name="n1"),
        status=NodeMetricStatus(
            update_time=datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
            node_metric=NodeMetricInfo(node_usage=ResourceMap(devices=[DeviceInfo(type="rdma", id="mlx5_0/1")])),
        ),
    )
    assert nm.to_wire() == {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": "n1"},
        "status": {
            "updateTime": "2026-01-02T03:04:05Z",
            "nodeMetric": {"nodeUsage": {"devices": [{"type": "rdma", "id": "mlx5_0/1", "health": False}]}},
        },
    }


def test_collect_policy_defaults_and_clamps() -> None:
    policy = NodeMetric.from_wire({"metadata": {"name": "n"}}).effective_collect_policy()
    assert (policy.aggregate_duration_seconds, policy.report_interval_seconds) == (300, 60)
    assert [d.canonical() for d in policy.durations] == ["5m0s", "10m0s", "30m0s"]
    assert policy.node_memory_collect_policy is NodeMemoryCollectPolicy.USAGE_WITHOUT_PAGE_CACHE
    custom = NodeMetric.from_wire(
        {
            "spec": {
                "metricCollectPolicy": {
                    "aggregateDurationSeconds": 10,
                    "reportIntervalSeconds": 5,
                    "nodeAggregatePolicy": {"durations": ["30m", "1m"]},
                }
            }
        }
    ).effective_collect_policy()
    assert (custom.aggregate_duration_seconds, custom.report_interval_seconds) == (60, 30)
    assert [d.canonical() for d in custom.durations] == ["1m0s", "30m0s"]


def test_expiry_and_aggregated_lookup() -> None:
    nm = digest_node_metric(_load(KOORDINATOR_NODEMETRIC))
    updated = datetime(2026, 7, 24, 6, 52, 45, tzinfo=UTC).timestamp()
    assert nm.update_time == updated
    assert report_staleness(nm.update_time, updated + 179, 180) is None
    assert report_staleness(nm.update_time, updated + 180, 180) is Staleness.TOO_OLD
    assert report_staleness(digest_node_metric({"metadata": {"name": "n"}}).update_time, updated, 180) is (
        Staleness.NEVER_UPDATED
    )
    # duration None → the longest window that has data: 30m is cold, so 5m
    assert (nm.aggregated_usage("p95", None) or {})["cpu"] == 4300
    assert nm.aggregated_usage("p95", 1800) is None
    assert nm.aggregated_usage("p99", 300) is not None


def test_nodeslo_thresholds_with_koordinator_defaults() -> None:
    empty = NodeSLO.from_wire({"metadata": {"name": "n"}}).thresholds()
    assert empty.enable is False
    assert empty.cpu_suppress_threshold_percent == 65
    assert empty.cpu_suppress_policy is CPUSuppressPolicy.CPUSET
    assert empty.memory_evict_threshold_percent == 70
    assert empty.effective_memory_evict_lower_percent() == 68
    own = NodeSLO.from_wire(_load(NODESLO)).thresholds()
    assert (own.enable, own.cpu_suppress_threshold_percent, own.cpu_suppress_policy) == (
        True,
        60,
        CPUSuppressPolicy.CFS_QUOTA,
    )
    assert own.effective_memory_evict_lower_percent() == 78
    assert own.cpu_evict_be_satisfaction_upper_percent == 80


def test_podgroup_versions_and_validation() -> None:
    new, legacy = (PodGroup.from_wire(_load(t)) for t in PODGROUPS)
    assert new.spec.min_member == 4 and new.status and new.status.phase is PodGroupPhase.SCHEDULING
    assert (new.spec.min_resources or {})["memory"].value() == 16 << 30
    assert legacy.api_version == "scheduling.sigs.k8s.io/v1alpha1" and legacy.status and legacy.status.scheduled == 1
    with pytest.raises(ValidationError, match="minMember"):
        PodGroup.from_wire({"spec": {"minMember": 0}})
    with pytest.raises(ValidationError, match="not a PodGroup version"):
        PodGroup.from_wire({"apiVersion": "batch/v1", "spec": {"minMember": 1}})


def test_podgroup_digest_reads_both_groups_once() -> None:
    new, legacy = (digest_pod_group(_load(t)) for t in PODGROUPS)
    assert new.min_member == 4 and new.min_resources["memory"] == 16 << 30 and new.key.endswith("/" + new.name)
    assert legacy.min_member >= 1 and legacy.creation_timestamp >= 0
    bare = digest_pod_group({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "metadata": {"name": "g"}})
    assert (bare.key, bare.min_member, bare.min_resources, bare.schedule_timeout_seconds) == ("default/g", 1, {}, None)
    with pytest.raises(MalformedObjectError, match=r"metadata\.name"):
        digest_pod_group({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "spec": {"minMember": 2}})
    with pytest.raises(MalformedObjectError, match="minMember"):
        digest_pod_group({"metadata": {"name": "g"}, "spec": {"minMember": 0}})


@given(st.integers(min_value=-(10**15), max_value=10**15))
def test_go_duration_canonical_is_a_fixed_point(nanoseconds: int) -> None:
    text = GoDuration(nanoseconds).canonical()
    again = GoDuration.parse(text)
    assert again.nanoseconds == nanoseconds
    assert again.canonical() == text


@pytest.mark.parametrize(
    ("text", "seconds", "canonical"),
    [
        ("5m0s", 300, "5m0s"),
        ("10m", 600, "10m0s"),
        ("1h", 3600, "1h0m0s"),
        ("1.5s", 1.5, "1.5s"),
        ("90s", 90, "1m30s"),
        ("0", 0, "0s"),
    ],
)
def test_go_duration_vectors(text: str, seconds: float, canonical: str) -> None:
    d = GoDuration.parse(text)
    assert d.seconds == seconds and d.canonical() == canonical and d.to_wire() == text


@pytest.mark.parametrize("bad", ["", "5", "m", "5x", "1h-5m", "five minutes"])
def test_go_duration_rejects_garbage(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        GoDuration.parse(bad)


def test_go_durations_stop_at_an_int64_of_nanoseconds_as_go_does() -> None:
    assert GoDuration.parse("2562047h47m16.854775807s").nanoseconds == 2**63 - 1
    assert GoDuration.parse("-2562047h47m16.854775808s").nanoseconds == -(2**63)
    for text in ("2562047h47m16.854775808s", "2562048h", "999999999999h"):
        with pytest.raises(ValueError, match="out of range"):
            GoDuration.parse(text)
