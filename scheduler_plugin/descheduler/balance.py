"""One LowNodeLoad round, planned in-process: which pods to evict, in which order, and why.

The result is a RoundPlan; the I/O layer (Eviction API, events, dryRun, rate limiting, leader
election) executes it. The only state carried between rounds is the DetectorStore.

Steps per node pool, in order (Koordinator's LowNodeLoad Balance):
 1. measure nodes (skip missing / expired / malformed NodeMetrics), compute thresholds, classify;
 2. stop unless some node is high (or prod-high);
 3. anomaly detection: mark hot nodes abnormal, reset the detectors of low nodes; stop unless some
    hot node is anomalous (hot for more than consecutiveAbnormalities rounds);
 4. stop unless there are low nodes, more than numberOfNodes of them, and not every node is low;
 5. node pass then prod pass: drain the anomalous hot nodes, hottest first, into the capacity the
    low nodes have under their high thresholds.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from common.api.pod import is_prod
from scheduler_plugin.descheduler.anomaly import DetectorStore, detector_key
from scheduler_plugin.descheduler.args import LowNodeLoadArgs, ResolvedPool
from scheduler_plugin.descheduler.classify import (
    NodeClasses,
    PoolClassification,
    classify_pools,
    headroom_sum,
    order_sources,
    over_any,
    pods_by_node,
    usage_scores,
    weight_vector,
)
from scheduler_plugin.descheduler.limits import LIMIT_GLOBAL, LIMIT_NODE, MigrationLimits
from scheduler_plugin.descheduler.model import (
    PODS,
    NodeMetricSnapshot,
    NodeSnapshot,
    PlannedEviction,
    PodSnapshot,
    PoolSummary,
    ResourceValues,
    RoundPlan,
)
from scheduler_plugin.descheduler.nodefit import TargetSet
from scheduler_plugin.descheduler.podfilter import PodFilter
from scheduler_plugin.descheduler.reason import overutilized_reason
from scheduler_plugin.descheduler.sorting import eviction_order, usage_fit_scores
from scheduler_plugin.descheduler.thresholds import ThresholdTable
from scheduler_plugin.descheduler.usage import BoolArray, FloatArray, NodeTable

SKIP_NO_METRIC = "no pod metric"
SKIP_OVER_CAPACITY = "usage exceeds remaining low-node capacity"
SKIP_NO_TARGET = "no low node fits"


def plan_round(
    args: LowNodeLoadArgs,
    nodes: Sequence[NodeSnapshot],
    pods: Iterable[PodSnapshot],
    node_metrics: Mapping[str, NodeMetricSnapshot],
    *,
    detectors: DetectorStore,
    now: float,
    refused: Collection[tuple[str, str]] = (),
) -> RoundPlan:
    """Plan one round at time ``now`` (epoch seconds). Never raises on malformed cluster data.

    ``refused``: (namespace, name) of pods not to plan this round (their eviction was refused lately).
    """
    plan = RoundPlan()
    if args.paused:
        plan.paused = True
        return plan
    pod_list = pods if isinstance(pods, list) else list(pods)
    limits = MigrationLimits.from_pods(args, pod_list)
    ctx = _RoundContext(args, plan, detectors, now, limits, PodFilter.from_args(args, refused))
    for found in classify_pools(args, nodes, node_metrics, pods_by_node(pod_list), now=now):
        _balance_pool(ctx, found)
    return plan


@dataclass(slots=True)
class _RoundContext:
    args: LowNodeLoadArgs
    plan: RoundPlan
    detectors: DetectorStore
    now: float
    limits: MigrationLimits
    pod_filter: PodFilter


def _balance_pool(ctx: _RoundContext, found: PoolClassification) -> None:
    pool = found.pool
    summary = PoolSummary(name=pool.name, nodes=len(found.nodes))
    ctx.plan.pools.append(summary)
    if found.table is None:
        summary.stop_reason = "no nodes in pool"
        return
    ctx.plan.skipped_nodes.update(found.skipped)
    table, th, cls = found.table, found.thresholds, found.classes
    if th is None or cls is None:
        summary.stop_reason = "no node with a usable NodeMetric"
        return
    _count_classes(summary, cls)
    names = table.names
    hot = cls.high | cls.prod_high

    # "Consecutive" means consecutive: any round in which a node is not hot ends its streak.
    # (Koordinator resets only nodes that turn low; a normal round there leaves the count intact.)
    for r in np.flatnonzero(~hot):
        ctx.detectors.reset(detector_key(pool.name, names[int(r)]), ctx.now)
    if not hot.any():
        summary.stop_reason = "no node over its high thresholds"
        return
    receivers = cls.low | cls.both_low | cls.prod_low
    anomalous = np.zeros(len(names), dtype=np.bool_)
    for r in np.flatnonzero(hot):
        anomalous[r] = ctx.detectors.mark_abnormal(
            detector_key(pool.name, names[int(r)]), pool.anomaly_condition, ctx.now
        )
    summary.anomalous = [names[int(r)] for r in np.flatnonzero(anomalous)]
    if not anomalous.any():
        summary.stop_reason = "no hot node has been hot long enough (anomalyCondition)"
        return
    if not receivers.any():
        summary.stop_reason = "no node under its low thresholds"
    elif int(receivers.sum()) <= ctx.args.number_of_nodes:
        summary.stop_reason = f"only {int(receivers.sum())} low nodes, numberOfNodes is {ctx.args.number_of_nodes}"
    elif bool((cls.low | cls.both_low).all()):
        summary.stop_reason = "every node is low"
    if summary.stop_reason is None:
        _drain(ctx, pool, table, th=th, cls=cls, anomalous=anomalous)
    # Koordinator marks the drained nodes normal once after the pool; marking every hot node would
    # break the abnormal streak of nodes still counting towards consecutiveAbnormalities.
    for r in np.flatnonzero(anomalous):
        ctx.detectors.mark_normal(detector_key(pool.name, names[int(r)]), ctx.now)


def _count_classes(summary: PoolSummary, cls: NodeClasses) -> None:
    summary.low = int(cls.low.sum())
    summary.both_low = int(cls.both_low.sum())
    summary.high = int(cls.high.sum())
    summary.prod_low = int(cls.prod_low.sum())
    summary.prod_high = int(cls.prod_high.sum())
    summary.normal = int(cls.normal.sum())


def _drain(
    ctx: _RoundContext,
    pool: ResolvedPool,
    table: NodeTable,
    *,
    th: ThresholdTable,
    cls: NodeClasses,
    anomalous: BoolArray,
) -> None:
    weights = weight_vector(table.resources, pool.resource_weights)
    target_rows = np.flatnonzero(cls.low | cls.both_low | cls.prod_low).astype(np.int64)
    targets = TargetSet(
        table,
        th,
        target_rows,
        node_pass=(cls.low | cls.both_low)[target_rows],
        prod_pass=(cls.prod_low | cls.both_low)[target_rows],
        weights=weights,
    )
    # All headrooms are taken before the node pass changes any usage.
    node_avail = headroom_sum(cls.low | cls.both_low, th.high, table.usage)
    both_node_headroom = headroom_sum(cls.both_low, th.high, table.usage)
    prod_low_headroom = headroom_sum(cls.prod_low, th.prod_high, table.prod_usage)
    prod_both_headroom = headroom_sum(cls.both_low, th.prod_high, table.prod_usage)

    names = table.names
    node_sources = order_sources(
        np.flatnonzero(cls.high & anomalous), names, usage_scores(table.usage, table.allocatable, weights)
    )
    _run_pass(
        ctx, pool, table, th=th, targets=targets, sources=node_sources, avail=node_avail, weights=weights, prod=False
    )

    if not pool.prod_enabled:
        return
    # bothLow nodes serve both passes: the prod pass gets what the node pass left of them.
    both_remaining = np.minimum(both_node_headroom, node_avail)
    prod_avail = prod_low_headroom + np.minimum(prod_both_headroom, both_remaining)
    prod_sources = order_sources(
        np.flatnonzero(cls.prod_high & anomalous), names, usage_scores(table.prod_usage, table.allocatable, weights)
    )
    _run_pass(
        ctx, pool, table, th=th, targets=targets, sources=prod_sources, avail=prod_avail, weights=weights, prod=True
    )


def _usage_row(values: ResourceValues | None, resources: tuple[str, ...]) -> list[float]:
    """The pod's metric usage over ``resources`` (pods = 1); NaNs when it has no podsMetric entry."""
    if values is None:
        return [np.nan] * len(resources)
    row = []
    for r in resources:
        v = 1.0 if r == PODS else values.get(r, 0.0)
        row.append(np.nan if v is None else v)
    return row


