"""Batch and mid resources of one node: compute them (noderesource core) and write them to the Node status.

`kubernetes.io/batch-cpu` (integer milli-cores) and `kubernetes.io/batch-memory` (bytes), and the mid tier's
`kubernetes.io/mid-cpu` / `mid-memory` (manager/noderesource/mid.py), go into both `status.capacity` and
`status.allocatable` with one JSON merge patch of the status subresource: only those keys are touched, whatever
kubelet (or kwok) writes next to them. Removal patches them to null. As in Koordinator, one node update covers
both tiers: it is written when either changed beyond resourceDiffThreshold (or updateTimeThresholdSeconds passed).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client import Gauge

from common.api.constants import ANNOTATION_NODE_RESERVATION, ANNOTATION_RAW_ALLOCATABLE, BATCH_CPU, BATCH_MEMORY
from common.api.malformed import MalformedObjectError
from common.api.nodemetric_digest import NodeMetricDigest
from common.kube.http import JSON, KubeError, KubeHTTP
from common.logging import ctx
from manager import metrics
from manager.adapters import NODE_RESOURCES, node_batch_resources, node_capacity, node_digest
from manager.noderesource.formulas import (
    BATCH_RESOURCE_NAMES,
    UpdateDecision,
    batch_outcome,
    decide_node_update,
)
from manager.noderesource.mid import MidOutcome, MidResources, MidStrategy, mid_outcome
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
    mid: MidOutcome | None = None  # None: mid resources not managed in this sync
    node_part_problem: MalformedObjectError | None = None  # an annotation of the Node treated as absent (counted)


def status_patch(desired: Mapping[str, int], names: Iterable[str] = (BATCH_CPU, BATCH_MEMORY)) -> JSON:
    """Merge patch setting (or, for `names` missing from `desired`, removing) the batch (and mid) resources."""
    values: dict[str, Any] = {name: str(desired[name]) if name in desired else None for name in names}
    return {"status": {"capacity": dict(values), "allocatable": dict(values)}}


# What a Node's status and annotations parse to: capacity, batch/mid allocatable and capacity, its part problem.
_Parsed = tuple[NodeCapacity, dict[str, int], dict[str, int], MalformedObjectError | None]


class BatchWriter:
    def __init__(self, http: KubeHTTP) -> None:
        self.http = http
        metrics.API_ERRORS.labels("Node", "status")  # 0 from the start: panels show 0 rather than no data
        self.last_written: dict[str, datetime] = {}  # in memory, as Koordinator: after a restart, write once
        self.verdicts: dict[str, BatchVerdict] = {}
        self._verdict_counts: dict[BatchVerdict, int] = {}
        self.exported: set[str] = set()  # nodes with loadline_manager_node_batch_allocatable series
        self.exported_mid: set[str] = set()  # nodes with loadline_manager_node_mid_allocatable series
        # name -> (capacity, allocatable, the annotations read as seen) and what they parse to: a resync
        # pass re-reads thousands of unchanged nodes, and quantity parsing would dominate it.
        self._parsed: dict[str, tuple[Any, Any, Any, _Parsed]] = {}

    def _parse(self, name: str, node: Mapping[str, Any]) -> _Parsed:
        status = node.get("status") or {}
        capacity, allocatable = status.get("capacity") or {}, status.get("allocatable") or {}
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        annotation = (annotations.get(ANNOTATION_NODE_RESERVATION), annotations.get(ANNOTATION_RAW_ALLOCATABLE))
        cached = self._parsed.get(name)
        if cached is not None and cached[0] == capacity and cached[1] == allocatable and cached[2] == annotation:
            return cached[3]
        digest = node_digest(node)
        parsed = (
            node_capacity(digest),
            node_batch_resources(digest, "allocatable", NODE_RESOURCES),
            node_batch_resources(digest, "capacity", NODE_RESOURCES),
            digest.part_problem,
        )
        self._parsed[name] = (capacity, allocatable, annotation, parsed)
        return parsed

    def forget(self, name: str) -> None:
        self.last_written.pop(name, None)
        self._parsed.pop(name, None)
        self._set_verdict(name, None)
        self._export(name, None)

    def _export(self, name: str, resources: BatchResources | None, mid: MidResources | None = None) -> None:
        """Per-node gauges of the computed batch (and mid) resources in base units; none while the node has none."""
        units = metrics.NODE_BATCH_RESOURCE_UNITS
        tiers: tuple[tuple[Gauge, BatchResources | MidResources | None, set[str]], ...] = (
            (metrics.NODE_BATCH_ALLOCATABLE, resources, self.exported),
            (metrics.NODE_MID_ALLOCATABLE, mid, self.exported_mid),
        )
        for gauge, values, exported in tiers:
            if values is not None:
                gauge.labels(name, "cpu", units["cpu"]).set(values.cpu_milli / 1000)
                gauge.labels(name, "memory", units["memory"]).set(values.memory_bytes)
                exported.add(name)
            elif name in exported:
                exported.discard(name)
                for resource, unit in units.items():
                    gauge.remove(name, resource, unit)

    def unexport_all(self) -> None:
        """Drop every per-node series (leadership lost: a standby must not show the values it last computed)."""
        for name in self.exported | self.exported_mid:
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
        *,
        mid: MidStrategy | None = None,
    ) -> BatchSync:
        """Bring the node's batch resources (and, given `mid`, its mid resources) to what they should be now."""
        name = str((node.get("metadata") or {}).get("name"))
        capacity, current, current_capacity, part_problem = self._parse(name, node)
        pod_list = list(pods)
        outcome = batch_outcome(capacity, pod_list, metric, strategy, now)
        mid_result = mid_outcome(capacity, pod_list, metric, mid, now) if mid is not None else None
        self._set_verdict(name, outcome.verdict)
        self._export(name, outcome.resources, mid_result.resources if mid_result is not None else None)
        desired = outcome.resources.as_resource_map() if outcome.resources is not None else {}
        if mid_result is not None and mid_result.resources is not None:
            desired.update(mid_result.resources.as_resource_map())
        names = BATCH_RESOURCE_NAMES if mid is None else NODE_RESOURCES
        decision = decide_node_update(
            current=current,
            desired=desired,
            diff_threshold=strategy.resource_diff_threshold,
            last_written_at=self.last_written.get(name),
            now=now,
            update_time_threshold_seconds=strategy.update_time_threshold_seconds,
            names=names,
        )
        if not decision.write and any(current_capacity.get(n) != current.get(n) for n in names):
            # Someone edited one of the two; they must agree or the scheduler and kubelet disagree.
            decision = UpdateDecision(True, "capacity and allocatable disagree")
        recheck = self._recheck_after(outcome, metric, strategy, name, now)
        if not decision.write:
            if decision.reason != "unchanged":
                metrics.BATCH_SKIPPED_WRITES.inc()
            return BatchSync(outcome, decision, None, recheck, mid_result, part_problem)

        try:
            stored = await self.http.merge_patch(f"/api/v1/nodes/{name}/status", status_patch(desired, names))
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
        if mid_result is not None:
            detail += "; " + (
                mid_result.breakdown.explain(mid_result.resources)
                if mid_result.breakdown is not None and mid_result.resources is not None
                else f"mid removed: {mid_result.verdict.value}"
            )
        log.info("node %s batch resources written: %s", name, decision.reason, extra=ctx(calculation=detail))
        return BatchSync(outcome, decision, stored, recheck, mid_result, part_problem)

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
        waits: list[float] = []  # seconds from now (no datetime arithmetic: see `degrade_verdict`)
        if outcome.verdict is BatchVerdict.CALCULATED and metric is not None and metric.update_time is not None:
            waits.append(metric.update_time + strategy.degrade_time_minutes * 60.0 + 1 - now.timestamp())
        written = self.last_written.get(name)
        if written is not None and outcome.resources is not None:
            waits.append((written - now).total_seconds() + strategy.update_time_threshold_seconds + 1)
        if not waits:
            return None
        return max(min(waits), 0.0)
