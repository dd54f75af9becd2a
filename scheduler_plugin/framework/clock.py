"""Time for the framework: wall-clock seconds plus one-shot timers (Permit timeouts).

The real clock needs a running asyncio loop for timers (the scheduler process is
asyncio). Tests and the in-process simulator use `FakeClock`, whose timers fire only
when the test advances time, so timeouts are deterministic.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (NodeMetric `updateTime` is compared against this)."""
        ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle: ...


class RealClock:
    def now(self) -> float:
        return time.time()

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(max(delay, 0.0), callback)


class _FakeTimer:
    __slots__ = ("callback", "cancelled", "due", "seq")

    def __init__(self, due: float, seq: int, callback: Callable[[], None]) -> None:
        self.due = due
        self.seq = seq
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def __lt__(self, other: _FakeTimer) -> bool:
        return (self.due, self.seq) < (other.due, other.seq)


class FakeClock:
    """Manually advanced clock; timers fire in due order inside `advance`/`advance_to`."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._timers: list[_FakeTimer] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def call_later(self, delay: float, callback: Callable[[], None]) -> TimerHandle:
        timer = _FakeTimer(self._now + max(delay, 0.0), next(self._seq), callback)
        heapq.heappush(self._timers, timer)
        return timer

    def next_timer_due(self) -> float | None:
        while self._timers and self._timers[0].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0].due if self._timers else None

    def advance(self, seconds: float) -> None:
        self.advance_to(self._now + seconds)

    def advance_to(self, when: float) -> None:
        while True:
            due = self.next_timer_due()
            if due is None or due > when:
                break
            timer = heapq.heappop(self._timers)
            self._now = max(self._now, timer.due)
            timer.callback()
        self._now = max(self._now, when)
