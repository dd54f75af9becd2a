"""The agent's enforcement of its node's NodeSLO on best-effort pods (koordlet's, koordinator
pkg/koordlet/qosmanager/plugins/{cpusuppress,cpuevict,memoryevict}).

    enforcer = QoSEnforcer(node_name, http, cgroup_root, lambda: usage_from_sampler(sampler),
                           cgroup_parent=..., pods=...)  # pods: the agent's own pod watch, optional
    task = asyncio.create_task(enforcer.run())

It watches its own Node, its own NodeSLO and the pods bound to the node, and every second:
- does nothing but restore (BE CFS quota -1, the BE cpuset it changed) unless the NodeSLO's
  `resourceUsedThresholdWithBE.enable` is true;
- BE CPU suppress: suppress = capacity × cpuSuppressThresholdPercent − non-BE pods − non-BE host
  apps − max(system usage, node reserved), applied with the `cfsQuota` or `cpuset` policy (the
  other policy's setting restored, as koordlet does when the policy switches);
- BE memory evict by deleting the pod (UID precondition; the chart's admission policy holds the
  agent's deletes to its own node), with the cool-down;
- batch isolation (agent.qos.batch_isolation), whatever the NodeSLO says: each batch pod's cgroups held to its
  batch-cpu / batch-memory. While suppression runs with the cfsQuota policy the batch pods' quotas are lifted (the
  besteffort cgroup's quota holds them; on cgroup v1 a child's quota above its parent's is refused), before the
  besteffort quota is set; otherwise they are set after it is lifted.

Usage comes from `usage()` (the newest collect cycle); a round without fresh usage does not act.
Stopping the enforcer leaves the cgroups as they are: an agent restart must not hand the node's
CPU to best-effort pods for the seconds until it is back (koordlet does the same).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent.qos import metrics
from agent.qos.batch_isolation import BatchIsolator
from agent.qos.batch_resource import IsolationMode, NodeLimits, cpu_normalization_ratio
from agent.qos.becgroup import BECgroup, locate_be_cgroup
from agent.qos.cpu_enforce import CpusetInputs, CPUSuppressor
from agent.qos.cpuset import Processor
from agent.qos.evictor import MemoryEvictor
from agent.qos.formulas import PodCPUUsage, SuppressBreakdown, be_suppress
from agent.qos.inputs import NodeFacts, PodEntry, exclusive_cpus, is_best_effort, node_facts
from agent.qos.topology import read_processors
from agent.qos.usage import UsageSnapshot
from common.api.constants import NODESLO_PLURAL, SLO_GROUP, SLO_VERSION
from common.api.malformed import from_validation_error
from common.api.nodedigest import NodeDigest, digest_node
from common.api.nodeslo import CPUSuppressPolicy, NodeSLO, ResourceThresholdStrategy
from common.api.poddigest import KIND as POD
from common.api.poddigest import digest_pod
from common.kube.events import EventRecorder
from common.kube.http import KubeHTTP, resource_path
from common.kube.malformed import MalformedObjects
from common.kube.reflector import Reflector

log = logging.getLogger("loadline.agent.qos")


class QoSEnforcer:
    def __init__(
        self,
        node_name: str,
        http: KubeHTTP,
        cgroup_root: str | Path,
        usage: Callable[[], UsageSnapshot | None],
        *,
        cgroup_parent: str = "",
        interval_seconds: float = 1.0,
        max_usage_age_seconds: float = 10.0,
        sys_root: str | Path = "/sys",
        recorder: EventRecorder | None = None,
        pods: Callable[[], Iterable[Mapping[str, Any]]] | None = None,
        evict_cooldown_seconds: float = 4.0,
        batch_isolation: IsolationMode = IsolationMode.ON,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node_name = node_name
        self.cgroup_root = Path(cgroup_root)
        self.cgroup_parent = cgroup_parent
        self.usage = usage
        self.interval_seconds = interval_seconds
        self.max_usage_age_seconds = max_usage_age_seconds
        self.sys_root = sys_root
        self.clock = clock
        selector = f"metadata.name={node_name}"
        self.node_watch = Reflector(http, "/api/v1/nodes", name="qos-node", field_selector=selector)
        self.slo_watch = Reflector(
            http, resource_path(SLO_GROUP, SLO_VERSION, NODESLO_PLURAL), name="qos-nodeslo", field_selector=selector
        )
        # The node's pods: the agent's own pod watch when it shares it (`pods`), else a watch of our own.
        self.pod_watch = Reflector(http, "/api/v1/pods", name="qos-pods", field_selector=f"spec.nodeName={node_name}")
        self._pods_source = pods
        # Objects this enforcer reads and cannot use, logged and counted once per version; the node's pods are
        # counted by the agent's pod watch when it shares it.
        self.malformed = MalformedObjects(("Node", "NodeSLO") if pods is not None else ("Node", "NodeSLO", POD))
        # Digests by object, rebuilt only when the watch delivers a new version (a round runs every second).
        self._node: tuple[Mapping[str, Any], NodeDigest] | None = None
        self._slo: tuple[Mapping[str, Any], ResourceThresholdStrategy | None] | None = None
        self._digests: dict[str, PodEntry] = {}
        recorder = recorder or EventRecorder(http, "loadline-agent", node_name)
        self.cpu = CPUSuppressor(self._be_cgroup)
        self.evictor = MemoryEvictor(http, recorder, cooldown_seconds=evict_cooldown_seconds, clock=clock)
        self.batch: BatchIsolator | None = None
        if batch_isolation is IsolationMode.OFF:
            metrics.BATCH_MODE.labels(IsolationMode.OFF.value).set(1)
        else:
            dry_run = batch_isolation is IsolationMode.DRY_RUN
            self.batch = BatchIsolator(self.cgroup_root, recorder, cgroup_parent=cgroup_parent, dry_run=dry_run)
        self.last_breakdown: SuppressBreakdown | None = None
        self._be: BECgroup | None = None
        self._processors: list[Processor] | None = None
        self._notes: dict[str, str] = {}

    # --- entry point -----------------------------------------------------------------------------
    def watches(self) -> list[Reflector]:
        """The list-watches this enforcer runs (the pods' only when it does not share the agent's)."""
        return [self.node_watch, self.slo_watch] + ([self.pod_watch] if self._pods_source is None else [])

    async def run(self) -> None:
        watches = [asyncio.create_task(w.run()) for w in self.watches()]
        try:
            while True:
                started = self.clock()
                try:
                    await self.step()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # a failed round must not end enforcement
                    metrics.ERRORS.labels("round").inc()
                    self._note("round", f"enforcement round failed: {type(exc).__name__}: {exc}", logging.ERROR)
                else:
                    self._note("round", "")
                await asyncio.sleep(max(self.interval_seconds - (self.clock() - started), 0.0))
        finally:
            for task in watches:
                task.cancel()
            for task in watches:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    # --- one round ---------------------------------------------------------------------------------
    async def step(self) -> None:
        thresholds = self._thresholds()
        enabled = thresholds is not None and thresholds.enable is True
        policy = thresholds.cpu_suppress_policy if thresholds is not None else None
        quota_suppress = enabled and policy is CPUSuppressPolicy.CFS_QUOTA
        if quota_suppress:  # batch quotas lifted before the besteffort cgroup may get one
            await self._batch_round(cfs_quota=False)
        await self._be_round(thresholds, enabled)
        if not quota_suppress:  # set after the besteffort quota was lifted
            await self._batch_round(cfs_quota=True)

    async def _batch_round(self, *, cfs_quota: bool) -> None:
        if self.batch is None:
            return
        node = self.node_watch.store.get(self.node_name)
        limits = NodeLimits(cpu_normalization_ratio=cpu_normalization_ratio(node))
        digest = self._node_digest(node) if node is not None else None
        if digest is not None and digest.problem is None:  # a malformed Node (counted): nothing clamped
            facts = node_facts(digest)
            limits = NodeLimits(facts.capacity_cpu_milli or None, facts.capacity_memory_bytes or None,
                                limits.cpu_normalization_ratio)  # fmt: skip
        try:
            await self.batch.round({uid: raw for uid, (raw, _) in self._pods().items()}, limits, cfs_quota=cfs_quota)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # batch isolation failing must not stop BE suppression or eviction
            metrics.ERRORS.labels("batch_round").inc()
            self._note("batch", f"batch isolation round failed: {type(exc).__name__}: {exc}", logging.ERROR)
        else:
            self._note("batch", "")

    async def _be_round(self, thresholds: ResourceThresholdStrategy | None, enabled: bool) -> None:
        metrics.ENABLED.set(1 if enabled else 0)
        if thresholds is None or not enabled:
            self._note("enabled", "BE enforcement off (resourceUsedThresholdWithBE.enable is not true)")
            self._restore("enforcement is off")
            return
        policy = thresholds.cpu_suppress_policy or CPUSuppressPolicy.CPUSET
        self._note("enabled", f"BE enforcement on: cpu suppress policy {policy.value}")

        node = self.node_watch.store.get(self.node_name)
        if node is None:
            self._skip("node_unknown", f"node {self.node_name} not seen yet")
            return
        digest = self._node_digest(node)
        if digest.problem is not None:
            # The enforcer's policy for a Node it cannot read: no enforcement this round (nor any until it is
            # readable); what was done before stays.
            self._skip("node_malformed", f"node {self.node_name} unreadable: {digest.problem}")
            return
        facts = node_facts(digest)
        usage = self.usage()
        if usage is None or self.clock() - usage.taken_at > self.max_usage_age_seconds:
            self._skip("usage_stale", "no fresh usage samples: not acting")
            return
        self._note("skip", "")
        pods = self._pods()

        breakdown = self.suppress(thresholds, facts, usage, pods)
        self.last_breakdown = breakdown
        metrics.SUPPRESS_CORES.set(breakdown.suppress_milli / 1000)
        if self._be_cgroup() is None:
            self._skip("no_be_cgroup", f"no besteffort cgroup under {self.cgroup_root}: CPU suppress waits")
        elif policy is CPUSuppressPolicy.CFS_QUOTA:
            self.cpu.restore_cpuset(self._cpuset_inputs(facts, pods), "cpu suppress policy is cfsQuota")
            self.cpu.apply_quota(breakdown)
        else:
            self.cpu.restore_quota("cpu suppress policy is cpuset")
            self.cpu.apply_cpuset(breakdown, self._cpuset_inputs(facts, pods))
        await self.evictor.round(thresholds, facts, usage, pods)

    def suppress(
        self,
        thresholds: ResourceThresholdStrategy,
        facts: NodeFacts,
        usage: UsageSnapshot,
        pods: Mapping[str, PodEntry],
    ) -> SuppressBreakdown:
        samples = [
            # metrics without a known pod count as non-BE: they might be anything
            PodCPUUsage(uid, s.cpu_cores, is_best_effort(pods[uid][1]) if uid in pods else None)
            for uid, s in usage.pods.items()
            if not math.isnan(s.cpu_cores)
        ]
        return be_suppress(
            capacity_milli=facts.capacity_cpu_milli,
            node_used_cores=usage.node_cpu_cores,
            node_reserved_milli=facts.reserved_cpu_milli,
            pods=samples,
            host_apps=usage.host_apps,
            threshold_percent=thresholds.cpu_suppress_threshold_percent or 65,
            min_percent=thresholds.cpu_suppress_min_percent,
        )

    # --- helpers --------------------------------------------------------------------------------------
    def _thresholds(self) -> ResourceThresholdStrategy | None:
        obj = self.slo_watch.store.get(self.node_name)
        if obj is None:
            return None
        if self._slo is not None and self._slo[0] is obj:
            return self._slo[1]
        thresholds: ResourceThresholdStrategy | None = None
        try:
            thresholds = NodeSLO.from_wire(obj).thresholds()
        except ValidationError as exc:
            # A NodeSLO we cannot read is treated as enforcement off.
            metrics.ERRORS.labels("nodeslo").inc()
            self.malformed.report("NodeSLO", self.node_name, obj, from_validation_error("NodeSLO", self.node_name, exc))
            self._note("nodeslo", f"NodeSLO {self.node_name} unreadable, treated as disabled: {exc}", logging.ERROR)
        else:
            self.malformed.clear("NodeSLO", self.node_name)
            self._note("nodeslo", "")
        self._slo = (obj, thresholds)
        return thresholds

    def _node_digest(self, node: Mapping[str, Any]) -> NodeDigest:
        if self._node is None or self._node[0] is not node:
            digest = digest_node(node)
            self.malformed.account("Node", self.node_name, node, digest.problem, digest.part_problem)
            self._node = (node, digest)
        return self._node[1]

    def _pods(self) -> dict[str, PodEntry]:
        """The node's pods by UID, each with its digest (see `is_best_effort` for a pod that cannot be read)."""
        source = self._pods_source() if self._pods_source is not None else self.pod_watch.store.values()
        counting = self._pods_source is None
        fresh: dict[str, PodEntry] = {}
        for pod in source:
            uid = str((pod.get("metadata") or {}).get("uid") or "")
            if not uid:
                continue
            entry = self._digests.get(uid)
            if entry is None or entry[0] is not pod:
                entry = (pod, digest_pod(pod))
                if counting:
                    self.malformed.account(POD, entry[1].key, pod, entry[1].problem, entry[1].part_problem)
            fresh[uid] = entry
        self._digests = fresh
        return fresh

    def _be_cgroup(self) -> BECgroup | None:
        if self._be is None or not self._be.cpu_dir.is_dir():
            self._be = locate_be_cgroup(self.cgroup_root, self.cgroup_parent)
        return self._be

    def _cpuset_inputs(self, facts: NodeFacts, pods: Mapping[str, PodEntry]) -> CpusetInputs:
        if self._processors is None:
            self._processors = read_processors(self.sys_root)
        lse, lsr = exclusive_cpus(digest for _, digest in pods.values())
        return CpusetInputs(self._processors, facts.reserved_cpus, lse, lsr)

    def _restore(self, why: str) -> None:
        if self._be_cgroup() is None:
            return
        self.cpu.restore_quota(why)
        if self.cpu.cpuset_touched:
            node = self.node_watch.store.get(self.node_name)
            reserved: tuple[int, ...] = ()
            if node is not None and (digest := self._node_digest(node)).problem is None:
                reserved = node_facts(digest).reserved_cpus
            if self._processors is None:
                self._processors = read_processors(self.sys_root)
            lse, lsr = exclusive_cpus(digest for _, digest in self._pods().values())
            self.cpu.restore_cpuset(CpusetInputs(self._processors, reserved, lse, lsr), why)

    def _skip(self, reason: str, message: str) -> None:
        metrics.SKIPPED_ROUNDS.labels(reason).inc()
        self._note("skip", message, logging.WARNING)

    def _note(self, key: str, message: str, level: int = logging.INFO) -> None:
        """Log `message` once per change of the state `key` ("" = back to normal, not logged)."""
        if self._notes.get(key, "") == message:
            return
        self._notes[key] = message
        if message:
            log.log(level, message)
