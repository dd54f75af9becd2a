"""Pods parked in Permit (kube-scheduler's waitingPod and waitingPodsMap).

Every plugin that answered Wait gets its own timer. The pod goes on when each of them
has called `allow(plugin)`; one `reject` or one expired timer fails it. The outcome is
delivered exactly once, to the callbacks and to anyone awaiting `wait()`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

from common.api.wire import GoDuration
from scheduler_plugin.framework.clock import Clock, TimerHandle
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.status import SUCCESS, Code, Status

DoneCallback = Callable[["WaitingPod", Status], None]


class WaitingPod:
    def __init__(self, pod: PodInfo, node_name: str, state: CycleState, waits: dict[str, float], clock: Clock) -> None:
        self.pod = pod
        self.node_name = node_name
        self.state = state
        self._pending: dict[str, TimerHandle] = {}
        self._result: Status | None = None
        self._callbacks: list[DoneCallback] = []
        self._futures: list[asyncio.Future[Status]] = []
        for plugin, timeout in waits.items():
            self._pending[plugin] = clock.call_later(timeout, self._timeout_callback(plugin, timeout))

    def _timeout_callback(self, plugin: str, timeout: float) -> Callable[[], None]:
        def expire() -> None:
            waited = GoDuration.from_seconds(timeout)
            self.reject(plugin, f"rejected due to timeout after waiting {waited} at plugin {plugin}")

        return expire

    @property
    def key(self) -> str:
        return self.pod.key

    @property
    def pending_plugins(self) -> list[str]:
        return sorted(self._pending)

    @property
    def done(self) -> bool:
        return self._result is not None

    @property
    def result(self) -> Status | None:
        return self._result

    def add_done_callback(self, callback: DoneCallback) -> None:
        if self._result is not None:
            callback(self, self._result)
        else:
            self._callbacks.append(callback)

    def allow(self, plugin: str) -> None:
        """`plugin` lets the pod go; when it was the last one pending, the pod is allowed."""
        if self._result is not None:
            return
        timer = self._pending.pop(plugin, None)
        if timer is not None:
            timer.cancel()
        if not self._pending:
            self._finish(SUCCESS)

    def reject(self, plugin: str, message: str) -> None:
        if self._result is not None:
            return
        self._finish(Status(Code.UNSCHEDULABLE, (message,), plugin))

    def _finish(self, status: Status) -> None:
        self._result = status
        for timer in self._pending.values():
            timer.cancel()
        self._pending.clear()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self, status)
        for future in self._futures:
            if not future.done():
                future.set_result(status)
        self._futures.clear()

    async def wait(self) -> Status:
        """Block the binding cycle until the pod is allowed or rejected (WaitOnPermit)."""
        if self._result is not None:
            return self._result
        future: asyncio.Future[Status] = asyncio.get_running_loop().create_future()
        self._futures.append(future)
        return await future

    def __repr__(self) -> str:
        return f"WaitingPod({self.pod.key} on {self.node_name}, pending={self.pending_plugins})"


class WaitingPodsMap:
    def __init__(self) -> None:
        self._pods: dict[str, WaitingPod] = {}

    def add(self, waiting: WaitingPod) -> None:
        self._pods[waiting.key] = waiting

    def remove(self, key: str) -> None:
        self._pods.pop(key, None)

    def get(self, key: str) -> WaitingPod | None:
        return self._pods.get(key)

    def allow(self, key: str, plugin: str) -> bool:
        """`plugin` lets the pod "namespace/name" go; False when no such pod is waiting."""
        waiting = self._pods.get(key)
        if waiting is not None:
            waiting.allow(plugin)
        return waiting is not None

    def reject(self, key: str, plugin: str, message: str) -> bool:
        """Reject the waiting pod "namespace/name"; False when no such pod is waiting."""
        waiting = self._pods.get(key)
        if waiting is not None:
            waiting.reject(plugin, message)
        return waiting is not None

    def __iter__(self) -> Iterator[WaitingPod]:
        # A copy: allowing or rejecting a pod removes it from the map while callers iterate.
        return iter(list(self._pods.values()))

    def __len__(self) -> int:
        return len(self._pods)

    def __contains__(self, key: object) -> bool:
        return key in self._pods
