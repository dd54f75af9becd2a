"""Classification of nodes into low / normal / high and the prod variants, per node pool (the one
LowNodeLoad classification: the descheduler's rounds and `loadline top` read it), plus the capacity
the low nodes can absorb and the order in which hot nodes are drained."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from scheduler_plugin.descheduler.args import LowNodeLoadArgs, ResolvedPool, resolve_pools
from scheduler_plugin.descheduler.model import NodeMetricSnapshot, NodeSnapshot, PodSnapshot
from scheduler_plugin.descheduler.thresholds import ThresholdTable, compute_thresholds
from scheduler_plugin.descheduler.usage import BoolArray, FloatArray, IntArray, NodeTable, measure_nodes

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(slots=True)
class NodeClasses:
    """Boolean (N,) masks; every node is in exactly one of them or in none (normal)."""

    low: BoolArray  # under every low threshold, prod neither high nor low
    both_low: BoolArray  # under every low threshold and every prod low threshold
    high: BoolArray  # over some high threshold: a source of the node pass
    prod_low: BoolArray  # normal, and under every prod low threshold
    prod_high: BoolArray  # not high, but prod usage over some prod high threshold: source of the prod pass

    @property
    def normal(self) -> BoolArray:
        return ~(self.low | self.both_low | self.high | self.prod_low | self.prod_high)


def over_any(usage: FloatArray, thresholds: FloatArray) -> BoolArray:
    return np.asarray((usage > thresholds).any(axis=-1), dtype=np.bool_)


def under_all(usage: FloatArray, thresholds: FloatArray) -> BoolArray:
    return np.asarray((usage <= thresholds).all(axis=-1), dtype=np.bool_)


def classify(table: NodeTable, th: ThresholdTable, prod_enabled: bool) -> NodeClasses:
    # An unschedulable node cannot receive pods, so it is never "low".
    under_low = table.schedulable & under_all(table.usage, th.low)
    over_high = over_any(table.usage, th.high) & ~under_low
    if prod_enabled:
        prod_over = over_any(table.prod_usage, th.prod_high)
        prod_under = under_all(table.prod_usage, th.prod_low)
    else:
        # Without prod thresholds every prod threshold would be 100 % and every normal node would
        # count as prodLow; keep the prod classes empty so numberOfNodes means what it says.
        prod_over = np.zeros(len(table.nodes), dtype=np.bool_)
        prod_under = np.zeros(len(table.nodes), dtype=np.bool_)
    middle = ~under_low & ~over_high
    return NodeClasses(
        low=under_low & ~prod_over & ~prod_under,
        both_low=under_low & ~prod_over & prod_under,
        high=over_high,
        prod_low=middle & ~prod_over & prod_under,
        prod_high=(under_low | middle) & prod_over,
    )


@dataclass(slots=True)
class PoolClassification:
    """One node pool's nodes, measured and classified as a round sees them."""

    pool: ResolvedPool
    nodes: list[NodeSnapshot]  # the pool's nodes, without those an earlier pool found hot
    table: NodeTable | None = None  # the measurable nodes; None for an empty pool
    skipped: dict[str, str] = field(default_factory=dict)  # node → why it could not be measured
    thresholds: ThresholdTable | None = None  # None when no node was measurable
    classes: NodeClasses | None = None

    def class_names(self) -> dict[str, str]:
        """Node → low, hot, prod-low, prod-hot or normal (low under both low thresholds is low too)."""
        if self.table is None or self.classes is None:
            return {}
        cls = self.classes
        named = (("low", cls.low | cls.both_low), ("hot", cls.high), ("prod-low", cls.prod_low),
                 ("prod-hot", cls.prod_high))  # fmt: skip
        out = dict.fromkeys(self.table.names, "normal")
        for name, mask in named:
            for r in np.flatnonzero(mask):
                out[self.table.names[int(r)]] = name
        return out


def pods_by_node(pods: Iterable[PodSnapshot]) -> dict[str, list[PodSnapshot]]:
    """The pods bound to each node and not finished: what a node's usage is the sum of."""
    out: dict[str, list[PodSnapshot]] = {}
    for pod in pods:
        if pod.node_name and pod.phase not in TERMINAL_PHASES:
            bucket = out.get(pod.node_name)
            if bucket is None:
                out[pod.node_name] = [pod]
            else:
                bucket.append(pod)
    return out


def classify_pools(
    args: LowNodeLoadArgs,
    nodes: Sequence[NodeSnapshot],
    node_metrics: Mapping[str, NodeMetricSnapshot],
    pods_on_nodes: Mapping[str, list[PodSnapshot]],
    *,
    now: float,
) -> Iterator[PoolClassification]:
    """Koordinator's LowNodeLoad, pool by pool: a node found hot by a pool is not handled by a later one.

    Lazy: a round acts on a pool before the next is classified (what it finds hot is already decided).
    """
    processed: set[str] = set()
    for pool in resolve_pools(args):
        if pool.node_selector is None:
            pool_nodes = list(nodes)
        else:
            selector = pool.node_selector.compile()
            pool_nodes = [n for n in nodes if n.name not in processed and selector.matches(n.labels)]
        found = PoolClassification(pool, pool_nodes)
        if pool_nodes:
            found.table, found.skipped = measure_nodes(
                pool_nodes,
                node_metrics,
                pods_on_nodes,
                resources=pool.resource_names,
                prod_enabled=pool.prod_enabled,
                now=now,
                expiration_seconds=args.node_metric_expiration_seconds,
            )
            if found.table.nodes:
                found.thresholds = compute_thresholds(found.table, pool)
                found.classes = classify(found.table, found.thresholds, pool.prod_enabled)
                hot = found.classes.high | found.classes.prod_high
                processed.update(found.table.names[int(r)] for r in np.flatnonzero(hot))
        yield found


def headroom_sum(rows: BoolArray, threshold: FloatArray, usage: FloatArray) -> FloatArray:
    """Σ over the selected nodes of (threshold − usage): what they can take before turning hot."""
    return np.asarray((threshold[rows] - usage[rows]).sum(axis=0), dtype=np.float64)


def usage_scores(usage: FloatArray, allocatable: FloatArray, weights: FloatArray) -> IntArray:
    """Koordinator's ResourceUsageScorer: per resource min(used, alloc)·1000 // alloc (0 when
    alloc is 0), then the weighted mean with integer division."""
    safe_alloc = np.where(allocatable > 0, allocatable, 1.0)
    per_resource = np.where(
        allocatable > 0, np.floor(np.minimum(usage, allocatable) * 1000.0 / safe_alloc), 0.0
    ).astype(np.int64)
    w = weights.astype(np.int64)
    total_w = int(w.sum())
    if total_w == 0:
        return np.zeros(usage.shape[0], dtype=np.int64)
    return np.asarray((per_resource * w).sum(axis=1) // total_w, dtype=np.int64)


def weight_vector(resources: tuple[str, ...], weights: Mapping[str, int]) -> FloatArray:
    # Resources without a configured weight (e.g. ``pods``) do not count in scores.
    return np.array([float(weights.get(r, 0)) for r in resources], dtype=np.float64)


def order_sources(rows: IntArray, names: list[str], scores: IntArray) -> list[int]:
    """Source rows, hottest first; ties by node name so a round is deterministic."""
    return sorted((int(r) for r in rows), key=lambda r: (-int(scores[r]), names[r]))
