"""A token bucket (client-go's flowcontrol semantics: ``qps`` tokens per second, at most ``burst``
banked) shared by every eviction of the process, so a big round cannot flood the API server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class TokenBucket:
    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("a token bucket needs qps > 0 and burst >= 1")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._updated = clock()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._updated) * self.qps)
        self._updated = now

    async def acquire(self) -> float:
        """Take one token, waiting for it if needed; returns the seconds waited."""
        async with self._lock:  # first come, first served
            self._refill()
            waited = 0.0
            if self._tokens < 1.0:
                delay = (1.0 - self._tokens) / self.qps
                await self._sleep(delay)
                waited = delay
                self._refill()
            self._tokens = max(0.0, self._tokens - 1.0)
            return waited
