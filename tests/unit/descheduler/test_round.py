"""Whole rounds: which pods are planned, in which order, with which reason, and where they fit."""

from __future__ import annotations

import numpy as np
import pytest

from common.api.scheduling import Requirement, SelectorTerm, Taint, Toleration
from scheduler_plugin.descheduler import NodeSnapshot, PodSnapshot
from scheduler_plugin.descheduler.model import OwnerRef
from scheduler_plugin.descheduler.reason import descheduled_event_message, overutilized_reason
from tests.unit.descheduler.builders import GiB, make_args, metric, node, rs_pod, run


def hot_node_scenario() -> tuple[list[NodeSnapshot], list[PodSnapshot], list]:  # type: ignore[type-arg]
    """n1: 10 cores, system 500m + pods 8000m = 8500m = 85 % (high threshold 75 % = 7500m, excess 1000m).

    Pods (cpu usage):  a 300m koord-batch | b 2000m | c 1000m | d 1500m | e 1600m (new) | f 1600m (old)
    Fit scores against the 1000m excess: b ratio 2 -> 1.5; c ratio 1 -> 2; d 1.5 -> 1.667; e, f 1.6 -> 1.625.
    Order: a (lower priority class) then c, d, e, f, b.
    Evict a: 8500 - 300 = 8200 > 7500, go on; evict c: 8200 - 1000 = 7200 <= 7500, stop.
    n2, n3: idle at 5 %.
    """
    usage = {"a": 300, "b": 2000, "c": 1000, "d": 1500, "e": 1600, "f": 1600}
    created = {"e": 300.0, "f": 200.0}
    pods = [
        rs_pod(name, "n1", priority=5500 if name == "a" else None, created=created.get(name, 100.0)) for name in usage
    ]
    metrics = [
        metric("n1", pods=[(p, usage[p.name], 1 * GiB) for p in pods]),
        metric("n2"),
        metric("n3"),
    ]
    return [node("n1"), node("n2"), node("n3")], pods, metrics


def test_hot_node_drained_in_order_until_under_threshold_and_not_one_more() -> None:
    nodes, pods, metrics = hot_node_scenario()
    plan = run(make_args(maxMigratingPerNode=10), nodes, pods, metrics)
    assert [e.pod.name for e in plan.evictions] == ["a", "c"]
    assert [e.reason for e in plan.evictions] == [
        "node is overutilized, node cpu usage(85.00%)>threshold(75.00%)",
        "node is overutilized, node cpu usage(82.00%)>threshold(75.00%)",
    ]
    assert descheduled_event_message(plan.evictions[0].node_name, plan.evictions[0].reason) == (
        'Pod evicted from node "n1" by the reason "node is overutilized, node cpu usage(85.00%)>threshold(75.00%)"'
    )
    # Replacements are accounted on the least-loaded idle node each time: a -> n2, then c -> n3.
    assert [e.target_node for e in plan.evictions] == ["n2", "n3"]
    assert all(e.node_name == "n1" and not e.prod for e in plan.evictions)
    summary = plan.pools[0]
    assert (summary.low, summary.high, summary.normal, summary.anomalous) == (2, 1, 0, ["n1"])
    assert plan.pods_considered == 6


def test_max_migrating_per_node_caps_a_round() -> None:
    nodes, pods, metrics = hot_node_scenario()
    plan = run(make_args(maxMigratingPerNode=1), nodes, pods, metrics)
    assert [e.pod.name for e in plan.evictions] == ["a"]
    assert plan.pod_skips == {"maxMigratingPerNode reached": 1}


def test_kube_system_and_loadline_system_are_never_touched() -> None:
    pods = [rs_pod(f"sys{i}", "n1", namespace=ns) for i, ns in enumerate(["kube-system", "loadline-system"] * 2)]
    metrics = [metric("n1", pods=[(p, 2000, GiB) for p in pods]), metric("n2")]
    for overrides in ({}, {"evictableNamespaces": {"exclude": ["something-else"]}}):
        plan = run(make_args(**overrides), [node("n1"), node("n2")], pods, metrics)
        assert plan.evictions == []
        assert plan.pod_skips == {"namespace not evictable": 4}
    # Only an explicit include opens them.
    plan = run(make_args(evictableNamespaces={"include": ["kube-system"]}), [node("n1"), node("n2")], pods, metrics)
    assert {e.pod.namespace for e in plan.evictions} == {"kube-system"}


