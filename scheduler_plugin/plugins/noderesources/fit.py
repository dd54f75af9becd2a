"""NodeResourcesFit (kube-scheduler semantics, vectorised).

Filter: one more pod must fit the node's `pods`, and every resource the pod requests
(cpu, memory, ephemeral-storage and extended resources such as kubernetes.io/batch-cpu)
must fit allocatable − requested; a request beyond the node's allocatable is unresolvable
(preemption cannot help there). Score: LeastAllocated (default) or MostAllocated
over the configured resources; cpu and memory use the "non-zero" requests (100m/200Mi
for containers without requests) like kube-scheduler, so request-less pods spread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from common.api import constants as c
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.events import RESOURCE_CHANGES
from scheduler_plugin.framework.filterresult import ALL_PASS, FilterResult, Rejection
from scheduler_plugin.framework.interfaces import FrameworkHandle, PreFilterResult
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.registry import plugin_args
from scheduler_plugin.framework.row_delta import RowDelta, row_delta, stack
from scheduler_plugin.framework.snapshot import CPU, MEMORY, PODS, IndexArray, IntArray, Snapshot
from scheduler_plugin.framework.status import SUCCESS, Code, Status
from scheduler_plugin.plugins.noderesources.formulas import least_requested_score, most_requested_score

NAME = "NodeResourcesFit"
TOO_MANY_PODS = "Too many pods"
SIMULATED = "NodeResourcesFit/simulated"  # cycle state: RowDelta of requests added/removed by a simulation


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True)


class ResourceSpec(_Args):
    name: str = Field(min_length=1)
    weight: int = Field(default=1, ge=1, le=100)


class ScoringStrategy(_Args):
    type: Literal["LeastAllocated", "MostAllocated"] = "LeastAllocated"
    resources: list[ResourceSpec] = Field(
        default_factory=lambda: [ResourceSpec(name=c.RESOURCE_CPU), ResourceSpec(name=c.RESOURCE_MEMORY)], min_length=1
    )


class NodeResourcesFitArgs(_Args):
    ignored_resources: list[str] = Field(default_factory=list)
    ignored_resource_groups: list[str] = Field(default_factory=list)  # prefixes before "/", e.g. "example.com"
    scoring_strategy: ScoringStrategy = Field(default_factory=ScoringStrategy)


class NodeResourcesFit:
    name = NAME

    def __init__(self, args: NodeResourcesFitArgs) -> None:
        self.args = args
        self._ignored = set(args.ignored_resources)
        self._ignored_groups = set(args.ignored_resource_groups)
        self._score = least_requested_score if args.scoring_strategy.type == "LeastAllocated" else most_requested_score

    @classmethod
    def new(cls, args: BaseModel | None, _handle: FrameworkHandle) -> NodeResourcesFit:
        return cls(plugin_args(NAME, args, NodeResourcesFitArgs))

    def events_to_register(self) -> frozenset[str]:
        return RESOURCE_CHANGES  # room appeared: a node added or resized, a pod left

    def _is_ignored(self, resource: str) -> bool:
        return resource in self._ignored or ("/" in resource and resource.split("/", 1)[0] in self._ignored_groups)

    # ------------------------------------------------------------------ PreFilter (+ extensions)
    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        return None, SUCCESS  # nothing to precompute; present so AddPod/RemovePod run in simulations

    def add_pods(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: IndexArray,
                 pods: Sequence[PodInfo]) -> Status:
        return self._simulate(state, snapshot, rows, pods, 1)

    def remove_pods(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: IndexArray,
                    pods: Sequence[PodInfo]) -> Status:
        return self._simulate(state, snapshot, rows, pods, -1)

    def _simulate(self, state: CycleState, snapshot: Snapshot, rows: IndexArray, pods: Sequence[PodInfo],
                  sign: int) -> Status:
        if pods:
            delta = row_delta(state, SIMULATED, snapshot.num_slots, len(snapshot.resource_names))
            records = snapshot.records
            # A pod on a node: the vector its record added there; otherwise (a nominated pod) its requests.
            vectors = [rec.vector if (rec := records.get(p.key)) is not None else snapshot.pod_vector(p) for p in pods]
            delta.add(rows, stack(vectors), sign)
        return SUCCESS

    # ------------------------------------------------------------------ Filter
    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> FilterResult:
        request = snapshot.pod_vector(pod)
        allocatable, requested = snapshot.allocatable, snapshot.requested
        simulated = state.get(SIMULATED, RowDelta)
        change = None if simulated is None else simulated.take(candidates, requested.shape[0])

        def used(j: int) -> IntArray:
            taken: IntArray = requested[j].take(candidates)
            return taken if change is None else taken + change[j]

        rejections = []
        too_many = used(PODS) + 1 > allocatable[PODS].take(candidates)
        if too_many.any():
            rejections.append(Rejection(TOO_MANY_PODS, too_many))
        for j in np.flatnonzero(request):
            if j == PODS or self._is_ignored(snapshot.resource_names[j]):
                continue
            capacity = allocatable[j].take(candidates)
            short = request[j] > capacity - used(int(j))
            if short.any():
                # Beyond the node's whole allocatable no eviction helps: kube-scheduler (v1.32+) marks the node
                # UnschedulableAndUnresolvable then, so preemption does not consider it.
                beyond = short & (request[j] > capacity)
                reason = f"Insufficient {snapshot.resource_names[j]}"
                rejections.append(Rejection(reason, short & ~beyond))
                rejections.append(Rejection(reason, beyond, Code.UNSCHEDULABLE_AND_UNRESOLVABLE))
        if not rejections:
            return ALL_PASS
        return FilterResult.from_rejections(candidates.size, rejections)

    def score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> IntArray:
        request = snapshot.pod_vector(pod)
        total = np.zeros(candidates.size, np.int64)
        weight_sum = np.zeros(candidates.size, np.int64)
        for spec in self.args.scoring_strategy.resources:
            if spec.name == c.RESOURCE_CPU:
                capacity = snapshot.allocatable[CPU].take(candidates)
                used = snapshot.nonzero_requested[0].take(candidates) + pod.nonzero_requests[0]
            elif spec.name == c.RESOURCE_MEMORY:
                capacity = snapshot.allocatable[MEMORY].take(candidates)
                used = snapshot.nonzero_requested[1].take(candidates) + pod.nonzero_requests[1]
            else:
                j = snapshot.resource_column(spec.name) if snapshot.has_resource(spec.name) else -1
                # kube-scheduler skips an extended resource the pod does not request.
                if j < 0 or j >= len(request) or request[j] == 0:
                    continue
                capacity = snapshot.allocatable[j].take(candidates)
                used = snapshot.requested[j].take(candidates) + request[j]
            # Resources a node does not have are left out of its weighted mean.
            counted = capacity != 0
            total += self._score(used, capacity) * spec.weight
            weight_sum += counted * spec.weight
        return np.where(weight_sum == 0, 0, total // np.maximum(weight_sum, 1))
