"""Cluster events that can make a rejected pod schedulable (kube-scheduler's ClusterEvent).

A plugin names the events that can undo its rejections in `events_to_register`
(`interfaces.EnqueueExtensions`); a pod it rejected then waits in the unschedulable pool
for one of them. The informers report these events as they apply watch events.
"""

from __future__ import annotations

NODE_ADD = "NodeAdd"
NODE_UPDATE = "NodeUpdate"  # allocatable, labels, annotations, taints or unschedulable changed
ASSIGNED_POD_DELETE = "AssignedPodDelete"  # also: a pod finished, or a reservation was released
NODE_METRIC = "NodeMetricChange"
POD_GROUP = "PodGroupChange"

NODE_CHANGES = frozenset({NODE_ADD, NODE_UPDATE})
RESOURCE_CHANGES = NODE_CHANGES | {ASSIGNED_POD_DELETE}  # room on a node may have appeared

# --- volumes (issue 28): the storage objects the volume plugins watch (any add, update or delete) ---
PERSISTENT_VOLUME = "PersistentVolumeChange"
PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaimChange"
STORAGE_CLASS = "StorageClassChange"
CSI_NODE = "CSINodeChange"
CSI_DRIVER = "CSIDriverChange"
CSI_STORAGE_CAPACITY = "CSIStorageCapacityChange"
VOLUME_ATTACHMENT = "VolumeAttachmentChange"
