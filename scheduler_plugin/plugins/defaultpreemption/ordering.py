"""Pure rules of kube-scheduler's DefaultPreemption: how many candidates, which victim matters
more, and which candidate node wins (`pickOneNodeForPreemption`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scheduler_plugin.framework.podinfo import PodInfo

# kube-scheduler adds MaxInt32+1 to every victim's priority before summing, so a node with
# fewer victims of the same negative priority is not worse than one with more.
PRIORITY_OFFSET = 2**31


def num_candidates(num_nodes: int, percentage: int, absolute: int) -> int:
    """calculateNumCandidates: max(nodes × percentage / 100, absolute), at most the number of nodes."""
    n = num_nodes * percentage // 100
    return min(max(n, absolute), num_nodes)


def start_time(pod: PodInfo, now: float) -> float:
    """GetPodStartTime: status.startTime, else now (a pod that has not started is the newest)."""
    return pod.start_time if pod.start_time is not None else now


def importance_key(pod: PodInfo, now: float) -> tuple[int, float]:
    """Sorts ascending in MoreImportantPod order: higher priority first, then the earlier start."""
    return (-pod.priority, start_time(pod, now))


@dataclass(frozen=True, slots=True)
class VictimSummary:
    """What pickOneNodeForPreemption reads of one candidate's victims (most important first)."""

    num_pdb_violations: int
    highest_priority: int
    priority_sum: int  # with PRIORITY_OFFSET per victim
    count: int
    earliest_start_of_highest: float  # earliest start among the victims of the highest priority

    @classmethod
    def of(cls, victims: Sequence[PodInfo], num_pdb_violations: int, now: float) -> VictimSummary:
        if not victims:
            return cls(num_pdb_violations, -(2**31), 0, 0, float("-inf"))
        highest = max(v.priority for v in victims)
        return cls(
            num_pdb_violations=num_pdb_violations,
            highest_priority=highest,
            priority_sum=sum(v.priority + PRIORITY_OFFSET for v in victims),
            count=len(victims),
            earliest_start_of_highest=min(start_time(v, now) for v in victims if v.priority == highest),
        )


def rank(summaries: Sequence[VictimSummary]) -> list[int]:
    """Candidate indices, best first, by kube-scheduler's `pickOneNodeForPreemption` rules.

    A candidate without victims comes first; then, in turn: fewest PDB violations, lowest
    highest-victim priority, smallest priority sum, fewest victims, and the latest start
    time of the earliest-started highest-priority victim. Ties keep the given order (the
    first is what kube-scheduler picks); the rest are the fallbacks when eviction fails.
    """
    keys = np.array(
        [(s.count != 0, s.num_pdb_violations, s.highest_priority, s.priority_sum, s.count,
          -s.earliest_start_of_highest) for s in summaries],
        dtype=np.float64,
    ).reshape(len(summaries), 6)
    # np.lexsort sorts by the last key first, stably, so ties stay in candidate order.
    order = np.lexsort(tuple(keys[:, k] for k in range(5, -1, -1)))
    return [int(i) for i in order]


def pick_one(summaries: Sequence[VictimSummary]) -> int:
    """The candidate kube-scheduler picks."""
    if not summaries:
        raise ValueError("no candidates")
    return rank(summaries)[0]
