"""Builders of storage objects for tests (PersistentVolumes, claims, StorageClasses, CSINodes, ...) and of pod
volumes, as the API server returns them: unit tests feed them to the scheduler's stores, integration tests
create them on a real API server (which fills in what a builder leaves out: uids, versions, defaults).

    persistent_volume("pv-a", "10Gi", storage_class="local", hostname="node-a")
    claim("data", storage_class="local", request="5Gi")
    with_claims(pod_obj, "data")
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

Obj = dict[str, Any]
HOSTNAME = "kubernetes.io/hostname"


def storage_class(name: str, *, provisioner: str = "kubernetes.io/no-provisioner",
                  mode: str | None = "WaitForFirstConsumer",
                  allowed_topologies: Mapping[str, Sequence[str]] | None = None) -> Obj:  # fmt: skip
    obj: Obj = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
                "provisioner": provisioner}  # fmt: skip
    if mode is not None:
        obj["volumeBindingMode"] = mode
    if allowed_topologies:
        obj["allowedTopologies"] = [{"matchLabelExpressions": [{"key": k, "values": list(v)}
                                                                for k, v in allowed_topologies.items()]}]  # fmt: skip
    return obj


def node_affinity(required: Mapping[str, Sequence[str]]) -> Obj:
    """A PV's `spec.nodeAffinity` with one term of `In` requirements."""
    expressions = [{"key": k, "operator": "In", "values": list(v)} for k, v in required.items()]
    return {"required": {"nodeSelectorTerms": [{"matchExpressions": expressions}]}}


def persistent_volume(
    name: str,
    capacity: str = "1Gi",
    *,
    storage_class: str = "",
    hostname: str | None = None,
    affinity: Obj | None = None,
    access_modes: Sequence[str] = ("ReadWriteOnce",),
    phase: str | None = "Available",
    labels: Mapping[str, str] | None = None,
    claim_ref: tuple[str, str, str] | None = None,
    local_path: str | None = None,
    csi: tuple[str, str] | None = None,
    source: Obj | None = None,
    volume_mode: str | None = None,
    resource_version: str = "1",
) -> Obj:
    """`hostname`: a local PV's node affinity on that node; `claim_ref`: (namespace, name, uid) it is bound to."""
    spec: Obj = {
        "capacity": {"storage": capacity},
        "accessModes": list(access_modes),
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": storage_class,
    }
    if hostname is not None:
        spec["nodeAffinity"] = node_affinity({HOSTNAME: [hostname]})
    if affinity is not None:
        spec["nodeAffinity"] = affinity
    if csi is not None:
        spec["csi"] = {"driver": csi[0], "volumeHandle": csi[1]}
    elif source is not None:
        spec.update(source)
    else:
        spec["local" if local_path or hostname else "hostPath"] = {"path": local_path or f"/tmp/{name}"}
    if claim_ref is not None:
        namespace, claim_name, uid = claim_ref
        spec["claimRef"] = {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": namespace,
                            "name": claim_name, **({"uid": uid} if uid else {})}  # fmt: skip
    if volume_mode is not None:
        spec["volumeMode"] = volume_mode
    meta: Obj = {"name": name, "labels": dict(labels or {}), "resourceVersion": resource_version,
                 "uid": f"uid-pv-{name}"}  # fmt: skip
    obj: Obj = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": meta, "spec": spec}
    if phase is not None:
        obj["status"] = {"phase": phase}
    return obj


def claim(
    name: str,
    namespace: str = "default",
    *,
    storage_class: str | None = None,
    request: str | None = "1Gi",
    access_modes: Sequence[str] = ("ReadWriteOnce",),
    volume_name: str = "",
    bound: bool = False,
    annotations: Mapping[str, str] | None = None,
    phase: str | None = None,
    owner_pod: tuple[str, str] | None = None,
    selector: Obj | None = None,
    resource_version: str = "1",
) -> Obj:
    """`bound`: bound by the PV controller to `volume_name` (bind-completed, phase Bound); `owner_pod`: (pod name,
    uid) a generic ephemeral volume's claim is controlled by."""
    spec: Obj = {"accessModes": list(access_modes)}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if request is not None:
        spec["resources"] = {"requests": {"storage": request}}
    if volume_name:
        spec["volumeName"] = volume_name
    if selector is not None:
        spec["selector"] = selector
    meta: Obj = {"name": name, "namespace": namespace, "uid": f"uid-pvc-{namespace}-{name}",
                 "resourceVersion": resource_version, "annotations": dict(annotations or {})}  # fmt: skip
    if bound:
        meta["annotations"]["pv.kubernetes.io/bind-completed"] = "yes"
    if owner_pod is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": owner_pod[0], "uid": owner_pod[1],
                                    "controller": True, "blockOwnerDeletion": True}]  # fmt: skip
    status = {"phase": phase or ("Bound" if bound else "Pending")}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec, "status": status}


def csi_node(name: str, limits: Mapping[str, int | None] | None = None, *, migrated: Sequence[str] = ()) -> Obj:
    """A CSINode: driver -> allocatable count (None: the driver sets no limit)."""
    drivers = [{"name": driver, "nodeID": name, "topologyKeys": None,
                **({"allocatable": {"count": count}} if count is not None else {})}
               for driver, count in (limits or {}).items()]  # fmt: skip
    meta: Obj = {"name": name}
    if migrated:
        meta["annotations"] = {"storage.alpha.kubernetes.io/migrated-plugins": ",".join(migrated)}
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": meta, "spec": {"drivers": drivers}}


def csi_driver(name: str, *, storage_capacity: bool = False) -> Obj:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": name},
            "spec": {"storageCapacity": storage_capacity, "attachRequired": True}}  # fmt: skip


def storage_capacity(name: str, storage_class: str, capacity: str, *, namespace: str = "default",
                     node_labels: Mapping[str, str] | None = None, maximum: str | None = None) -> Obj:  # fmt: skip
    obj: Obj = {"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
                "metadata": {"name": name, "namespace": namespace}, "storageClassName": storage_class,
                "capacity": capacity}  # fmt: skip
    if node_labels is not None:
        obj["nodeTopology"] = {"matchLabels": dict(node_labels)}
    if maximum is not None:
        obj["maximumVolumeSize"] = maximum
    return obj


def volume_attachment(name: str, node: str, attacher: str, pv: str) -> Obj:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": name},
            "spec": {"attacher": attacher, "nodeName": node, "source": {"persistentVolumeName": pv}}}  # fmt: skip


def with_claims(pod: Obj, *claims: str, ephemeral: Sequence[str] = (), inline: Sequence[Obj] = (),
                mount: bool = False) -> Obj:  # fmt: skip
    """The pod with a volume per claim ("vol-<claim>"), generic ephemeral volumes (claim template of 1Gi, class
    "standard") and inline volume sources (each a dict with its `name`); `mount`: each container mounts every
    volume under /data/<volume>."""
    out = copy.deepcopy(pod)
    volumes = [{"name": f"vol-{c}", "persistentVolumeClaim": {"claimName": c}} for c in claims]
    volumes += [{"name": e, "ephemeral": {"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteOnce"], "storageClassName": "standard",
        "resources": {"requests": {"storage": "1Gi"}}}}}} for e in ephemeral]  # fmt: skip
    volumes += [dict(v) for v in inline]
    out["spec"]["volumes"] = out["spec"].get("volumes", []) + volumes
    if mount:
        for container in out["spec"]["containers"]:
            container["volumeMounts"] = [{"name": v["name"], "mountPath": f"/data/{v['name']}"} for v in volumes]
    return out
