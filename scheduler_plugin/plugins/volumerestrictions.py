"""VolumeRestrictions (kube-scheduler's, pkg/scheduler/framework/plugins/volumerestrictions).

* An inline GCE PD, AWS EBS, iSCSI or Ceph RBD disk may not be on a node where another pod has the same
  disk (GCE PD, iSCSI and RBD: unless both mount it read-only): "node(s) had no available disk".
* A claim with the ReadWriteOncePod access mode that a scheduled pod uses anywhere keeps the pod off
  every node, until that pod is gone (preemption may evict it): "node(s) unavailable due to
  PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod".
* A claim that does not exist keeps the pod off every node: `persistentvolumeclaim "<name>" not found`.

Both rejections are Unschedulable (preemption can help). Pods are found through two snapshot indexes (by
claim, by disk), so a check costs what the pods that share something with the pod cost, not a node scan.
Preemption's simulated pod removals and additions are kept per node in the cycle state.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel

from common.api.podvolumes import InlineDisk
from common.api.storage import READ_WRITE_ONCE_POD
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.events import ASSIGNED_POD_DELETE, NODE_ADD, NODE_UPDATE, PERSISTENT_VOLUME_CLAIM
from scheduler_plugin.framework.filterresult import ALL_PASS, FilterResult, Rejection
from scheduler_plugin.framework.interfaces import FrameworkHandle, PreFilterResult, WatchedResource
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import BoolArray, IndexArray, Snapshot
from scheduler_plugin.framework.status import SUCCESS, Status
from scheduler_plugin.plugins.storage import PERSISTENT_VOLUME_CLAIMS, PersistentVolumeClaims
from scheduler_plugin.plugins.storage.simulated import SimulatedPods

NAME = "VolumeRestrictions"
STATE = "PreFilterVolumeRestrictions"
DISK_CONFLICT = "node(s) had no available disk"
READ_WRITE_ONCE_POD_CONFLICT = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod"
)
CLAIM_USERS = "volumerestrictions/claims"  # pod index: "namespace/claim" of each persistentVolumeClaim volume
DISK_USERS = "volumerestrictions/disks"  # pod index: (kind, id) of each inline disk


def _claims_of(pod: PodInfo) -> Iterable[Hashable]:
    return {f"{pod.namespace}/{v.claim}" for v in pod.volumes if v.claim and not v.ephemeral}


def _disks_of(pod: PodInfo) -> Iterable[Hashable]:
    return {(v.disk.kind, v.disk.id) for v in pod.volumes if v.disk is not None}


def _disks(pod: PodInfo) -> list[InlineDisk]:
    return [v.disk for v in pod.volumes if v.disk is not None]


@dataclass(slots=True)
class RestrictionsState:
    read_write_once_pod: frozenset[str]  # names of the pod's claims with ReadWriteOncePod
    in_use: int  # how many of them scheduled pods use
    # Simulated pods (preemption, nominated pods), per node row: the change of `in_use` there, and the pods.
    in_use_delta: dict[int, int] = field(default_factory=dict)
    simulated: SimulatedPods = field(default_factory=SimulatedPods)

    def clone(self) -> RestrictionsState:
        return RestrictionsState(self.read_write_once_pod, self.in_use, dict(self.in_use_delta), self.simulated.clone())

    def uses(self, pod: PodInfo) -> int:
        """conflictingPVCRefCountForPod: the pod's claim volumes named like one of ours (by name only, as there)."""
        return sum(1 for v in pod.volumes if v.claim and not v.ephemeral and v.claim in self.read_write_once_pod)


