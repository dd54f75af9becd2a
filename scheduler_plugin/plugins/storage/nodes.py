"""Which candidate nodes a storage object allows, over the snapshot's label columns (vectorised like
NodeAffinity): a PV's node affinity, a StorageClass's allowedTopologies, a CSIStorageCapacity's topology."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from common.api.scheduling import LabelSelector, Requirement
from common.api.storage import StorageClass, VolumeAffinity
from scheduler_plugin.framework.snapshot import BoolArray, IndexArray, Snapshot
from scheduler_plugin.plugins.nodeaffinity import requirement_mask


def expressions_mask(snapshot: Snapshot, rows: IndexArray, requirements: Sequence[Requirement]) -> BoolArray:
    mask = np.ones(rows.size, np.bool_)
    for req in requirements:
        mask &= requirement_mask(snapshot, rows, req)
    return mask


def affinity_mask(snapshot: Snapshot, rows: IndexArray, affinity: VolumeAffinity | None) -> BoolArray:
    """CheckNodeAffinity over the rows (None: no required affinity, every node)."""
    if affinity is None:
        return np.ones(rows.size, np.bool_)
    mask = np.zeros(rows.size, np.bool_)
    for term in affinity.terms:
        mask |= expressions_mask(snapshot, rows, term)
    return mask


class AffinityMasks:
    """`affinity_mask` per distinct affinity, for one set of rows (PVs on one node or zone share theirs).

    `positions` answers where an affinity holds as positions into the rows; for the common local PV (one term,
    one `In` requirement, e.g. kubernetes.io/hostname In [node]) from an index of the rows by that label's
    value, so each such PV costs a dictionary lookup rather than a pass over all rows."""

    def __init__(self, snapshot: Snapshot, rows: IndexArray) -> None:
        self.snapshot = snapshot
        self.rows = rows
        self._masks: dict[VolumeAffinity | None, BoolArray] = {}
        self._positions: dict[VolumeAffinity | None, IndexArray] = {}
        self._by_value: dict[str, dict[str, IndexArray]] = {}

    def of(self, affinity: VolumeAffinity | None) -> BoolArray:
        mask = self._masks.get(affinity)
        if mask is None:
            mask = self._masks[affinity] = affinity_mask(self.snapshot, self.rows, affinity)
        return mask

    def positions(self, affinity: VolumeAffinity | None) -> IndexArray:
        found = self._positions.get(affinity)
        if found is not None:
            return found
        if affinity is not None and len(affinity.terms) == 1 and len(affinity.terms[0]) == 1 \
                and affinity.terms[0][0].operator == "In":  # fmt: skip
            req = affinity.terms[0][0]
            by_value = self._index(req.key)
            if len(req.values) == 1:
                found = by_value.get(req.values[0], _NO_POSITIONS)
            else:
                parts = [by_value[v] for v in set(req.values) if v in by_value]
                found = np.sort(np.concatenate(parts)) if parts else _NO_POSITIONS
        else:
            found = np.flatnonzero(self.of(affinity))
        self._positions[affinity] = found
        return found

    def _index(self, key: str) -> dict[str, IndexArray]:
        """Positions of the rows by their value of label `key`."""
        found = self._by_value.get(key)
        if found is None:
            column = self.snapshot.label_column(key)
            codes = column.codes[self.rows]
            order = np.argsort(codes, kind="stable")
            ordered = codes[order]
            starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if ordered.size else ordered[:0]
            bounds = np.r_[starts, ordered.size]
            by_code = {int(ordered[a]): order[a:b] for a, b in itertools.pairwise(bounds.tolist())}
            found = {value: by_code[code] for value, code in column.vocab.items() if code in by_code}
            self._by_value[key] = found
        return found


_NO_POSITIONS: IndexArray = np.zeros(0, np.intp)


def topology_mask(snapshot: Snapshot, rows: IndexArray, storage_class: StorageClass) -> BoolArray:
    """MatchTopologySelectorTerms of the class's allowedTopologies over the rows."""
    if not storage_class.allowed_topologies:
        return np.ones(rows.size, np.bool_)
    mask = np.zeros(rows.size, np.bool_)
    for term in storage_class.allowed_topologies:
        if term:
            mask |= expressions_mask(snapshot, rows, [Requirement(key, "In", tuple(sorted(values)))
                                                      for key, values in term])  # fmt: skip
    return mask


def selector_mask(snapshot: Snapshot, rows: IndexArray, selector: LabelSelector) -> BoolArray:
    """A metav1.LabelSelector against the nodes' labels (the empty selector matches every node)."""
    requirements = [Requirement(key, "In", (value,)) for key, value in selector.match_labels]
    return expressions_mask(snapshot, rows, [*requirements, *selector.match_expressions])