def test_include_namespaces_limit_candidates() -> None:
    pods = [rs_pod("a", "n1", namespace="team-a"), rs_pod("b", "n1", namespace="team-b")]
    metrics = [metric("n1", pods=[(pods[0], 1000, GiB), (pods[1], 7000, GiB)]), metric("n2")]
    plan = run(make_args(evictableNamespaces={"include": ["team-a"]}), [node("n1"), node("n2")], pods, metrics)
    assert [e.pod.name for e in plan.evictions] == ["a"]


def test_unremovable_pods_are_skipped_with_reasons() -> None:
    ds = OwnerRef(kind="DaemonSet", name="agent", uid="ds")
    web = {"app": "web"}
    pods = [
        PodSnapshot("default", "daemon", "n1", owner=ds, labels=web),
        PodSnapshot("default", "bare", "n1", labels=web),
        rs_pod("mirror", "n1", labels=web, annotations={"kubernetes.io/config.mirror": "x"}),
        rs_pod("local", "n1", labels=web, has_local_storage=True),
        rs_pod("terminating", "n1", labels=web, terminating=True),
        rs_pod("critical", "n1", labels=web, priority=2_000_000_000),
        rs_pod("never", "n1", labels=web, annotations={"scheduling.koordinator.sh/eviction-cost": str(2**31 - 1)}),
        rs_pod("unselected", "n1", labels={"app": "db"}),
        # The descheduler's evict annotation opts even a bare pod in.
        PodSnapshot(
            "default", "bare-opted-in", "n1", labels=web, annotations={"descheduler.alpha.kubernetes.io/evict": "true"}
        ),
        rs_pod("ok", "n1", labels=web),
    ]
    metrics = [metric("n1", system_cpu=0, pods=[(p, 1000, GiB) for p in pods]), metric("n2")]
    args = make_args(podSelectors=[{"name": "web", "selector": {"matchLabels": web}}], maxMigratingPerNode=10)
    plan = run(args, [node("n1"), node("n2")], pods, metrics)
    # 10 x 1000m = 100 %: two pods out bring it to 80 %, a third to 70 %.
    assert [e.pod.name for e in plan.evictions] == ["bare-opted-in", "ok"]
    assert plan.pod_skips == {
        "DaemonSet pod": 1,
        "bare pod (no controller)": 1,
        "mirror or static pod": 1,
        "local storage": 1,
        "terminating": 1,
        "system-critical priority": 1,
        "eviction-cost is MaxInt32": 1,
        "not matched by podSelectors": 1,
    }


def test_targets_are_never_filled_past_their_high_threshold() -> None:
    # hot: 20 cores, 4000m system + 8 pods x 2000m = 20000m (100 %); high 75 % = 15000m: needs 3 pods out.
    # idle1, idle2: 10 cores at 44 % = 4400m; each can take 7500 - 4400 = 3100m, together 6200m.
    # Pod 1 -> idle1 (6400m), pod 2 -> idle2 (6400m). Pod 3 (2000m) still fits the 2200m aggregate left,
    # but on either target it would make 8400m > 7500m: it stays, and so do the rest.
    pods = [rs_pod(f"p{i}", "hot", created=float(i)) for i in range(8)]
    nodes = [node("hot", cpu=20_000), node("idle1"), node("idle2")]
    metrics = [
        metric("hot", system_cpu=4000, pods=[(p, 2000, GiB) for p in pods]),
        metric("idle1", system_cpu=4400),
        metric("idle2", system_cpu=4400),
    ]
    plan = run(make_args(maxMigratingPerNode=10), nodes, pods, metrics)
    assert [(e.pod.name, e.target_node) for e in plan.evictions] == [("p7", "idle1"), ("p6", "idle2")]
    assert plan.pod_skips == {"no low node fits": 6}


