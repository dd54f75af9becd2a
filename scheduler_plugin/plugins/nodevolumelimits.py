"""NodeVolumeLimits (kube-scheduler's CSI volume limits, pkg/scheduler/framework/plugins/nodevolumelimits/csi.go).

A node's CSINode says how many volumes each CSI driver may attach there (`allocatable.count`). The pod's
new volumes per driver plus those already attached (the node's pods' volumes, and VolumeAttachments of
CSI PVs not used by a pod there) must stay within it, else "node(s) exceed max volume count"
(Unschedulable: preemption may free volumes). A volume counts once however many pods use it: its
identity is driver/volume handle. A claim not bound yet counts under its class's provisioner with an
identity of its own; in-tree volumes (GCE PD, AWS EBS, Azure Disk, Cinder, Portworx) count under the CSI
driver they migrated to, on a node that has a CSINode. A new pod whose claim does not exist is refused on
every node (`looking up PVC <ns>/<name>: persistentvolumeclaim "<name>" not found`).

Only nodes whose CSINode sets limits are examined, each from its own pods, cached per node until the node's
pods or the storage objects change.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel

from common.api.csimigration import BY_NAME, MIGRATION_ON
from common.api.storage import CSINode, PersistentVolumeClaim
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.events import ASSIGNED_POD_DELETE, CSI_NODE, PERSISTENT_VOLUME_CLAIM, VOLUME_ATTACHMENT
from scheduler_plugin.framework.filterresult import ALL_PASS, FilterResult
from scheduler_plugin.framework.interfaces import FrameworkHandle, PreFilterResult, WatchedResource
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import IndexArray, Snapshot
from scheduler_plugin.framework.status import SUCCESS, Code, Status
from scheduler_plugin.plugins.storage import (
    CSI_NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
    VOLUME_ATTACHMENTS,
    CSINodes,
    PersistentVolumeClaims,
    PersistentVolumes,
    StorageClasses,
    VolumeAttachments,
)
from scheduler_plugin.plugins.storage.simulated import SimulatedPods

NAME = "NodeVolumeLimits"
STATE = "NodeVolumeLimits/simulated"
REASON = "node(s) exceed max volume count"

Volumes = dict[str, str]  # unique volume name (driver/handle) -> driver


class VolumeLookupError(Exception):
    def __init__(self, message: str, *, not_found: bool) -> None:
        super().__init__(message)
        self.not_found = not_found


class NodeVolumeLimits:
    name = NAME

    def __init__(self) -> None:
        # Identities of claims not bound yet must not collide with real volume handles (csi.go randomVolumeIDPrefix).
        self._prefix = uuid.uuid4().hex
        self._attached: dict[int, tuple[tuple[int, ...], Volumes]] = {}  # node row -> (cache key, volumes)

    @classmethod
    def new(cls, _args: BaseModel | None, _handle: FrameworkHandle) -> NodeVolumeLimits:
        return cls()

    def watched_resources(self) -> tuple[WatchedResource, ...]:
        return (PERSISTENT_VOLUMES, PERSISTENT_VOLUME_CLAIMS, STORAGE_CLASSES, CSI_NODES, VOLUME_ATTACHMENTS)

    def events_to_register(self) -> frozenset[str]:
        return frozenset({CSI_NODE, ASSIGNED_POD_DELETE, PERSISTENT_VOLUME_CLAIM, VOLUME_ATTACHMENT})

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        if any(v.claim or v.in_tree is not None for v in pod.volumes):
            return None, SUCCESS
        return None, Status.skip()

    # ------------------------------------------------------------------ simulations (preemption)
    def add_pods(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: IndexArray,
                 pods: Sequence[PodInfo]) -> Status:
        self._simulated(state).apply(rows, pods, 1)
        return SUCCESS

    def remove_pods(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: IndexArray,
                    pods: Sequence[PodInfo]) -> Status:
        self._simulated(state).apply(rows, pods, -1)
        return SUCCESS

    @staticmethod
    def _simulated(state: CycleState) -> SimulatedPods:
        simulated = state.get(STATE, SimulatedPods)
        if simulated is None:
            simulated = SimulatedPods()
            state.write(STATE, simulated)
        return simulated

    # ------------------------------------------------------------------ Filter
    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> FilterResult:
        if not pod.volumes:
            return ALL_PASS
        csi_nodes = snapshot.store(CSINodes)
        try:
            # The pod's own volumes depend on the node only through whether it has a CSINode (migration).
            self._volumes_of(pod, snapshot, None, new=True)  # refuses a pod whose claim is missing, on every node
            some_csi_node = next(iter(csi_nodes.values()), None)
            with_csi_node = self._volumes_of(pod, snapshot, some_csi_node, new=True) if some_csi_node else {}
        except VolumeLookupError as exc:
            if exc.not_found:
                return FilterResult.reject_all(candidates.size, str(exc), Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
            return FilterResult.error(str(exc))
        if not with_csi_node:
            return ALL_PASS  # only a node with a CSINode has limits
        limited = {info.index: node for node in csi_nodes.values()
                   if node.limits and (info := snapshot.node_by_name(node.name)) is not None}  # fmt: skip
        if not limited:
            return ALL_PASS
        simulated = state.get(STATE, SimulatedPods)
        over = np.zeros(candidates.size, np.bool_)
        for pos in np.flatnonzero(np.isin(candidates, np.fromiter(limited, np.intp, len(limited)))).tolist():
            row = int(candidates[pos])
            try:
                over[pos] = self._exceeds(snapshot, row, limited[row], dict(with_csi_node), simulated)
            except VolumeLookupError as exc:
                return FilterResult.error(str(exc))
        return FilterResult.rejecting(REASON, over)

    def _exceeds(self, snapshot: Snapshot, row: int, csi_node: CSINode, new: Volumes,
                 simulated: SimulatedPods | None) -> bool:
        if simulated is not None and simulated.touches(row):
            attached = self._pods_volumes(simulated.pods_on(snapshot, row), snapshot, csi_node)
        else:
            attached = self._attached_on(snapshot, row, csi_node)
        counts: dict[str, int] = {}
        for unique, driver in attached.items():
            new.pop(unique, None)  # a volume already on the node is not attached again
            counts[driver] = counts.get(driver, 0) + 1
        pvs = snapshot.store(PersistentVolumes)
        by_attachments: Volumes = {}  # a volume attached twice is one volume
        for attachment in snapshot.store(VolumeAttachments).on_node(csi_node.name):
            pv = pvs.get(attachment.volume) if attachment.attacher and attachment.volume else None
            if pv is not None and pv.csi is not None:
                by_attachments[f"{attachment.attacher}/{pv.csi[1]}"] = attachment.attacher
        for unique, driver in by_attachments.items():
            if unique not in attached:
                counts[driver] = counts.get(driver, 0) + 1
        wanted: dict[str, int] = {}
        for driver in new.values():
            wanted[driver] = wanted.get(driver, 0) + 1
        return any(driver in csi_node.limits and counts.get(driver, 0) + count > csi_node.limits[driver]
                   for driver, count in wanted.items())  # fmt: skip

    def _attached_on(self, snapshot: Snapshot, row: int, csi_node: CSINode) -> Volumes:
        key = (int(snapshot.generation[row]), snapshot.store(PersistentVolumes).version,
               snapshot.store(PersistentVolumeClaims).version, snapshot.store(StorageClasses).version,
               snapshot.store(CSINodes).version)  # fmt: skip
        cached = self._attached.get(row)
        if cached is not None and cached[0] == key:
            return cached[1]
        volumes = self._pods_volumes([r.pod for r in snapshot.node(row).pods.values()], snapshot, csi_node)
        self._attached[row] = (key, volumes)
        return volumes

    def _pods_volumes(self, pods: Sequence[PodInfo], snapshot: Snapshot, csi_node: CSINode) -> Volumes:
        out: Volumes = {}
        for other in pods:
            if other.volumes:
                out.update(self._volumes_of(other, snapshot, csi_node, new=False))
        return out

    # ------------------------------------------------------------------ one pod's attachable volumes
    def _volumes_of(self, pod: PodInfo, snapshot: Snapshot, csi_node: CSINode | None, *, new: bool) -> Volumes:
        """filterAttachableVolumes: the pod's volumes a CSI driver attaches, by unique name."""
        claims = snapshot.store(PersistentVolumeClaims)
        out: Volumes = {}
        for volume in pod.volumes:
            if not volume.claim:
                in_tree = volume.in_tree
                if in_tree is not None and csi_node is not None and in_tree.plugin.name in MIGRATION_ON:
                    out[f"{in_tree.plugin.driver}/{in_tree.handle}"] = in_tree.plugin.driver
                continue
            claim = claims.get_api(f"{pod.namespace}/{volume.claim}")
            if claim is None:
                if new:
                    raise VolumeLookupError(f'looking up PVC {pod.namespace}/{volume.claim}: persistentvolumeclaim '
                                            f'"{volume.claim}" not found', not_found=True)  # fmt: skip
                continue  # an existing pod's claim that is gone: not counted
            if volume.ephemeral and claim.controller_uid != pod.uid:
                raise VolumeLookupError(f"PVC {claim.key} was not created for pod {pod.key} (pod is not owner)",
                                        not_found=False)  # fmt: skip
            driver, handle = self._driver_info(snapshot, csi_node, claim)
            if driver and handle:
                out[f"{driver}/{handle}"] = driver
        return out

    def _driver_info(self, snapshot: Snapshot, csi_node: CSINode | None,
                     claim: PersistentVolumeClaim) -> tuple[str, str]:
        """getCSIDriverInfo: the bound PV's CSI driver and handle (an in-tree PV's after migration); a claim
        without a PV counts under its class's provisioner."""
        pv = snapshot.store(PersistentVolumes).get_api(claim.volume_name) if claim.volume_name else None
        if pv is None:
            return self._driver_from_class(snapshot, csi_node, claim)
        if pv.csi is not None:
            return pv.csi
        if pv.in_tree is None or csi_node is None or pv.in_tree.plugin.name not in MIGRATION_ON:
            return "", ""
        return pv.in_tree.plugin.driver, pv.in_tree.handle

    def _driver_from_class(self, snapshot: Snapshot, csi_node: CSINode | None,
                           claim: PersistentVolumeClaim) -> tuple[str, str]:
        found = snapshot.store(StorageClasses).get(claim.storage_class) if claim.storage_class else None
        if found is None:
            return "", ""
        handle = f"{self._prefix}-{claim.namespace}/{claim.name}"
        plugin = BY_NAME.get(found.provisioner)
        if plugin is not None:
            if csi_node is None or plugin.name not in MIGRATION_ON:
                return "", ""
            return plugin.driver, handle
        return found.provisioner, handle
