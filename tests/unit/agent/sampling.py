"""Run a collector through the agent's sampler, as the daemon does: rates come from the sampler, not the collector."""

from __future__ import annotations

import asyncio
from weakref import WeakKeyDictionary

from agent.collectors.base import Collector
from agent.sampler import Sampler
from agent.series import Sample

_SAMPLERS: WeakKeyDictionary[object, tuple[Sampler, list[float]]] = WeakKeyDictionary()


def sampler_of(collector: Collector, interval: float = 1.0) -> Sampler:
    return _entry(collector, interval)[0]


def _entry(collector: Collector, interval: float) -> tuple[Sampler, list[float]]:
    entry = _SAMPLERS.get(collector)
    if entry is None:
        now = [0.0]
        entry = _SAMPLERS[collector] = (Sampler([collector], interval=interval, clock=lambda: now[0]), now)
    return entry


def cycle(collector: Collector, now: float, *, interval: float = 1.0) -> list[Sample]:
    """One sampler cycle at monotonic `now` over `collector` alone: its samples, then the rates it declared."""
    sampler, clock = _entry(collector, interval)
    clock[0] = now
    asyncio.run(sampler.cycle())
    return [s for block in sampler.last_samples for s in block]
