"""VolumeBinding (kube-scheduler's, pkg/scheduler/framework/plugins/volumebinding): places a pod where
its PersistentVolumeClaims can be bound, and binds them.

PreFilter sorts the claims (`claims.py`): a missing, lost or deleting claim, or an unbound claim of an
Immediate class, keeps the pod off every node. Filter finds per node what the claims would bind
(`finder.py`). Score (only with `shape` configured) prefers nodes whose chosen volumes are filled as the
shape likes. Reserve assumes the chosen PVs and claims, Unreserve reverts them, and PreBind writes them
and waits for the PV controller (`binder.py`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel

from common.kube.http import KubeError
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.events import (
    CSI_DRIVER,
    CSI_NODE,
    CSI_STORAGE_CAPACITY,
    NODE_ADD,
    NODE_UPDATE,
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    STORAGE_CLASS,
)
from scheduler_plugin.framework.filterresult import ALL_PASS, FilterResult
from scheduler_plugin.framework.interfaces import FrameworkHandle, PreFilterResult, WatchedResource
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.registry import plugin_args
from scheduler_plugin.framework.snapshot import IndexArray, IntArray, Snapshot
from scheduler_plugin.framework.status import SUCCESS, Status
from scheduler_plugin.plugins.storage import (
    CSI_DRIVERS,
    CSI_NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CAPACITIES,
    STORAGE_CLASSES,
    CSIDrivers,
    CSINodes,
    OutOfSyncError,
    PersistentVolumeClaims,
    PersistentVolumes,
    StorageCapacities,
    StorageClasses,
)
from scheduler_plugin.plugins.volumebinding import binder
from scheduler_plugin.plugins.volumebinding.args import VolumeBindingArgs
from scheduler_plugin.plugins.volumebinding.claims import (
    UNBOUND_IMMEDIATE,
    ClaimRejected,
    PodClaims,
    check_claims_exist,
    has_claims,
    pod_claims,
)
from scheduler_plugin.plugins.volumebinding.finder import (
    FilterError,
    FilterPlan,
    NodeVolumes,
    Stores,
    UnboundClaims,
    find_pod_volumes,
)
from scheduler_plugin.plugins.volumebinding.scorer import VolumeScorer

NAME = "VolumeBinding"
STATE = "VolumeBinding"
log = logging.getLogger("loadline.scheduler.volumebinding")


@dataclass(slots=True)
class VolumeBindingState:
    """One cycle's claims, what the Filter calls found the nodes would bind, and what Reserve assumed."""

    claims: PodClaims
    unbound: UnboundClaims | None
    plans: list[FilterPlan] = field(default_factory=list)
    reserved: binder.Reserved | None = None
    all_bound: bool = False

    def clone(self) -> VolumeBindingState:
        return self  # as kube-scheduler's: what Filter finds for a node holds in every simulation of it

    def volumes_at(self, row: int) -> NodeVolumes | None:
        for plan in reversed(self.plans):
            found = plan.volumes_at(row)
            if found is not None:
                return found
        return None


