"""Gangs as the scheduler sees them: membership, minimum, timeout, and capacity checks.

A pod joins a gang through the PodGroup label of either CRD group, Koordinator's gang
annotations, or the label-only form (`pod-group.scheduling.sigs.k8s.io/name` +
`/min-available`); `common.api.podgroup.gang_of` reads all of them.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

import numpy as np

from common.api import constants as c
from common.api.podgroup import GangRef
from scheduler_plugin.framework.events import POD_GROUP
from scheduler_plugin.framework.interfaces import WatchedResource
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import PODS, IndexArray, IntArray, Snapshot
from scheduler_plugin.plugins.coscheduling.podgroups import PodGroups

GANG_INDEX = "coscheduling/gang"
# Both API groups of PodGroup (scheduler-plugins', and the older one Koordinator vendors).
POD_GROUP_RESOURCES = tuple(
    WatchedResource("PodGroup", group, c.PODGROUP_VERSION, c.PODGROUP_PLURAL, POD_GROUP, PodGroups, wakes="gang")
    for group in (c.PODGROUP_GROUP, c.PODGROUP_GROUP_LEGACY)
)


def gang_key_of(pod: PodInfo) -> Hashable | None:
    return pod.gang.key if pod.gang is not None else None


@dataclass(frozen=True, slots=True)
class Gang:
    key: str
    min_member: int
    min_resources: dict[str, int] = field(default_factory=dict)
    timeout_seconds: float | None = None
    created: float = 0.0
    has_object: bool = True  # False when the pod names a PodGroup object that does not exist


def member_keys(snapshot: Snapshot, key: str) -> set[str]:
    return snapshot.pod_index(GANG_INDEX, gang_key_of).get(key, set())


def assigned_members(snapshot: Snapshot, members: Iterable[str], exclude: str = "") -> int:
    """Members holding a node (assumed or bound)."""
    return sum(1 for k in members if k != exclude and k in snapshot.records)


def resolve(ref: GangRef, snapshot: Snapshot, created: float) -> Gang:
    if ref.uses_crd:
        group = snapshot.store(PodGroups).get(ref.key)
        if group is None:
            return Gang(ref.key, 1, has_object=False, created=created)
        timeout = float(group.schedule_timeout_seconds) if group.schedule_timeout_seconds else None
        return Gang(ref.key, group.min_member, dict(group.min_resources), timeout, group.creation_timestamp or created)
    timeout = ref.waiting_time.seconds if ref.waiting_time is not None else None
    return Gang(ref.key, ref.min_available or 1, {}, timeout, created)


def resource_gap(snapshot: Snapshot, gang: Gang, members: Iterable[str]) -> dict[str, int]:
    """minResources (plus pods = minMember) minus the cluster's free room, counting the
    gang's own placed members as room it already has. Empty when it fits."""
    need = snapshot.vector(gang.min_resources)
    need[PODS] = gang.min_member
    rows = snapshot.node_indices()
    free = np.maximum(snapshot.allocatable.take(rows, axis=1) - snapshot.requested.take(rows, axis=1), 0)
    total = free.sum(axis=1)
    for key in members:
        record = snapshot.records.get(key)
        if record is not None:
            total[: len(record.vector)] += record.vector
    gap = need - total
    return {snapshot.resource_names[j]: int(gap[j]) for j in np.flatnonzero(gap > 0)}


def room_per_node(snapshot: Snapshot, rows: IndexArray, shape: IntArray, freed: IntArray | None = None) -> IntArray:
    """How many pods of `shape` each node's free resources hold (`pods` = 1 is always in a pod's shape);
    `freed` (resources × all rows) is added to the free room (requests preemption could take back)."""
    room: IntArray | None = None
    for j in np.flatnonzero(shape):
        free = snapshot.allocatable[j].take(rows) - snapshot.requested[j].take(rows)
        if freed is not None and j < freed.shape[0]:
            free = free + freed[j].take(rows)
        fits = np.maximum(free, 0) // shape[j]
        room = fits if room is None else np.minimum(room, fits)
    return room if room is not None else np.zeros(rows.size, np.int64)


def room_for(snapshot: Snapshot, shape: IntArray) -> int:
    """How many pods of `shape` the cluster's free resources hold, node by node (an upper
    bound: taints, affinity and load are not considered, so a rejection is certain)."""
    return int(room_per_node(snapshot, snapshot.node_indices(), shape).sum())


def preemptible_requests(snapshot: Snapshot, priority: int, gang_key: str) -> IntArray:
    """Per node (resources × rows), the requests of placed pods of lower priority outside the gang: the
    room preemption could take back for it."""
    freed = np.zeros((len(snapshot.resource_names), snapshot.num_slots), np.int64)
    for record in snapshot.records.values():
        victim = record.pod
        if victim.priority < priority and (victim.gang is None or victim.gang.key != gang_key):
            freed[: len(record.vector), record.node_index] += record.vector
    return freed


def smallest_shape(snapshot: Snapshot, pods: Iterable[PodInfo]) -> IntArray | None:
    """Element-wise minimum of the members' request vectors (pods = 1)."""
    shape: IntArray | None = None
    for pod in pods:
        vec = snapshot.pod_vector(pod)
        if shape is not None and len(shape) < len(vec):
            shape = np.concatenate([shape, np.zeros(len(vec) - len(shape), np.int64)])
        shape = vec.copy() if shape is None else np.minimum(shape, vec[: len(shape)])
    return shape
