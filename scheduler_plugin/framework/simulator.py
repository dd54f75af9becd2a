"""Run one Framework over a Snapshot in process: queue → scheduling cycle → binding.

No API server: bindings are recorded by an in-memory binder. With a `FakeClock` the
driver advances virtual time to the next backoff expiry or Permit timeout whenever the
active queue runs dry, so gang timeouts and backoffs play out deterministically.
Used by the unit tests (gang deadlock, leaf-group placement) and by the in-process bench.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler_plugin.framework.binder import InMemoryBinder
from scheduler_plugin.framework.clock import FakeClock
from scheduler_plugin.framework.interfaces import QueuedPodInfo
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.queue import SchedulingQueue
from scheduler_plugin.framework.runtime import Framework, PermitOutcome
from scheduler_plugin.framework.schedule_one import ScheduleResult, binding_cycle, scheduling_cycle
from scheduler_plugin.framework.status import Status


@dataclass(slots=True)
class SimulationEvent:
    time: float
    kind: str  # "bound" | "waiting" | "unschedulable" | "error" | "rejected-in-permit" | "bind-failed"
    pod: str
    node: str = ""
    message: str = ""


@dataclass(slots=True)
class SimulationStats:
    attempts: int = 0
    attempt_seconds: list[float] = field(default_factory=list)  # wall time of each scheduling cycle
    attempt_cpu_seconds: list[float] = field(default_factory=list)  # CPU time of each (unaffected by other processes)


class InProcessScheduler:
    def __init__(
        self,
        framework: Framework,
        *,
        binder: InMemoryBinder | None = None,
        initial_backoff_seconds: float = 1.0,
        max_backoff_seconds: float = 10.0,
        cycle_seconds: float = 0.001,
    ) -> None:
        self.framework = framework
        # Virtual time one attempt costs (FakeClock only), so that a gang that keeps
        # failing still lets timers and backoffs come due, as it would in real time.
        self.cycle_seconds = cycle_seconds
        self.snapshot = framework.snapshot
        self.clock = framework.clock
        self.binder = binder
        self.queue = SchedulingQueue(
            framework.less,
            self.clock,
            initial_backoff_seconds=initial_backoff_seconds,
            max_backoff_seconds=max_backoff_seconds,
            pre_enqueue=framework.run_pre_enqueue,
            sort_key=framework.queue_sort_key(),
        )
        self.events: list[SimulationEvent] = []
        self.stats = SimulationStats()
        self._waiting: dict[str, tuple[QueuedPodInfo, ScheduleResult]] = {}
        self._to_bind: deque[tuple[QueuedPodInfo, ScheduleResult]] = deque()
        framework.add_permit_listener(self._on_permit)

    # ------------------------------------------------------------------ cluster changes
    def add_pod(self, pod: Mapping[str, Any] | PodInfo) -> PodInfo:
        info = pod if isinstance(pod, PodInfo) else PodInfo.from_dict(pod)
        self.snapshot.upsert_pod_info(info)
        # A new pod may be the sibling a gang was missing (Coscheduling listens to Pod Add).
        self.queue.move_all_to_active_or_backoff()
        self.queue.add(info)
        return info

    def add_node(self, node: Mapping[str, Any]) -> None:
        self.snapshot.upsert_node(node)
        self.queue.move_all_to_active_or_backoff()

    # ------------------------------------------------------------------ results
    @property
    def bound(self) -> dict[str, str]:
        return {e.pod: e.node for e in self.events if e.kind == "bound"}

    def pending(self) -> list[str]:
        bound = self.bound
        return sorted(k for k in self.snapshot.pods if k not in bound)

    # ------------------------------------------------------------------ running
    def schedule_one(self) -> ScheduleResult | None:
        info = self.queue.pop()
        if info is None:
            return None
        cycle = self.queue.scheduling_cycle
        started, started_cpu = time.perf_counter(), time.thread_time()
        result = scheduling_cycle(self.framework, info.pod)
        self.stats.attempt_seconds.append(time.perf_counter() - started)
        self.stats.attempt_cpu_seconds.append(time.thread_time() - started_cpu)
        self.stats.attempts += 1
        now = self.clock.now()
        if result.state is not None and result.state.pods_to_activate:
            self.queue.activate(list(result.state.pods_to_activate))
        if result.status.is_success():
            self._to_bind.append((info, result))
        elif result.status.is_wait():
            self._waiting[info.pod.key] = (info, result)
            self.events.append(SimulationEvent(now, "waiting", info.pod.key, result.node_name or ""))
        else:
            plugins = result.diagnosis.unschedulable_plugins if result.diagnosis else set()
            kind = "unschedulable" if result.status.is_rejected() else "error"
            self.events.append(SimulationEvent(now, kind, info.pod.key, message=result.status.message))
            self.queue.add_unschedulable(info, cycle, result.status, plugins)
        return result

    def _on_permit(self, outcome: PermitOutcome) -> None:
        entry = self._waiting.pop(outcome.pod.key, None)
        if entry is None:
            return
        if outcome.status.is_success():
            self._to_bind.append(entry)
            return
        info, _ = entry
        message = outcome.status.message
        self.events.append(SimulationEvent(self.clock.now(), "rejected-in-permit", info.pod.key, message=message))
        # Its reservation was released: pods that did not fit may fit now.
        self.queue.move_all_to_active_or_backoff()
        self.queue.add_unschedulable(info, self.queue.scheduling_cycle, outcome.status)

    async def _bind_ready(self) -> None:
        while self._to_bind:
            info, result = self._to_bind.popleft()
            status = await binding_cycle(self.framework, result)
            now = self.clock.now()
            if status.is_success():
                self.events.append(SimulationEvent(now, "bound", info.pod.key, result.node_name or ""))
            else:
                self.events.append(SimulationEvent(now, "bind-failed", info.pod.key, message=status.message))
                self.queue.move_all_to_active_or_backoff()
                self.queue.add_unschedulable(info, self.queue.scheduling_cycle, Status.error(status.message))

    async def run(self, *, max_virtual_seconds: float = 600.0, max_attempts: int = 1_000_000) -> None:
        """Schedule until nothing can make progress: the active queue is empty and (with a
        FakeClock) no backoff or Permit timer is due within `max_virtual_seconds`."""
        deadline = self.clock.now() + max_virtual_seconds
        fake = self.clock if isinstance(self.clock, FakeClock) else None
        while self.stats.attempts < max_attempts:
            await self._bind_ready()
            if fake is not None and fake.now() >= deadline:
                break
            if self.schedule_one() is not None:
                if fake is not None and self.cycle_seconds > 0:
                    fake.advance(self.cycle_seconds)
                continue
            await self._bind_ready()
            if fake is None:
                break
            dues = [t for t in (self.queue.next_backoff_due(), fake.next_timer_due()) if t is not None]
            if not dues or min(dues) > deadline:
                break
            fake.advance_to(min(dues))
        await self._bind_ready()