class VolumeBinding:
    name = NAME

    def __init__(self, args: VolumeBindingArgs, handle: FrameworkHandle) -> None:
        self.args = args
        self.handle = handle
        self.scorer = VolumeScorer(args.shape) if args.shape else None

    @classmethod
    def new(cls, args: BaseModel | None, handle: FrameworkHandle) -> VolumeBinding:
        return cls(plugin_args(NAME, args, VolumeBindingArgs), handle)

    def watched_resources(self) -> tuple[WatchedResource, ...]:
        return (PERSISTENT_VOLUMES, PERSISTENT_VOLUME_CLAIMS, STORAGE_CLASSES, CSI_NODES, CSI_DRIVERS,
                STORAGE_CAPACITIES)  # fmt: skip

    def events_to_register(self) -> frozenset[str]:
        return frozenset({STORAGE_CLASS, PERSISTENT_VOLUME_CLAIM, PERSISTENT_VOLUME, NODE_ADD, NODE_UPDATE, CSI_NODE,
                          CSI_DRIVER, CSI_STORAGE_CAPACITY})  # fmt: skip

    @staticmethod
    def stores(snapshot: Snapshot) -> Stores:
        return Stores(snapshot.store(PersistentVolumes), snapshot.store(PersistentVolumeClaims),
                      snapshot.store(StorageClasses), snapshot.store(CSINodes), snapshot.store(CSIDrivers),
                      snapshot.store(StorageCapacities))  # fmt: skip

    # ------------------------------------------------------------------ PreFilter / Filter
    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        if not has_claims(pod):
            return None, Status.skip()
        claims = snapshot.store(PersistentVolumeClaims)
        try:
            check_claims_exist(pod, claims)
            found = pod_claims(pod, claims, snapshot.store(StorageClasses))
        except ClaimRejected as rejected:
            return None, Status.error(rejected.message) if rejected.error else Status.unresolvable(rejected.message)
        if found.immediate:
            return None, Status.unresolvable(UNBOUND_IMMEDIATE)
        unbound = None
        if found.delayed:
            pvs = snapshot.store(PersistentVolumes)
            try:
                unbound = UnboundClaims.of(found.delayed, {c.storage_class: pvs.in_class(c.storage_class)
                                                           for c in found.delayed})  # fmt: skip
            except FilterError as exc:
                return None, Status.error(str(exc))
        state.write(STATE, VolumeBindingState(found, unbound))
        return None, SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> FilterResult:
        data = state.get(STATE, VolumeBindingState)
        if data is None:
            return ALL_PASS
        try:
            result, plan = find_pod_volumes(snapshot, candidates, data.claims.bound, data.unbound,
                                            self.stores(snapshot))  # fmt: skip
        except FilterError as exc:
            return FilterResult.error(str(exc))
        if plan is not None:
            data.plans.append(plan)
        return result

    # ------------------------------------------------------------------ Score
    def pre_score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> Status:
        data = state.get(STATE, VolumeBindingState)
        return SUCCESS if self.scorer is not None and data is not None and data.plans else Status.skip()

    def score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> IntArray:
        data = state.get(STATE, VolumeBindingState)
        scores = np.zeros(candidates.size, np.int64)
        if data is None or self.scorer is None:
            return scores
        for i, row in enumerate(candidates.tolist()):
            volumes = data.volumes_at(row)
            if volumes is not None:
                scores[i] = self.scorer.score(_by_class(volumes))
        return scores

    # ------------------------------------------------------------------ Reserve / Unreserve
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        data = state.get(STATE, VolumeBindingState)
        if data is None:
            return SUCCESS
        snapshot = self.handle.snapshot
        info = snapshot.node_by_name(node_name)
        volumes = data.volumes_at(info.index) if info is not None else None
        claims = snapshot.store(PersistentVolumeClaims)
        if volumes is None or binder.all_bound(pod, claims):
            data.all_bound = True
            return SUCCESS
        try:
            data.reserved = binder.assume(snapshot.store(PersistentVolumes), claims, node_name, volumes)
        except OutOfSyncError as exc:
            return Status.error(str(exc))
        data.all_bound = data.reserved.empty
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        data = state.get(STATE, VolumeBindingState)
        if data is None or data.reserved is None:
            return
        snapshot = self.handle.snapshot
        binder.revert(snapshot.store(PersistentVolumes), snapshot.store(PersistentVolumeClaims), data.reserved)
        data.reserved = None

    # ------------------------------------------------------------------ PreBind
    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        data = state.get(STATE, VolumeBindingState)
        if data is None or data.all_bound:
            return SUCCESS
        if data.reserved is None:
            return Status.error(f'no pod volume found for node "{node_name}"')
        api = self.handle.api
        if api is None:
            return Status.error("no API client to write the volume bindings with")
        snapshot = self.handle.snapshot
        stores = self.stores(snapshot)
        try:
            await binder.write_bindings(api, stores, data.reserved)
            await binder.wait_for_bindings(snapshot, pod, data.reserved, stores, float(self.args.bind_timeout_seconds))
        except binder.BindingFailed as exc:
            log.info("binding the volumes of %s on %s failed: %s", pod.key, node_name, exc)
            return Status.error(str(exc))
        except KubeError as exc:  # (write_bindings turns its own failures into BindingFailed)
            return Status.error(f"binding volumes: {exc.message}")
        return SUCCESS


def _by_class(volumes: NodeVolumes) -> dict[str, tuple[int, int]]:
    """Score's input: requested and capacity bytes per storage class, of the static bindings when there are any
    (else of the provisioned claims that CSIStorageCapacity vouched for)."""
    out: dict[str, tuple[int, int]] = {}
    if volumes.static:
        for claim, pv in volumes.static:
            requested, capacity = out.get(pv.storage_class, (0, 0))
            out[pv.storage_class] = (requested + claim.size.value(), capacity + pv.capacity.value())
        return out
    for claim, node_capacity in volumes.provisions:
        if node_capacity is None:
            continue
        requested, _ = out.get(claim.storage_class, (0, 0))
        total = node_capacity.capacity.value() if node_capacity.capacity is not None else 0
        out[claim.storage_class] = (requested + claim.size.value(), total)  # the class's capacity, not summed
    return out
