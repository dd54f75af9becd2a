"""NodeResourcesBalancedAllocation (kube-scheduler semantics, vectorised).

Score: favours nodes whose requested fractions of the configured resources (default cpu and
memory) stay close to each other, by how much placing the pod improves that balance
(`formulas.balanced_resource_score`, `balanced_allocation_score`). Unlike NodeResourcesFit's
score it counts the actual requests, not the 100m/200Mi defaults of request-less containers,
and a pod that requests none of the resources is not scored at all (kube-scheduler's PreScore
Skip: otherwise every best-effort pod would prefer the same node, kubernetes#129138).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from common.api import constants as c
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.interfaces import FrameworkHandle
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.registry import plugin_args
from scheduler_plugin.framework.snapshot import IndexArray, IntArray, Snapshot
from scheduler_plugin.framework.status import SUCCESS, Status
from scheduler_plugin.plugins.noderesources.formulas import balanced_allocation_score, balanced_resource_score

NAME = "NodeResourcesBalancedAllocation"
# Counted whenever the node has them; any other resource only when the pod requests it (kube-scheduler's
# calculateNodeAllocatableRequest), and then only a "scalar" one (extended, hugepages-, kubernetes.io/...).
ALWAYS_COUNTED = (c.RESOURCE_CPU, c.RESOURCE_MEMORY, "ephemeral-storage")


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True)


class BalancedResource(_Args):
    name: str = Field(min_length=1)
    weight: int = 1  # 0 (unset) means 1; anything else is refused, as kube-scheduler validates

    @field_validator("weight")
    @classmethod
    def _only_one(cls, weight: int) -> int:
        if weight not in (0, 1):
            raise ValueError("must be 1")
        return 1


class NodeResourcesBalancedAllocationArgs(_Args):
    resources: list[BalancedResource] = Field(
        default_factory=lambda: [BalancedResource(name=c.RESOURCE_CPU), BalancedResource(name=c.RESOURCE_MEMORY)]
    )

    @field_validator("resources")
    @classmethod
    def _defaulted_and_unique(cls, resources: list[BalancedResource]) -> list[BalancedResource]:
        if not resources:
            return [BalancedResource(name=c.RESOURCE_CPU), BalancedResource(name=c.RESOURCE_MEMORY)]
        seen: set[str] = set()
        for i, resource in enumerate(resources):
            if resource.name in seen:
                raise ValueError(f"resources[{i}].name: duplicate value {resource.name!r}")
            seen.add(resource.name)
        return resources


def is_scalar_resource(name: str) -> bool:
    """kube-scheduler's IsScalarResourceName: extended and prefixed native resources, hugepages, attachable volumes."""
    return "/" in name or name.startswith(("hugepages-", "attachable-volumes-"))


class NodeResourcesBalancedAllocation:
    name = NAME

    def __init__(self, args: NodeResourcesBalancedAllocationArgs) -> None:
        self.resources = tuple(r.name for r in args.resources)

    @classmethod
    def new(cls, args: BaseModel | None, _handle: FrameworkHandle) -> NodeResourcesBalancedAllocation:
        return cls(plugin_args(NAME, args, NodeResourcesBalancedAllocationArgs))

    def events_to_register(self) -> frozenset[str]:
        return frozenset()  # a Score plugin rejects no pod

    def _pod_requests(self, pod: PodInfo) -> list[int]:
        return [pod.requests.get(name, 0) for name in self.resources]

    def pre_score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> Status:
        return SUCCESS if any(self._pod_requests(pod)) else Status.skip()

    def score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> IntArray:
        wanted = self._pod_requests(pod)
        columns = [-1] * len(self.resources)  # snapshot column per resource; -1: left out of the balance
        for r, (name, request) in enumerate(zip(self.resources, wanted, strict=True)):
            if (name in ALWAYS_COUNTED or (request and is_scalar_resource(name))) and snapshot.has_resource(name):
                columns[r] = snapshot.resource_column(name)
        size = candidates.size
        if all(j >= 0 for j in columns):
            # Contiguous columns (cpu, memory: the default) are a slice, not a gather.
            lo = columns[0]
            rows = slice(lo, lo + len(columns)) if columns == list(range(lo, lo + len(columns))) else columns
            allocatable = snapshot.allocatable[rows].take(candidates, axis=1)
            allocated = snapshot.requested[rows].take(candidates, axis=1)
        else:
            allocatable = np.zeros((len(columns), size), np.int64)
            allocated = np.zeros((len(columns), size), np.int64)
            for r, j in enumerate(columns):
                if j >= 0:
                    allocatable[r] = snapshot.allocatable[j].take(candidates)
                    allocated[r] = snapshot.requested[j].take(candidates)
        # Sums in int64 as kube-scheduler's, then float64 fractions.
        capacity = allocatable.astype(np.float64)
        with_pod = balanced_resource_score((allocated + np.asarray(wanted, np.int64)[:, None]).astype(np.float64),
                                           capacity)
        without_pod = balanced_resource_score(allocated.astype(np.float64), capacity)
        return balanced_allocation_score(with_pod, without_pod)
