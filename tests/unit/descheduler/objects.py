"""Kubernetes JSON (plain dicts, as watches deliver them) for the descheduler's I/O-layer tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tests.objects import T0, node, node_metric, pod, pod_usage

GiB = 1024**3
NOW = T0


def node_obj(name: str, *, cpu: str = "10", memory: str = "40Gi", rv: str = "1", **kw: Any) -> dict[str, Any]:
    """A node of 10 cores / 40 GiB."""
    return node(name, cpu=cpu, memory=memory, rv=rv, **kw)


def pod_obj(
    name: str,
    node_name: str | None,
    *,
    cpu: str = "100m",
    memory: str = "256Mi",
    owner: tuple[str, str] | None = ("ReplicaSet", "web"),
    rv: str = "1",
    ready: bool = True,
    created: float = NOW - 3600,
    **kw: Any,
) -> dict[str, Any]:
    """A ready pod of a ReplicaSet `web`, an hour old, requesting 100m / 256Mi."""
    return pod(name, cpu, memory, node_name=node_name, owner=owner, rv=rv, ready=ready, created=created, **kw)


def replicaset_obj(name: str, replicas: int, *, rv: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": rv}, "spec": {"replicas": replicas}}


def nodemetric_obj(
    node_name: str,
    pods: Sequence[tuple[str, str, str, str]] = (),  # (namespace, name, cpu, memory)
    *,
    system_cpu: str = "500m",
    system_memory: str = "2Gi",
    updated: float | None = NOW - 30,
    rv: str = "1",
) -> dict[str, Any]:
    """A NodeMetric 30 s old with the system's usage and the pods' usages given."""
    return node_metric(node_name, system={"cpu": system_cpu, "memory": system_memory}, updated=updated, rv=rv,
                       pods=[pod_usage(*entry) for entry in pods], report_interval=None)  # fmt: skip


def store(*objs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A reflector store: key namespace/name (or name) -> object."""
    out = {}
    for obj in objs:
        meta = obj["metadata"]
        out[f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]] = obj
    return out
