"""Executes planned evictions through the Eviction API (common/kube/eviction.py), so PodDisruptionBudgets are
enforced by the API server, and records Koordinator's ``Descheduled`` event on each evicted pod.

Answers and what they mean here:
- 201: evicted; the pod gets its deletionTimestamp and the next round counts it as in flight.
- 429: "not now" (a PodDisruptionBudget allows no disruption, or the budget is still being
  processed). Normal operation: logged once per pod, counted, and the pod is left out of planning
  for ``refused_backoff`` seconds so it does not take the node's per-round slots every round.
- 404, or 409 on the UID precondition: the pod is already gone (or replaced by a namesake).
- no answer (status 0): the API server is unreachable; logged once per outage, the round stops
  evicting, the next round tries again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

from common.kube.eviction import (
    DRY_RUN,
    EVICTED,
    FAILED,
    GONE,
    REASON_PDB,
    REASON_TOO_MANY,
    REASON_UNREACHABLE,
    REFUSED,
    Creator,
    Outcome,
    evict,
)
from common.logging import ctx
from common.ratelimit import TokenBucket
from scheduler_plugin.descheduler.metrics import EVICTIONS
from scheduler_plugin.descheduler.model import PlannedEviction
from scheduler_plugin.descheduler.reason import EVENT_ACTION, EVENT_REASON, descheduled_event_message

log = logging.getLogger("loadline.descheduler.evictor")

class _Recorder(Protocol):
    async def record(
        self,
        regarding: Mapping[str, Any],
        *,
        reason: str,
        action: str,
        note: str,
        type: Literal["Normal", "Warning"] = "Normal",
    ) -> bool: ...


def trigger(planned: PlannedEviction) -> str:
    return "prod overutilized" if planned.prod else "node overutilized"


class Evictor:
    def __init__(
        self,
        http: Creator,
        recorder: _Recorder,
        bucket: TokenBucket,
        *,
        refused_backoff: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.http = http
        self.recorder = recorder
        self.bucket = bucket
        self.refused_backoff = refused_backoff
        self._clock = clock
        self._refused: dict[tuple[str, str], tuple[float, str]] = {}  # pod -> (retry after, reason)
        self._api_down = False
        self._last_failure: dict[str, str] = {}  # failure reason -> last message logged for it
        # 0 from the start: the failure panels and rate() show 0 rather than no data
        for result, reason in ((FAILED, REASON_UNREACHABLE), (REFUSED, REASON_PDB), (REFUSED, REASON_TOO_MANY)):
            EVICTIONS.labels(result, reason)

    def refused_pods(self) -> frozenset[tuple[str, str]]:
        """Pods whose eviction was refused within the backoff; the planner leaves them out."""
        now = self._clock()
        for key in [k for k, (until, _) in self._refused.items() if until <= now]:
            del self._refused[key]
        return frozenset(self._refused)

    async def execute(self, planned: PlannedEviction, pod: Mapping[str, Any], *, dry_run: bool) -> Outcome:
        key = planned.pod.key
        where = ctx(pod=f"{key[0]}/{key[1]}", node=planned.node_name, reason=planned.reason)
        if dry_run:
            outcome = Outcome(DRY_RUN, trigger(planned))
            log.info("dry run: would evict pod", extra=where)
            EVICTIONS.labels(outcome.result, outcome.reason).inc()
            return outcome
        await self.bucket.acquire()
        outcome = await evict(self.http, pod, reason=trigger(planned))
        EVICTIONS.labels(outcome.result, outcome.reason).inc()
        self._api_state(outcome)
        if outcome.result == EVICTED:
            self._refused.pop(key, None)
            log.info("evicted pod", extra=where)
            note = descheduled_event_message(planned.node_name, planned.reason)
            await self.recorder.record(pod, reason=EVENT_REASON, action=EVENT_ACTION, note=note, type="Normal")
        elif outcome.result == REFUSED:
            first = key not in self._refused
            self._refused[key] = (self._clock() + self.refused_backoff, outcome.reason)
            # Normal operation, not an error: said once per pod and refusal, then only counted.
            level = logging.INFO if first else logging.DEBUG
            log.log(level, "eviction refused, not now: %s", outcome.message, extra=ctx(
                pod=f"{key[0]}/{key[1]}", node=planned.node_name, why=outcome.reason,
                retry_in=f"{self.refused_backoff:g}s"))  # fmt: skip
        elif outcome.result == GONE:
            log.info("pod already gone", extra=ctx(pod=f"{key[0]}/{key[1]}", why=outcome.reason))
        elif not outcome.unreachable:
            # A misconfiguration (RBAC, several budgets on one pod) repeats every round: said once per message.
            repeated = self._last_failure.get(outcome.reason) == outcome.message
            self._last_failure[outcome.reason] = outcome.message
            log.log(
                logging.DEBUG if repeated else logging.WARNING,
                "eviction failed: %s",
                outcome.message,
                extra=ctx(pod=f"{key[0]}/{key[1]}", why=outcome.reason),
            )
        return outcome

    def _api_state(self, outcome: Outcome) -> None:
        down = outcome.unreachable
        if down and not self._api_down:
            log.warning("API server unreachable; evictions wait for the next round: %s", outcome.message)
        elif not down and self._api_down:
            log.info("API server answers again; evicting")
        self._api_down = down
