"""client-go's token bucket (`flowcontrol.NewTokenBucketRateLimiter(qps, burst)`): `qps` tokens per second, at
most `burst` banked, starting full. One bucket is shared by everything it limits (a client's requests, a
process's evictions, an agent's NodeMetric writes), so a burst of work cannot flood the API server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

# A token counts as there when this close to whole: a sleep of exactly the computed wait can leave the refill a
# rounding error short, and waiting again for that sliver could spin forever on a coarse clock.
_WHOLE = 1.0 - 1e-9


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
        self._at = clock()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
        self._at = now

    def try_accept(self) -> bool:
        """Take a token if one is there, without waiting."""
        self._refill()
        if self._tokens >= _WHOLE:
            self._tokens = max(self._tokens - 1.0, 0.0)
            return True
        return False

    def wait_seconds(self) -> float:
        """How long until a token is available (0 if one is)."""
        self._refill()
        return 0.0 if self._tokens >= _WHOLE else (1.0 - self._tokens) / self.qps

    async def acquire(self) -> float:
        """Take one token, waiting for it if needed (first come, first served); returns the seconds waited."""
        if not self._lock.locked() and self.try_accept():
            return 0.0  # nobody is waiting and a token is there: no lock round trip (most calls, at a high qps)
        async with self._lock:
            waited = 0.0
            wait = self.wait_seconds()
            while wait > 0:  # a timed wait for the refill, not a poll: nothing else hands out tokens
                await self._sleep(wait)
                waited += wait
                wait = self.wait_seconds()
            self.try_accept()
            return waited


# 2**64 times any initial delay is past every maximum a component sets; a larger exponent would only risk an
# OverflowError (2.0 ** 1024), which raised inside a worker's except clause and ended the worker (issue 29).
_MAX_DOUBLINGS = 64


def exponential_backoff(initial_seconds: float, doublings: int, maximum_seconds: float) -> float:
    """`initial_seconds * 2**doublings`, at most `maximum_seconds`: saturates for any count of failures."""
    return float(min(initial_seconds * 2.0 ** min(max(doublings, 0), _MAX_DOUBLINGS), maximum_seconds))
