"""Storage objects digested once for scheduling: PersistentVolumes, PersistentVolumeClaims, StorageClasses,
CSINodes, CSIDrivers, VolumeAttachments and CSIStorageCapacities (core/v1, storage.k8s.io/v1).

Each `parse_*` reads what kube-scheduler's volume plugins read (pkg/scheduler/framework/plugins/
{volumebinding,volumerestrictions,volumezone,nodevolumelimits}, k8s.io/component-helpers/storage/volume)
and raises `MalformedObjectError` naming the field when an object cannot be used at all. A PersistentVolume
whose node affinity has a term the scheduler cannot read keeps that term as one that matches no node and
says so in `affinity_problem`, as kube-scheduler's node selector does (such a term never matches).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from common.api.csimigration import (
    LABEL_BETA_REGION,
    LABEL_BETA_ZONE,
    LABEL_REGION,
    LABEL_ZONE,
    MIGRATION_ON,
    MULTI_ZONE_DELIMITER,
    InTreeVolume,
    TranslationError,
    migrated_node_affinity,
    persistent_volume,
)
from common.api.malformed import MalformedObjectError
from common.api.quantity import Quantity, QuantityError
from common.api.scheduling import (
    LabelSelector,
    Requirement,
    parse_int64,
    parse_label_selector,
    parse_selector_term,
    string_map,
)

ANN_BIND_COMPLETED: Final = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER: Final = "pv.kubernetes.io/bound-by-controller"
ANN_SELECTED_NODE: Final = "volume.kubernetes.io/selected-node"
ANN_BETA_STORAGE_CLASS: Final = "volume.beta.kubernetes.io/storage-class"
ANN_MIGRATED_PLUGINS: Final = "storage.alpha.kubernetes.io/migrated-plugins"
NO_PROVISIONER: Final = "kubernetes.io/no-provisioner"
WAIT_FOR_FIRST_CONSUMER: Final = "WaitForFirstConsumer"
READ_WRITE_ONCE_POD: Final = "ReadWriteOncePod"
FILESYSTEM: Final = "Filesystem"
# The PV labels VolumeZone compares with the node's (volumezone/volume_zone.go topologyLabels, in its order).
ZONE_LABELS: Final = (LABEL_BETA_ZONE, LABEL_BETA_REGION, LABEL_ZONE, LABEL_REGION)


def _meta(obj: Mapping[str, Any], kind: str) -> tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]]:
    if not isinstance(obj, Mapping):
        raise MalformedObjectError(f"expected an object, got {type(obj).__name__}", kind=kind)
    parts = [obj.get(key) or {} for key in ("metadata", "spec", "status")]
    for key, part in zip(("metadata", "spec", "status"), parts, strict=True):
        if not isinstance(part, Mapping):
            raise MalformedObjectError("must be an object", kind=kind, field=key)
    meta, spec, status = parts
    if not isinstance(meta.get("name"), str) or not meta.get("name"):
        raise MalformedObjectError("required", kind=kind, field="metadata.name")
    return meta, spec, status


def resource_version(meta: Mapping[str, Any]) -> int:
    """metadata.resourceVersion as the number etcd made it (0 when absent or not a number)."""
    try:
        return int(str(meta.get("resourceVersion") or "0"))
    except ValueError:
        return 0


def _quantity(value: Any, kind: str, name: str, where: str) -> Quantity | None:
    if value is None:
        return None
    try:
        return Quantity.parse(value, where)
    except QuantityError as exc:
        raise MalformedObjectError(str(exc), kind=kind, name=name, field=where) from None


def _strings(value: Any) -> frozenset[str]:
    return frozenset(str(v) for v in value) if isinstance(value, list) else frozenset()


def _object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(mapping: Mapping[str, Any], key: str) -> str:
    value = mapping.get(key)
    return value if isinstance(value, str) else ""


# --------------------------------------------------------------------------- node affinity of a PV
@dataclass(frozen=True, slots=True)
class VolumeAffinity:
    """`spec.nodeAffinity.required` of a PV as CheckNodeAffinity matches it (any term; every expression of it).

    A PV's node is judged by labels only: matchFields find no node fields there and are ignored, so a term
    of matchFields alone matches every node (its `expressions` are empty). Terms that are empty or cannot
    be read match no node and are left out; `problem` names the first unreadable one, `errors` says what
    kube-scheduler's node selector finds wrong with them, in its words."""

    terms: tuple[tuple[Requirement, ...], ...]
    problem: str | None = None
    errors: tuple[str, ...] = ()
    # Hashed once: thousands of PVs are grouped by their affinity every scheduling cycle.
    _hash: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.terms, self.problem)))

    def __hash__(self) -> int:
        return self._hash

    def matches(self, labels: Mapping[str, str]) -> bool:
        return any(all(req.matches(labels.get(req.key)) for req in term) for term in self.terms)

    def mismatch(self) -> str:
        """volume.CheckNodeAffinity's error on a node no term matches: the unreadable terms' errors (an
        aggregate), else "no matching NodeSelectorTerms"."""
        if not self.errors:
            return "no matching NodeSelectorTerms"
        unique = list(dict.fromkeys(self.errors))
        return unique[0] if len(unique) == 1 else f"[{', '.join(unique)}]"