def test_requests_taints_and_affinity_decide_the_target() -> None:
    gpu_taint = Taint(key="gpu", value="true", effect="NoSchedule")
    idle_tainted = node("tainted", taints=(gpu_taint,), labels={"zone": "b"})
    idle_small = NodeSnapshot(
        "small", allocatable={"cpu": 10_000, "memory": 40 * GiB, "pods": 110}, labels={"zone": "a"}
    )
    pods = [
        rs_pod("needs-zone-a", "hot", node_selector={"zone": "a"}, created=5.0),
        rs_pod(
            "needs-zone-b",
            "hot",
            created=4.0,
            required_node_affinity=(
                SelectorTerm(match_expressions=(Requirement("zone", "In", ("b",)),)),
            ),
        ),
        rs_pod(
            "tolerates",
            "hot",
            tolerations=(Toleration(key="gpu", operator="Exists"),),
            node_selector={"zone": "b"},
            created=3.0,
        ),
        rs_pod("too-big", "hot", cpu_request=50_000, created=2.0),
    ]
    metrics = [
        metric("hot", system_cpu=6000, pods=[(p, 1000, GiB) for p in pods]),  # 100 %
        metric("tainted", system_cpu=0),
        metric("small", system_cpu=0),
    ]
    plan = run(make_args(maxMigratingPerNode=10), [node("hot"), idle_tainted, idle_small], pods, metrics)
    placed = {e.pod.name: e.target_node for e in plan.evictions}
    # newest first (equal fit): needs-zone-a -> small; needs-zone-b: only "tainted" matches, taint not tolerated;
    # tolerates -> tainted; too-big fits nowhere. 10000 - 2000 = 8000m > 7500: still hot, but nothing else fits.
    assert placed == {"needs-zone-a": "small", "tolerates": "tainted"}
    assert plan.pod_skips["no low node fits"] == 2


def test_aggregate_capacity_limits_moves_without_node_fit() -> None:
    # nodeFit off: only the total headroom of the low nodes counts. Idle at 44 %: 7500 - 4400 = 3100m.
    pods = [rs_pod(f"p{i}", "hot", created=float(i)) for i in range(6)]
    metrics = [metric("hot", system_cpu=3500, pods=[(p, 1200, GiB) for p in pods]), metric("idle", system_cpu=4400)]
    plan = run(make_args(nodeFit=False, maxMigratingPerNode=10), [node("hot"), node("idle")], pods, metrics)
    # 3100 -> 1900 -> 700; a third 1200m pod would overfill the low nodes, so it is skipped.
    assert len(plan.evictions) == 2
    assert all(e.target_node is None for e in plan.evictions)
    assert plan.pod_skips["usage exceeds remaining low-node capacity"] >= 1


def test_number_of_nodes_and_missing_low_nodes_stop_the_pool() -> None:
    nodes, pods, metrics = hot_node_scenario()
    plan = run(make_args(numberOfNodes=2), nodes, pods, metrics)
    assert plan.evictions == [] and plan.pools[0].stop_reason == "only 2 low nodes, numberOfNodes is 2"
    normal = [metrics[0], metric("n2", system_cpu=6000), metric("n3", system_cpu=6000)]
    plan = run(make_args(), nodes, pods, normal)
    assert plan.evictions == [] and plan.pools[0].stop_reason == "no node under its low thresholds"


def test_paused_does_nothing() -> None:
    nodes, pods, metrics = hot_node_scenario()
    plan = run(make_args(paused=True), nodes, pods, metrics)
    assert plan.paused and plan.evictions == [] and plan.pools == []


def test_dry_run_plans_the_same_evictions() -> None:
    # dryRun is applied by the I/O layer; the plan (and its accounting) is identical.
    nodes, pods, metrics = hot_node_scenario()
    wet = run(make_args(maxMigratingPerNode=10), nodes, pods, metrics)
    dry = run(make_args(maxMigratingPerNode=10, dryRun=True), nodes, pods, metrics)
    assert [e.pod.name for e in dry.evictions] == [e.pod.name for e in wet.evictions]


def test_workload_limits() -> None:
    # One ReplicaSet of 5 replicas (default maxUnavailable 2) with one pod already not Ready.
    pods = [rs_pod(f"w{i}", "hot", owner="web", replicas=5, created=float(i)) for i in range(5)]
    pods[0] = rs_pod("w0", "elsewhere", owner="web", replicas=5, ready=False)
    metrics = [metric("hot", system_cpu=5500, pods=[(p, 1000, GiB) for p in pods[1:]]), metric("idle")]
    plan = run(make_args(maxMigratingPerNode=10), [node("hot"), node("idle")], pods, metrics)
    # 95 %: would need 2 evictions, but 1 unavailable + 1 planned reaches 2.
    assert len(plan.evictions) == 1
    assert plan.pod_skips["maxUnavailablePerWorkload reached"] == 3


