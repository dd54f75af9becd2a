"""Shared set-up of the volume plugins' unit tests: a snapshot with the storage stores filled, and one
plugin's PreFilter + Filter over every node."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.filterresult import FilterResult
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.framework.status import Status
from scheduler_plugin.plugins.storage import (
    CSIDrivers,
    CSINodes,
    PersistentVolumeClaims,
    PersistentVolumes,
    StorageCapacities,
    StorageClasses,
    VolumeAttachments,
)

Obj = dict[str, Any]


def volume_snapshot(
    nodes: Iterable[Obj],
    pods: Iterable[Obj] = (),
    *,
    pvs: Iterable[Obj] = (),
    claims: Iterable[Obj] = (),
    classes: Iterable[Obj] = (),
    csi_nodes: Iterable[Obj] = (),
    drivers: Iterable[Obj] = (),
    capacities: Iterable[Obj] = (),
    attachments: Iterable[Obj] = (),
) -> Snapshot:
    return Snapshot.from_objects(nodes, pods, stores={
        PersistentVolumes: pvs, PersistentVolumeClaims: claims, StorageClasses: classes, CSINodes: csi_nodes,
        CSIDrivers: drivers, StorageCapacities: capacities, VolumeAttachments: attachments,
    })  # fmt: skip


def filter_all(plugin: Any, snap: Snapshot, pod: Obj | PodInfo,
               state: CycleState | None = None) -> tuple[Status, dict[str, list[str]], FilterResult | None]:  # fmt: skip
    """(PreFilter status, node name -> reasons it was rejected for, the Filter's answer (None when PreFilter did
    not succeed))."""
    info = pod if isinstance(pod, PodInfo) else PodInfo.from_dict(pod)
    state = state if state is not None else CycleState()
    _, status = plugin.pre_filter(state, info, snap)
    if not status.is_success():
        return status, {}, None
    rows = snap.node_indices()
    result: FilterResult = plugin.filter(state, info, snap, rows)
    return status, rejected_by(result, snap, rows), result


def rejected_by(result: FilterResult, snap: Snapshot, rows: np.ndarray) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for rejection in result.rejections:
        for row in rows[rejection.mask]:
            out.setdefault(snap.node_name(int(row)), []).append(rejection.reason)
    return out
