"""VolumeBinding's Filter for many nodes at once: kube-scheduler's FindPodVolumes (binder.go) per node.

For each candidate node:
* bound claims: the PV must exist (else "unavailable due to one or more pvc(s) bound to non-existent pv(s)")
  and its node affinity must match (else "didn't match PersistentVolume's node affinity"), translated to
  the CSI driver's topology where the node's CSINode says the PV's in-tree plugin migrated;
* unbound WaitForFirstConsumer claims: a claim another attempt already marked for provisioning on a
  node fits only that node; the others, smallest request first, each take the smallest available PV of
  their class that fits (size, access modes, volume mode, attributes class, selector, node affinity; a PV
  pre-bound to the claim is taken or nothing is); a claim without one must be provisioned by its class
  (a provisioner, the node in allowedTopologies, and CSIStorageCapacity room when the driver asks for it).
  Otherwise "didn't find available persistent volumes to bind" or "did not have enough free storage".

What the claims may take is prepared once per cycle (`UnboundClaims`); a Filter call is then one vectorised
pass per claim over its nodes, a local PV costing one lookup. What a feasible node would bind is kept for
Reserve and Score (`FilterPlan.volumes_at`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from common.api.csimigration import MIGRATION_ON
from common.api.storage import PersistentVolume, PersistentVolumeClaim, StorageCapacity, VolumeAffinity
from scheduler_plugin.framework.filterresult import FilterResult, Rejection
from scheduler_plugin.framework.snapshot import BoolArray, IndexArray, IntArray, Snapshot
from scheduler_plugin.framework.status import Code
from scheduler_plugin.plugins.storage import (
    CSIDrivers,
    CSINodes,
    PersistentVolumeClaims,
    PersistentVolumes,
    StorageCapacities,
    StorageClasses,
)
from scheduler_plugin.plugins.storage.nodes import AffinityMasks, selector_mask, topology_mask

BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"


@dataclass(frozen=True, slots=True)
class NodeVolumes:
    """What binding the pod on one node takes: PVs for claims (static) and claims to provision there."""

    static: tuple[tuple[PersistentVolumeClaim, PersistentVolume], ...] = ()
    provisions: tuple[tuple[PersistentVolumeClaim, StorageCapacity | None], ...] = ()


@dataclass(frozen=True, slots=True)
class Stores:
    pvs: PersistentVolumes
    claims: PersistentVolumeClaims
    classes: StorageClasses
    csi_nodes: CSINodes
    csi_drivers: CSIDrivers
    capacities: StorageCapacities


class FilterError(Exception):
    """kube-scheduler fails the whole cycle here (FindPodVolumes returned an error)."""


@dataclass(slots=True)
class _Pass:
    """One Filter call's candidate rows and the PV affinity masks over them."""

    snapshot: Snapshot
    rows: IndexArray
    masks: AffinityMasks


def migrated_rows(snapshot: Snapshot, rows: IndexArray, csi_nodes: CSINodes, plugin: str) -> BoolArray:
    """Rows whose CSINode lists `plugin` in its migrated-plugins annotation."""
    found = [
        info.index
        for node in csi_nodes.values()
        if plugin in node.migrated_plugins and (info := snapshot.node_by_name(node.name)) is not None
    ]
    return np.isin(rows, np.asarray(found, np.intp)) if found else np.zeros(rows.size, np.bool_)


def find_pod_volumes(
    snapshot: Snapshot, rows: IndexArray, bound: Sequence[PersistentVolumeClaim], unbound: UnboundClaims | None,
    stores: Stores,
) -> tuple[FilterResult, FilterPlan | None]:
    """The Filter's answer over `rows` and, when the pod has unbound claims, what each row would bind.
    Raises FilterError where kube-scheduler's FindPodVolumes errors."""
    run = _Pass(snapshot, rows, AffinityMasks(snapshot, rows))
    n = rows.size
    node_conflict = np.zeros(n, np.bool_)
    pv_missing = np.zeros(n, np.bool_)
    if bound:
        node_conflict, pv_missing = _check_bound(run, bound, stores)
    bind_conflict = np.zeros(n, np.bool_)
    no_space = np.zeros(n, np.bool_)
    plan = None
    if unbound is not None:
        bind_conflict, no_space, plan = _find_unbound(run, unbound, stores)
    reasons = ((NODE_CONFLICT, node_conflict), (BIND_CONFLICT, bind_conflict), (NOT_ENOUGH_SPACE, no_space),
               (PV_NOT_EXIST, pv_missing))  # fmt: skip
    rejections = [Rejection(reason, mask, Code.UNSCHEDULABLE_AND_UNRESOLVABLE) for reason, mask in reasons]
    result = FilterResult.from_rejections(n, rejections)
    if plan is not None:
        plan.feasible = np.ones(n, np.bool_) if result.feasible is None else result.feasible
    return result, plan


