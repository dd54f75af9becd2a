"""A scheduling queue: activeQ ordered by the QueueSort plugin, backoffQ and the unschedulable pool.

Follows kube-scheduler's rules in the parts the in-process core needs:
* backoff = initial × 2^(attempts−1), capped at max (1 s and 10 s by default);
* an Error goes to backoff; a rejection goes to the unschedulable pool, unless a
  cluster event ("move request") happened during its cycle, then to backoff;
* a cluster event that may make pods fit moves the pool to active (or backoff while
  a pod is still backing off);
* PreEnqueue plugins gate pods before they enter activeQ;
* nothing re-queues a pod that failed an attempt without its backoff: a spec update or an
  activation (a gang sibling asking for the rest of its gang) of a pod still backing off
  sends it to backoffQ, not activeQ. (kube-scheduler's Activate skips the backoff; a gang
  that can never fit then re-activated itself thousands of times a second.)
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from common.ratelimit import exponential_backoff
from scheduler_plugin.framework.clock import Clock
from scheduler_plugin.framework.interfaces import QueuedPodInfo
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.status import Status

Less = Callable[[QueuedPodInfo, QueuedPodInfo], bool]
SortKey = Callable[[QueuedPodInfo], tuple[Any, ...]]


class _ActiveEntry:
    """Heap entry ordered by `less` (when the QueueSort plugin has no tuple key)."""

    __slots__ = ("info", "less", "seq")

    def __init__(self, info: QueuedPodInfo, less: Less, seq: int) -> None:
        self.info = info
        self.less = less
        self.seq = seq

    def __lt__(self, other: _ActiveEntry) -> bool:
        if self.less(self.info, other.info):
            return True
        if self.less(other.info, self.info):
            return False
        return self.seq < other.seq


class _KeyedEntry:
    """Heap entry ordered by a precomputed key (compared in C)."""

    __slots__ = ("info", "key")

    def __init__(self, key: tuple[Any, ...], info: QueuedPodInfo) -> None:
        self.key = key
        self.info = info

    def __lt__(self, other: _KeyedEntry) -> bool:
        return self.key < other.key


@dataclass(slots=True)
class QueueCounts:
    active: int
    backoff: int
    unschedulable: int
    gated: int


class SchedulingQueue:
    def __init__(
        self,
        less: Less,
        clock: Clock,
        *,
        initial_backoff_seconds: float = 1.0,
        max_backoff_seconds: float = 10.0,
        pre_enqueue: Callable[[PodInfo], Status] | None = None,
        sort_key: SortKey | None = None,
    ) -> None:
        self._less = less
        self._sort_key = sort_key
        self._clock = clock
        self._initial = initial_backoff_seconds
        self._max = max_backoff_seconds
        self._pre_enqueue = pre_enqueue
        self._seq = itertools.count()
        self._active: list[_ActiveEntry | _KeyedEntry] = []
        self._backoff: list[tuple[float, int, QueuedPodInfo]] = []
        self._unschedulable: dict[str, QueuedPodInfo] = {}
        self._gated: dict[str, QueuedPodInfo] = {}
        self._where: dict[str, str] = {}  # pod key -> "active" | "backoff" | "unschedulable" | "gated"
        self.scheduling_cycle = 0
        self._move_request_cycle = -1

    # ------------------------------------------------------------------ adding
    def add(self, pod: PodInfo) -> None:
        now = self._clock.now()
        self._enqueue(QueuedPodInfo(pod, now, None))

    def _enqueue(self, info: QueuedPodInfo) -> None:
        key = info.pod.key
        if self._pre_enqueue is not None and not self._pre_enqueue(info.pod).is_success():
            self._gated[key] = info
            self._where[key] = "gated"
            return
        seq = next(self._seq)
        entry = (_KeyedEntry((*self._sort_key(info), seq), info) if self._sort_key is not None
                 else _ActiveEntry(info, self._less, seq))
        heapq.heappush(self._active, entry)
        self._where[key] = "active"

    def update(self, pod: PodInfo) -> None:
        """A pod changed (e.g. its scheduling gates were removed): re-check and refresh its data."""
        key = pod.key
        where = self._where.get(key)
        if where == "gated":
            info = self._gated.pop(key)
            info.pod = pod
            self._enqueue(info)
        elif where == "unschedulable":
            info = self._unschedulable.pop(key)
            info.pod = pod
            self._requeue((info,))
        elif where is None:
            self.add(pod)

    def delete(self, key: str) -> None:
        self._where.pop(key, None)
        self._unschedulable.pop(key, None)
        self._gated.pop(key, None)
        # Entries left in the heaps are skipped when popped.

    # ------------------------------------------------------------------ popping
    def pop(self) -> QueuedPodInfo | None:
        """The next pod to schedule, or None when activeQ is empty (after moving due backoffs)."""
        self.flush_backoff()
        while self._active:
            entry = heapq.heappop(self._active)
            key = entry.info.pod.key
            if self._where.get(key) != "active":
                continue
            del self._where[key]
            info = entry.info
            info.attempts += 1
            if info.initial_attempt_timestamp is None:
                info.initial_attempt_timestamp = self._clock.now()
            self.scheduling_cycle += 1
            return info
        return None

    def flush_backoff(self) -> None:
        now = self._clock.now()
        while self._backoff and self._backoff[0][0] <= now:
            _, _, info = heapq.heappop(self._backoff)
            if self._where.get(info.pod.key) == "backoff":
                self._enqueue(info)

    def next_backoff_due(self) -> float | None:
        while self._backoff and self._where.get(self._backoff[0][2].pod.key) != "backoff":
            heapq.heappop(self._backoff)
        return self._backoff[0][0] if self._backoff else None

    # ------------------------------------------------------------------ failures
    def backoff_seconds(self, attempts: int) -> float:
        return exponential_backoff(self._initial, attempts - 1, self._max)

    def add_unschedulable(
        self, info: QueuedPodInfo, cycle: int, status: Status, plugins: set[str] | None = None
    ) -> None:
        """Requeue a pod after a failed attempt that started in `cycle`."""
        info.unschedulable_plugins = set(plugins or ())
        info.timestamp = self._clock.now()
        if status.is_rejected() and self._move_request_cycle < cycle:
            self._unschedulable[info.pod.key] = info
            self._where[info.pod.key] = "unschedulable"
        else:
            self._to_backoff(info)

    def _to_backoff(self, info: QueuedPodInfo) -> None:
        due = info.timestamp + self.backoff_seconds(info.attempts)
        heapq.heappush(self._backoff, (due, next(self._seq), info))
        self._where[info.pod.key] = "backoff"

    def move_all_to_active_or_backoff(self, predicate: Callable[[QueuedPodInfo], bool] | None = None) -> int:
        """A cluster event that may make unschedulable pods fit (node added, pod deleted, ...).

        With `predicate`, only the pods it accepts move (those rejected by a plugin the event
        can help); the others stay in the pool. Returns how many pods moved."""
        self._move_request_cycle = self.scheduling_cycle
        if predicate is None:
            pool, self._unschedulable = self._unschedulable, {}
        else:
            pool = {k: i for k, i in self._unschedulable.items() if predicate(i)}
            for key in pool:
                del self._unschedulable[key]
        self._requeue(pool.values())
        return len(pool)

    def flush_unschedulable_older_than(self, seconds: float) -> int:
        """Move pods that sat in the unschedulable pool longer than `seconds` (kube-scheduler's
        podMaxInUnschedulablePodsDuration): a safety net for events nobody told us about."""
        cutoff = self._clock.now() - seconds
        stale = {k: i for k, i in self._unschedulable.items() if i.timestamp <= cutoff}
        for key in stale:
            del self._unschedulable[key]
        self._requeue(stale.values())
        return len(stale)

    def _requeue(self, infos: Iterable[QueuedPodInfo]) -> None:
        now = self._clock.now()
        for info in infos:
            if info.timestamp + self.backoff_seconds(info.attempts) > now:
                self._to_backoff(info)
            else:
                self._enqueue(info)

    def activate(self, keys: list[str]) -> None:
        """Move named unschedulable pods (gang siblings) forward: to activeQ, or to backoffQ while
        they are still backing off. A pod already in backoffQ stays there until its backoff ends."""
        infos = [info for key in keys if (info := self._unschedulable.pop(key, None)) is not None]
        self._requeue(infos)

    def counts(self) -> QueueCounts:
        active = sum(1 for w in self._where.values() if w == "active")
        backoff = sum(1 for w in self._where.values() if w == "backoff")
        return QueueCounts(active, backoff, len(self._unschedulable), len(self._gated))

    def pending_attempts(self) -> list[int]:
        """Attempts made so far for every queued pod (a pod retried without end stands out)."""
        infos: list[QueuedPodInfo] = [*self._unschedulable.values(), *self._gated.values()]
        infos += [i for _, _, i in self._backoff if self._where.get(i.pod.key) == "backoff"]
        infos += [e.info for e in self._active if self._where.get(e.info.pod.key) == "active"]
        return [i.attempts for i in infos]

    def where(self, key: str) -> str | None:
        return self._where.get(key)

    def queued(self) -> Iterator[tuple[str, str]]:
        """(pod key, "active" | "backoff" | "unschedulable" | "gated") for every queued pod."""
        return iter(list(self._where.items()))
