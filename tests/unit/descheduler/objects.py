"""Kubernetes JSON (plain dicts, as watches deliver them) for the descheduler's I/O-layer tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tests.objects import MakeNodeMetric, rfc3339

GiB = 1024**3
NOW = 1_700_000_000.0


def node_obj(name: str, *, cpu: str = "10", memory: str = "40Gi", labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None, rv: str = "1", **spec: Any) -> dict[str, Any]:  # fmt: skip
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    return {
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}, "resourceVersion": rv},
        "spec": spec,
        "status": {"allocatable": allocatable, "capacity": allocatable},
    }


def pod_obj(
    name: str,
    node: str | None,
    *,
    namespace: str = "default",
    cpu: str = "100m",
    memory: str = "256Mi",
    owner: tuple[str, str] | None = ("ReplicaSet", "web"),
    labels: dict[str, str] | None = None,
    rv: str = "1",
    ready: bool = True,
    deleting: bool = False,
    created: float = NOW - 3600,
    **spec: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{namespace}-{name}",
        "labels": labels or {},
        "resourceVersion": rv,
        "creationTimestamp": rfc3339(created),
    }
    if owner is not None:
        kind, owner_name = owner
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": kind, "name": owner_name, "uid": f"uid-{owner_name}", "controller": True}
        ]
    if deleting:
        meta["deletionTimestamp"] = rfc3339(NOW)
    body: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
    if node:
        body["nodeName"] = node
    body.update(spec)
    status: dict[str, Any] = {
        "phase": "Running" if node else "Pending",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    return {"metadata": meta, "spec": body, "status": status}


def replicaset_obj(name: str, replicas: int, *, rv: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": rv}, "spec": {"replicas": replicas}}


def nodemetric_obj(
    node: str,
    pods: Sequence[tuple[str, str, str, str]] = (),  # (namespace, name, cpu, memory)
    *,
    system_cpu: str = "500m",
    system_memory: str = "2Gi",
    updated: float | None = NOW - 30,
    rv: str = "1",
) -> dict[str, Any]:
    built = MakeNodeMetric(node).resource_version(rv).system(system_cpu, system_memory).pods([])
    for ns, name, cpu, mem in pods:
        built.pod(ns, name, cpu, mem)
    return built.updated(updated).obj()


def store(*objs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A reflector store: key namespace/name (or name) -> object."""
    out = {}
    for obj in objs:
        meta = obj["metadata"]
        out[f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]] = obj
    return out
