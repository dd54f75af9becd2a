"""The scheduling loop: one queue for all profiles, a serial scheduling cycle, asynchronous binding.

Like kube-scheduler's scheduleOne: pop the next pod, run its profile's scheduling cycle
(PreFilter … Permit) to completion on the event loop — it is CPU work over numpy arrays,
no I/O — then hand a placed pod to a binding task (WaitOnPermit, PreBind, Bind,
PostBind) and go on with the next pod. Between cycles the loop yields so watch events
and bindings make progress.

Failures: a rejection puts the pod in the unschedulable pool, where only a cluster
event that can help it (see `queueing`) or the pool's timeout moves it again; an error
goes to backoff. A binding that fails releases the reservation and requeues the pod,
unless the pod turned out to be gone or bound elsewhere.

The queue is kept current on standby replicas too; only the leader runs `run()`. When
leadership is lost, waiting and binding pods are rolled back and go back to the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from common.logging import ctx
from scheduler_plugin.framework.clock import Clock, RealClock
from scheduler_plugin.framework.events import ASSIGNED_POD_DELETE, POD_GROUP
from scheduler_plugin.framework.interfaces import QueuedPodInfo
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.queue import SchedulingQueue
from scheduler_plugin.framework.runtime import Framework
from scheduler_plugin.framework.schedule_one import ScheduleResult, binding_cycle, rollback, scheduling_cycle
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.framework.status import SUCCESS, Status
from scheduler_plugin.plugins.coscheduling.gangs import member_keys
from scheduler_plugin.plugins.coscheduling.podgroups import PodGroups
from scheduler_plugin.plugins.defaultpreemption import DECISION, PreemptionDecision
from scheduler_plugin.server import metrics as m
from scheduler_plugin.server.attempts import BIND_FAILED, AttemptLog
from scheduler_plugin.server.binder import APIBinder
from scheduler_plugin.server.preemption import PreemptionExecutor
from scheduler_plugin.server.queueing import FLUSH, EventInterests
from scheduler_plugin.server.reporter import Reporter

log = logging.getLogger("loadline.scheduler")


@dataclass(slots=True)
class InFlight:
    """A pod past its scheduling cycle: waiting in Permit or being bound."""

    info: QueuedPodInfo
    result: ScheduleResult
    framework: Framework
    cycle: int
    task: asyncio.Task[None] | None = None


class Scheduler:
    def __init__(
        self,
        frameworks: dict[str, Framework],
        snapshot: Snapshot,
        binder: APIBinder,
        reporter: Reporter,
        *,
        clock: Clock | None = None,
        initial_backoff_seconds: float = 1.0,
        max_backoff_seconds: float = 10.0,
        unschedulable_timeout_seconds: float = 300.0,
        explain_capacity: int = 1000,
    ) -> None:
        if not frameworks:
            raise ValueError("at least one profile is needed")
        self.frameworks = frameworks
        self.snapshot = snapshot
        self.binder = binder
        self.reporter = reporter
        self.clock: Clock = clock if clock is not None else RealClock()
        self.unschedulable_timeout_seconds = unschedulable_timeout_seconds
        # One queue for all profiles: kube-scheduler requires the same QueueSort everywhere
        # and takes the first profile's.
        first = next(iter(frameworks.values()))
        self.queue = SchedulingQueue(
            first.less,
            self.clock,
            initial_backoff_seconds=initial_backoff_seconds,
            max_backoff_seconds=max_backoff_seconds,
            pre_enqueue=self._pre_enqueue,
            sort_key=first.queue_sort_key(),
        )
        self.interests = EventInterests(p for f in frameworks.values() for p in f.plugins.values())
        self.in_flight: dict[str, InFlight] = {}
        self.enqueued_at: dict[str, float] = {}  # first time a pod entered the queue (end-to-end latency)
        self.attempts = AttemptLog(explain_capacity)
        self.preemption = PreemptionExecutor(reporter.http, reporter, snapshot)
        self._preemptions: set[asyncio.Task[None]] = set()
        self.leading = False
        self._turned_at: float | None = None  # clock time the scheduling loop last turned
        self._wakeup = asyncio.Event()
        for framework in frameworks.values():
            framework.observer = m.FrameworkMetrics(framework.profile_name)
        self._export_gauges()

    # ------------------------------------------------------------------ gauges
    def _export_gauges(self) -> None:
        def queue_size(kind: str) -> Callable[[], float]:
            return lambda: float(getattr(self.queue.counts(), kind))

        for kind in ("active", "backoff", "unschedulable", "gated"):
            m.PENDING_PODS.labels(kind).set_function(queue_size(kind))
        m.IN_FLIGHT_PODS.labels("waiting_on_permit").set_function(lambda: float(self._waiting_count()))
        m.IN_FLIGHT_PODS.labels("binding").set_function(lambda: float(len(self.in_flight) - self._waiting_count()))
        m.PERMIT_WAITING_GANGS.set_function(lambda: float(len(self.waiting_gangs())))
        m.PENDING_POD_ATTEMPTS.source = self.queue.pending_attempts

    def _waiting_count(self) -> int:
        return sum(len(f.waiting_pods) for f in self.frameworks.values())

    def waiting_gangs(self) -> set[str]:
        return {
            w.pod.gang.key for f in self.frameworks.values() for w in f.waiting_pods if w.pod.gang is not None
        }

    # ------------------------------------------------------------------ queue feeding (ClusterListener)
    def _pre_enqueue(self, pod: PodInfo) -> Status:
        framework = self.frameworks.get(pod.scheduler_name)
        return framework.run_pre_enqueue(pod) if framework is not None else SUCCESS

    def _wake(self) -> None:
        self._wakeup.set()

    def _is_pending_ours(self, pod: PodInfo) -> bool:
        return (
            not pod.node_name
            and not pod.is_terminated
            and not pod.deleting
            and pod.scheduler_name in self.frameworks
        )

    def pod_changed(self, pod: PodInfo, *, is_new: bool, spec_changed: bool) -> None:
        key = pod.key
        if not self._is_pending_ours(pod):
            self.queue.delete(key)
            flight = self.in_flight.get(key)
            if flight is None:
                self.enqueued_at.pop(key, None)  # (a binding of ours still needs it for the latency metric)
            if pod.deleting and flight is not None and flight.result.waiting is not None:
                flight.result.waiting.reject("", "pod is being deleted")
            return
        if key in self.in_flight or key in self.snapshot.records:
            return  # being placed right now; the binding decides what happens next
        if self.queue.where(key) is None:
            self.enqueued_at.setdefault(key, self.clock.now())
            self.queue.add(pod)
            if pod.gang is not None:
                self._activate_gang(pod.gang.key, skip=key)  # maybe the sibling the gang was missing
            self._wake()
        elif spec_changed:
            self.queue.update(pod)  # e.g. scheduling gates removed, tolerations added
            self._wake()

    def pod_deleted(self, key: str, pod: PodInfo | None) -> None:
        self.queue.delete(key)
        self.enqueued_at.pop(key, None)
        self.attempts.forget(key)
        flight = self.in_flight.get(key)
        if flight is not None and flight.result.waiting is not None:
            flight.result.waiting.reject("", "pod was deleted")
        if pod is not None:
            self.reporter.forget_pod(str((pod.raw.get("metadata") or {}).get("uid") or key))

    def cluster_event(self, event: str, pod: PodInfo | None = None, old: PodInfo | None = None) -> None:
        self._move(event, changed=pod, old=old)

    def gang_changed(self, gang_key: str) -> None:
        self._move(POD_GROUP, lambda info: info.pod.gang is not None and info.pod.gang.key == gang_key)

    def _move(self, event: str, extra: Callable[[QueuedPodInfo], bool] | None = None, *,
              changed: PodInfo | None = None, old: PodInfo | None = None) -> None:
        helped = self.interests.helps(event, changed, old)
        predicate = helped if extra is None else (lambda info: extra(info) and helped(info))
        moved = self.queue.move_all_to_active_or_backoff(predicate)
        if moved:
            m.QUEUE_MOVES.labels(event).inc(moved)
            self._wake()

    def _activate_gang(self, gang_key: str, skip: str = "") -> None:
        """Bring a gang's parked members forward once it has enough members to be placed."""
        members = member_keys(self.snapshot, gang_key)
        group = self.snapshot.store(PodGroups).get(gang_key)
        sample = next((self.snapshot.pods[k] for k in members if k in self.snapshot.pods), None)
        minimum = group.min_member if group is not None else 1
        if sample is not None and sample.gang is not None and sample.gang.min_available:
            minimum = sample.gang.min_available
        if len(members) < minimum:
            return
        parked = [k for k in members if k != skip and self.queue.where(k) in ("unschedulable", "backoff")]
        if parked:
            self.queue.activate(parked)
            m.QUEUE_MOVES.labels("GangMemberAdd").inc(len(parked))
            self._wake()

    # ------------------------------------------------------------------ the loop
    async def run(self) -> None:
        """Schedule until cancelled (the leader elector cancels it when leadership is lost)."""
        self._start_leading()
        flush_every = min(30.0, self.unschedulable_timeout_seconds)
        next_flush = self.clock.now() + flush_every
        try:
            while True:
                self._turned_at = self.clock.now()
                if self.clock.now() >= next_flush:
                    moved = self.queue.flush_unschedulable_older_than(self.unschedulable_timeout_seconds)
                    if moved:
                        m.QUEUE_MOVES.labels(FLUSH).inc(moved)
                    next_flush = self.clock.now() + flush_every
                info = self.queue.pop()
                if info is None:
                    await self._idle(next_flush)
                    continue
                try:
                    self.schedule_one(info)
                except Exception as exc:  # a bug must cost one attempt of one pod, not the loop
                    self._crashed(info, exc)
                await asyncio.sleep(0)  # let watch events and bindings in between cycles
        finally:
            self._stop_leading()

    def loop_still_seconds(self) -> float:
        """Seconds since the scheduling loop last turned while leading (it turns at least every 30 s); 0 when
        not leading."""
        if not self.leading or self._turned_at is None:
            return 0.0
        return max(0.0, self.clock.now() - self._turned_at)

    async def _idle(self, next_flush: float) -> None:
        now = self.clock.now()
        due = self.queue.next_backoff_due()
        until = min(due, next_flush) if due is not None else next_flush
        self._wakeup.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wakeup.wait(), timeout=max(until - now, 0.001))

    def _start_leading(self) -> None:
        self.leading = True
        for framework in self.frameworks.values():
            framework.warm_up(self.snapshot)
        requeued = 0
        for pod in list(self.snapshot.pods.values()):
            key = pod.key
            if self._is_pending_ours(pod) and key not in self.snapshot.records and self.queue.where(key) is None:
                self.enqueued_at.setdefault(key, self.clock.now())
                self.queue.add(pod)
                requeued += 1
        log.info("scheduling: %d pod(s) pending", sum(1 for _ in self.queue.queued()),
                 extra=ctx(requeued=requeued))

    def _stop_leading(self) -> None:
        self.leading = False
        for flight in list(self.in_flight.values()):
            if flight.task is not None:
                flight.task.cancel()
        for task in list(self._preemptions):
            task.cancel()
        log.info("stopped scheduling", extra=ctx(in_flight=len(self.in_flight)))

    # ------------------------------------------------------------------ one pod
    def schedule_one(self, info: QueuedPodInfo) -> None:
        key = info.pod.key
        pod = self.snapshot.pods.get(key)
        if pod is None or not self._is_pending_ours(pod):
            if pod is not None and pod.deleting and pod.scheduler_name in self.frameworks and not pod.node_name:
                self.reporter.skipped_deleting(pod, pod.scheduler_name)
            return
        if key in self.in_flight or key in self.snapshot.records:
            return
        framework = self.frameworks[pod.scheduler_name]
        profile = framework.profile_name
        info.pod = pod  # the latest version, not the one that was queued
        cycle = self.queue.scheduling_cycle
        started = time.perf_counter()
        result = scheduling_cycle(framework, pod, record=self.attempts.capacity > 0)
        elapsed = time.perf_counter() - started
        now = self.clock.now()
        if result.state is not None and result.state.pods_to_activate:
            self.queue.activate(list(result.state.pods_to_activate))
        status = result.status
        if status.is_success() or status.is_wait():
            m.ATTEMPT_DURATION.labels("scheduled", profile).observe(elapsed)
            outcome = "waiting" if status.is_wait() else "binding"
            self.attempts.record(key, result, profile=profile, at=now, attempts=info.attempts, outcome=outcome)
            flight = InFlight(info, result, framework, cycle)
            self.in_flight[key] = flight
            flight.task = asyncio.get_running_loop().create_task(self._binding_cycle(flight))
            return
        label = "unschedulable" if status.is_rejected() else "error"
        m.ATTEMPT_DURATION.labels(label, profile).observe(elapsed)
        m.SCHEDULE_ATTEMPTS.labels(label, profile).inc()
        previous = self.attempts.get(key)
        self.attempts.record(key, result, profile=profile, at=now, attempts=info.attempts, outcome=label)
        if label == "error" and (previous is None or previous.message != status.message):
            # once per pod and message: a broken plugin must not log every retry of every pod
            log.warning("scheduling %s failed: %s", key, status.message, extra=ctx(pod=key, profile=profile))
        plugins = result.diagnosis.unschedulable_plugins if result.diagnosis is not None else set()
        self._requeue_failed(info, framework, status, cycle, plugins)
        self._after_post_filter(pod, framework, result)

    # ------------------------------------------------------------------ preemption
    def _after_post_filter(self, pod: PodInfo, framework: Framework, result: ScheduleResult) -> None:
        """Nominate the pod where preemption made room and evict the victims (in a task), or drop
        a nomination preemption found no longer helps."""
        key = pod.key
        decision = result.state.get(DECISION, PreemptionDecision) if result.state is not None else None
        if result.nominated_node_name and decision is not None:
            for member, node_name in {**decision.nominations, key: result.nominated_node_name}.items():
                target = self.snapshot.pods.get(member)
                if target is not None:  # (a gang's missing members get room too)
                    self.snapshot.nominate(member, node_name)
                    self.reporter.nominate(target, node_name)
            self.preemption.mark_terminating(decision.best)  # before the next cycle, not when the task runs
            task = asyncio.get_running_loop().create_task(self._preempt(framework, decision))
            self._preemptions.add(task)
            task.add_done_callback(self._preemptions.discard)
        elif result.clear_nomination and (pod.nominated_node_name or key in self.snapshot.nominations):
            self.snapshot.nominate(key, "")
            self.reporter.nominate(pod, "")

    async def _preempt(self, framework: Framework, decision: PreemptionDecision) -> None:
        pod = decision.preemptor
        try:
            outcome = await self.preemption.execute(decision, framework.waiting_pods, framework.profile_name)
        except Exception:
            log.exception("preemption for %s failed", pod.key, extra=ctx(pod=pod.key))
            return
        self.attempts.mark_preemption(pod.key, outcome.node_name, outcome.victims, outcome.refused)
        if outcome.node_name != decision.best.node_name and self.snapshot.nominations.get(pod.key) is not None:
            # A fallback candidate, or none worked: the nomination follows the outcome.
            self.snapshot.nominate(pod.key, outcome.node_name)
            current = self.snapshot.pods.get(pod.key)
            if current is not None:
                self.reporter.nominate(current, outcome.node_name)

    def _crashed(self, info: QueuedPodInfo, exc: Exception) -> None:
        key = info.pod.key
        log.exception("scheduling %s crashed", key, extra=ctx(pod=key))
        record = self.snapshot.records.get(key)
        if record is not None and record.assumed and key not in self.in_flight:
            self.snapshot.forget_pod(key)
        current = self.snapshot.pods.get(key)
        requeue = current is not None and self._is_pending_ours(current)
        if requeue and key not in self.in_flight and self.queue.where(key) is None:
            self.queue.add_unschedulable(info, self.queue.scheduling_cycle, Status.error(f"internal error: {exc}"))

    def _requeue_failed(
        self, info: QueuedPodInfo, framework: Framework, status: Status, cycle: int, plugins: set[str]
    ) -> None:
        key = info.pod.key
        current = self.snapshot.pods.get(key)
        if current is None or not self._is_pending_ours(current):
            return  # deleted or bound meanwhile: nothing to retry (kube-scheduler checks its informer too)
        if self.queue.where(key) is None:
            self.queue.add_unschedulable(info, cycle, status, plugins)
            # An idle loop sleeps until the backoff it knew of; this pod's backoff (a failed binding, e.g. a
            # VolumeBinding PreBind timeout) may end sooner.
            self._wake()
        self.reporter.failed(current, framework.profile_name, status)

    # ------------------------------------------------------------------ binding
    async def _binding_cycle(self, flight: InFlight) -> None:
        info, result, framework = flight.info, flight.result, flight.framework
        pod, profile = info.pod, framework.profile_name
        key = pod.key
        try:
            try:
                status = await binding_cycle(framework, result)
            except asyncio.CancelledError:
                self._abandon(flight)
                raise
            except Exception as exc:  # a bug in a plugin or binder must not lose the pod
                log.exception("binding cycle of %s failed", key)
                if key in self.snapshot.records and self.snapshot.records[key].assumed and result.state is not None:
                    rollback(framework, result.state, pod, result.node_name or "", self.snapshot)
                status = Status.error(f"binding cycle: {exc}")
        finally:
            self.in_flight.pop(key, None)
        if status.is_success():
            self._bound(flight)
            return
        if key in self.binder.abandoned:
            self.binder.abandoned.discard(key)
            self.enqueued_at.pop(key, None)
            self.attempts.mark(key, BIND_FAILED, status.message)
            log.info("dropping %s: %s", key, status.message, extra=ctx(pod=key))
            self._move(ASSIGNED_POD_DELETE)
            return
        if status.is_rejected():
            # Rejected while waiting in Permit (gang incomplete or timed out): the reservation is
            # released, which may help others — but not the rest of its own gang.
            m.SCHEDULE_ATTEMPTS.labels("unschedulable", profile).inc()
            self.attempts.mark(key, "rejected-in-permit", status.message)
            self._requeue_failed(info, framework, status, flight.cycle, {status.plugin} if status.plugin else set())
            gang = pod.gang.key if pod.gang is not None else None
            self._move(ASSIGNED_POD_DELETE, lambda q: gang is None or q.pod.gang is None or q.pod.gang.key != gang)
            return
        m.SCHEDULE_ATTEMPTS.labels("error", profile).inc()
        if status.plugin != "DefaultBinder":
            m.BIND_ERRORS.labels("plugin").inc()
        self.attempts.mark(key, BIND_FAILED, status.message)
        # An API server outage is logged once by the binder, not once per pod.
        level = logging.DEBUG if self.binder.health.unreachable else logging.WARNING
        log.log(level, "binding %s to %s failed: %s", key, result.node_name, status.message,
                extra=ctx(pod=key, node=result.node_name))
        self._requeue_failed(info, framework, Status.error(status.message, status.plugin), flight.cycle, set())
        self._move(ASSIGNED_POD_DELETE)

    def _bound(self, flight: InFlight) -> None:
        info, result = flight.info, flight.result
        key, profile = info.pod.key, flight.framework.profile_name
        m.SCHEDULE_ATTEMPTS.labels("scheduled", profile).inc()
        m.POD_ATTEMPTS.observe(info.attempts)
        entered = self.enqueued_at.pop(key, None)
        if entered is not None:
            m.E2E_DURATION.labels(profile).observe(max(self.clock.now() - entered, 0.0))
        self.attempts.mark(key, "bound")
        self.reporter.scheduled(info.pod, profile, result.node_name or "")

    def _abandon(self, flight: InFlight) -> None:
        """The binding task was cancelled (leadership lost, shutdown): release what the pod holds."""
        result = flight.result
        waiting = result.waiting
        if waiting is not None and not waiting.done:
            waiting.reject("", "scheduler stopped leading")  # rolls the pod back
            return
        record = self.snapshot.records.get(flight.info.pod.key)
        if record is not None and record.assumed and result.state is not None and result.node_name is not None:
            rollback(flight.framework, result.state, flight.info.pod, result.node_name, self.snapshot)
