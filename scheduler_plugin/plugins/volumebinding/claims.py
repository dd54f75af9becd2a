"""VolumeBinding's PreFilter: a pod's claims sorted into bound, unbound WaitForFirstConsumer and unbound
Immediate ones (volume_binding.go podHasPVCs, binder.go GetPodVolumeClaims), with kube-scheduler's words
for every claim that keeps the pod from being placed anywhere."""

from __future__ import annotations

from dataclasses import dataclass

from common.api.storage import PersistentVolumeClaim
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.plugins.storage import PersistentVolumeClaims, StorageClasses

UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"


class ClaimRejected(Exception):
    """The pod cannot be placed on any node for now (UnschedulableAndUnresolvable), or, with `error`, the
    cycle fails (kube-scheduler's AsStatus)."""

    def __init__(self, message: str, *, error: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.error = error


@dataclass(frozen=True, slots=True)
class PodClaims:
    bound: tuple[PersistentVolumeClaim, ...]
    delayed: tuple[PersistentVolumeClaim, ...]  # unbound, WaitForFirstConsumer: bound by the scheduler
    immediate: tuple[PersistentVolumeClaim, ...]  # unbound, Immediate (or pre-bound by volumeName)


def has_claims(pod: PodInfo) -> bool:
    return any(volume.claim for volume in pod.volumes)


def check_claims_exist(pod: PodInfo, claims: PersistentVolumeClaims) -> None:
    """podHasPVCs: every claim the pod's volumes use exists, is not lost nor being deleted, and an ephemeral
    volume's claim belongs to the pod. Raises ClaimRejected with the first problem, in volume order."""
    for volume in pod.volumes:
        if not volume.claim:
            continue
        claim = claims.get_api(f"{pod.namespace}/{volume.claim}")
        if claim is None:
            problem = claims.unreadable(f"{pod.namespace}/{volume.claim}")
            if problem is not None:
                raise ClaimRejected(f"persistentvolumeclaim {volume.claim!r} cannot be read: {problem}")
            if volume.ephemeral:
                raise ClaimRejected(
                    f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{volume.claim}"')
            raise ClaimRejected(f'persistentvolumeclaim "{volume.claim}" not found')
        if claim.phase == "Lost":
            raise ClaimRejected(f'persistentvolumeclaim "{claim.name}" bound to non-existent persistentvolume '
                                f'"{claim.volume_name}"')  # fmt: skip
        if claim.deleting:
            raise ClaimRejected(f'persistentvolumeclaim "{claim.name}" is being deleted')
        if volume.ephemeral and claim.controller_uid != pod.uid:
            raise ClaimRejected(f"PVC {claim.key} was not created for pod {pod.key} (pod is not owner)")


def pod_claims(pod: PodInfo, claims: PersistentVolumeClaims, classes: StorageClasses) -> PodClaims:
    """GetPodVolumeClaims over the assume cache (a claim this scheduler marked for provisioning counts as it
    marked it). Call after `check_claims_exist`."""
    bound: list[PersistentVolumeClaim] = []
    delayed: list[PersistentVolumeClaim] = []
    immediate: list[PersistentVolumeClaim] = []
    for volume in pod.volumes:
        if not volume.claim:
            continue
        claim = claims.get(f"{pod.namespace}/{volume.claim}")
        if claim is None:  # gone since check_claims_exist: not possible within one cycle, but never index None
            raise ClaimRejected(f'persistentvolumeclaim "{volume.claim}" not found')
        if volume.ephemeral and claim.controller_uid != pod.uid:
            raise ClaimRejected(f"PVC {claim.key} was not created for pod {pod.key} (pod is not owner)", error=True)
        if claim.fully_bound:
            bound.append(claim)
        elif _delays_binding(claim, classes) and not claim.volume_name:
            delayed.append(claim)
        else:
            immediate.append(claim)
    return PodClaims(tuple(bound), tuple(delayed), tuple(immediate))


def _delays_binding(claim: PersistentVolumeClaim, classes: StorageClasses) -> bool:
    """IsDelayBindingMode: the claim's class exists and is WaitForFirstConsumer (no class, or a class that does
    not exist, means Immediate)."""
    if not claim.storage_class:
        return False
    storage_class = classes.get(claim.storage_class)
    if storage_class is None:
        return False
    if storage_class.binding_mode is None:
        raise ClaimRejected(f'VolumeBindingMode not set for StorageClass "{claim.storage_class}"', error=True)
    return storage_class.waits_for_first_consumer
