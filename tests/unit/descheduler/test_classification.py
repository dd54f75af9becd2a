"""Node usage, thresholds (static and deviation), classification, capacity and source order,
with numbers worked out by hand in the comments."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler_plugin.descheduler.args import resolve_pools
from scheduler_plugin.descheduler.classify import classify, headroom_sum, order_sources, usage_scores, weight_vector
from scheduler_plugin.descheduler.model import NodeMetricSnapshot, NodeSnapshot, PodSnapshot
from scheduler_plugin.descheduler.thresholds import compute_thresholds, mean_usage_percent
from scheduler_plugin.descheduler.usage import NodeTable, measure_nodes
from tests.unit.descheduler.builders import NOW, GiB, make_args, metric, node, rs_pod


def measure(
    args_kw: dict[str, object],
    nodes: list[NodeSnapshot],
    metrics: list[NodeMetricSnapshot],
    pods: list[PodSnapshot] = (),  # type: ignore[assignment]
) -> tuple[NodeTable, dict[str, str]]:
    pool = resolve_pools(make_args(**args_kw))[0]
    by_node: dict[str, list[PodSnapshot]] = {}
    for p in pods:
        by_node.setdefault(p.node_name, []).append(p)
    return measure_nodes(
        nodes,
        {m.node_name: m for m in metrics},
        by_node,
        resources=pool.resource_names,
        prod_enabled=pool.prod_enabled,
        now=NOW,
        expiration_seconds=180,
    )


def cpu_node(name: str, cpu_pct: float, mem_pct: float = 10.0) -> tuple[NodeSnapshot, NodeMetricSnapshot]:
    """A 10-core / 40 GiB node whose whole usage is system usage."""
    return node(name), metric(name, system_cpu=cpu_pct * 100.0, system_mem=mem_pct / 100.0 * 40 * GiB)


def test_usage_is_system_plus_pod_metrics_not_node_usage() -> None:
    a, b = rs_pod("a", "n1"), rs_pod("b", "n1")
    m = metric("n1", system_cpu=400, system_mem=1 * GiB, pods=[(a, 1200, 2 * GiB), (b, 900, 3 * GiB)])
    table, skipped = measure({}, [node("n1")], [m], [a, b])
    assert skipped == {}
    assert table.resources == ("cpu", "memory")
    # cpu 400 + 1200 + 900 = 2500m; memory 1 + 2 + 3 = 6 GiB
    np.testing.assert_array_equal(table.usage, [[2500.0, 6.0 * GiB]])
    np.testing.assert_array_equal(table.allocatable, [[10_000.0, 40.0 * GiB]])


def test_raw_allocatable_annotation_overrides_allocatable_per_key() -> None:
    # CPU normalisation amplified allocatable to 20 cores; the raw value is 10 cores.
    n = NodeSnapshot("n1", allocatable={"cpu": 20_000, "memory": 40 * GiB}, raw_allocatable={"cpu": 10_000})
    table, _ = measure({}, [n], [metric("n1", system_cpu=8000)])
    np.testing.assert_array_equal(table.allocatable, [[10_000.0, 40.0 * GiB]])
    th = compute_thresholds(table, resolve_pools(make_args())[0])
    # 8000m of 10 cores is 80 % > 75 %: high; against the amplified 20 cores it would be 40 % (low).
    assert classify(table, th, prod_enabled=False).high.tolist() == [True]


def test_static_thresholds_classify_low_normal_high() -> None:
    pairs = [cpu_node("n1", 10), cpu_node("n2", 44.99), cpu_node("n3", 60), cpu_node("n4", 75.01), cpu_node("n5", 75)]
    table, _ = measure({}, [p[0] for p in pairs], [p[1] for p in pairs])
    pool = resolve_pools(make_args())[0]
    th = compute_thresholds(table, pool)
    # low cpu 45 % of 10000m = 4500m, high 75 % = 7500m; memory low 55 % / high 80 % of 40 GiB
    np.testing.assert_array_equal(th.low[0], [4500.0, np.trunc(0.55 * 40 * GiB)])
    np.testing.assert_array_equal(th.high[0], [7500.0, np.trunc(0.8 * 40 * GiB)])
    cls = classify(table, th, prod_enabled=False)
    assert cls.low.tolist() == [True, True, False, False, False]
    assert cls.high.tolist() == [False, False, False, True, False]  # exactly 75 % is not over
    assert cls.normal.tolist() == [False, False, True, False, True]
    assert not cls.both_low.any() and not cls.prod_low.any() and not cls.prod_high.any()


def test_memory_alone_makes_a_node_high_and_not_low() -> None:
    n, m = cpu_node("n1", 10, mem_pct=81)
    table, _ = measure({}, [n], [m])
    cls = classify(table, compute_thresholds(table, resolve_pools(make_args())[0]), prod_enabled=False)
    assert cls.high.tolist() == [True] and cls.low.tolist() == [False]


def test_unschedulable_node_is_never_low() -> None:
    n = node("n1", unschedulable=True)
    table, _ = measure({}, [n], [metric("n1", system_cpu=100)])
    cls = classify(table, compute_thresholds(table, resolve_pools(make_args())[0]), prod_enabled=False)
    assert cls.low.tolist() == [False] and cls.normal.tolist() == [True]


def test_missing_resource_thresholds_default_to_100_percent() -> None:
    # Only cpu thresholds: memory is still accounted, against 100 %, so 99 % memory is "low".
    n, m = cpu_node("n1", 10, mem_pct=99)
    kw = {"lowThresholds": {"cpu": 45}, "highThresholds": {"cpu": 75}}
    table, _ = measure(kw, [n], [m])
    th = compute_thresholds(table, resolve_pools(make_args(**kw))[0])
    assert table.resources == ("cpu", "memory")
    assert th.high_pct[0].tolist() == [75.0, 100.0]
    cls = classify(table, th, prod_enabled=False)
    assert cls.low.tolist() == [True] and cls.high.tolist() == [False]


def test_deviation_thresholds_follow_the_mean() -> None:
    # cpu usage 10 %, 30 %, 50 %, 90 % -> mean 45 %. low = 45 - 10 = 35 %, high = 45 + 20 = 65 %.
    pairs = [cpu_node("n1", 10), cpu_node("n2", 30), cpu_node("n3", 50), cpu_node("n4", 90)]
    kw = {"useDeviationThresholds": True, "lowThresholds": {"cpu": 10}, "highThresholds": {"cpu": 20}}
    table, _ = measure(kw, [p[0] for p in pairs], [p[1] for p in pairs])
    np.testing.assert_allclose(mean_usage_percent(table.usage, table.allocatable)[0], 45.0)
    th = compute_thresholds(table, resolve_pools(make_args(**kw))[0])
    np.testing.assert_allclose(th.high_pct[:, 0], [65.0] * 4)
    np.testing.assert_array_equal(th.low[:, 0], [3500.0] * 4)
    np.testing.assert_array_equal(th.high[:, 0], [6500.0] * 4)
    # memory has no low deviation: ignored, thresholds are the whole allocatable.
    np.testing.assert_array_equal(th.high[:, 1], [40.0 * GiB] * 4)
    cls = classify(table, th, prod_enabled=False)
    assert cls.low.tolist() == [True, True, False, False]
    assert cls.normal.tolist() == [False, False, True, False]
    assert cls.high.tolist() == [False, False, False, True]


def test_deviation_thresholds_are_clamped_to_0_and_100() -> None:
    # mean (5 + 95) / 2 = 50 %; low 50 - 60 -> 0 %, high 50 + 70 -> 100 %.
    pairs = [cpu_node("n1", 5), cpu_node("n2", 95)]
    kw = {"useDeviationThresholds": True, "lowThresholds": {"cpu": 60}, "highThresholds": {"cpu": 70}}
    table, _ = measure(kw, [p[0] for p in pairs], [p[1] for p in pairs])
    th = compute_thresholds(table, resolve_pools(make_args(**kw))[0])
    assert th.low[0, 0] == 0.0 and th.high[0, 0] == 10_000.0
    cls = classify(table, th, prod_enabled=False)
    assert not cls.low.any() and not cls.high.any()


def prod_setup() -> tuple[NodeTable, list[PodSnapshot]]:
    # prod pods: Burstable pods without priority default to koord-prod; the batch pod does not count.
    pods = []
    metrics = []
    nodes = []
    spec = {
        # name: (prod cpu, batch cpu); system 0
        "bothlow": (500, 0),  # node 5 %, prod 5 %
        "low": (2000, 0),  # node 20 %, prod 20 %  (prod low 10 %, prod high 30 %)
        "prodhigh_lownode": (3500, 0),  # node 35 % (low), prod 35 % > 30 %
        "prodlow": (500, 5000),  # node 55 % normal, prod 5 %
        "prodhigh": (4000, 2000),  # node 60 % normal, prod 40 %
        "normal": (2000, 4000),  # node 60 %, prod 20 %: neither
        "high": (1000, 7000),  # node 80 %
    }
    for name, (prod_cpu, batch_cpu) in spec.items():
        prod_pod = rs_pod(f"{name}-prod", name)
        batch_pod = rs_pod(f"{name}-batch", name, priority=5500)
        pods += [prod_pod, batch_pod]
        nodes.append(node(name))
        metrics.append(
            metric(name, system_cpu=0, system_mem=0, pods=[(prod_pod, prod_cpu, 0), (batch_pod, batch_cpu, 0)])
        )
    kw = {"prodLowThresholds": {"cpu": 10}, "prodHighThresholds": {"cpu": 30}}
    table, _ = measure(kw, nodes, metrics, pods)
    return table, pods


def test_prod_classification() -> None:
    table, _ = prod_setup()
    np.testing.assert_array_equal(table.prod_usage[:, 0], [500, 2000, 3500, 500, 4000, 2000, 1000])
    pool = resolve_pools(make_args(prodLowThresholds={"cpu": 10}, prodHighThresholds={"cpu": 30}))[0]
    cls = classify(table, compute_thresholds(table, pool), prod_enabled=True)
    names = table.names
    got = {
        name: [c for c in ("low", "both_low", "high", "prod_low", "prod_high", "normal") if getattr(cls, c)[i]]
        for i, name in enumerate(names)
    }
    assert got == {
        "bothlow": ["both_low"],
        "low": ["low"],
        "prodhigh_lownode": ["prod_high"],
        "prodlow": ["prod_low"],
        "prodhigh": ["prod_high"],
        "normal": ["normal"],
        "high": ["high"],
    }


def test_available_capacity_is_headroom_under_high_thresholds() -> None:
    # Koordinator's example: a node at 20 % with high 70 % on 96 cores can take (70 % - 20 %) * 96 = 48 cores.
    n = node("a", cpu=96_000)
    table, _ = measure({"highThresholds": {"cpu": 70}}, [n], [metric("a", system_cpu=0.2 * 96_000)])
    pool = resolve_pools(make_args(highThresholds={"cpu": 70}))[0]
    th = compute_thresholds(table, pool)
    cls = classify(table, th, prod_enabled=False)
    assert cls.low.tolist() == [True]
    avail = headroom_sum(cls.low, th.high, table.usage)
    assert avail[0] == pytest.approx(48_000.0)


def test_sources_are_ordered_by_weighted_usage_score() -> None:
    # Scores (per resource min(used, alloc)*1000//alloc, weighted mean, integer division):
    # a: cpu 900, mem 100 -> (900 + 100) // 2 = 500; b: cpu 800, mem 500 -> 650; c: cpu 950, mem 50 -> 500
    pairs = [cpu_node("a", 90, 10), cpu_node("b", 80, 50), cpu_node("c", 95, 5)]
    table, _ = measure({}, [p[0] for p in pairs], [p[1] for p in pairs])
    w = weight_vector(table.resources, {"cpu": 1, "memory": 1})
    scores = usage_scores(table.usage, table.allocatable, w)
    assert scores.tolist() == [500, 650, 500]
    assert order_sources(np.arange(3), table.names, scores) == [1, 0, 2]  # ties by name
    # cpu weighted 3: a (2700 + 100) // 4 = 700, b (2400 + 500) // 4 = 725, c (2850 + 50) // 4 = 725
    w3 = weight_vector(table.resources, {"cpu": 3, "memory": 1})
    assert usage_scores(table.usage, table.allocatable, w3).tolist() == [700, 725, 725]
