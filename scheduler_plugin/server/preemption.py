"""Carries out a preemption decision (kube-scheduler's `prepareCandidate`), off the scheduling loop.

For the best candidate first: each victim waiting in Permit is rejected there (its gang's
Unreserve releases the whole group), every other victim is evicted through the Eviction API,
so PodDisruptionBudgets are enforced by the API server. A 429 (a budget allows no disruption
now) abandons that candidate and the next one is tried; victims already evicted stay
evicted, as in kube-scheduler. On success the victims get a `Preempted` event, the preemptor
keeps its nomination, and lower-priority pods nominated to the same node lose theirs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from common.kube.eviction import EVICTED, FAILED, GONE, REFUSED, Creator, Outcome, evict
from common.logging import ctx
from scheduler_plugin.framework.interfaces import WaitingPods
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.defaultpreemption import NAME, Candidate, PreemptionDecision
from scheduler_plugin.server import metrics as m
from scheduler_plugin.server.reporter import Reporter

log = logging.getLogger("loadline.scheduler.preemption")


@dataclass(slots=True)
class PreemptionOutcome:
    node_name: str  # where the victims were evicted ("" when no candidate worked)
    victims: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # candidates given up on a 429
    error: str = ""


class PreemptionExecutor:
    def __init__(self, http: Creator, reporter: Reporter, snapshot: Snapshot) -> None:
        self.http = http
        self.reporter = reporter
        self.snapshot = snapshot

    async def execute(self, decision: PreemptionDecision, waiting: WaitingPods, profile: str) -> PreemptionOutcome:
        preemptor = decision.preemptor
        outcome = PreemptionOutcome("")
        for candidate in decision.candidates:
            refused = False
            self.mark_terminating(candidate)
            for i, victim in enumerate(candidate.victims):
                result = await self._remove(victim, preemptor, waiting)
                if result.result in (REFUSED, FAILED):
                    self.snapshot.evicting.difference_update(v.key for v in candidate.victims[i:])
                if result.result == REFUSED:
                    refused = True
                    log.info("preemption on %s refused for %s: %s", candidate.node_name, victim.key, result.message,
                             extra=ctx(pod=preemptor.key, node=candidate.node_name))
                    break
                if result.result == FAILED:
                    outcome.error = result.message
                    log.warning("preemption of %s failed: %s", victim.key, result.message,
                                extra=ctx(pod=preemptor.key, node=candidate.node_name))
                    return outcome
            if refused:
                outcome.refused.append(candidate.node_name)
                continue
            outcome.node_name = candidate.node_name
            outcome.victims = [v.key for v in candidate.victims]
            m.PREEMPTION_VICTIMS.observe(len(candidate.victims))
            for victim in candidate.victims:
                # (a gang's decision takes victims on several nodes)
                where = self.snapshot.node_of(victim.key) or candidate.node_name
                self.reporter.preempted(victim, preemptor, profile, where)
            for node_name in {candidate.node_name, *decision.nominations.values()}:
                self._clear_lower_nominations(preemptor, node_name)
            log.info("preempted %d pod(s) on %s for %s", len(candidate.victims), candidate.node_name, preemptor.key,
                     extra=ctx(pod=preemptor.key, node=candidate.node_name, victims=",".join(outcome.victims)))
            return outcome
        return outcome

    def mark_terminating(self, candidate: Candidate) -> None:
        """The candidate's victims count as terminating from now on (before the evictions and before the
        watch shows them deleted), so the preemptor and its gang wait instead of preempting again."""
        self.snapshot.evicting.update(v.key for v in candidate.victims)

    async def _remove(self, victim: PodInfo, preemptor: PodInfo, waiting: WaitingPods) -> Outcome:
        if waiting.get(victim.key) is not None:
            waiting.reject(victim.key, NAME, f"preempted by {preemptor.key}")
            return Outcome(EVICTED, "waiting in Permit")
        result = await evict(self.http, victim.raw, reason="evicted")
        return Outcome(EVICTED, result.reason) if result.result == GONE else result

    def _clear_lower_nominations(self, preemptor: PodInfo, node_name: str) -> None:
        for key, nominated in list(self.snapshot.nominations.items()):
            pod = self.snapshot.pods.get(key)
            if nominated != node_name or pod is None or pod.priority >= preemptor.priority:
                continue
            self.snapshot.nominate(key, "")
            self.reporter.nominate(pod, "")