def _run_pass(
    ctx: _RoundContext,
    pool: ResolvedPool,
    table: NodeTable,
    *,
    th: ThresholdTable,
    targets: TargetSet,
    sources: list[int],
    avail: FloatArray,
    weights: FloatArray,
    prod: bool,
) -> None:
    """Drain ``sources`` (hottest first) into ``avail``/``targets``; evictions go to ctx.plan."""
    if not sources or not targets.has_targets(prod):
        return
    plan, limits = ctx.plan, ctx.limits
    usage = table.prod_usage if prod else table.usage
    high = th.prod_high if prod else th.high
    high_pct = th.prod_high_pct if prod else th.high_pct

    # Removable pods of every source at once, so their sort keys are computed in one vectorised go.
    candidates: list[PodSnapshot] = []
    group: list[int] = []  # position of the candidate's node in ``sources``
    usage_rows: list[list[float]] = []
    for k, row in enumerate(sources):
        pod_usages = table.metrics[row].pod_usages
        for pod in table.pods[row]:
            if prod and not is_prod(pod.labels, pod.priority, pod.k8s_qos):
                continue
            plan.pods_considered += 1
            blocker = ctx.pod_filter.blocker(pod)
            if blocker is not None:
                plan.count_skip(blocker)
                continue
            candidates.append(pod)
            group.append(k)
            usage_rows.append(_usage_row(pod_usages.get(pod.key), table.resources))
    if not candidates:
        return
    groups = np.array(group, dtype=np.int64)
    pod_usage = np.array(usage_rows, dtype=np.float64).reshape(len(candidates), len(table.resources))
    source_rows = np.array(sources, dtype=np.int64)
    # Excess of each candidate's node as it is before that node is drained (sources are only
    # changed by their own evictions, so sorting up front equals sorting node by node).
    excess = (usage[source_rows] - high[source_rows])[groups]
    order = eviction_order(candidates, usage_fit_scores(pod_usage, excess, weights), group=groups)

    finished_group = -1
    for i in order:
        k = int(groups[i])
        if k == finished_group:
            continue
        if (avail <= 0).any():
            return  # the low nodes are full; no later node can move anything either
        row = sources[k]
        pod = candidates[int(i)]
        blocker = limits.blocker(pod)
        if blocker is not None:
            plan.count_skip(blocker)
            if blocker == LIMIT_GLOBAL:
                return
            if blocker == LIMIT_NODE:
                finished_group = k
            continue
        pod_u = pod_usage[int(i)]
        if np.isnan(pod_u).any():
            # Without its usage the pod's effect on the node is unknown; Koordinator's nodeFit
            # treats it as not removable as well.
            plan.count_skip(SKIP_NO_METRIC)
            continue
        if (pod_u > avail).any():
            plan.count_skip(SKIP_OVER_CAPACITY)
            continue
        target_index = None
        if ctx.args.node_fit:
            target_index = targets.find(pod, pod_u, prod)
            if target_index is None:
                plan.count_skip(SKIP_NO_TARGET)
                continue
        node_name = table.nodes[row].name
        reason = overutilized_reason(
            table.resources,
            usage=usage[row],
            allocatable=table.allocatable[row],
            threshold_qty=high[row],
            threshold_pct=high_pct[row],
            prod=prod,
        )
        pod_is_prod = prod or (pool.prod_enabled and is_prod(pod.labels, pod.priority, pod.k8s_qos))
        target_name = None if target_index is None else targets.place(target_index, pod, pod_u, pod_is_prod)
        plan.evictions.append(
            PlannedEviction(
                pod=pod, node_name=node_name, reason=reason, pool=pool.name, prod=prod, target_node=target_name
            )
        )
        limits.record(pod)
        avail -= pod_u
        table.usage[row] -= pod_u
        if pod_is_prod:
            table.prod_usage[row] -= pod_u
        if not over_any(usage[row], high[row]):
            ctx.detectors.reset(detector_key(pool.name, node_name), ctx.now)  # drained: the streak starts over
            finished_group = k