class VolumeRestrictions:
    name = NAME

    def __init__(self, handle: FrameworkHandle) -> None:
        self.handle = handle

    @classmethod
    def new(cls, _args: BaseModel | None, handle: FrameworkHandle) -> VolumeRestrictions:
        return cls(handle)

    def watched_resources(self) -> tuple[WatchedResource, ...]:
        return (PERSISTENT_VOLUME_CLAIMS,)

    def events_to_register(self) -> frozenset[str]:
        return frozenset({ASSIGNED_POD_DELETE, NODE_ADD, NODE_UPDATE, PERSISTENT_VOLUME_CLAIM})

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        claims = snapshot.store(PersistentVolumeClaims)
        exclusive: set[str] = set()
        for volume in pod.volumes:
            if not volume.claim or volume.ephemeral:
                continue
            key = f"{pod.namespace}/{volume.claim}"
            claim = claims.get_api(key)
            if claim is None:
                problem = claims.unreadable(key)
                if problem is not None:
                    message = f'persistentvolumeclaim "{volume.claim}" cannot be read: {problem}'
                    return None, Status.unresolvable(message)
                return None, Status.unresolvable(f'persistentvolumeclaim "{volume.claim}" not found')
            if READ_WRITE_ONCE_POD in claim.access_modes:
                exclusive.add(claim.name)
        in_use = 0
        if exclusive:
            users = snapshot.pod_multi_index(CLAIM_USERS, _claims_of)
            records = snapshot.records
            in_use = sum(1 for name in exclusive
                         if any(k in records for k in users.get(f"{pod.namespace}/{name}", ())))  # fmt: skip
        if not _disks(pod) and in_use == 0:
            return None, Status.skip()
        state.write(STATE, RestrictionsState(frozenset(exclusive), in_use))
        return None, SUCCESS

    # ------------------------------------------------------------------ simulations (preemption)
    def add_pods(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: IndexArray,
                 pods: Sequence[PodInfo]) -> Status:
        return self._simulate(state, rows, pods, 1)

    def remove_pods(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: IndexArray,
                    pods: Sequence[PodInfo]) -> Status:
        return self._simulate(state, rows, pods, -1)

    def _simulate(self, state: CycleState, rows: IndexArray, pods: Sequence[PodInfo], sign: int) -> Status:
        data = state.get(STATE, RestrictionsState)
        if data is None:
            return Status.error(f'cannot read "{STATE}" from cycleState')
        for row, other in zip(rows.tolist(), pods, strict=True):
            uses = data.uses(other)
            if uses:
                data.in_use_delta[row] = data.in_use_delta.get(row, 0) + sign * uses
        data.simulated.apply(rows, pods, sign)
        return SUCCESS

    # ------------------------------------------------------------------ Filter
    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> FilterResult:
        data = state.get(STATE, RestrictionsState)
        if data is None:
            return ALL_PASS
        disk = self._disk_conflicts(pod, snapshot, candidates, data)
        in_use = np.full(candidates.size, data.in_use, np.int64)
        if data.in_use_delta:
            in_use += np.fromiter((data.in_use_delta.get(r, 0) for r in candidates.tolist()), np.int64,
                                  candidates.size)  # fmt: skip
        exclusive = (in_use > 0) & ~disk
        return FilterResult.from_rejections(candidates.size, [Rejection(DISK_CONFLICT, disk),
                                                              Rejection(READ_WRITE_ONCE_POD_CONFLICT, exclusive)])

    def _disk_conflicts(self, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray,
                        data: RestrictionsState) -> BoolArray:
        disks = _disks(pod)
        if not disks:
            return np.zeros(candidates.size, np.bool_)
        users = snapshot.pod_multi_index(DISK_USERS, _disks_of)
        rows: set[int] = set()
        for disk in disks:
            for key in users.get((disk.kind, disk.id), ()):
                record = snapshot.records.get(key)
                if record is None or key == pod.key or key in data.simulated.removed.get(record.node_index, ()):
                    continue
                if any(disk.conflicts(theirs) for theirs in _disks(record.pod)):
                    rows.add(record.node_index)
        for row, added in data.simulated.added.items():
            if any(disk.conflicts(theirs) for other in added for theirs in _disks(other) for disk in disks):
                rows.add(row)
        if not rows:
            return np.zeros(candidates.size, np.bool_)
        return np.isin(candidates, np.fromiter(rows, np.intp, len(rows)))
