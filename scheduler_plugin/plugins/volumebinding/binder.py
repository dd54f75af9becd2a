"""VolumeBinding's Reserve, Unreserve and PreBind (binder.go AssumePodVolumes, RevertAssumedPodVolumes,
BindPodVolumes).

Reserve assumes, in the stores' assume caches, each chosen PV bound to its claim (claimRef set, annotated
bound-by-controller) and each claim to provision annotated with the selected node. PreBind writes those
objects to the API server (a PUT with the version they came from, so a concurrent change fails the write),
then waits until the PV controller (and a provisioner) bound every claim, reading the watched objects:
a reset claimRef, a removed selected-node annotation (the provisioner gave up), a PV whose node affinity
no longer fits, a deleted pod, or the timeout fail the binding; the framework then unreserves (reverting
the assumptions) and the pod is retried with backoff. Nothing written is undone: the PV controller
finishes or releases a pre-bound PV itself, as with kube-scheduler.
"""

from __future__ import annotations

import asyncio
import copy
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from common.api.storage import (
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    PersistentVolume,
    PersistentVolumeClaim,
    parse_claim,
    parse_persistent_volume,
)
from common.kube.http import KubeError
from scheduler_plugin.framework.interfaces import ObjectAPI
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.storage import OutOfSyncError, PersistentVolumeClaims, PersistentVolumes
from scheduler_plugin.plugins.storage.nodes import affinity_mask
from scheduler_plugin.plugins.volumebinding.finder import NodeVolumes, Stores

POLL_SECONDS = 0.5  # how often PreBind looks at the watched objects (kube-scheduler: every second)


class BindingFailed(Exception):
    """PreBind cannot complete: the message goes to the pod's event; the pod is retried."""


@dataclass(slots=True)
class Reserved:
    """What Reserve assumed for the pod on its node (and PreBind writes)."""

    node: str
    static: list[tuple[PersistentVolumeClaim, PersistentVolume]] = field(default_factory=list)
    provisions: list[PersistentVolumeClaim] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.static and not self.provisions


def claim_reference(claim: PersistentVolumeClaim) -> dict[str, str]:
    """reference.GetReference of the claim, as the PV controller writes spec.claimRef."""
    meta = claim.raw.get("metadata") or {}
    return {
        "kind": "PersistentVolumeClaim",
        "namespace": claim.namespace,
        "name": claim.name,
        "uid": claim.uid,
        "apiVersion": "v1",
        "resourceVersion": str(meta.get("resourceVersion") or ""),
    }


def bind_volume_to_claim(pv: PersistentVolume, claim: PersistentVolumeClaim) -> tuple[PersistentVolume, bool]:
    """GetBindVolumeToClaim: the PV with claimRef naming the claim and bound-by-controller set; and whether
    that changed anything."""
    raw: dict[str, Any] = copy.deepcopy(dict(pv.raw))
    spec = raw.setdefault("spec", {})
    meta = raw.setdefault("metadata", {})
    dirty = False
    ref = pv.claim_ref
    if ref is None or (ref.namespace, ref.name, ref.uid) != (claim.namespace, claim.name, claim.uid):
        spec["claimRef"] = claim_reference(claim)
        dirty = True
    annotations = dict(meta.get("annotations") or {})
    if not pv.bound_to(claim.namespace, claim.name, claim.uid) and ANN_BOUND_BY_CONTROLLER not in annotations:
        annotations[ANN_BOUND_BY_CONTROLLER] = "yes"
        meta["annotations"] = annotations
        dirty = True
    return parse_persistent_volume(raw), dirty


def with_selected_node(claim: PersistentVolumeClaim, node: str) -> PersistentVolumeClaim:
    raw: dict[str, Any] = copy.deepcopy(dict(claim.raw))
    meta = raw.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), ANN_SELECTED_NODE: node}
    return parse_claim(raw)


def all_bound(pod: PodInfo, claims: PersistentVolumeClaims) -> bool:
    """arePodVolumesBound: every claim of the pod is fully bound (as the assume cache has it)."""
    for volume in pod.volumes:
        if volume.claim:
            claim = claims.get(f"{pod.namespace}/{volume.claim}")
            if claim is None or not claim.fully_bound:
                return False
    return True


def assume(pvs: PersistentVolumes, claims: PersistentVolumeClaims, node: str, volumes: NodeVolumes) -> Reserved:
    """AssumePodVolumes; on failure what was assumed is reverted and OutOfSyncError raised."""
    reserved = Reserved(node)
    try:
        for claim, pv in volumes.static:
            bound, dirty = bind_volume_to_claim(pv, claim)
            if dirty:
                pvs.assume(bound)
            reserved.static.append((claim, bound))
        for claim, _capacity in volumes.provisions:
            marked = with_selected_node(claim, node)
            claims.assume(marked)
            reserved.provisions.append(marked)
    except OutOfSyncError:
        revert(pvs, claims, reserved)
        raise
    return reserved


def revert(pvs: PersistentVolumes, claims: PersistentVolumeClaims, reserved: Reserved) -> None:
    for _claim, pv in reserved.static:
        pvs.restore(pv)
    for claim in reserved.provisions:
        claims.restore(claim)


