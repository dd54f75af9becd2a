"""Cluster events that can make a rejected pod schedulable (kube-scheduler's ClusterEvent).

A plugin names the events that can undo its rejections in `events_to_register`
(`interfaces.EnqueueExtensions`); a pod it rejected then waits in the unschedulable pool
for one of them. The informers report these events as they apply watch events.
"""

from __future__ import annotations

NODE_ADD = "NodeAdd"
NODE_UPDATE = "NodeUpdate"  # allocatable, labels, annotations, taints or unschedulable changed
NODE_DELETE = "NodeDelete"
ASSIGNED_POD_ADD = "AssignedPodAdd"  # a pod was bound to a node (by any scheduler, or created bound)
ASSIGNED_POD_UPDATE = "AssignedPodUpdate"  # a bound pod's labels changed
ASSIGNED_POD_DELETE = "AssignedPodDelete"  # also: a pod finished, or a reservation was released
NAMESPACE_CHANGE = "NamespaceChange"  # a namespace was added, relabelled or deleted
WORKLOAD_CHANGE = "WorkloadChange"  # a Service, ReplicationController, ReplicaSet or StatefulSet changed
NODE_METRIC = "NodeMetricChange"
POD_GROUP = "PodGroupChange"

NODE_CHANGES = frozenset({NODE_ADD, NODE_UPDATE})
RESOURCE_CHANGES = NODE_CHANGES | {ASSIGNED_POD_DELETE}  # room on a node may have appeared
ASSIGNED_POD_CHANGES = frozenset({ASSIGNED_POD_ADD, ASSIGNED_POD_UPDATE, ASSIGNED_POD_DELETE})

# the storage objects the volume plugins watch (any add, update or delete)
PERSISTENT_VOLUME = "PersistentVolumeChange"
PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaimChange"
STORAGE_CLASS = "StorageClassChange"
CSI_NODE = "CSINodeChange"
CSI_DRIVER = "CSIDriverChange"
CSI_STORAGE_CAPACITY = "CSIStorageCapacityChange"
VOLUME_ATTACHMENT = "VolumeAttachmentChange"
