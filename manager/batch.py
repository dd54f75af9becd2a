"""Batch resources of one node: compute them (noderesource core) and write them to the Node status.

`kubernetes.io/batch-cpu` (integer milli-cores) and `kubernetes.io/batch-memory` (bytes) go into
both `status.capacity` and `status.allocatable` with a JSON merge patch of the status
subresource: only those two keys are touched, whatever kubelet (or kwok) writes next to them.
Removal patches them to null.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from common.api.constants import ANNOTATION_NODE_RESERVATION, BATCH_CPU, BATCH_MEMORY
from common.api.nodemetric_digest import NodeMetricDigest
from common.kube.http import JSON, KubeError, KubeHTTP
from common.logging import ctx
from manager import metrics
from manager.adapters import node_batch_resources, node_capacity
from manager.noderesource.formulas import UpdateDecision, batch_outcome, decide_node_update, updated_at
from manager.noderesource.model import (
    BatchOutcome,
    BatchResources,
    BatchStrategy,
    BatchVerdict,
    NodeCapacity,
    PodOnNode,
)

log = logging.getLogger("loadline.manager.batch")


@dataclass(frozen=True, slots=True)
class BatchSync:
    outcome: BatchOutcome
    decision: UpdateDecision
    stored: JSON | None  # the Node as the server stored it after our write; None: not written
    recheck_after: float | None  # seconds until the node must be looked at again even without events


def status_patch(desired: Mapping[str, int]) -> JSON:
    """Merge patch setting (or, for names missing from `desired`, removing) the batch resources."""
    values: dict[str, Any] = {
        name: str(desired[name]) if name in desired else None for name in (BATCH_CPU, BATCH_MEMORY)
    }
    return {"status": {"capacity": dict(values), "allocatable": dict(values)}}


class BatchWriter:
    def __init__(self, http: KubeHTTP) -> None:
        self.http = http
        metrics.API_ERRORS.labels("Node", "status")  # 0 from the start: panels show 0 rather than no data
        self.last_written: dict[str, datetime] = {}  # in memory, as Koordinator: after a restart, write once
        self.verdicts: dict[str, BatchVerdict] = {}
        self._verdict_counts: dict[BatchVerdict, int] = {}
        self.exported: set[str] = set()  # nodes with loadline_manager_node_batch_allocatable series
        # name -> (capacity, allocatable, reservation annotation as seen) and what they parse to: a resync
        # pass re-reads thousands of unchanged nodes, and quantity parsing would dominate it.
        self._parsed: dict[str, tuple[Any, Any, Any, NodeCapacity, dict[str, int], dict[str, int]]] = {}

    def _parse(self, name: str, node: Mapping[str, Any]) -> tuple[NodeCapacity, dict[str, int], dict[str, int]]:
        status = node.get("status") or {}
        capacity, allocatable = status.get("capacity") or {}, status.get("allocatable") or {}
        annotation = ((node.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_NODE_RESERVATION)
        cached = self._parsed.get(name)
        if cached is not None and cached[0] == capacity and cached[1] == allocatable and cached[2] == annotation:
            return cached[3], cached[4], cached[5]
        parsed = (
            node_capacity(node),
            node_batch_resources(node, "allocatable"),
            node_batch_resources(node, "capacity"),
        )
        self._parsed[name] = (capacity, allocatable, annotation, *parsed)
        return parsed

    def forget(self, name: str) -> None:
        self.last_written.pop(name, None)
        self._parsed.pop(name, None)
        self._set_verdict(name, None)
        self._export(name, None)

    def _export(self, name: str, resources: BatchResources | None) -> None:
        """Per-node gauges of the computed batch resources in base units; none while the node has none."""
        if resources is not None:
            units = metrics.NODE_BATCH_RESOURCE_UNITS
            metrics.NODE_BATCH_ALLOCATABLE.labels(name, "cpu", units["cpu"]).set(resources.cpu_milli / 1000)
            metrics.NODE_BATCH_ALLOCATABLE.labels(name, "memory", units["memory"]).set(resources.memory_bytes)
            self.exported.add(name)
        elif name in self.exported:
            self.exported.discard(name)
            for resource, unit in metrics.NODE_BATCH_RESOURCE_UNITS.items():
                metrics.NODE_BATCH_ALLOCATABLE.remove(name, resource, unit)

    def unexport_all(self) -> None:
        """Drop every per-node series (leadership lost: a standby must not show the values it last computed)."""
        for name in list(self.exported):
            self._export(name, None)

    def _set_verdict(self, name: str, verdict: BatchVerdict | None) -> None:
        old = self.verdicts.pop(name, None) if verdict is None else self.verdicts.get(name)
        if old == verdict:
            return
        if old is not None:
            self._verdict_counts[old] -= 1
            metrics.BATCH_NODES.labels(old.value).set(self._verdict_counts[old])
        if verdict is not None:
            self.verdicts[name] = verdict
            self._verdict_counts[verdict] = self._verdict_counts.get(verdict, 0) + 1
            metrics.BATCH_NODES.labels(verdict.value).set(self._verdict_counts[verdict])
            if old is not None or verdict is not BatchVerdict.CALCULATED:
                log.info("batch resources of %s: %s", name, verdict.value, extra=ctx(was=old.value if old else None))

    async def sync(
        self,
        node: Mapping[str, Any],
        pods: Iterable[PodOnNode],
        metric: NodeMetricDigest | None,
        strategy: BatchStrategy,
        now: datetime,
    ) -> BatchSync:
        name = str((node.get("metadata") or {}).get("name"))
        capacity, current, current_capacity = self._parse(name, node)
        outcome = batch_outcome(capacity, pods, metric, strategy, now)
        self._set_verdict(name, outcome.verdict)
        self._export(name, outcome.resources)
        desired = outcome.resources.as_resource_map() if outcome.resources is not None else {}
        decision = decide_node_update(
            current=current,
            desired=desired,
            diff_threshold=strategy.resource_diff_threshold,
            last_written_at=self.last_written.get(name),
            now=now,
            update_time_threshold_seconds=strategy.update_time_threshold_seconds,
        )
        if not decision.write and current_capacity != current:
            # Someone edited one of the two; they must agree or the scheduler and kubelet disagree.
            decision = UpdateDecision(True, "capacity and allocatable disagree")
        if not decision.write:
            if decision.reason != "unchanged":
                metrics.BATCH_SKIPPED_WRITES.inc()
            return BatchSync(outcome, decision, None, self._recheck_after(outcome, metric, strategy, name, now))

        try:
            stored = await self.http.merge_patch(f"/api/v1/nodes/{name}/status", status_patch(desired))
        except KubeError:
            metrics.API_ERRORS.labels("Node", "status").inc()
            raise
        metrics.OBJECT_WRITES.labels("Node", "remove-batch" if outcome.removes else "update-batch").inc()
        self.last_written[name] = now
        detail = (
            outcome.breakdown.explain(outcome.resources, strategy)
            if outcome.breakdown is not None and outcome.resources is not None
            else f"removed: {outcome.verdict.value}"
        )
        log.info("node %s batch resources written: %s", name, decision.reason, extra=ctx(calculation=detail))
        return BatchSync(outcome, decision, stored, self._recheck_after(outcome, metric, strategy, name, now))

    def _recheck_after(
        self,
        outcome: BatchOutcome,
        metric: NodeMetricDigest | None,
        strategy: BatchStrategy,
        name: str,
        now: datetime,
    ) -> float | None:
        """When the node's batch resources change by the clock alone: its NodeMetric going stale,
        or the updateTimeThresholdSeconds write coming due."""
        due: list[datetime] = []
        update_time = updated_at(metric) if metric is not None else None
        if outcome.verdict is BatchVerdict.CALCULATED and update_time is not None:
            due.append(update_time + timedelta(minutes=strategy.degrade_time_minutes, seconds=1))
        written = self.last_written.get(name)
        if written is not None and outcome.resources is not None:
            due.append(written + timedelta(seconds=strategy.update_time_threshold_seconds + 1))
        if not due:
            return None
        return max((min(due) - now).total_seconds(), 0.0)