def test_single_replica_workload_is_never_migrated() -> None:
    pods = [rs_pod("solo", "hot", replicas=1)]
    metrics = [metric("hot", system_cpu=6000, pods=[(pods[0], 3000, GiB)]), metric("idle")]
    plan = run(make_args(), [node("hot"), node("idle")], pods, metrics)
    assert plan.evictions == [] and plan.pod_skips == {"workload too small to migrate": 1}


def test_reason_lists_every_exceeding_resource_sorted_with_prod_prefix() -> None:
    resources = ("memory", "cpu")
    kw = {
        "usage": np.array([0.9 * 40 * GiB, 8235.0]),
        "allocatable": np.array([40 * GiB, 10_000.0]),
        "threshold_qty": np.array([0.8 * 40 * GiB, 7500.0]),
        "threshold_pct": np.array([80.0, 75.0]),
    }
    assert overutilized_reason(resources, prod=False, **kw) == (
        "node is overutilized, node cpu usage(82.35%)>threshold(75.00%), node memory usage(90.00%)>threshold(80.00%)"
    )
    assert overutilized_reason(resources, prod=True, **kw) == (
        "node is overutilized, prod cpu usage(82.35%)>threshold(75.00%), prod memory usage(90.00%)>threshold(80.00%)"
    )
    assert descheduled_event_message("n1", "x") == 'Pod evicted from node "n1" by the reason "x"'


def test_prod_pass_moves_prod_pods_into_prod_low_nodes() -> None:
    # prodHigh 30 %, prodLow 10 %. "busy": node 60 % (normal) but prod 40 %: prod-high source.
    prod1 = rs_pod("prod1", "busy", created=1.0)  # Burstable, no priority -> koord-prod
    prod2 = rs_pod("prod2", "busy", created=2.0)
    batch = rs_pod("batch", "busy", priority=5500)
    pods = [prod1, prod2, batch]
    metrics = [
        metric("busy", system_cpu=0, system_mem=0, pods=[(prod1, 2000, 0), (prod2, 2000, 0), (batch, 2000, 0)]),
        metric("calm", system_cpu=5000, system_mem=0),  # 50 %: normal, prod 0 %: prodLow
    ]
    args = make_args(prodHighThresholds={"cpu": 30}, prodLowThresholds={"cpu": 10})
    plan = run(args, [node("busy"), node("calm")], pods, metrics)
    # prod 4000m > 3000m: evict the newest prod pod (equal fit) -> 2000m <= 3000m, stop.
    assert [(e.pod.name, e.prod, e.target_node) for e in plan.evictions] == [("prod2", True, "calm")]
    assert plan.evictions[0].reason == "node is overutilized, prod cpu usage(40.00%)>threshold(30.00%)"
    assert plan.pools[0].prod_high == 1 and plan.pools[0].prod_low == 1


def test_node_pools_have_their_own_thresholds_and_skip_processed_nodes() -> None:
    # Pool "batch" (selector pool=batch) tolerates 90 %; the default pool has only cpu 75 %.
    labels = {"pool": "batch"}
    nodes = [node("b-hot", labels=labels), node("b-idle", labels=labels), node("web-idle")]
    pods = [rs_pod(f"p{i}", "b-hot") for i in range(4)]
    metrics = [metric("b-hot", pods=[(p, 2000, GiB) for p in pods]), metric("b-idle"), metric("web-idle")]
    args = make_args(
        lowThresholds={"cpu": 45},
        highThresholds={"cpu": 75},
        nodeSelector={"matchExpressions": [{"key": "pool", "operator": "DoesNotExist"}]},
        nodePools=[{"name": "batch", "nodeSelector": {"matchLabels": labels}, "highThresholds": {"cpu": 80}}],
    )
    plan = run(args, nodes, pods, metrics)
    default, batch = plan.pools
    assert default.nodes == 1 and default.stop_reason == "no node over its high thresholds"
    # batch pool: 85 % > 80 %: one 2000m pod moves to b-idle.
    assert (batch.nodes, batch.high, batch.low) == (2, 1, 1)
    assert [(e.pool, e.target_node) for e in plan.evictions] == [("batch", "b-idle")]


