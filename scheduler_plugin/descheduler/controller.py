"""The descheduler loop: every ``deschedulingInterval``, plan a LowNodeLoad round from the
reflectors' caches (nodes, pods, NodeMetrics, ReplicaSets/StatefulSets for workload sizes) and
execute it through the Evictor.

Robustness rules: a round never crashes the loop (an exception is logged once per distinct error,
counted, and the next round runs); nodes left out of a round (missing, expired or malformed
NodeMetric) are logged once per node and state, and counted; the API server going away only
pauses evictions (the reflectors keep their stores and re-sync when it is back).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from common.api import constants as c
from common.kube.events import EventRecorder
from common.kube.eviction import Outcome
from common.kube.http import KubeHTTP, resource_path
from common.kube.reflector import LIVENESS_STALL_SECONDS, STALL_SECONDS, Reflector, stalled_watch
from common.logging import ctx
from common.ratelimit import TokenBucket
from scheduler_plugin.descheduler.anomaly import DetectorStore
from scheduler_plugin.descheduler.args import LowNodeLoadArgs
from scheduler_plugin.descheduler.balance import plan_round
from scheduler_plugin.descheduler.evictor import Evictor
from scheduler_plugin.descheduler.inputs import InputCache, RoundInputs
from scheduler_plugin.descheduler.metrics import (
    LAST_ROUND,
    NODE_SKIPS,
    NODES,
    NODES_SKIPPED,
    PODS_CONSIDERED,
    PODS_SKIPPED,
    ROUND_DURATION,
    ROUNDS,
)
from scheduler_plugin.descheduler.model import RoundPlan

log = logging.getLogger("loadline.descheduler")

CONTROLLER_NAME = "loadline-descheduler"
# A pod whose eviction was refused (429) is left out of planning for this many intervals.
REFUSED_BACKOFF_ROUNDS = 5


SKIP_CATEGORIES = ("malformed", "expired", "no update time", "not reported", "missing", "other")


def skip_category(reason: str) -> str:
    """A bounded label for a skip reason (the reason itself carries ages and values)."""
    text = reason.lower()
    if "malformed" in text or "not a valid" in text or "does not sum" in text:
        return "malformed"
    if "expired" in text:
        return "expired"
    if "updatetime" in text:
        return "no update time"
    if "no status.nodemetric" in text:
        return "not reported"
    if "not found" in text:
        return "missing"
    return "other"


@dataclass(slots=True)
class RoundReport:
    """What one round did; returned for tests and the --once mode."""

    plan: RoundPlan | None = None
    outcomes: list[Outcome] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    result: str = "ok"


class Descheduler:
    def __init__(
        self,
        args: LowNodeLoadArgs,
        http: KubeHTTP,
        *,
        identity: str,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.args = args
        self.http = http
        self.wall_clock = wall_clock
        self.nodes = Reflector(http, "/api/v1/nodes")
        # Terminal pods never count (the core ignores them too); pending ones do, for workload limits.
        self.pods = Reflector(http, "/api/v1/pods", field_selector="status.phase!=Succeeded,status.phase!=Failed")
        self.node_metrics = Reflector(http, resource_path(c.SLO_GROUP, c.SLO_VERSION, c.NODEMETRIC_PLURAL))
        # Only for workload sizes (maxUnavailablePerWorkload); without them the round counts pods.
        self.replicasets = Reflector(http, "/apis/apps/v1/replicasets")
        self.statefulsets = Reflector(http, "/apis/apps/v1/statefulsets")
        self.cache = InputCache()
        self.detectors = DetectorStore.from_args(args)
        self.evictor = Evictor(
            http,
            EventRecorder(http, CONTROLLER_NAME, identity),
            TokenBucket(args.evict_qps, args.evict_burst),
            refused_backoff=REFUSED_BACKOFF_ROUNDS * args.descheduling_interval,
        )
        self.rounds = 0
        self.round_started: float | None = None  # monotonic start of the last round
        self.leading = False
        self._skip_state: dict[str, str] = {}  # node -> skip category last logged
        self._pool_state: dict[str, tuple[Any, ...]] = {}
        self._last_error: str | None = None
        self._waiting_logged = False

    # ------------------------------------------------------------------ caches
    @property
    def required_reflectors(self) -> list[Reflector]:
        return [self.nodes, self.pods, self.node_metrics]

    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self.required_reflectors)

    def unsynced_names(self) -> list[str]:
        return [r.name for r in self.required_reflectors if not r.synced.is_set()]

    async def run_reflectors(self) -> None:
        await asyncio.gather(*(r.run() for r in self.reflectors))

    async def inputs(self) -> RoundInputs:
        return await self.cache.build(
            self.nodes.store,
            self.pods.store,
            self.node_metrics.store,
            [self.replicasets.store, self.statefulsets.store],
        )

    # ------------------------------------------------------------------ rounds
    async def run_round(self) -> RoundReport:
        """One round; never raises (except cancellation)."""
        started = time.monotonic()
        self.round_started = started
        report = RoundReport()
        try:
            if self.args.paused:
                report.result = "paused"
            elif not self.synced():
                report.result = "not_synced"
                if not self._waiting_logged:
                    log.info("waiting for caches before the first round", extra=ctx(unsynced=self.unsynced_names()))
                    self._waiting_logged = True
            else:
                await self._round(report)
            if self._last_error is not None and report.result != "error":
                log.info("rounds succeed again")
                self._last_error = None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            report.result = "error"
            report.error = f"{type(exc).__name__}: {exc}"
            if report.error != self._last_error:
                log.exception("round failed; the next round runs as scheduled")
            else:
                log.debug("round failed again: %s", report.error)
            self._last_error = report.error
        ROUNDS.labels(report.result).inc()
        ROUND_DURATION.labels("total").observe(time.monotonic() - started)
        LAST_ROUND.set(self.wall_clock())
        self.rounds += 1
        return report

    async def _round(self, report: RoundReport) -> None:
        inputs = await self.inputs()
        planning = time.monotonic()
        plan = plan_round(
            self.args,
            inputs.nodes,
            inputs.pods,
            inputs.node_metrics,
            detectors=self.detectors,
            now=self.wall_clock(),
            refused=self.evictor.refused_pods(),
        )
        ROUND_DURATION.labels("plan").observe(time.monotonic() - planning)
        report.plan = plan
        # The core saw no metric for nodes whose objects did not parse; say what was wrong with them.
        report.skipped = {node: inputs.node_problems.get(node, reason) for node, reason in plan.skipped_nodes.items()}
        self._observe(plan, report.skipped)
        for planned in plan.evictions:
            pod = inputs.pod_object(planned.pod.key)
            if pod is None:  # cannot happen: the plan only holds pods of this snapshot
                continue
            outcome = await self.evictor.execute(planned, pod, dry_run=self.args.dry_run)
            report.outcomes.append(outcome)
            if outcome.unreachable:
                break  # every further call would fail the same way; the next round retries
        if plan.evictions:
            results = Counter(o.result for o in report.outcomes)
            log.info("round executed", extra=ctx(planned=len(plan.evictions), **results))

    # ------------------------------------------------------------------ observability
    def _observe(self, plan: RoundPlan, skipped: dict[str, str]) -> None:
        NODES.clear()
        for pool in plan.pools:
            for cls, count in (
                ("low", pool.low),
                ("both_low", pool.both_low),
                ("normal", pool.normal),
                ("high", pool.high),
                ("prod_low", pool.prod_low),
                ("prod_high", pool.prod_high),
                ("anomalous", len(pool.anomalous)),
            ):
                NODES.labels(pool.name, cls).set(count)
            state = (pool.stop_reason, pool.high, pool.prod_high, tuple(pool.anomalous))
            if self._pool_state.get(pool.name) != state:
                self._pool_state[pool.name] = state
                log.info(
                    "pool state",
                    extra=ctx(
                        pool=pool.name,
                        nodes=pool.nodes,
                        low=pool.low + pool.both_low,
                        high=pool.high,
                        prod_high=pool.prod_high,
                        anomalous=",".join(pool.anomalous) or "-",
                        stop=pool.stop_reason or "-",
                    ),
                )
        categories = Counter(skip_category(reason) for reason in skipped.values())
        for category in SKIP_CATEGORIES:  # 0, not absent, for the reasons no node has this round
            NODES_SKIPPED.labels(category).set(0)
        for category, count in categories.items():
            NODES_SKIPPED.labels(category).set(count)
            NODE_SKIPS.labels(category).inc(count)
        for node, reason in skipped.items():
            category = skip_category(reason)
            if self._skip_state.get(node) != category:
                self._skip_state[node] = category
                log.warning("node skipped: %s", reason, extra=ctx(node=node))
        for node in [n for n in self._skip_state if n not in skipped]:
            del self._skip_state[node]
            log.info("node measurable again", extra=ctx(node=node))
        PODS_CONSIDERED.inc(plan.pods_considered)
        for reason, count in plan.pod_skips.items():
            PODS_SKIPPED.labels(reason).inc(count)

    # ------------------------------------------------------------------ loop
    async def lead(self) -> None:
        """Run rounds every deschedulingInterval (measured start to start) while leading."""
        self.leading = True
        # A fresh streak per term: counts from an earlier term are stale by now.
        self.detectors = DetectorStore.from_args(self.args)
        interval = self.args.descheduling_interval
        log.info("leading: rounds every %gs", interval, extra=ctx(dry_run=self.args.dry_run))
        try:
            while True:
                started = time.monotonic()
                await self.run_round()
                await asyncio.sleep(max(0.0, started + interval - time.monotonic()))
        finally:
            self.leading = False

    @property
    def reflectors(self) -> list[Reflector]:
        return [*self.required_reflectors, self.replicasets, self.statefulsets]

    def healthy(self) -> tuple[bool, str]:
        """Unhealthy when a watch has failed without progress for `LIVENESS_STALL_SECONDS`, or when leading and
        the loop has not started a round for far too long."""
        if (problem := stalled_watch(self.reflectors, LIVENESS_STALL_SECONDS)) is not None:
            return False, problem
        if not self.leading or self.round_started is None:
            return True, "ok"
        stalled = time.monotonic() - self.round_started
        limit = 3 * self.args.descheduling_interval + 60
        if stalled > limit:
            return False, f"no round started for {stalled:.0f}s"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        if (problem := stalled_watch(self.reflectors, STALL_SECONDS)) is not None:
            return False, problem
        if self.synced():
            return True, "ok"
        return False, "caches not synced: " + ", ".join(self.unsynced_names())
