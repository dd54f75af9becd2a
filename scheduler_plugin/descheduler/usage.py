"""Node usage as LowNodeLoad sees it: systemUsage + Σ podsMetric podUsage, against allocatable.

Koordinator deliberately ignores ``nodeUsage`` here: system + pods is what migration can change.
A node whose NodeMetric is missing, has no ``status.nodeMetric``, is expired, or carries a malformed
quantity is left out of the round with a reason, never raised on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt

from common.api.nodemetric_digest import Staleness, report_staleness
from common.api.pod import is_prod
from scheduler_plugin.descheduler.model import (
    PODS,
    NodeMetricSnapshot,
    NodeSnapshot,
    PodSnapshot,
    ResourceValues,
)

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]


@dataclass(slots=True)
class NodeTable:
    """Column store of the measurable nodes of one pool; row i describes ``nodes[i]``.

    ``usage``/``prod_usage`` are updated in place while the round plans evictions, so later
    decisions see the effect of earlier ones.
    """

    resources: tuple[str, ...]
    nodes: list[NodeSnapshot]
    metrics: list[NodeMetricSnapshot]
    pods: list[list[PodSnapshot]]  # non-terminal pods bound to the node
    allocatable: FloatArray  # (N, R), raw-allocatable override applied
    usage: FloatArray  # (N, R)
    prod_usage: FloatArray  # (N, R); zeros when the pool has no prod thresholds
    schedulable: BoolArray  # (N,)

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]


def is_valid_quantity(value: float | None) -> bool:
    return value is not None and 0.0 <= value < math.inf  # False for NaN, negatives, inf


def effective_allocatable(node: NodeSnapshot) -> ResourceValues:
    """status.allocatable overridden per key by node.koordinator.sh/raw-allocatable.

    Koordinator replaces the whole map when the annotation exists; overriding per key is the same
    for the usual cpu+memory annotation and does not zero a resource the annotation omits.
    """
    if not node.raw_allocatable:
        return node.allocatable
    merged = dict(node.allocatable)
    merged.update(node.raw_allocatable)
    return merged


def _metric_problem(
    metric: NodeMetricSnapshot | None,
    now: float,
    expiration_seconds: float,
) -> str | None:
    if metric is None:
        return "NodeMetric not found"
    if metric.system_usage is None:
        return "NodeMetric has no status.nodeMetric"
    staleness = report_staleness(metric.update_time, now, expiration_seconds)
    if staleness is Staleness.NEVER_UPDATED:
        return "NodeMetric has no valid status.updateTime"
    assert metric.update_time is not None  # a report with a time
    age = now - metric.update_time
    if staleness is Staleness.FROM_THE_FUTURE:
        return f"NodeMetric expired (updateTime {-age:.0f}s in the future)"
    if staleness is Staleness.TOO_OLD:
        return f"NodeMetric expired ({age:.0f}s old, nodeMetricExpirationSeconds={expiration_seconds:g})"
    return None


def measure_nodes(
    nodes: Sequence[NodeSnapshot],
    metrics: Mapping[str, NodeMetricSnapshot],
    pods_by_node: Mapping[str, list[PodSnapshot]],
    *,
    resources: tuple[str, ...],
    prod_enabled: bool,
    now: float,
    expiration_seconds: float,
) -> tuple[NodeTable, dict[str, str]]:
    """Measure every node; returns the table of usable nodes and {node: reason} for the rest."""
    skipped: dict[str, str] = {}
    kept_nodes: list[NodeSnapshot] = []
    kept_metrics: list[NodeMetricSnapshot] = []
    kept_pods: list[list[PodSnapshot]] = []
    alloc_rows: list[list[float]] = []
    usage_rows: list[list[float]] = []
    prod_rows: list[list[float]] = []
    metric_resources = [r for r in resources if r != PODS]

    for node in nodes:
        metric = metrics.get(node.name)
        problem = _metric_problem(metric, now, expiration_seconds)
        if problem is not None or metric is None:
            skipped[node.name] = problem or "NodeMetric not found"
            continue
        pods = pods_by_node.get(node.name, [])
        alloc: ResourceValues = effective_allocatable(node)
        alloc_row: list[float] = []
        for r in resources:
            v = alloc.get(r, 0.0)
            if not is_valid_quantity(v):
                problem = f"allocatable {r} is not a valid quantity ({v!r})"
                break
            alloc_row.append(float(v))  # type: ignore[arg-type]  # checked by is_valid_quantity
        if problem is None:
            problem, usage_row, prod_row = _sum_usage(metric, pods, resources, metric_resources, prod_enabled)
        if problem is not None:
            skipped[node.name] = problem
            continue
        kept_nodes.append(node)
        kept_metrics.append(metric)
        kept_pods.append(pods)
        alloc_rows.append(alloc_row)
        usage_rows.append(usage_row)
        prod_rows.append(prod_row)

    r_count = len(resources)
    table = NodeTable(
        resources=resources,
        nodes=kept_nodes,
        metrics=kept_metrics,
        pods=kept_pods,
        allocatable=np.array(alloc_rows, dtype=np.float64).reshape(-1, r_count),
        usage=np.array(usage_rows, dtype=np.float64).reshape(-1, r_count),
        prod_usage=np.array(prod_rows, dtype=np.float64).reshape(-1, r_count),
        schedulable=np.array([not n.unschedulable for n in kept_nodes], dtype=np.bool_),
    )
    return table, skipped


def _sum_usage(
    metric: NodeMetricSnapshot,
    pods: list[PodSnapshot],
    resources: tuple[str, ...],
    metric_resources: list[str],
    prod_enabled: bool,
) -> tuple[str | None, list[float], list[float]]:
    system = metric.system_usage or {}
    pod_values = list(metric.pod_usages.values())
    totals: dict[str, float] = {}
    for r in metric_resources:
        v = system.get(r, 0.0)
        if not is_valid_quantity(v):
            return f"NodeMetric systemUsage {r} is not a valid quantity ({v!r})", [], []
        # Fast path over builtins; a None makes sum() raise TypeError, NaN/inf make the total
        # non-finite, a negative shows in min(). Only then is the column walked to name the pod.
        column = cast(list[float], [u.get(r, 0.0) for u in pod_values])
        try:
            total = sum(column)
            valid = math.isfinite(total) and (not column or min(column) >= 0.0)
        except TypeError:
            valid = False
        if not valid:
            return _name_bad_pod_usage(metric, r), [], []
        totals[r] = float(v) + float(total)  # type: ignore[arg-type]  # v checked by is_valid_quantity
    usage = [float(len(pods)) if r == PODS else totals[r] for r in resources]

    prod = [0.0] * len(resources)
    if prod_enabled:
        # Prod usage counts the metric entries of pods on the node whose defaulted class is prod.
        prod_pods = [pod for pod in pods if is_prod(pod.labels, pod.priority, pod.k8s_qos)]
        lookup = metric.pod_usages.get
        prod_values = [v for v in (lookup(pod.key) for pod in prod_pods) if v is not None]
        for j, r in enumerate(resources):
            # The column was validated above (every pod entry is a finite non-negative number).
            prod[j] = float(len(prod_pods)) if r == PODS else float(sum([v.get(r, 0.0) or 0.0 for v in prod_values]))
    return None, usage, prod


def _name_bad_pod_usage(metric: NodeMetricSnapshot, resource: str) -> str:
    for (ns, name), values in metric.pod_usages.items():
        v = values.get(resource, 0.0)
        if not is_valid_quantity(v):
            return f"NodeMetric podUsage {resource} of {ns}/{name} is not a valid quantity ({v!r})"
    return f"NodeMetric podUsage {resource} does not sum to a valid quantity"