def parse_volume_affinity(raw: Any, where: str) -> VolumeAffinity | None:
    """None: no required node affinity, every node matches."""
    if not isinstance(raw, Mapping) or raw.get("required") is None:
        return None
    required = raw["required"]
    terms_raw = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    terms: list[tuple[Requirement, ...]] = []
    problem: str | None = None
    errors: list[str] = []
    for i, term_raw in enumerate(terms_raw if isinstance(terms_raw, list) else []):
        errors += _integer_errors(term_raw, i)
        try:
            term = parse_selector_term(term_raw, f"{where}.required.nodeSelectorTerms[{i}]")
        except MalformedObjectError as exc:
            problem = problem or str(exc)
            continue
        if not term.is_empty:
            terms.append(term.match_expressions)
    return VolumeAffinity(tuple(terms), problem, tuple(errors))


def _integer_errors(term: Any, index: int) -> list[str]:
    """The one way a PV's node affinity the API server accepts is unreadable: Gt/Lt with a value that is no
    integer (its validation counts the values, it does not parse them). As the node selector words it
    (k8s.io/apimachinery labels.NewRequirement)."""
    expressions = term.get("matchExpressions") if isinstance(term, Mapping) else None
    out = []
    for j, expression in enumerate(expressions if isinstance(expressions, list) else []):
        if not isinstance(expression, Mapping) or expression.get("operator") not in ("Gt", "Lt"):
            continue
        values = expression.get("values")
        for k, value in enumerate(values if isinstance(values, list) else []):
            if parse_int64(str(value)) is None:
                out.append(f"nodeSelectorTerms[{index}].matchExpressions[{j}].values[{k}]: Invalid value: "
                           f"{json.dumps(str(value))}: for 'Gt', 'Lt' operators, the value must be an integer")
    return out


# --------------------------------------------------------------------------- PersistentVolume
@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True, eq=False)
class PersistentVolume:
    name: str
    uid: str
    resource_version: int
    labels: dict[str, str]
    storage_class: str
    capacity: Quantity
    access_modes: frozenset[str]
    volume_mode: str
    attributes_class: str
    phase: str
    deleting: bool
    claim_ref: ClaimRef | None
    node_affinity: VolumeAffinity | None
    csi: tuple[str, str] | None  # (driver, volume handle) of a CSI volume
    in_tree: InTreeVolume | None
    # The node affinity in the CSI driver's topology, for nodes whose CSINode lists `in_tree` as migrated;
    # `migration_problem`: the translation failed (kube-scheduler's Filter then errors on such a node).
    migrated_affinity: VolumeAffinity | None
    migration_problem: str | None
    zones: tuple[tuple[str, frozenset[str]], ...]  # VolumeZone's (label, values) of the PV
    raw: Mapping[str, Any] = field(repr=False)

    def bound_to(self, namespace: str, name: str, uid: str) -> bool:
        """IsVolumeBoundToClaim: claimRef names the claim (and its uid, when the ref has one)."""
        ref = self.claim_ref
        return ref is not None and ref.namespace == namespace and ref.name == name and (not ref.uid or ref.uid == uid)

    def affinity_on(self, migrated: bool) -> VolumeAffinity | None:
        """The node affinity to match on a node where this PV's in-tree plugin is (or is not) migrated."""
        return self.migrated_affinity if migrated and self.in_tree is not None else self.node_affinity


