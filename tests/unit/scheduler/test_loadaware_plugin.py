"""LoadAwareScheduling over a snapshot: thresholds, expiry, the assign cache, prod/aggregated paths, scoring.

Units: cpu milli-cores. Nodes have 4 cpu / 8Gi unless said otherwise. An incoming
`pod(cpu="1", memory="1Gi")` is estimated at 850m cpu and round(1Gi × 0.7) = 751619277 bytes.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from common.api.malformed import MalformedObjectError
from scheduler_plugin.framework.clock import FakeClock
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.filterresult import FilterResult
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.runtime import Framework
from scheduler_plugin.framework.schedule_one import scheduling_cycle
from scheduler_plugin.framework.snapshot import CPU, Snapshot
from scheduler_plugin.plugins.loadaware import LoadAwareScheduling, LoadAwareSchedulingArgs
from scheduler_plugin.plugins.loadaware.nodeload import NodeLoads
from tests.objects import T0, node, node_metric, pod
from tests.unit.scheduler.builders import default_framework, pod_metric

GI = 1024**3
EST_MEM = 751619277
NOW = T0 + 10

Obj = dict[str, Any]


def setup(nodes: list[Obj], metrics: list[Obj], pods: list[Obj] | None = None,
          **args: Any) -> tuple[LoadAwareScheduling, Snapshot, FakeClock]:
    snap = Snapshot.from_objects(nodes=nodes, stores={NodeLoads: metrics}, pods=pods or [])
    clock = FakeClock(NOW)
    fw = Framework("t", snapshot=snap, clock=clock)
    plugin = LoadAwareScheduling(LoadAwareSchedulingArgs.model_validate(args), fw)
    return plugin, snap, clock


def verdicts(plugin: LoadAwareScheduling, snap: Snapshot, p: Obj) -> dict[str, str]:
    """node -> "ok" or its rejection reason."""
    rows = snap.node_indices()
    result: FilterResult = plugin.filter(CycleState(), PodInfo.from_dict(p), snap, rows)
    out = {snap.node_name(int(r)): "ok" for r in rows}
    for rejection in result.rejections:
        for r in rows[rejection.mask]:
            out[snap.node_name(int(r))] = rejection.reason
    return out


def scores(plugin: LoadAwareScheduling, snap: Snapshot, p: Obj) -> dict[str, int]:
    rows = snap.node_indices()
    values = plugin.score(CycleState(), PodInfo.from_dict(p), snap, rows)
    return {snap.node_name(int(r)): int(v) for r, v in zip(rows, values, strict=True)}


def test_worked_example_filter_and_score() -> None:
    # used cpu = 1000 + 850 = 1850 → 46.25% → 46 ≤ 65; memory = 2Gi + 751619277 → 33.75% → 34 ≤ 95
    # score: cpu (4000 − 1850) × 100 / 4000 = 53; memory (8Gi − 2899102925) × 100 / 8Gi = 66 → (53 + 66) / 2 = 59
    plugin, snap, _ = setup([node("n1"), node("bare")], [node_metric("n1", cpu="1000m", memory="2Gi")])
    assert verdicts(plugin, snap, pod("p")) == {"n1": "ok", "bare": "ok"}
    assert scores(plugin, snap, pod("p")) == {"n1": 59, "bare": 0}  # no NodeMetric: passes, scores 0


def test_threshold_uses_go_rounding() -> None:
    # 1730 + 850 = 2580 of 4000 = 64.5% → Go rounds to 65 > 64: rejected (half-to-even would give 64 and pass)
    plugin, snap, _ = setup([node("n1")], [node_metric("n1", cpu="1730m", memory="1Gi")],
                            usageThresholds={"cpu": 64, "memory": 95})
    assert verdicts(plugin, snap, pod("p")) == {"n1": "node(s) cpu usage exceed threshold"}
    plugin, snap, _ = setup([node("n1")], [node_metric("n1", cpu="1729m", memory="1Gi")],
                            usageThresholds={"cpu": 64, "memory": 95})
    assert verdicts(plugin, snap, pod("p")) == {"n1": "ok"}  # 2579 → 64.475% → 64


def test_expired_node_metrics() -> None:
    stale = [node_metric("n1", cpu="100m", memory="1Gi", updated=NOW - 180)]  # age 180 ≥ 180: expired
    fresh = [node_metric("n1", cpu="100m", memory="1Gi", updated=NOW - 179)]
    plugin, snap, _ = setup([node("n1")], stale)
    assert verdicts(plugin, snap, pod("p")) == {"n1": "node(s) nodeMetric expired"}
    assert scores(plugin, snap, pod("p")) == {"n1": 0}
    plugin, snap, _ = setup([node("n1")], fresh)
    assert verdicts(plugin, snap, pod("p")) == {"n1": "ok"} and scores(plugin, snap, pod("p"))["n1"] > 0
    plugin, snap, _ = setup([node("n1")], stale, enableScheduleWhenNodeMetricsExpired=True)
    assert verdicts(plugin, snap, pod("p")) == {"n1": "ok"}
    assert scores(plugin, snap, pod("p")) == {"n1": 0}  # expired metrics never score
    # filterExpiredNodeMetrics=false: an expired metric is still checked against the thresholds
    hot_stale = [node_metric("n1", cpu="3900m", memory="1Gi", updated=NOW - 1000)]
    plugin, snap, _ = setup([node("n1")], hot_stale, filterExpiredNodeMetrics=False)
    assert verdicts(plugin, snap, pod("p")) == {"n1": "node(s) cpu usage exceed threshold"}
    no_time = [node_metric("n1", cpu="100m", memory="1Gi", updated=None)]
    plugin, snap, _ = setup([node("n1")], no_time)
    assert verdicts(plugin, snap, pod("p")) == {"n1": "node(s) nodeMetric expired"}


def test_daemonset_pods_always_pass() -> None:
    plugin, snap, _ = setup([node("n1")], [node_metric("n1", cpu="3900m", memory="1Gi")])
    assert verdicts(plugin, snap, pod("p")) == {"n1": "node(s) cpu usage exceed threshold"}
    assert verdicts(plugin, snap, pod("ds", owner=("DaemonSet", "o"))) == {"n1": "ok"}


def test_assign_cache_counts_pods_placed_since_the_last_node_metric() -> None:
    metric = [node_metric("n1", cpu="1000m", memory="2Gi", updated=T0)]
    plugin, snap, clock = setup([node("n1")], metric)
    assert verdicts(plugin, snap, pod("p")) == {"n1": "ok"}  # 1850 → 46%
    snap.assume_pod(PodInfo.from_dict(pod("burst-1")), "n1", clock.now())
    # 1000 + 850 (burst-1, placed after the report) + 850 = 2700 → 67.5% → 68 > 65
    assert verdicts(plugin, snap, pod("p")) == {"n1": "node(s) cpu usage exceed threshold"}
    snap.forget_pod("default/burst-1")
    assert verdicts(plugin, snap, pod("p")) == {"n1": "ok"}


def test_reflected_and_partly_reflected_pods() -> None:
    metrics = [node_metric("n1", cpu="1000m", memory="2Gi", updated=T0, pods=[
        pod_metric("old", cpu="300m"), pod_metric("recent", cpu="300m")])]
    pods = [
        pod("old", node_name="n1", scheduled_at=T0 - 200),  # placed long before the report: fully in nodeUsage
        pod("recent", node_name="n1", scheduled_at=T0 - 30),  # within the report interval: delta max(0, e − u)
    ]
    plugin, snap, _ = setup([node("n1")], metrics, pods)
    # cpu: 1000 + (850 − 300) + 850 = 2400 → (4000 − 2400) × 100 / 4000 = 40
    # memory: 2Gi + (751619277 − 0) + 751619277 = 3650722202 → (8Gi − that) × 100 / 8Gi = 57 → (40 + 57) / 2 = 48
    assert scores(plugin, snap, pod("p")) == {"n1": 48}
    table = plugin.table
    row = snap.node_by_name("n1").index  # type: ignore[union-attr]
    assert table.base_usage[table.position["cpu"], row] == 1000 + 550  # nodeUsage + the delta of "recent"


def test_prod_thresholds_use_prod_usage() -> None:
    metrics = [node_metric("n1", cpu="3000m", memory="1Gi", updated=T0, system={"cpu": "400m", "memory": "0"},
                           pods=[pod_metric("web", cpu="1000m", priority="koord-prod")])]
    pods = [pod("web", node_name="n1", priority=9500, scheduled_at=T0 - 600)]
    args = {"usageThresholds": {"cpu": 80, "memory": 95}, "prodUsageThresholds": {"cpu": 50}}
    plugin, snap, clock = setup([node("n1")], metrics, pods, **args)
    prod = pod("api", priority=9500)
    batch = pod("job", cpu=None, memory=None, priority=5500, requests={"kubernetes.io/batch-cpu": "1000"})
    # prod: 1000 (prod usage) + 850 = 1850 → 46% ≤ 50, although the node is at 75% overall
    assert verdicts(plugin, snap, prod) == {"n1": "ok"}
    # batch: 3000 + round(1000 × 0.85) = 3850 → 96% > 80
    assert verdicts(plugin, snap, batch) == {"n1": "node(s) cpu usage exceed threshold"}
    snap.assume_pod(PodInfo.from_dict(pod("api-2", priority=9500)), "n1", clock.now())
    # another prod pod just placed: 1000 + 850 + 850 = 2700 → 68% > 50
    assert verdicts(plugin, snap, prod) == {"n1": "node(s) cpu usage exceed threshold"}
    plugin, snap, _ = setup([node("n1")], metrics, pods, prodUsageIncludeSys=True, **args)
    # with system usage: 1000 + 400 + 850 = 2250 → 56% > 50
    assert verdicts(plugin, snap, prod) == {"n1": "node(s) cpu usage exceed threshold"}


def _aggregated(window: str, p95_cpu: str) -> list[Obj]:
    return [{"duration": window, "usage": {"p95": {"resources": {"cpu": p95_cpu, "memory": "1Gi"}}}}]


def test_aggregated_thresholds_and_missing_windows() -> None:
    metrics = [node_metric("n1", cpu="500m", memory="1Gi", aggregated=_aggregated("5m0s", "2100m"))]
    agg = {"usageThresholds": {"cpu": 50}, "usageAggregationType": "p95", "usageAggregatedDuration": "5m"}
    plugin, snap, _ = setup([node("n1")], metrics, aggregated=agg)
    # p95 2100 + 850 = 2950 → 74% > 50
    assert verdicts(plugin, snap, pod("p")) == {"n1": "node(s) cpu aggregated usage exceed threshold"}
    plugin, snap, _ = setup([node("n1")], metrics, aggregated={**agg, "usageAggregatedDuration": "10m"})
    # no 10m window: base = estimates of assigned pods (none) → 850 → 21%
    assert verdicts(plugin, snap, pod("p")) == {"n1": "ok"}
    plugin, snap, _ = setup([node("n1")], metrics, aggregated={k: v for k, v in agg.items() if k != "usageAggregatedDuration"})
    # no window asked: the longest window with data (5m)
    assert verdicts(plugin, snap, pod("p")) == {"n1": "node(s) cpu aggregated usage exceed threshold"}


def test_aggregated_score() -> None:
    metrics = [node_metric("n1", cpu="500m", memory="1Gi", aggregated=_aggregated("5m0s", "2150m"))]
    plugin, snap, _ = setup([node("n1")], metrics, aggregated={"scoreAggregationType": "p95"})
    # cpu: 2150 + 850 = 3000 → 25; memory: 1Gi + 751619277 → (8Gi − 1825361101) × 100 / 8Gi = 78 → (25 + 78) / 2 = 51
    assert scores(plugin, snap, pod("p")) == {"n1": 51}


def test_node_annotation_overrides_thresholds() -> None:
    annotation = {"scheduling.koordinator.sh/usage-thresholds": json.dumps({"usageThresholds": {"cpu": 40}})}
    nodes = [node("strict", annotations=annotation), node("normal"), node("garbled", annotations={
        "scheduling.koordinator.sh/usage-thresholds": "{not json"})]
    metrics = [node_metric(n, cpu="1000m", memory="2Gi") for n in ("strict", "normal", "garbled")]
    plugin, snap, _ = setup(nodes, metrics)
    # 1850 → 46%: over the node's own 40, under the default 65; an unreadable annotation falls back to the args
    assert verdicts(plugin, snap, pod("p")) == {
        "strict": "node(s) cpu usage exceed threshold", "normal": "ok", "garbled": "ok",
    }


def test_raw_allocatable_annotation_is_the_denominator() -> None:
    nodes = [node("n1", cpu="8", annotations={"node.koordinator.sh/raw-allocatable": json.dumps({"cpu": "4"})})]
    plugin, snap, _ = setup(nodes, [node_metric("n1", cpu="2000m", memory="1Gi")])
    # 2000 + 850 = 2850 of the raw 4000 → 71% > 65 (of the amplified 8000 it would be 36%)
    assert verdicts(plugin, snap, pod("p")) == {"n1": "node(s) cpu usage exceed threshold"}


def test_most_used_strategy_packs() -> None:
    nodes = [node("idle"), node("busy")]
    metrics = [node_metric("idle", cpu="800m", memory="1Gi"), node_metric("busy", cpu="2000m", memory="1Gi")]
    plugin, snap, _ = setup(nodes, metrics, scoringStrategy={"type": "MostUsed"})
    s = scores(plugin, snap, pod("p"))
    # busy cpu 2850 → 100 − 28 = 72; idle 1650 → 100 − 58 = 42; memory equal on both
    assert s["busy"] > s["idle"]
    plugin, snap, _ = setup(nodes, metrics)
    s = scores(plugin, snap, pod("p"))
    assert s["idle"] > s["busy"]


def test_burst_spreads_instead_of_piling_onto_the_coldest_node() -> None:
    nodes = [node(f"n{i}") for i in range(4)]
    metrics = [node_metric("n0", cpu="200m", memory="0")] + [node_metric(f"n{i}", cpu="800m", memory="0") for i in (1, 2, 3)]
    snap = Snapshot.from_objects(nodes=nodes, stores={NodeLoads: metrics})
    only_loadaware_scores = {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "profiles": [{"plugins": {"score": {"disabled": [{"name": "*"}], "enabled": [{"name": "LoadAwareScheduling"}]}}}],
    }
    fw, _, _ = default_framework(snap, only_loadaware_scores, clock=FakeClock(NOW))
    placed = [scheduling_cycle(fw, PodInfo.from_dict(pod(f"p{i}"))).node_name for i in range(8)]
    # The cold node scores best first, then the estimates of the pods just placed bring it level with the others.
    assert placed[0] == "n0"
    assert sorted(placed[1:4]) == ["n1", "n2", "n3"]
    assert sorted(placed[4:]) == ["n0", "n1", "n2", "n3"]
    last = scheduling_cycle(fw, PodInfo.from_dict(pod("p8")))
    assert last.status.message == (
        "0/4 nodes are available: 4 node(s) cpu usage exceed threshold. "
        "preemption: 0/4 nodes are available: 4 No preemption victims found for incoming pod.")
    assert np.all(snap.requested[CPU] == 2000)


def test_a_node_metric_from_the_future_is_expired_beyond_the_clock_skew() -> None:
    ahead = [node_metric("n1", cpu="100m", memory="1Gi", updated=NOW + 365 * 86400)]  # a year ahead
    plugin, snap, _ = setup([node("n1")], ahead)
    assert verdicts(plugin, snap, pod("p")) == {"n1": "node(s) nodeMetric expired"}
    assert scores(plugin, snap, pod("p")) == {"n1": 0}
    skewed = [node_metric("n1", cpu="100m", memory="1Gi", updated=NOW + 59)]  # within MAX_CLOCK_SKEW_SECONDS
    plugin, snap, _ = setup([node("n1")], skewed)
    assert verdicts(plugin, snap, pod("p")) == {"n1": "ok"} and scores(plugin, snap, pod("p"))["n1"] > 0


def test_usage_beyond_the_range_rule_leaves_the_node_with_an_expired_node_metric() -> None:
    """"1e16" cores used to overflow the int64 arrays; "8Ei" and "9223372036854775807m" wrapped to look idle."""
    for cpu, memory in (("1e16", "1Gi"), ("100m", "8Ei"), ("9223372036854775807m", "1Gi")):
        plugin, snap, _ = setup([node("n1"), node("bare")], [node_metric("n1", cpu="100m", memory="1Gi")])
        assert scores(plugin, snap, pod("p"))["n1"] > 0
        with pytest.raises(MalformedObjectError, match="out of range"):
            snap.store(NodeLoads).upsert(node_metric("n1", cpu=cpu, memory=memory))
        # the valid version before it is not used either: the node's load is unknown, as with an expired NodeMetric
        assert verdicts(plugin, snap, pod("p")) == {"n1": "node(s) nodeMetric expired", "bare": "ok"}
        assert scores(plugin, snap, pod("p")) == {"n1": 0, "bare": 0}
        with pytest.raises(MalformedObjectError, match="out of range"):
            Snapshot.from_objects(nodes=[node("n1")], stores={NodeLoads: [node_metric("n1", cpu=cpu, memory=memory)]})
