"""VolumeZone (kube-scheduler's, pkg/scheduler/framework/plugins/volumezone).

The zone and region labels of the PVs a pod's claims are bound to (beta and GA keys; a multi-zone value
is "zone-a__zone-b") must match the node's: a node with none of those labels fits any volume (a single-zone
cluster), otherwise it needs every PV label's key (or its GA form) with a value the PV allows, else "node(s)
had no available volume zone" (UnschedulableAndUnresolvable). Unbound WaitForFirstConsumer claims are left
to VolumeBinding; PreFilter refuses a pod whose claim, class or PV is missing with kube-scheduler's words.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from common.api.csimigration import LABEL_BETA_REGION, LABEL_BETA_ZONE, LABEL_REGION, LABEL_ZONE
from common.api.storage import ZONE_LABELS
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.events import (
    NODE_ADD,
    NODE_UPDATE,
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    STORAGE_CLASS,
)
from scheduler_plugin.framework.filterresult import ALL_PASS, FilterResult
from scheduler_plugin.framework.interfaces import FrameworkHandle, PreFilterResult, WatchedResource
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import IndexArray, Snapshot
from scheduler_plugin.framework.status import SUCCESS, Code, Status
from scheduler_plugin.plugins.storage import (
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
    PersistentVolumeClaims,
    PersistentVolumes,
    StorageClasses,
)

NAME = "VolumeZone"
STATE = "PreFilterVolumeZone"
REASON = "node(s) had no available volume zone"
GA_FORM = {LABEL_BETA_ZONE: LABEL_ZONE, LABEL_BETA_REGION: LABEL_REGION}

Topology = tuple[str, str, frozenset[str]]  # (PV name, label, allowed values)


class ZoneRejected(Exception):
    pass


class VolumeZone:
    name = NAME

    @classmethod
    def new(cls, _args: BaseModel | None, _handle: FrameworkHandle) -> VolumeZone:
        return cls()

    def watched_resources(self) -> tuple[WatchedResource, ...]:
        return (PERSISTENT_VOLUMES, PERSISTENT_VOLUME_CLAIMS, STORAGE_CLASSES)

    def events_to_register(self) -> frozenset[str]:
        return frozenset({STORAGE_CLASS, NODE_ADD, NODE_UPDATE, PERSISTENT_VOLUME_CLAIM, PERSISTENT_VOLUME})

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        try:
            topologies = self._topologies(pod, snapshot)
        except ZoneRejected as rejected:
            return None, Status.unresolvable(str(rejected))
        if not topologies:
            return None, Status.skip()
        state.write(STATE, tuple(topologies))
        return None, SUCCESS

    @staticmethod
    def _topologies(pod: PodInfo, snapshot: Snapshot) -> list[Topology]:
        """getPVbyPod: the zone labels of the PVs bound to the pod's claims (not ephemeral volumes')."""
        claims = snapshot.store(PersistentVolumeClaims)
        classes = snapshot.store(StorageClasses)
        pvs = snapshot.store(PersistentVolumes)
        out: list[Topology] = []
        for volume in pod.volumes:
            if not volume.claim or volume.ephemeral:
                continue  # an inline volume (the API server requires a claim's name)
            claim = claims.get_api(f"{pod.namespace}/{volume.claim}")
            if claim is None:
                raise ZoneRejected(f'persistentvolumeclaim "{volume.claim}" not found')
            if not claim.volume_name:
                if not claim.storage_class:
                    raise ZoneRejected("PersistentVolumeClaim had no pv name and storageClass name")
                storage_class = classes.get(claim.storage_class)
                if storage_class is None:
                    raise ZoneRejected(f'storageclass.storage.k8s.io "{claim.storage_class}" not found')
                if storage_class.binding_mode is None:
                    raise ZoneRejected(f'VolumeBindingMode not set for StorageClass "{claim.storage_class}"')
                if storage_class.waits_for_first_consumer:
                    continue
                raise ZoneRejected("PersistentVolume had no name")
            pv = pvs.get_api(claim.volume_name)
            if pv is None:
                raise ZoneRejected(f'persistentvolume "{claim.volume_name}" not found')
            out.extend((pv.name, key, values) for key, values in pv.zones)
        return out

    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> FilterResult:
        topologies = state.get(STATE, tuple)
        if not pod.volumes or not topologies:
            return ALL_PASS
        labelled = np.zeros(candidates.size, np.bool_)
        for key in ZONE_LABELS:
            labelled |= snapshot.label_column(key).codes[candidates] >= 0
        if not labelled.any():
            return ALL_PASS
        fits = np.ones(candidates.size, np.bool_)
        for _pv, key, values in topologies:
            column = snapshot.label_column(key)
            codes = column.codes[candidates]
            allowed = np.isin(codes, [column.vocab[v] for v in values if v in column.vocab])
            ga = GA_FORM.get(key)
            if ga is not None:  # no beta label on the node: the PV's beta label against the node's GA one
                ga_column = snapshot.label_column(ga)
                ga_allowed = np.isin(ga_column.codes[candidates], [ga_column.vocab[v] for v in values
                                                                   if v in ga_column.vocab])  # fmt: skip
                allowed = np.where(codes >= 0, allowed, ga_allowed)
            fits &= allowed
        rejected = labelled & ~fits
        return FilterResult.rejecting(REASON, rejected, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
