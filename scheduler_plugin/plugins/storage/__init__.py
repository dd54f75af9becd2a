"""What the volume plugins (VolumeBinding, VolumeRestrictions, VolumeZone, NodeVolumeLimits) share: the storage
resources they watch, each with its store (`stores.py`) and the cluster event a change of it is."""

from __future__ import annotations

from scheduler_plugin.framework import events
from scheduler_plugin.framework.interfaces import WatchedResource
from scheduler_plugin.plugins.storage.stores import (
    CSIDrivers,
    CSINodes,
    OutOfSyncError,
    PersistentVolumeClaims,
    PersistentVolumes,
    StorageCapacities,
    StorageClasses,
    VolumeAttachments,
)

STORAGE_GROUP = "storage.k8s.io"

PERSISTENT_VOLUMES = WatchedResource("PersistentVolume", "", "v1", "persistentvolumes", events.PERSISTENT_VOLUME,
                                     PersistentVolumes)  # fmt: skip
PERSISTENT_VOLUME_CLAIMS = WatchedResource("PersistentVolumeClaim", "", "v1", "persistentvolumeclaims",
                                           events.PERSISTENT_VOLUME_CLAIM, PersistentVolumeClaims)  # fmt: skip
STORAGE_CLASSES = WatchedResource("StorageClass", STORAGE_GROUP, "v1", "storageclasses", events.STORAGE_CLASS,
                                  StorageClasses)  # fmt: skip
CSI_NODES = WatchedResource("CSINode", STORAGE_GROUP, "v1", "csinodes", events.CSI_NODE, CSINodes)
CSI_DRIVERS = WatchedResource("CSIDriver", STORAGE_GROUP, "v1", "csidrivers", events.CSI_DRIVER, CSIDrivers)
STORAGE_CAPACITIES = WatchedResource("CSIStorageCapacity", STORAGE_GROUP, "v1", "csistoragecapacities",
                                     events.CSI_STORAGE_CAPACITY, StorageCapacities)  # fmt: skip
VOLUME_ATTACHMENTS = WatchedResource("VolumeAttachment", STORAGE_GROUP, "v1", "volumeattachments",
                                     events.VOLUME_ATTACHMENT, VolumeAttachments)  # fmt: skip

__all__ = [
    "CSI_DRIVERS",
    "CSI_NODES",
    "PERSISTENT_VOLUMES",
    "PERSISTENT_VOLUME_CLAIMS",
    "STORAGE_CAPACITIES",
    "STORAGE_CLASSES",
    "VOLUME_ATTACHMENTS",
    "CSIDrivers",
    "CSINodes",
    "OutOfSyncError",
    "PersistentVolumeClaims",
    "PersistentVolumes",
    "StorageCapacities",
    "StorageClasses",
    "VolumeAttachments",
]