async def write_bindings(api: ObjectAPI, stores: Stores, reserved: Reserved) -> None:
    """bindAPIUpdate: PUT the pre-bound PVs, then the claims to provision; each answer replaces what PreBind
    waits for. A failed write reverts the assumptions not written yet and raises BindingFailed with the API
    server's answer, as kube-scheduler does (it names the object)."""
    done_static = done_claims = 0
    try:
        for i, (claim, pv) in enumerate(reserved.static):
            answer = await api.replace(f"/api/v1/persistentvolumes/{pv.name}", pv.raw)
            reserved.static[i] = (claim, parse_persistent_volume(answer))
            done_static += 1
        for i, claim in enumerate(reserved.provisions):
            path = f"/api/v1/namespaces/{claim.namespace}/persistentvolumeclaims/{claim.name}"
            reserved.provisions[i] = parse_claim(await api.replace(path, claim.raw))
            done_claims += 1
    except KubeError as exc:
        unwritten = Reserved(reserved.node, reserved.static[done_static:], reserved.provisions[done_claims:])
        revert(stores.pvs, stores.claims, unwritten)
        raise BindingFailed(exc.message) from None


def check_bindings(snapshot: Snapshot, pod: PodInfo, reserved: Reserved, stores: Stores) -> bool:
    """checkBindings: True once every claim is bound; False while waiting; BindingFailed to give up, in
    kube-scheduler's words (`wait_for_bindings` says "binding volumes: " first, as BindPodVolumes does)."""
    info = snapshot.node_by_name(reserved.node)
    if info is None:
        raise BindingFailed(f'failed to get node "{reserved.node}": node "{reserved.node}" not found')
    if pod.key not in snapshot.pods:
        raise BindingFailed(f'pod does not exist any more: pods "{pod.name}" not found')
    rows = np.asarray([info.index], np.intp)
    pvs, claims = stores.pvs, stores.claims
    csi_node = stores.csi_nodes.get(reserved.node)
    migrated = csi_node.migrated_plugins if csi_node is not None else frozenset()

    def fits(pv: PersistentVolume, *, static: bool) -> bool:
        plugin = pv.in_tree.plugin.name if pv.in_tree is not None else ""
        if plugin in migrated and pv.migration_problem is not None:  # (tryTranslatePVToCSI failed)
            problem = f"could not translate pv: {pv.migration_problem}"
            raise BindingFailed(f"failed to translate pv to csi: {problem}" if static else problem)
        affinity = pv.affinity_on(plugin in migrated)
        return bool(affinity_mask(snapshot, rows, affinity)[0])

    for claim, written in reserved.static:
        pv = pvs.get_api(written.name)
        current = claims.get_api(claim.key)
        if pv is None or current is None:
            missing = f'persistentvolume "{written.name}"' if pv is None else f'persistentvolumeclaim "{claim.key}"'
            raise BindingFailed(f"failed to check binding: {missing} not found")
        if written.resource_version > pv.resource_version:
            return False  # our write has not come back through the watch yet
        if not fits(pv, static=True):
            raise BindingFailed(_affinity_mismatch(pv, reserved.node, migrated))
        if pv.claim_ref is None or not pv.claim_ref.uid:
            raise BindingFailed(f'ClaimRef got reset for pv "{pv.name}"')
        if not current.fully_bound:
            return False
    for written_claim in reserved.provisions:
        current = claims.get_api(written_claim.key)
        if current is None:
            raise BindingFailed(f'failed to check provisioning pvc: persistentvolumeclaim "{written_claim.key}" '
                                "not found")  # fmt: skip
        if written_claim.resource_version > current.resource_version:
            return False
        if current.selected_node != reserved.node:
            raise BindingFailed(f'provisioning failed for PVC "{current.name}"')
        if current.volume_name:
            pv = pvs.get_api(current.volume_name)
            if pv is None:
                return False  # not watched yet
            if not fits(pv, static=False):
                raise BindingFailed(_affinity_mismatch(pv, reserved.node, migrated))
        if not current.fully_bound:
            return False
    return True


def _affinity_mismatch(pv: PersistentVolume, node: str, migrated: frozenset[str]) -> str:
    plugin = pv.in_tree.plugin.name if pv.in_tree is not None else ""
    affinity = pv.affinity_on(plugin in migrated)
    why = affinity.mismatch() if affinity is not None else "no matching NodeSelectorTerms"
    return f'pv "{pv.name}" node affinity doesn\'t match node "{node}": {why}'


async def wait_for_bindings(snapshot: Snapshot, pod: PodInfo, reserved: Reserved, stores: Stores,
                            timeout_seconds: float, *, poll_seconds: float = POLL_SECONDS) -> None:
    """Poll `check_bindings` until it says done; BindingFailed on failure or after `timeout_seconds`."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            if check_bindings(snapshot, pod, reserved, stores):
                return
        except BindingFailed as failed:
            raise BindingFailed(f"binding volumes: {failed}") from None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            waiting = [c.key for c, _ in reserved.static] + [c.key for c in reserved.provisions]
            raise BindingFailed(f"binding volumes: timed out after {timeout_seconds:g}s waiting for the PV controller "
                                f"to bind {', '.join(waiting)}")  # fmt: skip
        await asyncio.sleep(min(poll_seconds, remaining))
