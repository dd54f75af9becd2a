"""Loops that cannot die quietly (common/supervise.py)."""

from __future__ import annotations

import asyncio

from prometheus_client import REGISTRY

from common.supervise import Supervised


def restarts(worker: str) -> float:
    return REGISTRY.get_sample_value("loadline_worker_restarts_total", {"worker": worker}) or 0.0


def test_a_loop_that_raises_or_returns_is_restarted_and_counted_until_its_orderly_end() -> None:
    runs: list[int] = []
    stopping = [False]

    async def loop() -> None:
        runs.append(len(runs))
        if len(runs) == 1:
            raise OverflowError("(34, 'Numerical result out of range')")
        if len(runs) == 2:
            return  # an unexpected end
        if len(runs) == 3:
            raise RecursionError("maximum recursion depth exceeded")
        stopping[0] = True  # the fourth run ends as a shut-down queue ends it

    async def body() -> list[str]:
        loops = Supervised()
        seen_down: list[str] = []
        task = asyncio.create_task(loops.run("t-worker", loop, finished=lambda: stopping[0]))
        while not task.done():
            seen_down += loops.down()
            await asyncio.sleep(0.01)
        await task
        return seen_down

    before = restarts("t-worker")
    seen_down = asyncio.run(body())
    assert runs == [0, 1, 2, 3]
    assert restarts("t-worker") == before + 3
    assert "t-worker" in seen_down  # /healthz names it while it waits for its restart


def test_cancellation_stops_the_loop_without_a_restart() -> None:
    async def forever() -> None:
        await asyncio.Event().wait()

    async def body() -> None:
        task = asyncio.create_task(Supervised().run("t-cancel", forever))
        await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return
        raise AssertionError("cancellation was swallowed")

    before = restarts("t-cancel")
    asyncio.run(body())
    assert restarts("t-cancel") == before