# --------------------------------------------------------------------------- bound claims
def pv_node_mask(run: _Pass, pv: PersistentVolume, csi_nodes: CSINodes, undecided: BoolArray) -> BoolArray:
    """Where the PV's node affinity holds (translated on nodes whose CSINode migrated its plugin). A PV that
    cannot be translated fails the Filter (binder.go tryTranslatePVToCSI) if a node still `undecided` migrated
    its plugin: kube-scheduler's checkBoundClaims stops at a node's first mismatching claim."""
    plain = run.masks.of(pv.node_affinity)
    if pv.in_tree is None or pv.in_tree.plugin.name not in MIGRATION_ON:
        return plain
    migrated = migrated_rows(run.snapshot, run.rows, csi_nodes, pv.in_tree.plugin.name)
    if not migrated.any():
        return plain
    if pv.migration_problem is not None:
        if (migrated & undecided).any():
            raise FilterError(f"could not translate pv: {pv.migration_problem}")
        return plain  # (only nodes an earlier claim already rejected migrated it)
    return np.where(migrated, run.masks.of(pv.migrated_affinity), plain)


def _check_bound(run: _Pass, bound: Sequence[PersistentVolumeClaim], stores: Stores) -> tuple[BoolArray, BoolArray]:
    """checkBoundClaims: per node the first claim whose PV is missing or does not match decides."""
    n = run.rows.size
    decided = np.zeros(n, np.bool_)
    conflict = np.zeros(n, np.bool_)
    for claim in bound:
        pv = stores.pvs.get(claim.volume_name)
        if pv is None:
            return conflict, ~decided  # a missing PV is the answer wherever nothing decided before
        mismatch = ~pv_node_mask(run, pv, stores.csi_nodes, ~decided) & ~decided
        conflict |= mismatch
        decided |= mismatch
    return conflict, np.zeros(n, np.bool_)


# --------------------------------------------------------------------------- unbound claims
@dataclass(slots=True)
class Candidates:
    """The PVs one unbound claim may take on some node (FindMatchingVolume's checks that do not depend on the
    node), in the class's order (smallest first), as ids into `UnboundClaims.pvs`."""

    claim: PersistentVolumeClaim
    prebound: list[int]  # PVs pre-bound to the claim (claimRef): such a PV is the answer or nothing is
    others: IntArray
    # Per distinct node affinity, the first PVs (by order in `others`) that can be a node's answer: with k
    # earlier claims of the pod, only the first k+1 of a group can be (each earlier claim takes at most one).
    groups: list[tuple[VolumeAffinity | None, list[int]]]


@dataclass(slots=True)
class UnboundClaims:
    """A pod's unbound WaitForFirstConsumer claims, prepared once per cycle (PreFilter)."""

    selected: tuple[PersistentVolumeClaim, ...]  # marked for provisioning on a node by an earlier attempt
    to_match: list[Candidates]  # the others, smallest request first
    pvs: list[PersistentVolume]

    @classmethod
    def of(cls, delayed: Sequence[PersistentVolumeClaim],
           pvs_by_class: Mapping[str, Sequence[PersistentVolume]]) -> UnboundClaims:  # fmt: skip
        out = cls(tuple(c for c in delayed if c.selected_node is not None), [], [])
        ids: dict[str, int] = {}

        def id_of(pv: PersistentVolume) -> int:
            found = ids.get(pv.name)
            if found is None:
                found = ids[pv.name] = len(out.pvs)
                out.pvs.append(pv)
            return found

        # sort.Sort by request; stable for the few claims a pod has (Go sorts fewer than 12 by insertion)
        for depth, claim in enumerate(sorted((c for c in delayed if c.selected_node is None), key=lambda c: c.size)):
            if claim.selector_problem is not None:
                raise FilterError(claim.selector_problem)
            prebound, others = _eligible(claim, pvs_by_class.get(claim.storage_class, ()))
            groups: dict[VolumeAffinity | None, list[int]] = {}
            for order, pv in enumerate(others):
                members = groups.setdefault(pv.node_affinity, [])
                if len(members) <= depth:
                    members.append(order)
            out.to_match.append(Candidates(
                claim, [id_of(pv) for pv in prebound],
                np.fromiter((id_of(pv) for pv in others), np.int64, len(others)), list(groups.items()),
            ))  # fmt: skip
        return out


