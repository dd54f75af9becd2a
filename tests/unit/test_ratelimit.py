"""The one token bucket (client-go's flowcontrol semantics) behind NodeMetric writes, evictions and API clients."""

from __future__ import annotations

import asyncio

import pytest

from common.ratelimit import TokenBucket
from tests.fakeclock import FakeClock


def test_starts_full_refills_at_qps_and_never_banks_above_the_burst() -> None:
    now = [0.0]
    bucket = TokenBucket(0.1, 2, clock=lambda: now[0])
    assert bucket.try_accept() and bucket.try_accept() and not bucket.try_accept()
    assert bucket.wait_seconds() == pytest.approx(10.0)
    now[0] = 10.0
    assert bucket.try_accept() and not bucket.try_accept()
    now[0] = 1000.0
    assert bucket.try_accept() and bucket.try_accept() and not bucket.try_accept()


def test_acquire_waits_for_the_refill_after_the_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(2.0, 3, clock=clock, sleep=clock.sleep)

    async def take(n: int) -> list[float]:
        return [await bucket.acquire() for _ in range(n)]

    waits = asyncio.run(take(6))
    assert waits[:3] == [0.0, 0.0, 0.0]  # the burst
    assert waits[3:] == pytest.approx([0.5, 0.5, 0.5])  # then 2 per second
    clock.now += 10.0  # idle time refills up to the burst only
    assert asyncio.run(take(4)) == pytest.approx([0.0, 0.0, 0.0, 0.5])


def test_concurrent_waiters_are_served_one_token_each() -> None:
    clock = FakeClock()
    bucket = TokenBucket(4.0, 1, clock=clock, sleep=clock.sleep)

    async def main() -> list[float]:
        return list(await asyncio.gather(*(bucket.acquire() for _ in range(5))))

    waits = asyncio.run(main())
    assert sorted(waits) == pytest.approx([0.0, 0.25, 0.25, 0.25, 0.25])
    assert clock.now == pytest.approx(101.0)  # 4 refills at 4/s


def test_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="qps > 0"):
        TokenBucket(0, 1)
    with pytest.raises(ValueError, match="burst >= 1"):
        TokenBucket(1, 0)


def test_a_rounding_sliver_short_of_a_token_does_not_spin() -> None:
    """Sleeping exactly the computed wait may refill to 0.999...; on a clock that cannot advance by the sliver,
    waiting for it again would never end."""
    now = [0.5]
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    bucket = TokenBucket(3.0, 1, clock=lambda: now[0], sleep=sleep)

    async def take(n: int) -> None:
        for _ in range(n):
            await asyncio.wait_for(bucket.acquire(), timeout=5)

    asyncio.run(take(50))
    assert len(sleeps) == 49 and sum(sleeps) == pytest.approx(49 / 3.0)
