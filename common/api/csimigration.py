"""In-tree cloud volumes as their CSI drivers see them (k8s.io/csi-translation-lib, CSI migration).

kube-scheduler counts an in-tree volume (a `gcePersistentDisk`, `awsElasticBlockStore`, ... source in
a PersistentVolume or inline in a pod) under the CSI driver it migrated to (NodeVolumeLimits), and
matches a migrated PersistentVolume's node affinity in the CSI driver's topology key (VolumeBinding,
on nodes whose CSINode lists the plugin as migrated). This module is the part of the translation
library those two read: which driver, which volume handle, which topology key; nothing else of the
translated object is needed for scheduling.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

LABEL_ZONE: Final = "topology.kubernetes.io/zone"
LABEL_REGION: Final = "topology.kubernetes.io/region"
LABEL_BETA_ZONE: Final = "failure-domain.beta.kubernetes.io/zone"
LABEL_BETA_REGION: Final = "failure-domain.beta.kubernetes.io/region"
MULTI_ZONE_DELIMITER: Final = "__"  # k8s.io/cloud-provider/volume: zones of a multi-zone volume label

GCE_PD: Final = "kubernetes.io/gce-pd"
AWS_EBS: Final = "kubernetes.io/aws-ebs"
AZURE_DISK: Final = "kubernetes.io/azure-disk"
AZURE_FILE: Final = "kubernetes.io/azure-file"
CINDER: Final = "kubernetes.io/cinder"
VSPHERE: Final = "kubernetes.io/vsphere-volume"
PORTWORX: Final = "kubernetes.io/portworx-volume"


@dataclass(frozen=True, slots=True)
class InTreePlugin:
    name: str  # the in-tree plugin, e.g. kubernetes.io/gce-pd (also a StorageClass provisioner)
    source: str  # the volume source field in a Volume / PersistentVolumeSpec
    driver: str  # the CSI driver it migrated to
    topology_key: str | None  # where the CSI driver keeps the zone (None: no topology translation)


PLUGINS: Final = (
    InTreePlugin(GCE_PD, "gcePersistentDisk", "pd.csi.storage.gke.io", "topology.gke.io/zone"),
    InTreePlugin(AWS_EBS, "awsElasticBlockStore", "ebs.csi.aws.com", "topology.ebs.csi.aws.com/zone"),
    InTreePlugin(AZURE_DISK, "azureDisk", "disk.csi.azure.com", "topology.disk.csi.azure.com/zone"),
    InTreePlugin(AZURE_FILE, "azureFile", "file.csi.azure.com", None),
    InTreePlugin(CINDER, "cinder", "cinder.csi.openstack.org", "topology.cinder.csi.openstack.org/zone"),
    InTreePlugin(VSPHERE, "vsphereVolume", "csi.vsphere.vmware.com", None),
    InTreePlugin(PORTWORX, "portworxVolume", "pxd.portworx.com", None),
)
BY_NAME: Final = {p.name: p for p in PLUGINS}

# The plugins whose migration kube-scheduler v1.36 honours: VolumeBinding translates their PVs' topology
# (volumebinding/binder.go isCSIMigrationOnForPlugin), NodeVolumeLimits counts them under the CSI
# driver (nodevolumelimits/utils.go isCSIMigrationOn). Azure File and vSphere volumes are counted by neither.
MIGRATION_ON: Final = frozenset({AWS_EBS, GCE_PD, AZURE_DISK, CINDER, PORTWORX})


class TranslationError(ValueError):
    """The in-tree volume cannot be translated (kube-scheduler then fails the Filter with an error)."""


@dataclass(frozen=True, slots=True)
class InTreeVolume:
    """An in-tree volume source and the CSI volume it is translated to."""

    plugin: InTreePlugin
    handle: str  # the CSI volume handle ("" when the source cannot be translated: such a volume is not counted)
    problem: str | None = None  # why a PersistentVolume cannot be translated, in the library's words


def in_tree_source(spec: Mapping[str, Any]) -> tuple[InTreePlugin, Mapping[str, Any]] | None:
    """The in-tree plugin a Volume or PersistentVolumeSpec uses, with its source object."""
    for plugin in PLUGINS:
        source = spec.get(plugin.source)
        if isinstance(source, Mapping):
            return plugin, source
    return None


def _text(source: Mapping[str, Any], key: str) -> str:
    value = source.get(key)
    return value if isinstance(value, str) else ""


def inline_volume(volume: Mapping[str, Any]) -> InTreeVolume | None:
    """An inline in-tree volume of a pod (TranslateInTreeInlineVolumeToCSI's driver and handle)."""
    found = in_tree_source(volume)
    if found is None:
        return None
    plugin, source = found
    if plugin.name == GCE_PD:
        handle = f"projects/UNSPECIFIED/zones/UNSPECIFIED/disks/{_text(source, 'pdName')}"
    elif plugin.name == AWS_EBS:
        handle = _ebs_volume_id(_text(source, "volumeID"))
    elif plugin.name == AZURE_DISK:
        handle = _text(source, "diskURI")
    elif plugin.name in (CINDER, PORTWORX):
        handle = _text(source, "volumeID")
    else:
        handle = ""  # Azure File and vSphere: never counted (MIGRATION_ON), the handle does not matter
    return InTreeVolume(plugin, handle)


def persistent_volume(spec: Mapping[str, Any], labels: Mapping[str, str]) -> InTreeVolume | None:
    """An in-tree PersistentVolume source (TranslateInTreePVToCSI's driver and handle)."""
    found = in_tree_source(spec)
    if found is None:
        return None
    plugin, source = found
    if plugin.name == GCE_PD:
        zones = (labels.get(LABEL_BETA_ZONE) or labels.get(LABEL_ZONE) or "").split(MULTI_ZONE_DELIMITER)
        name = _text(source, "pdName")
        if len(zones) > 1:  # a regional disk: every zone must be {locale}-{region}-{zone} of one region
            try:
                handle = f"projects/UNSPECIFIED/regions/{_gce_region(zones)}/disks/{name}"
            except TranslationError as exc:
                return InTreeVolume(plugin, "", f"failed to get region from zones: {exc}")
        else:
            handle = f"projects/UNSPECIFIED/zones/{zones[0] or 'UNSPECIFIED'}/disks/{name}"
        return InTreeVolume(plugin, handle)
    inline = inline_volume(spec)
    return inline if inline is None or plugin.name != AZURE_DISK else InTreeVolume(plugin, _text(source, "diskURI"))


def _ebs_volume_id(volume_id: str) -> str:
    """aws://<zone>/<id> or a bare id; "" when unreadable (csi-translation-lib KubernetesVolumeIDToEBSVolumeID)."""
    if not volume_id.startswith("aws://"):
        return volume_id
    rest = volume_id[len("aws://"):]
    found = rest.split("/", 1)[1].strip("/") if "/" in rest else ""
    return found if found.startswith("vol-") else ""


def _gce_region(zones: list[str]) -> str:
    """gceGetRegionFromZones (csi-translation-lib plugins/gce_pd.go), its errors word for word."""
    regions = set()
    for zone in zones:
        parts = zone.split("-")
        if len(parts) != 3:
            raise TranslationError(f"zone in unexpected format, expected: {{locale}}-{{region}}-{{zone}}, got: {zone}")
        regions.add("-".join(parts[:2]))
    if len(regions) != 1:  # (Go prints the set as a map)
        raise TranslationError("multiple or no regions gotten from zones, got: map["
                               + " ".join(f"{r}:{{}}" for r in sorted(regions)) + "]")
    return regions.pop()


# --------------------------------------------------------------------------- topology of a migrated PV
def _terms(affinity: Any) -> list[Any]:
    required = affinity.get("required") if isinstance(affinity, Mapping) else None
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    return terms if isinstance(terms, list) else []


def _expressions(affinity: Any) -> list[Any]:
    return [
        expr
        for term in _terms(affinity) if isinstance(term, Mapping)
        for expr in term.get("matchExpressions") or [] if isinstance(expr, dict)
    ]  # fmt: skip


def _values_of(affinity: Any, key: str) -> list[str]:
    return [str(v) for expr in _expressions(affinity) if expr.get("key") == key for v in expr.get("values") or []]


def migrated_node_affinity(affinity: Any, labels: Mapping[str, str], topology_key: str) -> dict[str, Any] | None:
    """A migrated PV's `spec.nodeAffinity` in the CSI driver's topology (translateTopologyFromInTreeToCSI).

    The zone key of the node affinity (GA before beta), else the PV's zone label, becomes `topology_key`;
    a beta region key becomes the GA one. Raises TranslationError where the library fails."""
    out: dict[str, Any] = copy.deepcopy(dict(affinity)) if isinstance(affinity, Mapping) else {}
    keys = {expr.get("key") for expr in _expressions(out)}
    if LABEL_ZONE in keys or (LABEL_BETA_ZONE not in keys and (LABEL_ZONE in labels or LABEL_BETA_ZONE not in labels)):
        zone_key, region_key = LABEL_ZONE, LABEL_REGION
    else:
        zone_key, region_key = LABEL_BETA_ZONE, LABEL_BETA_REGION
    if _values_of(out, zone_key):
        _rename(out, zone_key, topology_key)
    elif zone_key in labels:
        zones = sorted({z.strip() for z in labels[zone_key].split(MULTI_ZONE_DELIMITER) if z.strip()})
        if not zones:
            raise TranslationError("failed to translate topology: there are no valid zones to add to pv")
        requirement = {"key": topology_key, "operator": "In", "values": zones}
        required = out.setdefault("required", {})
        terms = [t for t in required.get("nodeSelectorTerms") or [] if isinstance(t, Mapping)] or [{}]
        required["nodeSelectorTerms"] = [
            {**term, "matchExpressions": [*(term.get("matchExpressions") or []), requirement]} for term in terms
        ]
    if region_key == LABEL_BETA_REGION and _values_of(out, LABEL_BETA_REGION):
        _rename(out, LABEL_BETA_REGION, LABEL_REGION)
    return out or None


def _rename(affinity: dict[str, Any], old: str, new: str) -> None:
    for expr in _expressions(affinity):
        if expr.get("key") == old:
            expr["key"] = new
