"""The coalescing work queue: one entry per key, never two workers on one key, delayed and backed-off adds."""

from __future__ import annotations

import asyncio

import pytest

from manager.workqueue import ShutDown, WorkQueue


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_a_key_added_many_times_is_queued_once() -> None:
    async def body() -> list[str]:
        q = WorkQueue()
        for key in ("a", "b", "a", "a", "c", "b"):
            q.add(key)
        assert len(q) == 3
        return [await q.get() for _ in range(3)]

    assert run(body()) == ["a", "b", "c"]


def test_a_key_added_while_processing_comes_back_after_done_not_before() -> None:
    async def body() -> None:
        q = WorkQueue()
        q.add("a")
        key = await q.get()
        q.add("a")  # an event arrives while a worker handles "a"
        q.add("a")
        assert len(q) == 0  # not handed to a second worker
        q.done(key)
        assert len(q) == 1
        assert await q.get() == "a"
        q.done("a")
        assert len(q) == 0

    run(body())


def test_add_after_fires_once_and_the_earliest_delay_wins() -> None:
    async def body() -> None:
        q = WorkQueue()
        q.add_after("a", 5.0)
        q.add_after("a", 0.05)  # earlier: replaces
        q.add_after("a", 1.0)  # later: ignored
        assert len(q) == 0
        assert await asyncio.wait_for(q.get(), 0.5) == "a"
        q.done("a")
        await asyncio.sleep(1.2)
        assert len(q) == 0

    run(body())


def test_rate_limited_retries_back_off_exponentially_until_forgotten() -> None:
    async def body() -> None:
        q = WorkQueue(base_backoff_seconds=0.1, max_backoff_seconds=0.3)
        assert [q.add_rate_limited("a") for _ in range(4)] == pytest.approx([0.1, 0.2, 0.3, 0.3])
        q.forget("a")
        assert q.add_rate_limited("a") == pytest.approx(0.1)
        q.shut_down()

    run(body())


def test_shut_down_wakes_waiting_workers() -> None:
    async def body() -> None:
        q = WorkQueue()
        waiter = asyncio.create_task(q.get())
        await asyncio.sleep(0)
        q.shut_down()
        with pytest.raises(ShutDown):
            await asyncio.wait_for(waiter, 1)
        q.add("late")  # ignored after shut-down
        assert len(q) == 0

    run(body())


def test_backoff_saturates_at_the_maximum_after_any_number_of_failures() -> None:
    """Issue 29: `base * 2.0 ** failures` raised OverflowError at the 1,025th failure, inside the worker's except."""

    async def body() -> list[float]:
        q = WorkQueue(base_backoff_seconds=0.5, max_backoff_seconds=60)
        delays = [q.add_rate_limited("n") for _ in range(2_000)]
        q.shut_down()
        return delays

    delays = run(body())
    assert isinstance(delays, list)
    assert delays[:4] == [0.5, 1.0, 2.0, 4.0] and delays[-1] == 60.0 and max(delays) == 60.0


def test_stuck_counts_while_keys_wait_and_nothing_moves() -> None:
    async def body() -> tuple[float, float, float]:
        q = WorkQueue()
        idle = q.stuck_seconds()
        q.add("a")
        await asyncio.sleep(0.05)
        waiting = q.stuck_seconds()  # no worker takes it
        key = await q.get()
        q.done(key)
        return idle, waiting, q.stuck_seconds()

    idle, waiting, drained = run(body())  # type: ignore[misc]
    assert idle == 0.0 and waiting >= 0.04 and drained == 0.0
