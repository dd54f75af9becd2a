"""BE memory eviction by deleting the pod: its own node only, enforced by the API server; no PDB check.

Each round plans with the memory_evict core (threshold, lower bound, victim order, cool-down);
every eviction is logged, written as an event on the pod (`evictPodSuccess` / `evictPodFail`,
Koordinator's reasons with its "trigger by koordlet feature" wording) and counted.

Why DELETE and not the Eviction API: the API server can hold a DELETE to the agent's own node, not
an Eviction. Admission sees a deleted pod as `oldObject`, so the chart's ValidatingAdmissionPolicy
(templates/admission-policy.yaml) lets the agent's account delete only pods whose `spec.nodeName` is
the node its token is bound to (as NodeRestriction does for kubelets); an Eviction CREATE shows
admission only the Eviction's name and namespace, never the pod, so a stolen token holding
`pods/eviction` could evict any pod in the cluster.

What it costs: PodDisruptionBudgets are not consulted. Neither does the kubelet's node-pressure
eviction (it stops the pod's containers and marks it Failed), nor koordlet by default: its memory
eviction stops the victim's containers through the container runtime, and uses the Eviction API
(with `pods/eviction` on every pod in its ClusterRole) only with `--only-evict-by-api`.

The DELETE carries a UID precondition, so a namesake created since (a StatefulSet's, perhaps on
another node) is never hit (409), and no grace period of its own: the pod gets its
`terminationGracePeriodSeconds`, as it did through the Eviction API.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agent.qos import metrics
from agent.qos.inputs import NodeFacts, PodEntry, is_best_effort, is_terminating
from agent.qos.memory_evict import (
    MEMORY_EVICT_COOLDOWN_SECONDS,
    BEPodMemory,
    EvictCooldown,
    MemoryEvictionPlan,
    plan_memory_eviction,
)
from agent.qos.usage import UsageSnapshot
from common.api.nodeslo import ResourceThresholdStrategy
from common.api.poddigest import PodDigest
from common.kube.events import EventRecorder
from common.kube.http import KubeError, KubeHTTP, resource_path

log = logging.getLogger("loadline.agent.qos")

FEATURE = "BEMemoryEvict"
REASON_SUCCESS = "evictPodSuccess"
REASON_FAIL = "evictPodFail"


class MemoryEvictor:
    def __init__(
        self,
        http: KubeHTTP,
        recorder: EventRecorder,
        *,
        cooldown_seconds: float = MEMORY_EVICT_COOLDOWN_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.http = http
        self.recorder = recorder
        self.cooldown = EvictCooldown(cooldown_seconds)
        self.clock = clock
        self._evicted: set[str] = set()  # UIDs asked to go; not candidates again while they linger
        self._last_failure: str | None = None

    def candidates(self, pods: Iterable[PodDigest], usage: UsageSnapshot) -> list[BEPodMemory]:
        out = []
        for pod in pods:
            uid = pod.uid
            if not uid or uid in self._evicted or is_terminating(pod) or not is_best_effort(pod):
                continue
            sample = usage.pods.get(uid)
            out.append(
                BEPodMemory(
                    namespace=pod.namespace,
                    name=pod.name,
                    uid=uid,
                    priority=pod.priority,
                    memory_used_bytes=sample.memory_bytes if sample is not None else 0,
                )
            )
        return out

    async def round(
        self,
        thresholds: ResourceThresholdStrategy,
        node: NodeFacts,
        usage: UsageSnapshot,
        pods: Mapping[str, PodEntry],
    ) -> MemoryEvictionPlan | None:
        """One eviction round; `pods` are the node's pods by UID. Returns the plan when it evicts."""
        self._evicted &= set(pods)  # forget pods that are gone
        threshold = thresholds.memory_evict_threshold_percent
        if threshold is None or node.capacity_memory_bytes <= 0:
            return None
        now = self.clock()
        plan = plan_memory_eviction(
            used_bytes=usage.node_memory_bytes,
            capacity_bytes=node.capacity_memory_bytes,
            threshold_percent=threshold,
            lower_percent=thresholds.memory_evict_lower_percent,
            candidates=self.candidates((digest for _, digest in pods.values()), usage),
            cooldown=self.cooldown,
            now=now,
        )
        if not plan.victims:
            if plan.pressure is not None and plan.pressure.triggered:
                metrics.SKIPPED_ROUNDS.labels("no_evictable_be_pod").inc()
            return None
        log.warning("BE memory eviction: %s; evicting %d pod(s)", plan.reason, len(plan.victims))
        evicted = 0
        for victim in plan.victims:
            if await self._evict(pods[victim.uid][0], victim, plan.reason):
                evicted += 1
        if evicted:
            self.cooldown = self.cooldown.after_eviction(self.clock())
        return plan

    async def _evict(self, pod: Mapping[str, Any], victim: BEPodMemory, reason: str) -> bool:
        path = resource_path("", "v1", "pods", namespace=victim.namespace, name=victim.name)
        # Exactly the planned pod: a namesake created since (a StatefulSet's, maybe on another node) answers 409.
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": victim.uid}}
        note = f"trigger by koordlet feature {FEATURE}: {reason}; pod uses {victim.memory_used_bytes} bytes"
        try:
            await self.http.delete(path, body)
        except KubeError as exc:
            if exc.is_not_found or exc.is_conflict:
                self._evicted.add(victim.uid)  # already gone (or replaced by a namesake)
                return False
            metrics.ACTIONS.labels("evict_failed").inc()
            failure = f"{victim.uid}: {exc.status}"
            if failure != self._last_failure:  # retried every round: logged once per pod and cause
                self._last_failure = failure
                log.warning("could not evict %s/%s: %s", victim.namespace, victim.name, exc)
                if exc.status != 0:  # with the API server away, the event could not be written either
                    await self.recorder.record(
                        pod,
                        reason=REASON_FAIL,
                        action="Evict",
                        note=f"{note}; eviction refused: {exc.message}",
                        type="Warning",
                    )
            return False
        self._last_failure = None
        self._evicted.add(victim.uid)
        metrics.ACTIONS.labels("evicted").inc()
        log.warning("evicted %s/%s", victim.namespace, victim.name, extra={"ctx": {"reason": reason}})
        await self.recorder.record(pod, reason=REASON_SUCCESS, action="Evict", note=note, type="Warning")
        return True