@dataclass(slots=True)
class FilterPlan:
    """What one Filter call found for its rows: per claim to match the PV id taken per row (-1: none), and per
    claim to provision where it is provisioned (with the CSIStorageCapacity that has room, if any)."""

    rows: IndexArray
    feasible: BoolArray
    unbound: UnboundClaims
    taken: list[IntArray]
    provisions: list[tuple[PersistentVolumeClaim, BoolArray, list[StorageCapacity | None]]]
    _positions: dict[int, int] | None = None

    def volumes_at(self, row: int) -> NodeVolumes | None:
        """What binding on node `row` takes; None when this call did not find the row feasible."""
        if self._positions is None:
            self._positions = {r: i for i, r in enumerate(self.rows.tolist())}
        pos = self._positions.get(row)
        if pos is None or not self.feasible[pos]:
            return None
        static = tuple((candidates.claim, self.unbound.pvs[int(taken[pos])])
                       for candidates, taken in zip(self.unbound.to_match, self.taken, strict=True)
                       if taken[pos] >= 0)  # fmt: skip
        provisions = tuple((claim, capacities[pos] if capacities else None)
                           for claim, needed, capacities in self.provisions if needed[pos])  # fmt: skip
        return NodeVolumes(static, provisions)


def _eligible(
    claim: PersistentVolumeClaim, pvs: Sequence[PersistentVolume]
) -> tuple[list[PersistentVolume], list[PersistentVolume]]:
    """FindMatchingVolume's node-independent checks: (PVs pre-bound to the claim, other candidates), each in
    the class's order (smallest first)."""
    prebound: list[PersistentVolume] = []
    others: list[PersistentVolume] = []
    size = claim.size.nanos
    for pv in pvs:
        is_prebound = pv.claim_ref is not None and pv.bound_to(claim.namespace, claim.name, claim.uid)
        if pv.claim_ref is not None and not is_prebound:
            continue
        if pv.capacity.nanos < size or pv.volume_mode != claim.volume_mode:
            continue
        if pv.attributes_class != claim.attributes_class or pv.deleting:
            continue
        if is_prebound:
            prebound.append(pv)
            continue
        if pv.phase != "Available":
            continue
        if claim.selector is not None and not claim.selector.matches(pv.labels):
            continue
        if not claim.access_modes <= pv.access_modes:
            continue
        others.append(pv)
    return prebound, others


def _match(run: _Pass, candidates: Candidates, pvs: Sequence[PersistentVolume], earlier: list[IntArray]) -> IntArray:
    """Per row the id of the PV the claim takes there, -1 for none: a PV pre-bound to the claim decides where
    it is considered (taken where its affinity holds, nothing elsewhere); elsewhere each row takes the first
    (smallest) other PV whose node affinity holds there and that no earlier claim of the pod took there."""
    n = run.rows.size
    taken = np.full(n, -1, np.int64)
    open_rows = np.ones(n, np.bool_)
    for pv_id in candidates.prebound:
        free = open_rows.copy()
        for before in earlier:  # a PV an earlier claim of the pod took on a node is not there any more
            free &= before != pv_id
        taken[free & run.masks.of(pvs[pv_id].node_affinity)] = pv_id
        open_rows &= ~free
    if not candidates.groups or not open_rows.any():
        return taken
    position_parts: list[IntArray] = []
    member_orders: list[int] = []
    for affinity, members in candidates.groups:
        positions = run.masks.positions(affinity)
        for order in members:
            position_parts.append(positions)
            member_orders.append(order)
    sizes = np.fromiter((p.size for p in position_parts), np.int64, len(position_parts))
    positions = np.concatenate(position_parts)
    orders = np.repeat(np.asarray(member_orders, np.int64), sizes)
    ids = candidates.others
    keep = open_rows[positions]
    for before in earlier:
        keep &= before[positions] != ids[orders]
    best = np.full(n, ids.size, np.int64)
    np.minimum.at(best, positions[keep], orders[keep])
    found = best < ids.size
    taken[found] = ids[best[found]]
    return taken


