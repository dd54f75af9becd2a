"""NetworkTopology: place a gang in as few InfiniBand leaf groups as possible (seed 004).

Nodes name their leaf group in a label (`leafGroupLabelKey`). The decision is taken
once for the whole gang, when its first member reaches Filter: the room of each leaf
group is counted over all nodes that pass every other Filter for that member, and
`plan_leaf_groups` fixes how many members go to each group. Every member is then
confined to groups with quota left; Reserve/Unreserve move the quota. Per-pod scoring
(the seed's PreScore/Score approach) drifts as members land, which is why the plan is
made for the group at once.

Only pods in a gang are affected, and only when some node carries the label.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.events import RESOURCE_CHANGES
from scheduler_plugin.framework.filterresult import FilterResult
from scheduler_plugin.framework.interfaces import FrameworkHandle, PreFilterResult, WatchedResource
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.registry import plugin_args
from scheduler_plugin.framework.snapshot import IndexArray, Snapshot
from scheduler_plugin.framework.status import SUCCESS, Code, Status
from scheduler_plugin.plugins.coscheduling.gangs import POD_GROUP_RESOURCES, member_keys, room_per_node
from scheduler_plugin.plugins.networktopology.formulas import plan_leaf_groups

NAME = "NetworkTopology"
DEFAULT_LEAF_GROUP_LABEL = "network.loadline.io/ib-leaf-group"


class NetworkTopologyArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True)

    leaf_group_label_key: str = Field(default=DEFAULT_LEAF_GROUP_LABEL, min_length=1)


@dataclass(slots=True)
class GangPlan:
    quota: dict[str, int]  # leaf group -> members still to place there
    placed: dict[str, str] = field(default_factory=dict)  # pod key -> leaf group it was reserved in


class NetworkTopology:
    name = NAME

    def __init__(self, args: NetworkTopologyArgs, handle: FrameworkHandle) -> None:
        self.args = args
        self.handle = handle
        self.plans: dict[str, GangPlan] = {}

    @classmethod
    def new(cls, args: BaseModel | None, handle: FrameworkHandle) -> NetworkTopology:
        return cls(plugin_args(NAME, args, NetworkTopologyArgs), handle)

    def watched_resources(self) -> tuple[WatchedResource, ...]:
        return POD_GROUP_RESOURCES  # a gang's size may come from its PodGroup

    def events_to_register(self) -> frozenset[str]:
        return RESOURCE_CHANGES  # room appeared in a leaf group

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        if pod.gang is None or not snapshot.label_column(self.args.leaf_group_label_key).vocab:
            return None, Status.skip()
        return None, SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> FilterResult:
        assert pod.gang is not None  # PreFilter skips pods outside gangs
        gang_key = pod.gang.key
        column = snapshot.label_column(self.args.leaf_group_label_key)
        plan = self.plans.get(gang_key)
        if plan is None:
            planned = self._plan(state, pod, snapshot, candidates)
            if isinstance(planned, FilterResult):
                return planned
            plan = self.plans[gang_key] = planned
        allowed_codes = [column.vocab[g] for g, left in plan.quota.items() if left > 0 and g in column.vocab]
        inside = np.isin(column.codes[candidates], allowed_codes)
        if not inside.any():
            # The planned groups filled up under us (cluster changed): plan again next attempt.
            self.plans.pop(gang_key, None)
        groups = ",".join(sorted(g for g, left in plan.quota.items() if left > 0))
        reason = f"node(s) not in the leaf group(s) planned for the pod group: [{groups}]"
        return FilterResult.rejecting(reason, ~inside)

    def _plan(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray
    ) -> GangPlan | FilterResult:
        assert pod.gang is not None
        column = snapshot.label_column(self.args.leaf_group_label_key)
        # The whole cluster, not just this cycle's candidates: the framework may be sampling nodes.
        feasible = self.handle.run_filter_plugins_except(self.name, state, pod, snapshot, snapshot.node_indices())
        labelled = feasible[column.codes[feasible] >= 0]
        room_by_code = np.bincount(
            column.codes[labelled], weights=room_per_node(snapshot, labelled, snapshot.pod_vector(pod)),
            minlength=len(column.vocab),
        )
        names = {code: name for name, code in column.vocab.items()}
        room = {names[code]: int(free) for code, free in enumerate(room_by_code) if free > 0}
        pending = [k for k in member_keys(snapshot, pod.gang.key) if k not in snapshot.records]
        wanted = max(len(pending), 1)
        quota = plan_leaf_groups(room, wanted)
        if quota is None:
            reason = (f"node(s) left unused: the leaf groups have room for only {sum(room.values())} "
                      f"of the {wanted} pods of pod group {pod.gang.key}")
            return FilterResult.reject_all(candidates.size, reason, Code.UNSCHEDULABLE)
        return GangPlan(quota)

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        if pod.gang is None:
            return SUCCESS
        plan = self.plans.get(pod.gang.key)
        node = self.handle.snapshot.node_by_name(node_name)
        group = node.labels.get(self.args.leaf_group_label_key) if node is not None else None
        if plan is None or group is None or pod.key in plan.placed:
            return SUCCESS
        plan.quota[group] = plan.quota.get(group, 0) - 1
        plan.placed[pod.key] = group
        if all(left <= 0 for left in plan.quota.values()):
            del self.plans[pod.gang.key]  # every member has its place; nothing left to steer
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        if pod.gang is None:
            return
        plan = self.plans.get(pod.gang.key)
        if plan is None:
            return
        group = plan.placed.pop(pod.key, None)
        if group is not None:
            plan.quota[group] = plan.quota.get(group, 0) + 1
        if not plan.placed:
            # The whole gang let go (rejected or timed out): decide afresh on the next attempt.
            del self.plans[pod.gang.key]
