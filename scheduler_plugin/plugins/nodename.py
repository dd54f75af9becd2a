"""NodeName: a pod that names its node (`spec.nodeName`) fits only there."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.events import NODE_ADD
from scheduler_plugin.framework.filterresult import ALL_PASS, FilterResult
from scheduler_plugin.framework.interfaces import FrameworkHandle
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import IndexArray, Snapshot
from scheduler_plugin.framework.status import Code

NAME = "NodeName"
REASON = "node(s) didn't match the requested node name"


class NodeName:
    name = NAME

    @classmethod
    def new(cls, _args: BaseModel | None, _handle: FrameworkHandle) -> NodeName:
        return cls()

    def events_to_register(self) -> frozenset[str]:
        return frozenset({NODE_ADD})  # only the named node appearing helps

    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> FilterResult:
        if not pod.node_name:
            return ALL_PASS
        node = snapshot.node_by_name(pod.node_name)
        wrong = np.ones(candidates.size, np.bool_) if node is None else candidates != node.index
        return FilterResult.rejecting(REASON, wrong, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
