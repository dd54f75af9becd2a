"""The volumes dimension of the differential test (issue 28): storage for a generated case.

A case with storage has StorageClasses (WaitForFirstConsumer or Immediate; no provisioner, a CSI
driver with or without storage capacity tracking, an in-tree cloud provisioner; allowedTopologies),
PersistentVolumes (local ones with node affinity on the case's nodes, zonal ones with zone affinity
or zone/region labels, CSI and in-tree GCE PD / AWS EBS ones; sizes, access modes with
ReadWriteOncePod, block mode, labels for claim selectors, a node affinity no scheduler can read),
claims (bound to their PV by kube-controller-manager's PV controller, unbound, of an Immediate class,
of a class or naming a PV that does not exist, lost, being deleted), generic ephemeral volumes (their
claim created for the pod, not yet created, or belonging to someone else), inline disks (GCE PD,
AWS EBS, iSCSI, Ceph RBD, read-only or not), CSINodes with `allocatable.count` per driver and
migrated in-tree plugins, VolumeAttachments and CSIStorageCapacities. Pods already on the nodes use
claims and disks too, so ReadWriteOncePod, disk conflicts and volume limits also make preemption.

The cases stay apart as the rest of the generator's do: every StorageClass, PV, CSIStorageCapacity
and VolumeAttachment belongs to one case and one copy (its name says which), claims live in the
copy's namespace under the case's name, an available PV is only offered to claims of its own case's
class, and a bound PV only matters to the pod of its case (which is pinned to the case's nodes).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.integration.differential_cases import Case, Copy, GenNode, GenPod

Obj = dict[str, Any]

ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
ZONES = ("z1", "z2", "z3")
NO_PROVISIONER = "kubernetes.io/no-provisioner"
GCE_PD, AWS_EBS = "kubernetes.io/gce-pd", "kubernetes.io/aws-ebs"
PLAIN_DRIVER = "plain.csi.diff.test"  # a CSI driver without storage capacity tracking
CAPACITY_DRIVER = "capacity.csi.diff.test"  # a CSIDriver with storageCapacity: CSIStorageCapacities count
GCE_DRIVER, EBS_DRIVER = "pd.csi.storage.gke.io", "ebs.csi.aws.com"
DRIVERS = (PLAIN_DRIVER, CAPACITY_DRIVER, GCE_DRIVER, EBS_DRIVER)
# Where the CSI drivers of migrated in-tree volumes keep the zone (csi-translation-lib)
CSI_ZONE_KEYS = {GCE_PD: "topology.gke.io/zone", AWS_EBS: "topology.ebs.csi.aws.com/zone"}
HOLD_FINALIZER = "diff.loadline.test/hold"  # keeps a claim "being deleted" until the batch is cleaned up
GATE = "diff.loadline.test/claims"  # a pod waits behind it until its ephemeral claims exist
MISSING = "gone"  # the logical name of a class or PV that is never created
RWO, ROX, RWX, RWOP = "ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"
CLAIM_MODES = ((RWO,), (RWO,), (RWO,), (RWOP,), (RWX,), (ROX,), (RWO, ROX))
PV_MODES = ((RWO,), (RWO,), (RWO, RWX), (RWOP,), (RWO, ROX, RWX), (ROX,))
STORAGE_LABEL = "diff.loadline.test/speed"  # on PVs, for claims' selectors

# Cluster-scoped objects every batch shares: the CSI drivers' own settings.
CSI_DRIVERS = tuple(
    {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": name},
     "spec": {"attachRequired": True, "storageCapacity": name == CAPACITY_DRIVER}}
    for name in (PLAIN_DRIVER, CAPACITY_DRIVER))  # fmt: skip


@dataclass
class GenClass:
    name: str
    mode: str  # WaitForFirstConsumer | Immediate
    provisioner: str
    zones: tuple[str, ...]  # allowedTopologies (zone In ...); () none
    capacity: dict[str, tuple[int, int | None]] = field(default_factory=dict)  # zone -> (GiB, maximum GiB)


@dataclass
class GenPV:
    name: str
    gib: int
    modes: tuple[str, ...]
    storage_class: str  # a GenClass's name, or "" (pre-bound PVs only)
    source: str  # local | hostPath | plain | capacity (CSI) | gce-pd | aws-ebs
    nodes: tuple[int, ...] = ()  # node affinity: hostname In these nodes of the case
    zones: tuple[str, ...] = ()  # node affinity: zone In (a term of its own, ORed with the nodes')
    malformed: bool = False  # a term no scheduler can read (Gt with a word), ORed with the others
    labels: dict[str, str] = field(default_factory=dict)  # zone/region labels, the selector label
    claim: str | None = None  # pre-bound to this claim (claimRef)
    block: bool = False


@dataclass
class GenClaim:
    name: str
    storage_class: str | None  # a GenClass's name, MISSING, "" or None (not set)
    gib: int
    modes: tuple[str, ...]
    volume: str = ""  # volumeName: a GenPV's name or MISSING
    selector: str | None = None  # matchLabels {STORAGE_LABEL: value}
    block: bool = False
    # bound (the PV controller binds it to its pre-bound PV) | pending | lost | deleting
    # ephemeral ones: created (for the pod) | absent | foreign (not the pod's)
    state: str = "pending"


@dataclass
class GenVolume:
    """One volume of a pod: a claim by name, a generic ephemeral volume, or an inline disk."""

    kind: str  # claim | ephemeral | gce-pd | aws-ebs | iscsi | rbd
    ref: str = ""  # the claim's name; a disk's PD name / volume ID / IQN / image
    read_only: bool = False
    monitors: tuple[str, ...] = ()  # RBD
    pool: str = ""  # RBD
    template: GenClaim | None = None  # ephemeral


@dataclass
class GenStorage:
    classes: list[GenClass] = field(default_factory=list)
    pvs: list[GenPV] = field(default_factory=list)
    claims: list[GenClaim] = field(default_factory=list)
    csi_nodes: dict[int, tuple[dict[str, int | None], tuple[str, ...]]] = field(default_factory=dict)
    attachments: list[tuple[int, str]] = field(default_factory=list)  # (node, PV name)

    def describe(self) -> list[str]:
        lines = [f"  class {c}" for c in self.classes]
        lines += [f"  pv {p}" for p in self.pvs]
        lines += [f"  claim {c}" for c in self.claims]
        lines += [f"  csinode {n}: limits {limits} migrated {migrated}" for n, (limits, migrated) in self.csi_nodes.items()]
        lines += [f"  attachment node {n} pv {pv}" for n, pv in self.attachments]
        return lines


# --------------------------------------------------------------------------- generation
def generate_storage(rng: random.Random, nodes: Sequence[GenNode], existing: Sequence[GenPod],
                     incoming: GenPod) -> GenStorage:  # fmt: skip
    """Storage for a case, and volumes for its pods (set on them)."""
    gen = _Generator(rng, len(nodes))
    for node in nodes:  # migrated CSI drivers' zone keys, regions: what in-tree translation and VolumeZone read
        for key in CSI_ZONE_KEYS.values():
            if rng.random() < 0.4:
                node.labels[key] = node.labels[ZONE]
        if rng.random() < 0.5:
            node.labels[REGION] = "r1"
    for _ in range(1 if rng.random() < 0.7 else 2):
        gen.new_class()
    for pod in existing:
        if rng.random() < 0.3:
            pod.volumes = [gen.existing_volume() for _ in range(1 if rng.random() < 0.7 else 2)]
    for storage_class in gen.storage.classes:
        if storage_class.mode == "WaitForFirstConsumer":
            for _ in range(rng.choice((0, 1, 1, 2))):
                gen.available_pv(storage_class.name)
    incoming.volumes = [gen.incoming_volume(existing) for _ in range(rng.choice((1, 1, 1, 2, 2, 3)))]
    gen.csi_nodes_and_attachments()
    return gen.storage


class _Generator:
    def __init__(self, rng: random.Random, nodes: int) -> None:
        self.rng, self.nodes, self.storage = rng, nodes, GenStorage()

    def _name(self, prefix: str, items: Sequence[Any]) -> str:
        return f"{prefix}{len(items)}"

    def new_class(self, mode: str | None = None) -> GenClass:
        rng = self.rng
        mode = mode or ("WaitForFirstConsumer" if rng.random() < 0.75 else "Immediate")
        provisioner = rng.choice((NO_PROVISIONER, NO_PROVISIONER, PLAIN_DRIVER, CAPACITY_DRIVER, GCE_PD, AWS_EBS))
        zones = tuple(sorted(rng.sample(ZONES, rng.randint(1, 2)))) if rng.random() < 0.25 else ()
        made = GenClass(self._name("sc", self.storage.classes), mode, provisioner, zones)
        if provisioner == CAPACITY_DRIVER:
            for zone in ZONES:
                if rng.random() < 0.7:
                    made.capacity[zone] = (rng.choice((1, 5, 20)), rng.choice((None, None, 2, 10)))
        self.storage.classes.append(made)
        return made

    def _class(self, mode: str) -> GenClass:
        choices = [c for c in self.storage.classes if c.mode == mode]
        return self.rng.choice(choices) if choices else self.new_class(mode)

    def _pv(self, storage_class: str, gib: int, modes: tuple[str, ...], *, claim: str | None = None,
            block: bool = False) -> GenPV:  # fmt: skip
        rng = self.rng
        source = rng.choice(("local", "local", "local", "hostPath", "plain", "capacity", "gce-pd", "aws-ebs"))
        pv = GenPV(self._name("pv", self.storage.pvs), gib, modes, storage_class, source, claim=claim, block=block)
        shape = rng.random()
        if source == "local" or shape < 0.3:  # a local volume must say where it is
            if rng.random() < 0.8:
                pv.nodes = tuple(rng.sample(range(self.nodes), 1 if rng.random() < 0.85 else 2))
            else:
                pv.zones = tuple(sorted(rng.sample(ZONES, rng.randint(1, 2))))
        elif shape < 0.45:
            pv.zones = tuple(sorted(rng.sample(ZONES, rng.randint(1, 2))))
        pv.malformed = rng.random() < 0.04
        if source != "local" and rng.random() < 0.4:
            zones = sorted(rng.sample(ZONES, 1 if rng.random() < 0.7 else 2))
            pv.labels[BETA_ZONE if rng.random() < 0.25 else ZONE] = "__".join(zones)
            if rng.random() < 0.3:
                pv.labels[REGION] = rng.choice(("r1", "r2"))
        if rng.random() < 0.4:
            pv.labels[STORAGE_LABEL] = rng.choice(("fast", "slow"))
        self.storage.pvs.append(pv)
        return pv

    def available_pv(self, storage_class: str) -> GenPV:
        return self._pv(storage_class, self.rng.choice((1, 2, 5, 10)), self.rng.choice(PV_MODES),
                        block=self.rng.random() < 0.1)  # fmt: skip

    def _claim(self, storage_class: str | None, **kw: Any) -> GenClaim:
        rng = self.rng
        claim = GenClaim(self._name("data", self.storage.claims), storage_class, rng.choice((1, 1, 2, 5)),
                         rng.choice(CLAIM_MODES), block=rng.random() < 0.1, **kw)  # fmt: skip
        self.storage.claims.append(claim)
        return claim

    def bound_claim(self) -> GenClaim:
        """A claim and the PV pre-bound to it; the PV controller binds them before the pods come."""
        rng = self.rng
        storage_class = rng.choice(["", *(c.name for c in self.storage.classes)])
        claim = self._claim(storage_class if storage_class or rng.random() < 0.5 else None, state="bound")
        extra = rng.choice(PV_MODES)
        # (ReadWriteOncePod goes with no other mode: the API server says so)
        widen = rng.random() < 0.5 and RWOP not in claim.modes and RWOP not in extra
        modes = tuple(sorted({*claim.modes, *extra})) if widen else claim.modes
        pv = self._pv(storage_class, claim.gib * rng.choice((1, 1, 2)), modes, claim=claim.name, block=claim.block)
        claim.volume = pv.name
        return claim

    def delayed_claim(self, *, fitting_pv: bool = False) -> GenClaim:
        """An unbound claim of a WaitForFirstConsumer class; `fitting_pv`: and an available PV of its class that
        fits it but perhaps for its node affinity (the other available PVs fit by chance)."""
        rng = self.rng
        selector = rng.choice(("fast", "slow")) if rng.random() < 0.15 else None
        claim = self._claim(self._class("WaitForFirstConsumer").name, selector=selector)
        if fitting_pv:
            assert claim.storage_class is not None
            pv = self._pv(claim.storage_class, claim.gib * rng.choice((1, 2)), claim.modes, block=claim.block)
            if selector:
                pv.labels[STORAGE_LABEL] = selector
        return claim

    def broken_claim(self) -> GenClaim:
        rng = self.rng
        kind = rng.choice(("immediate", "immediate", "no-class", "missing-class", "missing-pv", "lost", "deleting"))
        if kind == "immediate":  # an Immediate class without PVs of its own: the PV controller leaves it pending
            return self._claim(self._class("Immediate").name)
        if kind == "no-class":  # no PV has class "" but the pre-bound ones: it stays pending
            return self._claim(rng.choice(("", None)))
        if kind == "missing-class":
            return self._claim(MISSING)
        if kind == "missing-pv":
            return self._claim(self._class("WaitForFirstConsumer").name, volume=MISSING)
        if kind == "lost":  # bound once, its PV gone: the PV controller says Lost
            return self._claim(self._class("WaitForFirstConsumer").name, volume=MISSING, state="lost")
        return self._claim(self._class("WaitForFirstConsumer").name, state="deleting")

    def _disk(self) -> GenVolume:
        rng = self.rng
        kind = rng.choice(("gce-pd", "aws-ebs", "iscsi", "rbd"))
        volume = GenVolume(kind, rng.choice(("d1", "d2")), read_only=rng.random() < 0.4)
        if kind == "rbd":
            volume.monitors = tuple(sorted(rng.sample(("m1", "m2", "m3"), rng.randint(1, 2))))
            volume.pool = rng.choice(("", "rbd", "other"))
        return volume

    def existing_volume(self) -> GenVolume:
        rng = self.rng
        draw = rng.random()
        if draw < 0.5:
            return GenVolume("claim", self.bound_claim().name)
        if draw < 0.6:
            return GenVolume("claim", self.delayed_claim().name)
        return self._disk()

    def incoming_volume(self, existing: Sequence[GenPod]) -> GenVolume:
        rng = self.rng
        held = [v.ref for p in existing for v in p.volumes if v.kind == "claim"]
        draw = rng.random()
        if held and draw < 0.15:
            return GenVolume("claim", rng.choice(held))
        if draw < 0.4:
            return GenVolume("claim", self.bound_claim().name)
        if draw < 0.67:
            return GenVolume("claim", self.delayed_claim(fitting_pv=rng.random() < 0.5).name)
        if draw < 0.74:
            return GenVolume("claim", self.broken_claim().name)
        if draw < 0.75:
            return GenVolume("claim", MISSING)  # a claim that does not exist
        if draw < 0.87:
            storage_class = self._class("WaitForFirstConsumer").name if rng.random() < 0.9 else MISSING
            state = rng.choice(("created",) * 8 + ("absent", "foreign"))
            template = GenClaim("", storage_class, rng.choice((1, 2, 5)), rng.choice(CLAIM_MODES), state=state)
            return GenVolume("ephemeral", template=template)
        return self._disk()

    def csi_nodes_and_attachments(self) -> None:
        rng = self.rng
        for node in range(self.nodes):
            if rng.random() < 0.45:
                drivers = rng.sample(DRIVERS, rng.randint(1, 3))
                limits = {d: rng.choice((None, 0, 1, 1, 2, 2, 3)) for d in drivers}
                migrated = tuple(sorted(rng.sample((GCE_PD, AWS_EBS), rng.randint(0, 2))))
                self.storage.csi_nodes[node] = (limits, migrated)
        csi = [pv.name for pv in self.storage.pvs if pv.source in ("plain", "capacity")]
        if csi and rng.random() < 0.3:
            for _ in range(rng.randint(1, 2)):
                self.storage.attachments.append((rng.randrange(self.nodes), rng.choice(csi)))


# --------------------------------------------------------------------------- rendering
def _scoped(copy: Copy, case: Case, name: str) -> str:
    """A cluster-scoped object's name (and a claim's, in the copy's namespace): batch, case and copy."""
    return f"b{copy.batch}-c{case.index}-{copy.tag}-{name}"


