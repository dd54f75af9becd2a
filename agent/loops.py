"""The agent's long-running loops: fixed-cadence sampling, periodic work, crash logging, signals."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Sequence

from agent.sampler import Sampler

log = logging.getLogger("loadline.agent")


class SamplingLoop:
    """Runs every sampler's cycle on a fixed cadence. A late cycle is run late, never twice; a cycle that
    raises is logged and the loop goes on (collectors already contain their own failures)."""

    def __init__(self, samplers: Callable[[], Sequence[Sampler]], interval: float) -> None:
        self.samplers = samplers
        self.interval = interval
        self.last_cycle_end: float | None = None  # monotonic
        self.cycles = 0
        self.on_cycle: list[Callable[[], None]] = []

    async def run_once(self) -> None:
        for sampler in self.samplers():
            try:
                await sampler.cycle()
            except Exception:
                log.exception("collect cycle failed")
        self.cycles += 1
        self.last_cycle_end = time.monotonic()
        for callback in self.on_cycle:
            callback()

    async def run(self) -> None:
        next_at = time.monotonic()
        while True:
            await self.run_once()
            next_at += self.interval
            now = time.monotonic()
            if next_at < now:  # overran: skip the missed ticks instead of bursting
                next_at = now + self.interval - ((now - next_at) % self.interval)
            await asyncio.sleep(next_at - now)

    def healthy(self) -> tuple[bool, str]:
        if self.last_cycle_end is None:
            return True, "starting"
        age = time.monotonic() - self.last_cycle_end
        limit = max(3 * self.interval, 10.0)
        if age > limit:
            return False, f"no collect cycle for {age:.1f}s"
        return True, "ok"


async def every(seconds: Callable[[], float], work: Callable[[], Awaitable[None]], first: float) -> None:
    await asyncio.sleep(first)
    while True:
        started = time.monotonic()
        try:
            await work()
        except Exception:
            log.exception("periodic work failed")
        await asyncio.sleep(max(seconds() - (time.monotonic() - started), 0.0))


# ------------------------------------------------------------------------------------------------ daemon


def spawn(tasks: list[asyncio.Task[None]], coro: Awaitable[None], name: str) -> None:
    """Run `coro` as a named task whose crash is logged, kept in `tasks` so the daemon can cancel it."""
    task: asyncio.Task[None] = asyncio.ensure_future(coro)
    task.set_name(name)
    task.add_done_callback(log_crash)
    tasks.append(task)


def log_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("agent task %s stopped: %r", task.get_name(), task.exception())


async def until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