def parse_persistent_volume(obj: Mapping[str, Any]) -> PersistentVolume:
    kind = "PersistentVolume"
    meta, spec, status = _meta(obj, kind)
    name = str(meta["name"])
    labels = string_map(meta.get("labels"), "metadata.labels")
    annotations = string_map(meta.get("annotations"), "metadata.annotations")
    capacity = _object(spec.get("capacity"))
    ref_raw = spec.get("claimRef")
    claim_ref = None
    if isinstance(ref_raw, Mapping):
        claim_ref = ClaimRef(_text(ref_raw, "namespace"), _text(ref_raw, "name"), _text(ref_raw, "uid"))
    csi_raw = spec.get("csi")
    csi = (_text(csi_raw, "driver"), _text(csi_raw, "volumeHandle")) if isinstance(csi_raw, Mapping) else None
    affinity = parse_volume_affinity(spec.get("nodeAffinity"), "spec.nodeAffinity")
    in_tree = persistent_volume(spec, labels) if csi is None else None
    migrated, migration_problem = affinity, in_tree.problem if in_tree is not None else None
    if (in_tree is not None and migration_problem is None and in_tree.plugin.name in MIGRATION_ON
            and in_tree.plugin.topology_key is not None):  # fmt: skip
        try:
            translated = migrated_node_affinity(spec.get("nodeAffinity"), labels, in_tree.plugin.topology_key)
            migrated = parse_volume_affinity(translated, "spec.nodeAffinity")
        except TranslationError as exc:
            migration_problem = str(exc)
    zones = []
    for key in ZONE_LABELS:
        if key in labels:
            values = [v.strip() for v in labels[key].split(MULTI_ZONE_DELIMITER)]
            if all(values):  # LabelZonesToSet fails on an empty zone; kube-scheduler then ignores the label
                zones.append((key, frozenset(values)))
    return PersistentVolume(
        name=name,
        uid=_text(meta, "uid"),
        resource_version=resource_version(meta),
        labels=labels,
        storage_class=annotations.get(ANN_BETA_STORAGE_CLASS, _text(spec, "storageClassName")),
        capacity=_quantity(capacity.get("storage"), kind, name, "spec.capacity.storage") or Quantity.parse(0),
        access_modes=_strings(spec.get("accessModes")),
        volume_mode=_text(spec, "volumeMode") or FILESYSTEM,
        attributes_class=_text(spec, "volumeAttributesClassName"),
        phase=_text(status, "phase"),
        deleting=meta.get("deletionTimestamp") is not None,
        claim_ref=claim_ref,
        node_affinity=affinity,
        csi=csi,
        in_tree=in_tree,
        migrated_affinity=migrated,
        migration_problem=migration_problem,
        zones=tuple(zones),
        raw=obj,
    )


# --------------------------------------------------------------------------- PersistentVolumeClaim
@dataclass(frozen=True, slots=True, eq=False)
class PersistentVolumeClaim:
    namespace: str
    name: str
    key: str  # namespace/name
    uid: str
    resource_version: int
    annotations: dict[str, str]
    storage_class: str  # the beta annotation first, then spec.storageClassName ("" for none)
    volume_name: str
    phase: str
    deleting: bool
    access_modes: frozenset[str]
    volume_mode: str
    attributes_class: str
    request: Quantity | None  # spec.resources.requests.storage
    selector: LabelSelector | None
    selector_problem: str | None
    controller_uid: str  # the uid of the controlling owner (a generic ephemeral volume's pod)
    raw: Mapping[str, Any] = field(repr=False)

    @property
    def fully_bound(self) -> bool:
        """isPVCFullyBound: the PV controller finished binding (volumeName and bind-completed)."""
        return bool(self.volume_name) and ANN_BIND_COMPLETED in self.annotations

    @property
    def selected_node(self) -> str | None:
        return self.annotations.get(ANN_SELECTED_NODE)

    @property
    def size(self) -> Quantity:
        return self.request if self.request is not None else Quantity.parse(0)


