"""Placement check for an evicted pod: some low node must be able to take it (nodeFit).

A target must match the pod's nodeSelector and required node affinity, carry no untolerated
NoSchedule/NoExecute taint, be schedulable, have room for the pod's requests, and stay under its
high thresholds (prod pass: also under its prod high thresholds) once the pod's measured usage is
added. The chosen target's usage and requests then grow by the pod's, so later pods see the space
as taken and no target is ever filled past its threshold.

Hot path: one ``find`` per eviction attempt over every target, so the per-target state is kept
as contiguous (R, T) / (T,) arrays updated in place rather than gathered from the node table.
"""

from __future__ import annotations

import math
from collections.abc import Hashable

import numpy as np

from common.api.scheduling import first_untolerated, node_matches
from scheduler_plugin.descheduler.model import CPU, MEMORY, PODS, NodeSnapshot, PodSnapshot
from scheduler_plugin.descheduler.thresholds import ThresholdTable
from scheduler_plugin.descheduler.usage import BoolArray, FloatArray, IntArray, NodeTable


class TargetSet:
    """The low nodes of one pool that may receive pods, indexed 0..T-1 (``rows`` maps to the table)."""

    def __init__(
        self,
        table: NodeTable,
        thresholds: ThresholdTable,
        rows: IntArray,
        *,
        node_pass: BoolArray,
        prod_pass: BoolArray,
        weights: FloatArray,
    ) -> None:
        self.table = table
        self.rows = rows
        self.nodes: list[NodeSnapshot] = [table.nodes[int(r)] for r in rows]
        schedulable = table.schedulable[rows]
        self._pass_mask = {False: node_pass & schedulable, True: prod_pass & schedulable}
        # Headroom under the thresholds, (R, T), so each resource is one contiguous compare.
        self.free = np.ascontiguousarray((thresholds.high[rows] - table.usage[rows]).T)
        self.prod_free = np.ascontiguousarray((thresholds.prod_high[rows] - table.prod_usage[rows]).T)
        alloc = table.allocatable[rows]
        self._inv_alloc_weighted = np.where(alloc > 0, weights / np.where(alloc > 0, alloc, 1.0), 0.0)
        self.load = (table.usage[rows] * self._inv_alloc_weighted).sum(axis=1)  # weighted usage ratio
        self._compat: dict[Hashable, BoolArray] = {}
        self._request_free: dict[str, FloatArray] = {}
        self.pod_free = np.array(
            [
                (_finite_or_zero(n.allocatable[PODS]) if PODS in n.allocatable else math.inf) - len(table.pods[int(r)])
                for n, r in zip(self.nodes, rows, strict=True)
            ],
            dtype=np.float64,
        )
        for resource in (CPU, MEMORY):
            self._ensure_request_column(resource)

    def __len__(self) -> int:
        return len(self.rows)

    def has_targets(self, prod: bool) -> bool:
        return bool(self._pass_mask[prod].any())

    def _ensure_request_column(self, resource: str) -> FloatArray:
        column = self._request_free.get(resource)
        if column is None:
            # Scheduling fit uses status.allocatable (the amplified view the scheduler sees).
            column = np.array(
                [
                    _finite_or_zero(n.allocatable.get(resource, 0.0)) - _sum_requests(self.table.pods[int(r)], resource)
                    for n, r in zip(self.nodes, self.rows, strict=True)
                ],
                dtype=np.float64,
            )
            self._request_free[resource] = column
        return column

    def _compatible(self, pod: PodSnapshot) -> BoolArray:
        if not pod.node_selector and pod.required_node_affinity is None and not pod.tolerations:
            signature: Hashable = ()
        else:
            signature = (tuple(sorted(pod.node_selector.items())), pod.required_node_affinity, pod.tolerations)
        mask = self._compat.get(signature)
        if mask is None:
            mask = np.array(
                [
                    node_matches(n.name, n.labels, pod.node_selector, pod.required_node_affinity)
                    and first_untolerated(n.taints, pod.tolerations) is None
                    for n in self.nodes
                ],
                dtype=np.bool_,
            )
            self._compat[signature] = mask
        return mask

    def find(self, pod: PodSnapshot, usage: FloatArray, prod: bool) -> int | None:
        """Index of the least-loaded target that can take the pod, or None."""
        if len(self.rows) == 0:
            return None
        mask = self._pass_mask[prod] & self._compatible(pod) & (self.pod_free >= 1.0)
        for resource, value in pod.requests.items():
            if value is None or not (0.0 <= value < math.inf):
                return None  # malformed request: no safe placement
            if value > 0.0 and resource != PODS:
                mask &= self._ensure_request_column(resource) >= value
        for j, u in enumerate(usage):
            mask &= self.free[j] >= u
            if prod:
                mask &= self.prod_free[j] >= u
        if not mask.any():
            return None
        # Least loaded first, as the load-aware scheduler would spread the replacements.
        return int(np.argmin(np.where(mask, self.load, np.inf)))

    def place(self, index: int, pod: PodSnapshot, usage: FloatArray, pod_is_prod: bool) -> str:
        """Account the pod on target ``index``; returns the target's node name."""
        row = int(self.rows[index])
        self.table.usage[row] += usage
        self.free[:, index] -= usage
        if pod_is_prod:
            self.table.prod_usage[row] += usage
            self.prod_free[:, index] -= usage
        self.load[index] += float(usage @ self._inv_alloc_weighted[index])
        for resource, column in self._request_free.items():
            column[index] -= _finite_or_zero(pod.requests.get(resource, 0.0))
        self.pod_free[index] -= 1.0
        return self.nodes[index].name


def _sum_requests(pods: list[PodSnapshot], resource: str) -> float:
    total = sum([p.requests.get(resource, 0.0) or 0.0 for p in pods])
    if math.isfinite(total) and total >= 0:
        return float(total)
    return sum(_finite_or_zero(p.requests.get(resource, 0.0)) for p in pods)  # some request is garbage


def _finite_or_zero(value: float | None) -> float:
    if value is None or not (0.0 <= value < math.inf):
        return 0.0
    return float(value)