def claim_name(case: Case, copy: Copy, name: str) -> str:
    return f"b{copy.batch}-c{case.index}-{name}"


def _class_name(case: Case, copy: Copy, name: str | None) -> str | None:
    return name if not name else _scoped(copy, case, name)


def _claim_spec(case: Case, copy: Copy, claim: GenClaim) -> Obj:
    spec: Obj = {"accessModes": list(claim.modes), "resources": {"requests": {"storage": f"{claim.gib}Gi"}}}
    if claim.storage_class is not None:
        spec["storageClassName"] = _class_name(case, copy, claim.storage_class)
    if claim.volume:
        spec["volumeName"] = _scoped(copy, case, claim.volume)
    if claim.selector:
        spec["selector"] = {"matchLabels": {STORAGE_LABEL: claim.selector}}
    if claim.block:
        spec["volumeMode"] = "Block"
    return spec


def _pv_object(case: Case, copy: Copy, pv: GenPV, labels: dict[str, str]) -> Obj:
    name = _scoped(copy, case, pv.name)
    spec: Obj = {"capacity": {"storage": f"{pv.gib}Gi"}, "accessModes": list(pv.modes),
                 "persistentVolumeReclaimPolicy": "Retain", "storageClassName": _class_name(case, copy, pv.storage_class)}
    handle = f"{name}-h"
    spec.update({
        "local": {"local": {"path": f"/mnt/{pv.name}"}},
        "hostPath": {"hostPath": {"path": f"/mnt/{pv.name}"}},
        "plain": {"csi": {"driver": PLAIN_DRIVER, "volumeHandle": handle}},
        "capacity": {"csi": {"driver": CAPACITY_DRIVER, "volumeHandle": handle}},
        "gce-pd": {"gcePersistentDisk": {"pdName": handle}},
        "aws-ebs": {"awsElasticBlockStore": {"volumeID": f"vol-{handle}"}},
    }[pv.source])
    terms: list[Obj] = []
    if pv.nodes:
        names = [copy.node_name(case.index, n) for n in pv.nodes]
        terms.append({"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": names}]})
    if pv.zones:
        terms.append({"matchExpressions": [{"key": ZONE, "operator": "In", "values": list(pv.zones)}]})
    if pv.malformed:
        terms.append({"matchExpressions": [{"key": "rank", "operator": "Gt", "values": ["high"]}]})
    if terms:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": terms}}
    if pv.claim is not None:
        spec["claimRef"] = {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": copy.namespace,
                            "name": claim_name(case, copy, pv.claim)}  # fmt: skip
    if pv.block:
        spec["volumeMode"] = "Block"
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name, "labels": {**labels, **pv.labels}},
            "spec": spec}