def parse_claim(obj: Mapping[str, Any]) -> PersistentVolumeClaim:
    kind = "PersistentVolumeClaim"
    meta, spec, status = _meta(obj, kind)
    name = str(meta["name"])
    namespace = str(meta.get("namespace") or "default")
    annotations = string_map(meta.get("annotations"), "metadata.annotations")
    requests = _object(_object(spec.get("resources")).get("requests"))
    selector, problem = None, None
    if spec.get("selector") is not None:
        try:
            selector = parse_label_selector(spec["selector"], "spec.selector")
        except MalformedObjectError as exc:
            problem = f"error creating internal label selector for claim: {namespace}/{name}: {exc}"
    controller = ""
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            controller = _text(ref, "uid")
    class_name = spec.get("storageClassName")
    return PersistentVolumeClaim(
        namespace=namespace,
        name=name,
        key=f"{namespace}/{name}",
        uid=_text(meta, "uid"),
        resource_version=resource_version(meta),
        annotations=annotations,
        storage_class=annotations.get(ANN_BETA_STORAGE_CLASS, class_name if isinstance(class_name, str) else ""),
        volume_name=_text(spec, "volumeName"),
        phase=_text(status, "phase"),
        deleting=meta.get("deletionTimestamp") is not None,
        access_modes=_strings(spec.get("accessModes")),
        volume_mode=_text(spec, "volumeMode") or FILESYSTEM,
        attributes_class=_text(spec, "volumeAttributesClassName"),
        request=_quantity(requests.get("storage"), kind, f"{namespace}/{name}", "spec.resources.requests.storage"),
        selector=selector,
        selector_problem=problem,
        controller_uid=controller,
        raw=obj,
    )


# --------------------------------------------------------------------------- StorageClass
TopologyTerm = tuple[tuple[str, frozenset[str]], ...]  # every (label, allowed values) must hold


@dataclass(frozen=True, slots=True, eq=False)
class StorageClass:
    name: str
    provisioner: str
    binding_mode: str | None  # None only for a class written without one (the API server defaults it)
    allowed_topologies: tuple[TopologyTerm, ...]  # empty: every node
    raw: Mapping[str, Any] = field(repr=False)

    @property
    def waits_for_first_consumer(self) -> bool:
        return self.binding_mode == WAIT_FOR_FIRST_CONSUMER

    @property
    def provisions(self) -> bool:
        return bool(self.provisioner) and self.provisioner != NO_PROVISIONER

    def topology_allows(self, labels: Mapping[str, str]) -> bool:
        """MatchTopologySelectorTerms: no terms allow every node; an empty or unreadable term allows none."""
        if not self.allowed_topologies:
            return True
        return any(term and all(labels.get(k) in values for k, values in term) for term in self.allowed_topologies)


def parse_storage_class(obj: Mapping[str, Any]) -> StorageClass:
    meta, _, _ = _meta(obj, "StorageClass")
    terms: list[TopologyTerm] = []
    for term in obj.get("allowedTopologies") or []:
        expressions = term.get("matchLabelExpressions") if isinstance(term, Mapping) else None
        parsed = [
            (_text(e, "key"), _strings(e.get("values")))
            for e in (expressions if isinstance(expressions, list) else []) if isinstance(e, Mapping)
        ]  # fmt: skip
        # An expression without values cannot be a label requirement: the whole term then allows no node.
        terms.append(() if any(not values for _, values in parsed) else tuple(parsed))
    mode = obj.get("volumeBindingMode")
    return StorageClass(
        name=str(meta["name"]),
        provisioner=_text(obj, "provisioner"),
        binding_mode=mode if isinstance(mode, str) and mode else None,
        allowed_topologies=tuple(terms),
        raw=obj,
    )


