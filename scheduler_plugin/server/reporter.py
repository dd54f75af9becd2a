"""What the scheduler tells users: `Scheduled`/`FailedScheduling` events and the PodScheduled condition.

Formats are kube-scheduler's (pkg/scheduler/schedule_one.go, handleSchedulingFailure): events through events.k8s.io/v1
with the profile's schedulerName as reporting controller; on failure the pod status
gets `PodScheduled=False` with reason `Unschedulable` (a rejection) or `SchedulerError`
and the full FitError message.

Writes are asynchronous (the scheduling cycle never waits on the API server). Status writes (the
condition, the nominated node) are kept in order per pod, and the binder waits for a pod's earlier
status writes before binding it. Events take a lane of their own, over their own connections
(`event_http`; kube-scheduler has its own event client too), so they never hold a binding back, with
at most `event_concurrency` in flight: as many as bindings can be (a connection pool's,
`POOL_CONNECTIONS`), so the events keep pace with the bindings. kube-scheduler writes each event
from its own goroutine and its events are all stored before its last binding; with 8 in flight
Loadline's trickled out 26 s after its last binding (bench/scheduler_backlog_bench.py, 2,000 pods,
by the API server's creationTimestamp), and the informers' work of those seconds (NodeMetric
refreshes, pod status updates) was added to its cost. All of them are written: a `Scheduled` event
is retried while the API server is away. Identical failures are not re-reported on every retry: the
condition is only patched when it changes, and the same event note is repeated at most every
`event_repeat_seconds` (kube-scheduler's event correlator aggregates repeats the same way).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Mapping
from datetime import UTC, datetime
from typing import Any

from common.api.wire import format_time
from common.kube.events import EventRecorder
from common.kube.http import POOL_CONNECTIONS, KubeError, KubeHTTP
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.status import Status
from scheduler_plugin.server.apihealth import ApiHealth

log = logging.getLogger("loadline.scheduler.reporter")

REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULER_ERROR = "SchedulerError"


def failure_reason(status: Status) -> str:
    return REASON_UNSCHEDULABLE if status.is_rejected() else REASON_SCHEDULER_ERROR


def scheduled_condition(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "PodScheduled":
            return cond
    return None


def condition_patch(pod: Mapping[str, Any], reason: str, message: str) -> dict[str, Any] | None:
    """The strategic-merge patch for PodScheduled=False, or None when the pod already says exactly that."""
    current = scheduled_condition(pod)
    if current is not None and (current.get("status"), current.get("reason"), current.get("message")) == (
        "False", reason, message
    ):
        return None
    transition = (
        current.get("lastTransitionTime")
        if current is not None and current.get("status") == "False" and current.get("lastTransitionTime")
        else format_time(datetime.now(UTC))
    )
    condition: dict[str, Any] = {
        "type": "PodScheduled",
        "status": "False",
        "reason": reason,
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": transition,
    }
    generation = (pod.get("metadata") or {}).get("generation")
    if isinstance(generation, int):
        condition["observedGeneration"] = generation
    return {"status": {"conditions": [condition]}}


class Reporter:
    def __init__(
        self,
        http: KubeHTTP,
        instance: str,
        *,
        event_http: KubeHTTP | None = None,
        health: ApiHealth | None = None,
        event_repeat_seconds: float = 300.0,
        event_concurrency: int = POOL_CONNECTIONS,
    ) -> None:
        self.http = http
        self.event_http = event_http if event_http is not None else http
        self.instance = instance
        self.health = health if health is not None else ApiHealth()
        self.event_repeat_seconds = event_repeat_seconds
        self._recorders: dict[str, EventRecorder] = {}
        self._chains: dict[str, asyncio.Task[None]] = {}
        self._event_tasks: set[asyncio.Task[None]] = set()
        self._event_slots = asyncio.Semaphore(event_concurrency)
        self._last_event: dict[str, dict[str, tuple[str, float]]] = {}  # uid -> reason -> (note, when)
        # Retry delays of a Scheduled event while the API server is away: about two minutes in all.
        self.scheduled_event_retry_seconds: tuple[float, ...] = (1, 2, 4, 8, *([10.0] * 10))

    def _recorder(self, profile: str) -> EventRecorder:
        recorder = self._recorders.get(profile)
        if recorder is None:
            recorder = self._recorders[profile] = EventRecorder(self.event_http, profile, self.instance)
        return recorder

    # ------------------------------------------------------------------ ordering per pod
    def _enqueue(self, key: str, work: Coroutine[Any, Any, None]) -> None:
        previous = self._chains.get(key)

        async def run() -> None:
            try:
                if previous is not None:
                    await asyncio.gather(previous, return_exceptions=True)
                await work
            except asyncio.CancelledError:
                work.close()  # cancelled before it started: no "never awaited" warning
                raise
            except Exception:
                log.exception("reporting on pod %s failed", key)

        task = asyncio.get_running_loop().create_task(run())
        self._chains[key] = task

        def forget(done: asyncio.Task[None]) -> None:
            if self._chains.get(key) is done:
                del self._chains[key]

        task.add_done_callback(forget)

    def _emit(self, key: str, work: Coroutine[Any, Any, None]) -> None:
        """An event write, in the event lane (see the module's doc): not waited for by `settle`."""

        async def run() -> None:
            try:
                await work
            except asyncio.CancelledError:
                work.close()
                raise
            except Exception:
                log.exception("an event on pod %s failed", key)

        task = asyncio.get_running_loop().create_task(run())
        self._event_tasks.add(task)
        task.add_done_callback(self._event_tasks.discard)

    async def settle(self, key: str) -> None:
        """Wait until every status write queued for the pod so far has finished."""
        pending = self._chains.get(key)
        if pending is not None:
            await asyncio.gather(pending, return_exceptions=True)

    async def drain(self) -> None:
        """Wait for every queued write, events included (shutdown)."""
        pending = [*self._chains.values(), *self._event_tasks]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    def forget_pod(self, uid: str) -> None:
        self._last_event.pop(uid, None)

    # ------------------------------------------------------------------ reports
    def scheduled(self, pod: PodInfo, profile: str, node_name: str) -> None:
        note = f"Successfully assigned {pod.key} to {node_name}"
        retry = self.scheduled_event_retry_seconds
        self._emit(pod.key, self._event(pod, profile, "Scheduled", "Binding", note, kind="Normal", retry=retry))

    def failed(self, pod: PodInfo, profile: str, status: Status, *, nominated_node: str = "") -> None:
        reason = failure_reason(status)
        message = status.message or str(status)
        self._emit(pod.key, self._event(pod, profile, "FailedScheduling", "Scheduling", message, kind="Warning"))
        self._enqueue(pod.key, self._failure(pod, reason, message))

    def preempted(self, victim: PodInfo, preemptor: PodInfo, profile: str, node_name: str) -> None:
        note = f"Preempted by {preemptor.key} on node {node_name}"
        self._emit(victim.key, self._event(victim, profile, "Preempted", "Preempting", note, kind="Normal"))

    def nominate(self, pod: PodInfo, node_name: str) -> None:
        """Set (or with "" clear) the pod's status.nominatedNodeName, in order with its other writes."""
        self._enqueue(pod.key, self._nominate(pod, node_name))

    async def _nominate(self, pod: PodInfo, node_name: str) -> None:
        patch = {"status": {"nominatedNodeName": node_name or None}}
        try:
            await self.http.strategic_patch(f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status", patch)
        except KubeError as exc:
            if not exc.is_not_found:
                self.health.failed("pod status", exc)
            return
        self.health.succeeded("pod status")

    def skipped_deleting(self, pod: PodInfo, profile: str) -> None:
        note = f"skip schedule deleting pod: {pod.key}"
        self._emit(pod.key, self._event(pod, profile, "FailedScheduling", "Scheduling", note, kind="Warning"))

    async def _failure(self, pod: PodInfo, reason: str, message: str) -> None:
        patch = condition_patch(pod.raw, reason, message)
        if patch is None:
            return
        try:
            await self.http.strategic_patch(f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status", patch)
        except KubeError as exc:
            if not exc.is_not_found:  # (deleted meanwhile: nothing to tell)
                self.health.failed("pod status", exc)
            return
        self.health.succeeded("pod status")

    async def _event(
        self,
        pod: PodInfo,
        profile: str,
        reason: str,
        action: str,
        note: str,
        *,
        kind: str,
        retry: tuple[float, ...] = (),
    ) -> None:
        """Write one event. A failure is dropped (the next attempt reports again), except that with
        `retry` an API server that did not answer or answered 429/5xx is asked again after each delay:
        a pod bound in the instant the server went away gets its `Scheduled` event once it is back
        (nothing later would report it). client-go's event broadcaster also retries (12 tries)."""
        uid = str((pod.raw.get("metadata") or {}).get("uid") or pod.key)
        now = time.monotonic()
        last = self._last_event.get(uid, {}).get(reason)
        if last is not None and last[0] == note and now - last[1] < self.event_repeat_seconds:
            return
        regarding = {"apiVersion": "v1", "kind": "Pod", "metadata": pod.raw.get("metadata") or {}}
        event = self._recorder(profile).build(
            regarding, reason=reason, action=action, note=note, type="Warning" if kind == "Warning" else "Normal"
        )
        # Noted before the write: a repeat queued meanwhile in the event lane is then skipped, as the chained
        # writes skipped it before; a write that fails for good takes the note back.
        notes = self._last_event.setdefault(uid, {})
        notes[reason] = (note, now)
        delays = iter(retry)
        while True:
            try:
                async with self._event_slots:
                    await self.event_http.create(f"/apis/events.k8s.io/v1/namespaces/{pod.namespace}/events", event)
                break
            except KubeError as exc:
                if exc.is_conflict:
                    break  # the event's name exists: an earlier try went through and its answer was lost
                self.health.failed("event", exc)
                transient = exc.status in {0, 429} or exc.status >= 500
                delay = next(delays, None) if transient else None
                if delay is None:
                    if notes.get(reason) == (note, now):
                        if last is None:
                            del notes[reason]
                        else:
                            notes[reason] = last
                    return
                await asyncio.sleep(delay)
        self.health.succeeded("event")
