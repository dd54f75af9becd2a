"""A coalescing work queue of keys (node names), as client-go's workqueue.

Watch events arrive in bursts (a NodeMetric status, a pod starting, the node heartbeat): a
key added while it is already waiting is not queued twice, and a key added while a worker
is processing it is processed once more afterwards, never by two workers at once. Delayed
adds serve time-driven re-checks (a NodeMetric going stale) and per-key retry backoff.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterable


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

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def processing(self) -> int:
        return len(self._processing)

    def add(self, key: str) -> None:
        if self._shut_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
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
        self._failures[key] = failures + 1
        delay: float = min(self._base_backoff * 2.0**failures, self._max_backoff)
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
        return key

    def done(self, key: str) -> None:
        self._processing.discard(key)
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