def render_storage(case: Case, copy: Copy, *, labels: dict[str, str]) -> list[tuple[str, Obj]]:
    """(path, object) of the case's storage objects in one copy, in the order to create them: classes and
    capacities, PVs, claims (not the ephemeral volumes' ones), CSINodes, VolumeAttachments; all with `labels`."""
    storage = case.storage
    if storage is None:
        return []
    namespaced = f"/namespaces/{copy.namespace}"
    out: list[tuple[str, Obj]] = []
    for c in storage.classes:
        body: Obj = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                     "metadata": {"name": _scoped(copy, case, c.name), "labels": labels},
                     "provisioner": c.provisioner, "volumeBindingMode": c.mode}  # fmt: skip
        if c.zones:
            body["allowedTopologies"] = [{"matchLabelExpressions": [{"key": ZONE, "values": list(c.zones)}]}]
        out.append(("/apis/storage.k8s.io/v1/storageclasses", body))
        for zone, (gib, maximum) in c.capacity.items():
            capacity: Obj = {"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
                             "metadata": {"name": _scoped(copy, case, f"{c.name}-{zone}"), "labels": labels},
                             "storageClassName": _scoped(copy, case, c.name), "capacity": f"{gib}Gi",
                             "nodeTopology": {"matchLabels": {ZONE: zone}}}  # fmt: skip
            if maximum is not None:
                capacity["maximumVolumeSize"] = f"{maximum}Gi"
            out.append((f"/apis/storage.k8s.io/v1{namespaced}/csistoragecapacities", capacity))
    out += [("/api/v1/persistentvolumes", _pv_object(case, copy, pv, labels)) for pv in storage.pvs]
    for claim in storage.claims:
        meta: Obj = {"name": claim_name(case, copy, claim.name), "labels": labels}
        if claim.state == "lost":
            meta["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
        if claim.state == "deleting":
            meta["finalizers"] = [HOLD_FINALIZER]
        out.append((f"/api/v1{namespaced}/persistentvolumeclaims",
                    {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta,
                     "spec": _claim_spec(case, copy, claim)}))  # fmt: skip
    for node, (limits, migrated) in storage.csi_nodes.items():
        name = copy.node_name(case.index, node)
        drivers = [{"name": d, "nodeID": name, **({"allocatable": {"count": n}} if n is not None else {})}
                   for d, n in limits.items()]  # fmt: skip
        meta = {"name": name, "labels": labels}
        if migrated:
            meta["annotations"] = {"storage.alpha.kubernetes.io/migrated-plugins": ",".join(migrated)}
        out.append(("/apis/storage.k8s.io/v1/csinodes",
                    {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": meta,
                     "spec": {"drivers": drivers}}))  # fmt: skip
    drivers = {pv.name: {"plain": PLAIN_DRIVER, "capacity": CAPACITY_DRIVER}[pv.source] for pv in storage.pvs
               if pv.source in ("plain", "capacity")}  # fmt: skip
    for i, (node, pv_name) in enumerate(storage.attachments):
        out.append(("/apis/storage.k8s.io/v1/volumeattachments",
                    {"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                     "metadata": {"name": _scoped(copy, case, f"va{i}"), "labels": labels},
                     "spec": {"attacher": drivers[pv_name], "nodeName": copy.node_name(case.index, node),
                              "source": {"persistentVolumeName": _scoped(copy, case, pv_name)}}}))  # fmt: skip
    return out


def deleting_claims(case: Case, copy: Copy) -> list[str]:
    """Paths of the claims to delete before the pods come (held by a finalizer: "being deleted")."""
    if case.storage is None:
        return []
    return [f"/api/v1/namespaces/{copy.namespace}/persistentvolumeclaims/{claim_name(case, copy, c.name)}"
            for c in case.storage.claims if c.state == "deleting"]  # fmt: skip


def awaited_claims(case: Case, copy: Copy) -> dict[str, str]:
    """claim name -> the phase the PV controller must have given it before the pods come."""
    if case.storage is None:
        return {}
    return {claim_name(case, copy, c.name): {"bound": "Bound", "lost": "Lost"}[c.state]
            for c in case.storage.claims if c.state in ("bound", "lost")}  # fmt: skip


def render_volumes(case: Case, pod: GenPod, copy: Copy) -> list[Obj]:
    out: list[Obj] = []
    for i, volume in enumerate(pod.volumes):
        name = f"v{i}"
        if volume.kind == "claim":
            out.append({"name": name, "persistentVolumeClaim": {"claimName": claim_name(case, copy, volume.ref)}})
        elif volume.kind == "ephemeral":
            assert volume.template is not None
            spec = _claim_spec(case, copy, volume.template)
            out.append({"name": name, "ephemeral": {"volumeClaimTemplate": {"spec": spec}}})
        elif volume.kind == "gce-pd":
            out.append({"name": name, "gcePersistentDisk": {"pdName": volume.ref, "readOnly": volume.read_only}})
        elif volume.kind == "aws-ebs":
            out.append({"name": name, "awsElasticBlockStore": {"volumeID": f"vol-{volume.ref}"}})
        elif volume.kind == "iscsi":
            out.append({"name": name, "iscsi": {"targetPortal": "10.0.0.1:3260", "iqn": f"iqn.2026-01.test:{volume.ref}",
                                                "lun": 0, "readOnly": volume.read_only}})  # fmt: skip
        else:
            rbd: Obj = {"monitors": list(volume.monitors), "image": volume.ref, "readOnly": volume.read_only}
            if volume.pool:
                rbd["pool"] = volume.pool
            out.append({"name": name, "rbd": rbd})
    return out


def gated(pod: GenPod) -> bool:
    """A pod whose ephemeral claims the test creates for it (it needs the pod's uid) waits behind a gate."""
    return any(v.kind == "ephemeral" and v.template is not None and v.template.state == "created" for v in pod.volumes)


def ephemeral_claims(case: Case, pod: GenPod, copy: Copy, pod_obj: Obj, *,
                     labels: dict[str, str]) -> list[tuple[str, Obj]]:  # fmt: skip
    """The claims of the pod's generic ephemeral volumes, as the ephemeral volume controller makes them
    (`<pod>-<volume>`, controlled by the pod), or, "foreign", one the pod does not own; none when "absent".
    `pod_obj`: the pod as created (its uid), or as rendered for foreign claims only."""
    out: list[tuple[str, Obj]] = []
    for i, volume in enumerate(pod.volumes):
        if volume.kind != "ephemeral" or volume.template is None or volume.template.state == "absent":
            continue
        meta: Obj = {"name": f"{pod_obj['metadata']['name']}-v{i}", "labels": labels}
        if volume.template.state == "created":
            meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": pod_obj["metadata"]["name"],
                                        "uid": pod_obj["metadata"]["uid"], "controller": True}]  # fmt: skip
        out.append((f"/api/v1/namespaces/{copy.namespace}/persistentvolumeclaims",
                    {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta,
                     "spec": _claim_spec(case, copy, volume.template)}))  # fmt: skip
    return out
