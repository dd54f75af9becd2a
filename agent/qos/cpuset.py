"""Which CPUs best-effort pods get under the `cpuset` suppress policy.

Candidates are the node's CPUs minus reserved ones (node annotation), SYSTEM-QoS exclusive
ones and the cores LSE pods own exclusively. They form two pools, LSR-exclusive CPUs and the
shared (LS) pool, and BE gets a share of each in proportion to the pool sizes. Within a pool
CPUs are spread over NUMA nodes/sockets and taken as whole cores (hyper-thread siblings)
first, so BE load lands evenly and does not split a core with an LS thread where avoidable.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Processor:
    """One logical CPU and its place in the topology."""

    cpu_id: int
    core_id: int
    socket_id: int = 0
    numa_node_id: int = 0


def be_allowed_cpus(
    processors: Sequence[Processor],
    reserved: Collection[int] = (),
    system_exclusive: Collection[int] = (),
    lse_cpus: Collection[int] = (),
) -> list[int]:
    """Every CPU BE pods may ever run on: what suppress restores when it stops (sorted)."""
    excluded = set(reserved) | set(system_exclusive) | set(lse_cpus)
    return sorted(p.cpu_id for p in processors if p.cpu_id not in excluded)


def _spread_pick(count: int, pool: Sequence[Processor]) -> list[int]:
    """`count` CPUs from `pool`: whole cores first, round-robin over NUMA node/socket buckets."""
    buckets: dict[tuple[int, int], list[Processor]] = {}
    for proc in pool:
        buckets.setdefault((proc.numa_node_id, proc.socket_id), []).append(proc)
    ordered = sorted(
        (sorted(bucket, key=lambda p: (p.core_id, p.cpu_id)) for bucket in buckets.values()),
        key=lambda bucket: (-len(bucket), bucket[0].cpu_id),
    )
    taken: set[int] = set()
    need = min(count, len(pool))

    def take_core(bucket: list[Processor]) -> list[int]:
        for i in range(len(bucket) - 1):
            first, second = bucket[i], bucket[i + 1]
            if first.cpu_id not in taken and second.cpu_id not in taken and first.core_id == second.core_id:
                return [first.cpu_id, second.cpu_id]
        return []

    def take_single(bucket: list[Processor]) -> list[int]:
        for proc in bucket:
            if proc.cpu_id not in taken:
                return [proc.cpu_id]
        return []

    for take, size in ((take_core, 2), (take_single, 1)):
        progressed = True
        while need >= size and progressed:
            progressed = False
            for bucket in ordered:
                if need < size:
                    break
                picked = take(bucket)
                if picked:
                    taken.update(picked)
                    need -= len(picked)
                    progressed = True
    return sorted(taken)


def pick_be_cpus(
    count: int,
    processors: Sequence[Processor],
    *,
    reserved: Collection[int] = (),
    system_exclusive: Collection[int] = (),
    lse_cpus: Collection[int] = (),
    lsr_cpus: Collection[int] = (),
) -> list[int]:
    """The `count` CPUs best-effort pods get (sorted); fewer if fewer are allowed."""
    allowed = set(be_allowed_cpus(processors, reserved, system_exclusive, lse_cpus))
    lsr = set(lsr_cpus)
    lsr_pool = [p for p in processors if p.cpu_id in allowed and p.cpu_id in lsr]
    ls_pool = [p for p in processors if p.cpu_id in allowed and p.cpu_id not in lsr]
    if not lsr_pool and not ls_pool:
        return []
    from_lsr = count * len(lsr_pool) // (len(lsr_pool) + len(ls_pool))
    return sorted(_spread_pick(from_lsr, lsr_pool) + _spread_pick(count - from_lsr, ls_pool))
