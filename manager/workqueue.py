"""A coalescing work queue of keys (node names), as client-go's workqueue.

Watch events arrive in bursts (a NodeMetric status, a pod starting, the node heartbeat): a
key added while it is already waiting is not queued twice, and a key added while a worker
is processing it is processed once more afterwards, never by two workers at once. Delayed
adds serve time-driven re-checks (a NodeMetric going stale) and per-key retry backoff.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Iterable

from common.ratelimit import exponential_backoff


class ShutDown(Exception):
    """The queue was shut down; workers stop."""


class WorkQueue:
    def __init__(self, *, base_backoff_seconds: float = 0.5, max_backoff_seconds: float = 60.0) -> None:
        self._queue: collections.deque[str] = collections.deque()
        self._dirty: set[str] = set()  # waiting in _queue, or to be re-queued when processing ends
        self._processing: set[str] = set()
        self._wakeup = asyncio.Event()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._timer_due: dict[str, float] = {}
        self._failures: dict[str, int] = {}
        self._base_backoff = base_backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._shut_down = False
        self._moved_at: float | None = None  # loop time a key last went to or came back from a worker

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def processing(self) -> int:
        return len(self._processing)

    @property
    def is_shut_down(self) -> bool:
        return self._shut_down

    def _moved(self) -> None:
        self._moved_at = time.monotonic()

    def stuck_seconds(self) -> float:
        """How long keys have waited or been processed without any key moving to or from a worker: 0 when
        idle or moving; grows when the workers are gone or hung."""
        if self._moved_at is None or not (self._queue or self._processing):
            return 0.0
        return max(0.0, time.monotonic() - self._moved_at)

    def add(self, key: str) -> None:
        if self._shut_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            if not self._queue and not self._processing:
                self._moved()  # work after idleness: the wait counts from now
            self._queue.append(key)
            self._wakeup.set()

    def add_all(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.add(key)

    def add_after(self, key: str, delay_seconds: float) -> None:
        """Add `key` after a delay; an earlier pending delayed add for the key wins."""
        if self._shut_down:
            return
        if delay_seconds <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + delay_seconds
        if key in self._timers and self._timer_due[key] <= due:
            return
        if key in self._timers:
            self._timers[key].cancel()
        self._timers[key] = loop.call_at(due, self._fire, key)
        self._timer_due[key] = due

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        self._timer_due.pop(key, None)
        self.add(key)

    def add_rate_limited(self, key: str) -> float:
        """Retry `key` after an exponential backoff that grows with its consecutive failures."""
        failures = self._failures.get(key, 0)
        self._failures[key] = min(failures + 1, 1 << 20)  # the count saturates too; the delay long before
        delay = exponential_backoff(self._base_backoff, failures, self._max_backoff)
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        """The key succeeded: its next failure starts the backoff afresh."""
        self._failures.pop(key, None)

    async def get(self) -> str:
        while not self._queue:
            if self._shut_down:
                raise ShutDown
            self._wakeup.clear()
            await self._wakeup.wait()
        key = self._queue.popleft()
        self._dirty.discard(key)
        self._processing.add(key)
        self._moved()
        return key

    def done(self, key: str) -> None:
        self._processing.discard(key)
        self._moved()
        if key in self._dirty:  # re-added while being processed
            self._queue.append(key)
            self._wakeup.set()

    def shut_down(self) -> None:
        self._shut_down = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._timer_due.clear()
        self._wakeup.set()
