"""Loops that cannot die quietly: a worker that ends for any reason is logged, counted and restarted.

A manager worker once ended on an OverflowError raised inside its own except clause, then the next, until
none was left, while /healthz answered 200 (issue 29). `supervised` runs a loop forever: an exception or
an unexpected return restarts it after a backoff that grows with consecutive quick deaths, and counts it
in `loadline_worker_restarts_total{worker}`; `Supervised.down` names the loops that are not running now,
for /healthz.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from prometheus_client import Counter

from common.ratelimit import exponential_backoff

log = logging.getLogger("loadline.supervise")

WORKER_RESTARTS = Counter(
    "loadline_worker_restarts_total",
    "Loops that ended unexpectedly (raised or returned) and were restarted",
    ["worker"],
)

RESTART_INITIAL_SECONDS = 0.1  # the first restart is at once, for a one-off failure
RESTART_MAX_SECONDS = 10.0  # a loop that dies at every start retries this often, not in a tight spin
HEALTHY_RUN_SECONDS = 60.0  # a loop that ran this long before ending starts its restart backoff afresh


class Supervised:
    """The loops of one component; `down()` lists those ended and waiting for their restart."""

    def __init__(self) -> None:
        self._down: set[str] = set()

    def down(self) -> list[str]:
        return sorted(self._down)

    async def run(
        self, name: str, loop: Callable[[], Awaitable[None]], *, finished: Callable[[], bool] = lambda: False
    ) -> None:
        """Run `loop()` until cancelled, or until it returns while `finished()` holds (an orderly stop)."""
        WORKER_RESTARTS.labels(name)
        clock = asyncio.get_running_loop().time
        quick_deaths = 0
        while True:
            started = clock()
            try:
                await loop()
            except Exception as exc:  # not cancellation, nor the process stopping: log, count, restart
                log.error("%s ended by %s: %s; restarting", name, type(exc).__name__, exc, exc_info=exc)
            else:
                if finished():
                    return
                log.error("%s returned unexpectedly; restarting", name)
            WORKER_RESTARTS.labels(name).inc()
            quick_deaths = 0 if clock() - started >= HEALTHY_RUN_SECONDS else quick_deaths + 1
            self._down.add(name)
            try:
                await asyncio.sleep(exponential_backoff(RESTART_INITIAL_SECONDS, quick_deaths - 1, RESTART_MAX_SECONDS))
            finally:
                self._down.discard(name)
