"""BE memory eviction arithmetic (koordinator `pkg/koordlet/qosmanager/plugins/memoryevict`).

When node memory usage reaches `memoryEvictThresholdPercent`, best-effort pods are evicted,
lowest priority first and within a priority the biggest first, until the memory they use adds
up to what must be released to bring the node down to `memoryEvictLowerPercent`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

MEMORY_RELEASE_BUFFER_PERCENT: Final = 2  # lower percent defaults to threshold - 2
MEMORY_EVICT_COOLDOWN_SECONDS: Final = 4.0  # let the kernel and metrics catch up after a kill


def memory_usage_percent(used_bytes: int, capacity_bytes: int) -> int:
    """Node memory usage as koordlet computes it: integer percent, truncated."""
    return used_bytes * 100 // capacity_bytes


def effective_lower_percent(threshold_percent: int, lower_percent: int | None) -> int:
    return lower_percent if lower_percent is not None else threshold_percent - MEMORY_RELEASE_BUFFER_PERCENT


@dataclass(frozen=True, slots=True)
class MemoryPressure:
    usage_percent: int
    threshold_percent: int
    lower_percent: int
    release_bytes: int  # 0: nothing to do

    @property
    def triggered(self) -> bool:
        return self.release_bytes > 0


def memory_pressure(
    used_bytes: int, capacity_bytes: int, threshold_percent: int, lower_percent: int | None = None
) -> MemoryPressure:
    """How much memory must be released: capacity * (usage% - lower%) / 100 once usage% ≥ threshold.

    Nothing is released for a band that is inverted (lower ≥ threshold), which koordlet
    treats as a configuration mistake, or for a node without capacity.
    """
    lower = effective_lower_percent(threshold_percent, lower_percent)
    if capacity_bytes <= 0:
        return MemoryPressure(0, threshold_percent, lower, 0)
    usage = memory_usage_percent(used_bytes, capacity_bytes)
    if lower >= threshold_percent or usage < threshold_percent:
        return MemoryPressure(usage, threshold_percent, lower, 0)
    return MemoryPressure(usage, threshold_percent, lower, capacity_bytes * (usage - lower) // 100)


@dataclass(frozen=True, slots=True)
class BEPodMemory:
    """A best-effort pod (`koordinator.sh/qosClass=BE`) allowed to be evicted by this feature."""

    namespace: str
    name: str
    uid: str
    # spec.priority; the Priority admission plugin always sets it, None is read as 0.
    priority: int | None
    memory_used_bytes: int


def _victim_order(a: BEPodMemory, b: BEPodMemory) -> int:
    pa, pb = a.priority or 0, b.priority or 0
    if pa != pb:
        return -1 if pa < pb else 1
    ua, ub = a.memory_used_bytes, b.memory_used_bytes
    if ua and ub and ua != ub:
        return -1 if ua > ub else 1  # biggest first: fewest evictions release the memory
    if bool(ua) != bool(ub):
        return -1 if ua else 1  # pods without a usage sample last: evicting them may free nothing
    if not ua and a.name != b.name:
        return -1 if a.name > b.name else 1  # koordlet orders unmeasured pods by name, descending
    key_a, key_b = (a.namespace, a.name, a.uid), (b.namespace, b.name, b.uid)
    return (key_a > key_b) - (key_a < key_b)  # deterministic among equals


def eviction_order(pods: Iterable[BEPodMemory]) -> list[BEPodMemory]:
    """Candidates in the order they are evicted: priority ascending, then memory used descending."""
    return sorted(pods, key=functools.cmp_to_key(_victim_order))


def select_victims(ordered: Sequence[BEPodMemory], release_bytes: int) -> list[BEPodMemory]:
    """Take pods in order until the memory they use reaches `release_bytes`."""
    victims: list[BEPodMemory] = []
    released = 0
    for pod in ordered:
        if released >= release_bytes:
            break
        victims.append(pod)
        released += pod.memory_used_bytes
    return victims


@dataclass(frozen=True, slots=True)
class EvictCooldown:
    """Cool-down after an eviction round that evicted something (times in monotonic seconds)."""

    seconds: float = MEMORY_EVICT_COOLDOWN_SECONDS
    last_evicted_at: float | None = None

    def active(self, now: float) -> bool:
        return self.last_evicted_at is not None and now < self.last_evicted_at + self.seconds

    def after_eviction(self, now: float) -> EvictCooldown:
        return EvictCooldown(self.seconds, now)


@dataclass(frozen=True, slots=True)
class MemoryEvictionPlan:
    pressure: MemoryPressure | None  # None while cooling down
    victims: tuple[BEPodMemory, ...]
    reason: str

    @property
    def released_bytes(self) -> int:
        return sum(p.memory_used_bytes for p in self.victims)


def plan_memory_eviction(
    *,
    used_bytes: int,
    capacity_bytes: int,
    threshold_percent: int,
    lower_percent: int | None,
    candidates: Iterable[BEPodMemory],
    cooldown: EvictCooldown,
    now: float,
) -> MemoryEvictionPlan:
    """One round of BE memory eviction: whom to evict now (possibly nobody) and why."""
    if cooldown.active(now):
        return MemoryEvictionPlan(None, (), "cooling down after the last eviction")
    pressure = memory_pressure(used_bytes, capacity_bytes, threshold_percent, lower_percent)
    if not pressure.triggered:
        return MemoryEvictionPlan(pressure, (), f"memory usage {pressure.usage_percent}% below {threshold_percent}%")
    victims = tuple(select_victims(eviction_order(candidates), pressure.release_bytes))
    reason = (
        f"node memory usage {pressure.usage_percent}% >= threshold {threshold_percent}%,"
        f" releasing {pressure.release_bytes} bytes to reach {pressure.lower_percent}%"
    )
    return MemoryEvictionPlan(pressure, victims, reason)
