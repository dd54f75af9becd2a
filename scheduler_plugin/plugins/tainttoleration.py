"""TaintToleration: NoSchedule/NoExecute taints must be tolerated; untolerated
PreferNoSchedule taints lower the score.

Nodes are grouped by their interned taint set (few distinct sets in real clusters), so
each distinct set is matched against the pod's tolerations once, then mapped to rows.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel

from common.api.scheduling import Taint, Toleration, first_untolerated, tolerated
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.events import NODE_CHANGES
from scheduler_plugin.framework.filterresult import ALL_PASS, FilterResult
from scheduler_plugin.framework.interfaces import FrameworkHandle, default_normalize_score
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import IndexArray, IntArray, Snapshot
from scheduler_plugin.framework.status import Code

NAME = "TaintToleration"
# kube-scheduler v1.36 names no taint (releases before it said "untolerated taint {key: value}").
REASON = "node(s) had untolerated taint(s)"
# Per taint set of the snapshot: whether some NoSchedule/NoExecute taint is not tolerated, PreferNoSchedule count.
Verdicts = tuple[NDArray[np.bool_], IntArray]


def count_intolerable_prefer(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> int:
    """PreferNoSchedule taints not tolerated by tolerations with effect PreferNoSchedule or empty."""
    relevant = tuple(t for t in tolerations if t.effect in ("", "PreferNoSchedule"))
    return sum(1 for t in taints if t.effect == "PreferNoSchedule" and not tolerated(t, relevant))


class TaintToleration:
    name = NAME

    def __init__(self) -> None:
        # (snapshot uid, number of taint sets, tolerations) -> per taint set: untolerated or not, and its
        # PreferNoSchedule count. Most pods share a handful of toleration lists.
        self._verdicts: dict[tuple[int, int, tuple[Toleration, ...]], Verdicts] = {}

    @classmethod
    def new(cls, _args: BaseModel | None, _handle: FrameworkHandle) -> TaintToleration:
        return cls()

    def events_to_register(self) -> frozenset[str]:
        return NODE_CHANGES  # a node's taints changed, or a node was added

    def _verdicts_for(self, snapshot: Snapshot, pod: PodInfo) -> Verdicts:
        key = (snapshot.uid, len(snapshot.taint_sets), pod.tolerations)
        cached = self._verdicts.get(key)
        if cached is not None:
            return cached
        untolerated = np.zeros(len(snapshot.taint_sets), np.bool_)
        prefer = np.zeros(len(snapshot.taint_sets), np.int64)
        for set_id, taints in enumerate(snapshot.taint_sets):
            untolerated[set_id] = first_untolerated(taints, pod.tolerations) is not None
            prefer[set_id] = count_intolerable_prefer(taints, pod.tolerations)
        if len(self._verdicts) > 4096:
            self._verdicts.clear()
        self._verdicts[key] = (untolerated, prefer)
        return untolerated, prefer

    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> FilterResult:
        untolerated, _ = self._verdicts_for(snapshot, pod)
        if not untolerated.any():
            return ALL_PASS
        rejected = untolerated.take(snapshot.taint_set_ids.take(candidates))
        return FilterResult.rejecting(REASON, rejected, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    def score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> IntArray:
        _, prefer = self._verdicts_for(snapshot, pod)
        counts: IntArray = prefer.take(snapshot.taint_set_ids.take(candidates))
        return counts

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: IntArray) -> IntArray:
        # Fewer intolerable taints is better: reverse so the cleanest nodes get 100.
        return default_normalize_score(scores, reverse=True)
