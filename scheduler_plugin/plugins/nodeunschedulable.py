"""NodeUnschedulable: `spec.unschedulable` nodes take only pods tolerating the unschedulable taint."""

from __future__ import annotations

from pydantic import BaseModel

from common.api.scheduling import Taint, tolerated
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.events import NODE_CHANGES
from scheduler_plugin.framework.filterresult import ALL_PASS, FilterResult
from scheduler_plugin.framework.interfaces import FrameworkHandle
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import IndexArray, Snapshot
from scheduler_plugin.framework.status import Code

NAME = "NodeUnschedulable"
REASON = "node(s) were unschedulable"
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


class NodeUnschedulable:
    name = NAME

    @classmethod
    def new(cls, _args: BaseModel | None, _handle: FrameworkHandle) -> NodeUnschedulable:
        return cls()

    def events_to_register(self) -> frozenset[str]:
        return NODE_CHANGES  # a node was added or its spec.unschedulable cleared

    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> FilterResult:
        blocked = snapshot.unschedulable[candidates]
        if not blocked.any() or tolerated(UNSCHEDULABLE_TAINT, pod.tolerations):
            return ALL_PASS
        return FilterResult.rejecting(REASON, blocked, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