def _find_unbound(run: _Pass, unbound: UnboundClaims, stores: Stores) -> tuple[BoolArray, BoolArray, FilterPlan]:
    n = run.rows.size
    bind_conflict = np.zeros(n, np.bool_)
    no_space = np.zeros(n, np.bool_)
    active = np.ones(n, np.bool_)
    names = [run.snapshot.node_name(r) for r in run.rows.tolist()] if unbound.selected else []
    for claim in unbound.selected:  # marked for provisioning on another node: the fast path out
        wrong = np.fromiter((name != claim.selected_node for name in names), np.bool_, n)
        bind_conflict |= wrong & active
        active &= ~wrong
    taken: list[IntArray] = []
    for candidates in unbound.to_match:
        taken.append(_match(run, candidates, unbound.pvs, taken))
    # Claims to provision, per node in kube-scheduler's order: the marked ones, then those without a PV there.
    order = [(c, np.ones(n, np.bool_)) for c in unbound.selected]
    order += [(c.claim, t < 0) for c, t in zip(unbound.to_match, taken, strict=True)]
    provisions: list[tuple[PersistentVolumeClaim, BoolArray, list[StorageCapacity | None]]] = []
    for claim, wanted in order:
        needed = wanted & active
        if not needed.any():
            provisions.append((claim, needed, []))
            continue
        ok, short, capacities = _provisionable(run, claim, needed, stores)
        bind_conflict |= needed & ~ok
        no_space |= needed & ok & short
        active &= ~(needed & (~ok | short))
        provisions.append((claim, needed, capacities))
    return bind_conflict, no_space, FilterPlan(run.rows, active, unbound, taken, provisions)


def _provisionable(
    run: _Pass, claim: PersistentVolumeClaim, needed: BoolArray, stores: Stores
) -> tuple[BoolArray, BoolArray, list[StorageCapacity | None]]:
    """checkVolumeProvisions for one claim: (the class can provision it there, short of storage there, the
    CSIStorageCapacity that has room per row)."""
    n = run.rows.size
    none: list[StorageCapacity | None] = [None] * n
    if not claim.storage_class:
        raise FilterError(f'no class for claim "{claim.key}"')
    storage_class = stores.classes.get(claim.storage_class)
    if storage_class is None:
        raise FilterError(f'failed to find storage class "{claim.storage_class}"')
    if not storage_class.provisions:
        return np.zeros(n, np.bool_), np.zeros(n, np.bool_), none
    ok = topology_mask(run.snapshot, run.rows, storage_class)
    if claim.request is None:
        return ok, np.zeros(n, np.bool_), none
    driver = stores.csi_drivers.get(storage_class.provisioner)
    if driver is None or not driver.storage_capacity:
        return ok, np.zeros(n, np.bool_), none
    # The first capacity object of the class with room for the claim that the node can reach (hasEnoughCapacity).
    found: list[StorageCapacity | None] = [None] * n
    has_room = np.zeros(n, np.bool_)
    for capacity in sorted(stores.capacities.values(), key=lambda c: c.key):
        if capacity.storage_class != storage_class.name or capacity.limit is None or capacity.limit < claim.size:
            continue
        if capacity.node_topology is None:
            continue
        reach = selector_mask(run.snapshot, run.rows, capacity.node_topology) & ~has_room & needed
        for pos in np.flatnonzero(reach).tolist():
            found[pos] = capacity
        has_room |= reach
    return ok, ok & ~has_room, found
