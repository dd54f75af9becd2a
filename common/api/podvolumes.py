"""A pod's volumes as the scheduler's volume plugins read them (`PodInfo.volumes`).

Only what placement depends on: the claim a volume uses (a `persistentVolumeClaim`, or the claim
`<pod>-<volume>` a generic ephemeral volume's controller creates), the inline disks VolumeRestrictions
compares between pods on a node (GCE PD, AWS EBS, iSCSI, Ceph RBD), and the inline in-tree volumes
NodeVolumeLimits counts under their CSI driver (`common/api/csimigration.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from common.api.csimigration import InTreeVolume, inline_volume
from common.api.malformed import MalformedObjectError


@dataclass(frozen=True, slots=True)
class InlineDisk:
    """An inline disk two pods on one node may not share (volumerestrictions isVolumeConflict)."""

    kind: str  # "gce-pd" | "aws-ebs" | "iscsi" | "rbd"
    id: str  # PD name, EBS volume ID, iSCSI IQN, RBD pool/image
    read_only: bool
    monitors: frozenset[str] = frozenset()  # RBD: Ceph monitors

    def conflicts(self, other: InlineDisk) -> bool:
        """The same disk in both, unless both mount it read-only (never allowed for AWS EBS; RBD images are the
        same when they share a monitor)."""
        if self.kind != other.kind or self.id != other.id:
            return False
        if self.kind == "aws-ebs":
            return True
        if self.kind == "rbd" and not (self.monitors & other.monitors):
            return False
        return not (self.read_only and other.read_only)


@dataclass(frozen=True, slots=True)
class PodVolume:
    name: str
    claim: str  # the PersistentVolumeClaim's name in the pod's namespace ("" for a volume without one)
    ephemeral: bool  # a generic ephemeral volume: `claim` must be controlled by the pod
    disk: InlineDisk | None = None
    in_tree: InTreeVolume | None = None


def _text(source: Mapping[str, Any], key: str) -> str:
    value = source.get(key)
    return value if isinstance(value, str) else ""


def _disk(volume: Mapping[str, Any]) -> InlineDisk | None:
    source = volume.get("gcePersistentDisk")
    if isinstance(source, Mapping):
        return InlineDisk("gce-pd", _text(source, "pdName"), source.get("readOnly") is True)
    source = volume.get("awsElasticBlockStore")
    if isinstance(source, Mapping):
        return InlineDisk("aws-ebs", _text(source, "volumeID"), source.get("readOnly") is True)
    source = volume.get("iscsi")
    if isinstance(source, Mapping):
        return InlineDisk("iscsi", _text(source, "iqn"), source.get("readOnly") is True)
    source = volume.get("rbd")
    if isinstance(source, Mapping):
        monitors = source.get("monitors")
        image = f"{_text(source, 'pool') or 'rbd'}/{_text(source, 'image')}"  # the API defaults pool to "rbd"
        return InlineDisk("rbd", image, source.get("readOnly") is True,
                          frozenset(str(m) for m in monitors) if isinstance(monitors, list) else frozenset())
    return None


def parse_pod_volumes(spec: Mapping[str, Any], pod_name: str) -> tuple[PodVolume, ...]:
    """`spec.volumes` of a pod; raises MalformedObjectError for a volume that is not an object or has no name."""
    raw = spec.get("volumes")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise MalformedObjectError("expected a list", field="spec.volumes")
    out = []
    for i, volume in enumerate(raw):
        if not isinstance(volume, Mapping) or not isinstance(volume.get("name"), str):
            raise MalformedObjectError("must be an object with a name", field=f"spec.volumes[{i}]")
        name = volume["name"]
        claim_source = volume.get("persistentVolumeClaim")
        if isinstance(claim_source, Mapping):
            out.append(PodVolume(name, _text(claim_source, "claimName"), False))
        elif isinstance(volume.get("ephemeral"), Mapping):
            out.append(PodVolume(name, f"{pod_name}-{name}", True))
        else:
            disk, in_tree = _disk(volume), inline_volume(volume)
            if disk is not None or in_tree is not None:
                out.append(PodVolume(name, "", False, disk, in_tree))
    return tuple(out)