@pytest.mark.parametrize(
    ("broken", "reason"),
    [
        (None, "NodeMetric not found"),
        ("expired", "NodeMetric expired (400s old, nodeMetricExpirationSeconds=180)"),
        ("no-status", "NodeMetric has no status.nodeMetric"),
        ("no-time", "NodeMetric has no valid status.updateTime"),
        ("nan-system", "NodeMetric systemUsage cpu is not a valid quantity (nan)"),
        ("none-pod", "NodeMetric podUsage memory of default/x is not a valid quantity (None)"),
        ("negative-pod", "NodeMetric podUsage cpu of default/x is not a valid quantity (-5.0)"),
        ("bad-alloc", "allocatable memory is not a valid quantity (nan)"),
    ],
)
def test_malformed_inputs_skip_the_node_with_a_reason(broken: str | None, reason: str) -> None:
    from scheduler_plugin.descheduler.model import NodeMetricSnapshot

    nodes, pods, metrics = hot_node_scenario()
    victim = "n2"
    good = [m for m in metrics if m.node_name != victim]
    base = metric(victim)
    nan = float("nan")
    replacements = {
        "expired": metric(victim, age=400),
        "no-status": NodeMetricSnapshot(victim, base.update_time, None, {}),
        "no-time": NodeMetricSnapshot(victim, None, base.system_usage, {}),
        "nan-system": NodeMetricSnapshot(victim, base.update_time, {"cpu": nan, "memory": 1.0}, {}),
        "none-pod": NodeMetricSnapshot(
            victim, base.update_time, base.system_usage, {("default", "x"): {"cpu": 1, "memory": None}}
        ),
        "negative-pod": NodeMetricSnapshot(
            victim, base.update_time, base.system_usage, {("default", "x"): {"cpu": -5.0}}
        ),
        "bad-alloc": base,
    }
    if broken == "bad-alloc":
        nodes = [nodes[0], NodeSnapshot(victim, allocatable={"cpu": 10_000, "memory": nan}), nodes[2]]
    if broken is not None:
        good.append(replacements[broken])
    plan = run(make_args(maxMigratingPerNode=10), nodes, pods, good)
    assert plan.skipped_nodes == {victim: reason}
    # The rest of the cluster is still balanced: both pods go to n3.
    assert [(e.pod.name, e.target_node) for e in plan.evictions] == [("a", "n3"), ("c", "n3")]


def test_pod_without_metric_and_garbage_requests_are_skipped_not_raised() -> None:
    nodes, pods, metrics = hot_node_scenario()
    ghost = rs_pod("ghost", "n1", priority=3500)  # koord-free: first in line, but no podsMetric entry
    weird = rs_pod("weird", "n1", priority=3600, cpu_request=float("nan"))
    m0 = metrics[0]
    usages = dict(m0.pod_usages)
    usages[weird.key] = {"cpu": 500.0, "memory": GiB}
    metrics[0] = type(m0)(m0.node_name, m0.update_time, {"cpu": 0.0, "memory": 2 * GiB}, usages)
    plan = run(make_args(maxMigratingPerNode=10), nodes, [*pods, ghost, weird], metrics)
    assert plan.pod_skips["no pod metric"] == 1
    assert plan.pod_skips["no low node fits"] == 1  # NaN request: no safe placement
    assert plan.evictions, "the healthy pods are still planned"


def test_deviation_mode_round_reports_the_effective_threshold() -> None:
    # cpu 20 %, 20 %, 20 %, 60 % -> mean 30 %; low 30 - 10 = 20 %, high 30 + 20 = 50 % (5000m).
    # hot: 500m system + 4 x 1375m = 6000m; one pod out -> 4625m <= 5000m.
    pods = [rs_pod(f"p{i}", "hot", created=float(i)) for i in range(4)]
    nodes = [node("a"), node("b"), node("c"), node("hot")]
    metrics = [metric(n, system_cpu=2000) for n in "abc"]
    metrics.append(metric("hot", pods=[(p, 1375, GiB) for p in pods]))
    args = make_args(useDeviationThresholds=True, lowThresholds={"cpu": 10}, highThresholds={"cpu": 20})
    plan = run(args, nodes, pods, metrics)
    assert [e.pod.name for e in plan.evictions] == ["p3"]
    assert plan.evictions[0].reason == "node is overutilized, node cpu usage(60.00%)>threshold(50.00%)"
    assert plan.pools[0].low == 3
