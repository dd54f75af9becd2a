"""Invariants of a round over random clusters (Hypothesis)."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_plugin.descheduler import NodeMetricSnapshot, NodeSnapshot, PodSnapshot
from tests.unit.descheduler.builders import NOW, GiB, make_args, rs_pod, run

HIGH = {"cpu": 75.0, "memory": 80.0}


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[NodeSnapshot], list[PodSnapshot], list[NodeMetricSnapshot]]:
    """Random nodes, plus one hot node whose pods are movable and one idle node with room for
    them, so that every round plans evictions and the invariants below are exercised."""
    nodes, pods, metrics = [], [], []
    hot_cpu = float(draw(st.sampled_from([4000, 8000])))
    nodes.append(NodeSnapshot("hot", allocatable={"cpu": hot_cpu, "memory": 32.0 * GiB, "pods": 20}))
    hot_usages = {}
    for j in range(draw(st.integers(3, 6))):
        pod = rs_pod(f"hot-{j}", "hot", created=float(draw(st.integers(0, 50))), cpu_request=100.0,
                     mem_request=0.25 * GiB, replicas=12)  # fmt: skip
        pods.append(pod)
        hot_usages[pod.key] = {"cpu": hot_cpu / 3, "memory": 1.0 * GiB}  # ≥ 100 % in all
    metrics.append(NodeMetricSnapshot("hot", NOW - 10, {"cpu": 0.0, "memory": 0.0}, hot_usages))
    nodes.append(NodeSnapshot("idle", allocatable={"cpu": 32000.0, "memory": 64.0 * GiB, "pods": 110}))
    metrics.append(NodeMetricSnapshot("idle", NOW - 10, {"cpu": 0.0, "memory": 0.0}, {}))
    for i in range(draw(st.integers(0, 5))):
        name = f"n{i}"
        cpu = float(draw(st.sampled_from([4000, 8000, 16000, 32000])))
        mem = float(draw(st.sampled_from([8, 32, 64]))) * GiB
        nodes.append(NodeSnapshot(name, allocatable={"cpu": cpu, "memory": mem, "pods": 20}))
        usages = {}
        for j in range(draw(st.integers(0, 10))):
            pod = rs_pod(
                f"p{i}-{j}",
                name,
                namespace=draw(st.sampled_from(["default", "team", "kube-system"])),
                priority=draw(st.sampled_from([None, 3500, 5500, 9500])),
                created=float(draw(st.integers(0, 50))),
                cpu_request=float(draw(st.integers(0, 4000))),
                mem_request=float(draw(st.integers(0, 4))) * GiB,
                replicas=draw(st.sampled_from([None, 1, 3, 12])),
            )
            pods.append(pod)
            usages[pod.key] = {
                "cpu": float(draw(st.integers(0, int(cpu // 4)))),
                "memory": float(draw(st.integers(0, int(mem // 4 // GiB)))) * GiB,
            }
        system = {"cpu": float(draw(st.integers(0, int(cpu // 3)))), "memory": float(draw(st.integers(0, 2))) * GiB}
        metrics.append(NodeMetricSnapshot(name, NOW - 10, system, usages))
    return nodes, pods, metrics


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.booleans(), st.integers(1, 4))
def test_round_invariants(
    cluster: tuple[list[NodeSnapshot], list[PodSnapshot], list[NodeMetricSnapshot]], node_fit: bool, per_node: int
) -> None:
    nodes, pods, metrics = cluster
    args = make_args(nodeFit=node_fit, maxMigratingPerNode=per_node)
    plan = run(args, nodes, pods, metrics)

    by_name = {n.name: n for n in nodes}
    metric_of = {m.node_name: m for m in metrics}

    def usage(node: str) -> dict[str, float]:
        m = metric_of[node]
        total = dict(m.system_usage or {})
        for u in m.pod_usages.values():
            for r in ("cpu", "memory"):
                total[r] = total.get(r, 0.0) + (u.get(r) or 0.0)
        return total

    def threshold(node: str, r: str) -> float:
        return math.trunc(HIGH[r] * 0.01 * (by_name[node].allocatable[r] or 0.0))

    assert plan.evictions, "the generated cluster has a hot node with movable pods and room for them"
    moved_to: dict[str, dict[str, float]] = {}
    removed_from: dict[str, dict[str, float]] = {}
    per_source: dict[str, int] = {}
    for e in plan.evictions:
        assert e.pod.namespace != "kube-system"
        assert e.pod.node_name == e.node_name
        pod_u = metric_of[e.node_name].pod_usages[e.pod.key]
        # Before each eviction the source was still over some high threshold.
        before = {r: usage(e.node_name)[r] - removed_from.get(e.node_name, {}).get(r, 0.0) for r in HIGH}
        assert any(before[r] > threshold(e.node_name, r) for r in HIGH)
        per_source[e.node_name] = per_source.get(e.node_name, 0) + 1
        acc = removed_from.setdefault(e.node_name, {})
        for r in HIGH:
            acc[r] = acc.get(r, 0.0) + (pod_u.get(r) or 0.0)
        if node_fit:
            assert e.target_node is not None
            into = moved_to.setdefault(e.target_node, {})
            for r in HIGH:
                into[r] = into.get(r, 0.0) + (pod_u.get(r) or 0.0)
        else:
            assert e.target_node is None

    assert all(count <= per_node for count in per_source.values())
    # No target ends above its high threshold.
    for target, added in moved_to.items():
        for r in HIGH:
            assert usage(target)[r] + added[r] <= threshold(target, r)
    # Sources and targets are disjoint.
    assert not set(moved_to) & set(removed_from)
