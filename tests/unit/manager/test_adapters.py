"""API objects (as watches deliver them) mapped onto the batch core's inputs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from common.api.constants import BATCH_CPU, BATCH_MEMORY
from common.api.malformed import MalformedObjectError, MalformedReason
from common.api.nodemetric_digest import HostAppUsage, PodUsage
from manager.adapters import (
    node_batch_resources,
    node_capacity,
    node_digest,
    node_metric,
    pod_node_name,
    pod_on_node,
)
from manager.noderesource.formulas import updated_at, usage_pair
from manager.noderesource.model import ResourcePair
from tests import objects

GI = 1024**3


def node(**status: Any) -> dict[str, Any]:
    return objects.node(status=status)


def test_node_capacity_allocatable_and_reservation_annotation() -> None:
    obj = node(capacity={"cpu": "16", "memory": "64Gi"}, allocatable={"cpu": "15500m", "memory": "62Gi"})
    obj["metadata"]["annotations"]["node.koordinator.sh/reservation"] = '{"resources": {"cpu": "2", "memory": "1Gi"}}'
    facts = node_capacity(node_digest(obj))
    assert facts.capacity == ResourcePair(16_000, 64 * GI)
    assert facts.allocatable == ResourcePair(15_500, 62 * GI)
    assert facts.annotation_reserved == ResourcePair(2_000, GI)


def test_malformed_node_quantity_is_an_input_error_naming_the_field() -> None:
    with pytest.raises(MalformedObjectError, match=r"Node n1 status.capacity.cpu") as bad:
        node_digest(node(capacity={"cpu": "lots"}))
    assert bad.value.reason is MalformedReason.INVALID_QUANTITY


def test_batch_resources_read_back_in_the_api_servers_canonical_forms() -> None:
    obj = node(allocatable={BATCH_CPU: "6100", BATCH_MEMORY: "32Gi", "cpu": "16"}, capacity={BATCH_CPU: "6k"})
    digest = node_digest(obj)
    assert node_batch_resources(digest) == {BATCH_CPU: 6100, BATCH_MEMORY: 32 * GI}
    assert node_batch_resources(digest, "capacity") == {BATCH_CPU: 6000}
    # A batch resource the manager writes itself that does not parse counts as absent (the next write replaces
    # it); anything else wrong with the node makes it unreadable.
    assert node_batch_resources(node_digest(node(allocatable={BATCH_CPU: "garbage"}))) == {}
    with pytest.raises(MalformedObjectError):
        node_digest(node(allocatable={BATCH_CPU: "garbage", "cpu": "garbage"}))


def test_pod_classes_and_requests_as_kube_scheduler_sums_them() -> None:
    pod = {
        "metadata": {"namespace": "ns", "name": "web", "labels": {"koordinator.sh/priority-class": "koord-prod"}},
        "spec": {
            "nodeName": "n1",
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "1", "memory": "512Mi"}}},
            ],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "4"}}}],
            "overhead": {"cpu": "100m"},
        },
        "status": {"phase": "Running"},
    }
    mapped = pod_on_node(pod)
    assert pod_node_name(pod) == "n1"
    assert (mapped.key, mapped.phase, mapped.priority_class, mapped.qos_class) == (
        "ns/web",
        "Running",
        "koord-prod",
        "LS",
    )
    assert mapped.request == ResourcePair(4_100, GI + 512 * 1024**2)  # init container peak 4 cores + overhead


def test_best_effort_pod_without_labels_defaults_to_batch() -> None:
    pod = {"metadata": {"namespace": "ns", "name": "x"}, "spec": {"containers": [{"name": "c"}]}, "status": {}}
    mapped = pod_on_node(pod)
    assert (mapped.priority_class, mapped.qos_class, mapped.phase) == ("koord-batch", "BE", "Pending")


def test_nodemetric_snapshot_reads_system_pods_and_host_apps() -> None:
    obj = (
        objects.MakeNodeMetric("n1").updated("2026-07-24T06:52:45Z").system("412m", "3Gi")
        .pod("ns", "web", "1500m", priority="koord-prod").host_app("nginx", memory="64Mi", priority="koord-prod").obj()
    )  # fmt: skip
    snap = node_metric(obj)
    assert snap is not None
    assert updated_at(snap) == datetime(2026, 7, 24, 6, 52, 45, tzinfo=UTC)
    assert usage_pair(snap.system_usage) == ResourcePair(412, 3 * GI)
    assert tuple(snap.pod_usages.values()) == (PodUsage("ns", "web", {"cpu": 1_500}, "koord-prod"),)
    assert snap.host_apps == (HostAppUsage("nginx", {"memory": 64 * 1024**2}, "koord-prod"),)


def test_nodemetric_without_status_is_none_and_a_negative_usage_is_an_input_error() -> None:
    assert node_metric({"metadata": {"name": "n1"}, "spec": {}}) is None
    bad = {"metadata": {"name": "n1"}, "status": {"nodeMetric": {"systemUsage": {"resources": {"cpu": "-1"}}}}}
    with pytest.raises(MalformedObjectError, match="NodeMetric n1"):
        node_metric(bad)
