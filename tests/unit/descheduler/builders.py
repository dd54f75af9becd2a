"""Small factories for descheduler tests: nodes of 10 cores / 40 GiB unless told otherwise."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from scheduler_plugin.descheduler import (
    DetectorStore,
    LowNodeLoadArgs,
    NodeMetricSnapshot,
    NodeSnapshot,
    OwnerRef,
    PodSnapshot,
    RoundPlan,
    parse_args,
    plan_round,
)

GiB = 1024**3
NOW = 1_000_000.0
CPU_ALLOC = 10_000.0  # millicores
MEM_ALLOC = 40.0 * GiB


def make_args(**overrides: Any) -> LowNodeLoadArgs:
    data: dict[str, Any] = {
        "lowThresholds": {"cpu": 45, "memory": 55},
        "highThresholds": {"cpu": 75, "memory": 80},
        # Most tests look at one round; anomaly detection has its own tests.
        "anomalyCondition": {"consecutiveAbnormalities": 1},
    }
    data.update(overrides)
    return parse_args(data)


def node(name: str, cpu: float = CPU_ALLOC, memory: float = MEM_ALLOC, **kw: Any) -> NodeSnapshot:
    return NodeSnapshot(name=name, allocatable={"cpu": cpu, "memory": memory, "pods": 110}, **kw)


def rs_pod(
    name: str,
    node_name: str,
    *,
    namespace: str = "default",
    owner: str | None = None,
    replicas: int | None = 20,
    created: float = 100.0,
    cpu_request: float = 100.0,
    mem_request: float = 0.5 * GiB,
    **kw: Any,
) -> PodSnapshot:
    """A ReplicaSet-owned, Burstable pod; each pod gets its own ReplicaSet unless ``owner`` is given."""
    rs = owner or f"rs-{name}"
    return PodSnapshot(
        namespace=namespace,
        name=name,
        node_name=node_name,
        owner=OwnerRef(kind="ReplicaSet", name=rs, uid=f"uid-{namespace}-{rs}"),
        k8s_qos=kw.pop("k8s_qos", "Burstable"),
        creation_timestamp=created,
        requests={"cpu": cpu_request, "memory": mem_request},
        workload_replicas=replicas,
        **kw,
    )


def metric(
    node_name: str,
    *,
    system_cpu: float = 500.0,
    system_mem: float = 2.0 * GiB,
    pods: Iterable[tuple[PodSnapshot, float, float]] = (),
    age: float = 30.0,
) -> NodeMetricSnapshot:
    """A fresh NodeMetric; ``pods`` are (pod, cpu millicores, memory bytes)."""
    return NodeMetricSnapshot(
        node_name=node_name,
        update_time=NOW - age,
        system_usage={"cpu": system_cpu, "memory": system_mem},
        pod_usages={p.key: {"cpu": c, "memory": m} for p, c, m in pods},
    )


def run(
    args: LowNodeLoadArgs,
    nodes: list[NodeSnapshot],
    pods: list[PodSnapshot],
    metrics: list[NodeMetricSnapshot],
    *,
    detectors: DetectorStore | None = None,
    now: float = NOW,
) -> RoundPlan:
    return plan_round(
        args,
        nodes,
        pods,
        {m.node_name: m for m in metrics},
        detectors=detectors if detectors is not None else DetectorStore(300.0),
        now=now,
    )
