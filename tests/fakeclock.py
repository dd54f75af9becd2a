"""A monotonic clock for tests that moves only when told to or when something sleeps on it."""

from __future__ import annotations


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