# --------------------------------------------------------------------------- CSI objects
@dataclass(frozen=True, slots=True)
class CSINode:
    name: str  # the node's name
    limits: dict[str, int]  # driver -> allocatable.count (drivers without a count have no limit)
    drivers: frozenset[str]
    migrated_plugins: frozenset[str]  # in-tree plugins the node's drivers took over (annotation)


def parse_csi_node(obj: Mapping[str, Any]) -> CSINode:
    meta, spec, _ = _meta(obj, "CSINode")
    limits: dict[str, int] = {}
    drivers = set()
    for i, driver in enumerate(spec.get("drivers") or []):
        if not isinstance(driver, Mapping):
            raise MalformedObjectError("must be an object", kind="CSINode", name=str(meta["name"]),
                                       field=f"spec.drivers[{i}]")  # fmt: skip
        drivers.add(_text(driver, "name"))
        count = (driver.get("allocatable") or {}).get("count") if isinstance(driver.get("allocatable"), Mapping) \
            else None  # fmt: skip
        if count is not None:
            if not isinstance(count, int) or isinstance(count, bool):
                raise MalformedObjectError(f"expected an integer, got {count!r}", kind="CSINode",
                                           name=str(meta["name"]), field=f"spec.drivers[{i}].allocatable.count")
            limits[_text(driver, "name")] = count
    annotations = string_map(meta.get("annotations"), "metadata.annotations")
    migrated = frozenset(p.strip() for p in annotations.get(ANN_MIGRATED_PLUGINS, "").split(",") if p.strip())
    return CSINode(str(meta["name"]), limits, frozenset(drivers), migrated)


@dataclass(frozen=True, slots=True)
class CSIDriver:
    name: str
    storage_capacity: bool  # spec.storageCapacity: provisioning checks CSIStorageCapacity objects


def parse_csi_driver(obj: Mapping[str, Any]) -> CSIDriver:
    meta, spec, _ = _meta(obj, "CSIDriver")
    return CSIDriver(str(meta["name"]), spec.get("storageCapacity") is True)


@dataclass(frozen=True, slots=True)
class VolumeAttachment:
    name: str
    node: str
    attacher: str
    volume: str  # spec.source.persistentVolumeName ("" for an inline volume)


def parse_volume_attachment(obj: Mapping[str, Any]) -> VolumeAttachment:
    meta, spec, _ = _meta(obj, "VolumeAttachment")
    return VolumeAttachment(str(meta["name"]), _text(spec, "nodeName"), _text(spec, "attacher"),
                            _text(_object(spec.get("source")), "persistentVolumeName"))  # fmt: skip


@dataclass(frozen=True, slots=True)
class StorageCapacity:
    key: str
    storage_class: str
    capacity: Quantity | None
    limit: Quantity | None  # the largest volume it can hold: maximumVolumeSize when set (more precise), else capacity
    node_topology: LabelSelector | None  # None: unavailable to every node


def parse_storage_capacity(obj: Mapping[str, Any]) -> StorageCapacity:
    meta, _, _ = _meta(obj, "CSIStorageCapacity")
    key = f"{meta.get('namespace') or 'default'}/{meta['name']}"
    kind = "CSIStorageCapacity"
    capacity = _quantity(obj.get("capacity"), kind, key, "capacity")
    maximum = _quantity(obj.get("maximumVolumeSize"), kind, key, "maximumVolumeSize")
    topology = obj.get("nodeTopology")
    selector = parse_label_selector(topology, "nodeTopology") if topology is not None else None
    return StorageCapacity(key, _text(obj, "storageClassName"), capacity,
                           maximum if maximum is not None else capacity, selector)  # fmt: skip
