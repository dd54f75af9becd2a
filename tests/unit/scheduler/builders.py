"""Kubernetes JSON builders for scheduler tests (plain dicts, as the API server returns them)."""

from __future__ import annotations

from typing import Any

from scheduler_plugin.framework.binder import InMemoryBinder
from scheduler_plugin.framework.clock import FakeClock
from scheduler_plugin.framework.runtime import Framework
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.registry import frameworks_from_config
from tests.objects import MakeNodeMetric, pod_usage, rfc3339

T0 = 1_700_000_000.0  # FakeClock's default start
GANG_NAME = "pod-group.scheduling.sigs.k8s.io/name"
GANG_MIN = "pod-group.scheduling.sigs.k8s.io/min-available"


def node(
    name: str,
    *,
    cpu: str = "4",
    memory: str = "8Gi",
    pods: str = "110",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}
    spec: dict[str, Any] = {"taints": taints or []}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": spec,
        "status": {"allocatable": allocatable, "capacity": allocatable},
    }


def pod(
    name: str,
    cpu: str | None = "1",
    memory: str | None = "1Gi",
    *,
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    node_name: str | None = None,
    priority: int | None = None,
    created: float = T0,
    scheduled_at: float | None = None,
    tolerations: list[dict[str, str]] | None = None,
    node_selector: dict[str, str] | None = None,
    affinity: dict[str, Any] | None = None,
    owner_kind: str | None = None,
    gates: list[str] | None = None,
) -> dict[str, Any]:
    reqs: dict[str, str] = {}
    if cpu is not None:
        reqs["cpu"] = cpu
    if memory is not None:
        reqs["memory"] = memory
    reqs.update(requests or {})
    resources: dict[str, Any] = {"requests": reqs}
    if limits:
        resources["limits"] = limits
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{namespace}-{name}",
        "labels": labels or {},
        "annotations": annotations or {},
        "creationTimestamp": rfc3339(created),
    }
    if owner_kind:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner_kind, "name": "o", "uid": "o"}]
    spec: dict[str, Any] = {"schedulerName": "loadline-scheduler", "containers": [{"name": "c", "resources": resources}]}
    if node_name:
        spec["nodeName"] = node_name
    if priority is not None:
        spec["priority"] = priority
    if tolerations:
        spec["tolerations"] = tolerations
    if node_selector:
        spec["nodeSelector"] = node_selector
    if affinity:
        spec["affinity"] = affinity
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    status: dict[str, Any] = {"phase": "Running" if node_name else "Pending"}
    if scheduled_at is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(scheduled_at)}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def gang_labels(group: str, min_available: int) -> dict[str, str]:
    return {GANG_NAME: group, GANG_MIN: str(min_available)}


def node_metric(
    name: str,
    cpu: str | None = None,
    memory: str | None = None,
    *,
    updated: float | None = T0,
    report_interval: int | None = 60,
    aggregated: list[dict[str, Any]] | None = None,
    pods: list[dict[str, Any]] | None = None,
    system: dict[str, str] | None = None,
) -> dict[str, Any]:
    built = MakeNodeMetric(name).report_interval(report_interval).node_usage(cpu, memory).updated(updated)
    if aggregated is not None:
        built.aggregated(aggregated)
    if system is not None:
        built.system(system.get("cpu"), system.get("memory"))
    return built.pods(pods or []).obj()


def pod_metric(name: str, cpu: str, memory: str = "0", namespace: str = "default", priority: str = "") -> dict[str, Any]:
    return pod_usage(namespace, name, cpu, memory, priority=priority)


def pod_group(name: str, min_member: int, *, namespace: str = "default", created: float = T0,
              min_resources: dict[str, str] | None = None, timeout: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": min_member}
    if min_resources:
        spec["minResources"] = min_resources
    if timeout is not None:
        spec["scheduleTimeoutSeconds"] = timeout
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": rfc3339(created)},
        "spec": spec,
    }


def default_framework(
    snapshot: Snapshot, config: str | dict[str, Any] | None = None, clock: FakeClock | None = None
) -> tuple[Framework, FakeClock, InMemoryBinder]:
    clock = clock or FakeClock()
    binder = InMemoryBinder()
    frameworks = frameworks_from_config(config, snapshot=snapshot, clock=clock, binder=binder)
    return next(iter(frameworks.values())), clock, binder
