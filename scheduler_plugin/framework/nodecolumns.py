"""The node side of the scheduler's snapshot: one column per node in numpy arrays.

Layout: resource-major. `allocatable[r, i]` is resource r of node row i, so a plugin
reads one resource for its candidates as a contiguous 1-D `take`, and reductions over
resources are element-wise (numpy is slow at reducing a 2-wide axis). Node i owns
column i of every array (a "row" of the cluster); rows of removed nodes are marked
invalid and reused. Resources are append-only (cpu, memory, pods, ephemeral-storage
first, then extended resources as they appear), so a vector built for fewer resources
stays a valid prefix. Labels, taints and annotations stay Python per node; label
columns are materialised lazily per key for vectorised selector matching. What pods
take of each node (`requested`) is kept here and accounted by `snapshot.Snapshot`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from common.api import constants as c
from common.api.malformed import MalformedObjectError, MalformedReason
from common.api.nodedigest import digest_node
from common.api.scheduling import HostPort, Taint, parse_int64
from scheduler_plugin.framework.images import ImageTable, parse_node_images
from scheduler_plugin.framework.podinfo import PodInfo

FIXED_RESOURCES = (c.RESOURCE_CPU, c.RESOURCE_MEMORY, c.RESOURCE_PODS, "ephemeral-storage")
CPU, MEMORY, PODS = 0, 1, 2
# Distinct resource names tracked as columns: each is 16 bytes of every node row and one more check of Fit per pod,
# and pods may name any (64 each, MAX_POD_RESOURCE_NAMES); real clusters use tens (cpu, memory, hugepages, batch/mid,
# a few device plugins). Past it, every new name shares the UNTRACKED column, which no node offers (allocatable 0):
# a pending pod requesting such a name fits no node, the safe direction, and a node's own name past it is not offered.
MAX_RESOURCE_COLUMNS: Final = 256
# Of those, columns a pod (or gang) may add for names no node offered yet: tenants writing made-up names fill these
# and then share UNTRACKED, while the rest stay for what nodes offer (a device plugin installed later still gets its
# column; before this split, made-up names could take every column until a restart).
MAX_POD_RESOURCE_COLUMNS: Final = 128
UNTRACKED: Final = "loadline.io/untracked-resources"

IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]
IndexArray = NDArray[np.intp]

_snapshot_ids = itertools.count(1)


class NodeInfo:
    """The Python side of one node row."""

    __slots__ = (
        "allocatable",
        "annotations",
        "index",
        "labels",
        "name",
        "part_problem",
        "pods",
        "raw",
        "raw_allocatable",
        "taint_set_id",
        "taints",
        "unschedulable",
    )

    def __init__(self, index: int, name: str) -> None:
        self.index = index
        self.name = name
        self.labels: dict[str, str] = {}
        self.annotations: dict[str, str] = {}
        self.taints: tuple[Taint, ...] = ()
        self.unschedulable = False
        self.allocatable: dict[str, int] = {}
        self.raw_allocatable: dict[str, int] | None = None  # node.koordinator.sh/raw-allocatable (nodedigest.py)
        self.raw: Mapping[str, Any] = {}
        self.part_problem: MalformedObjectError | None = None  # the digest's, or resources past the column bound
        self.pods: dict[str, PodRecord] = {}  # pods accounted on this node (bound or assumed)
        self.taint_set_id = 0

    def __repr__(self) -> str:
        return f"NodeInfo({self.name}@{self.index})"


@dataclass(slots=True, eq=False)
class PodRecord:
    """A pod accounted on a node: what it added to the node's row, and since when."""

    pod: PodInfo
    node_index: int
    assumed: bool
    assigned_at: float
    vector: IntArray
    nonzero: tuple[int, int]
    host_ports: tuple[HostPort, ...] = ()


@dataclass(slots=True)
class LabelColumn:
    """One label key across all node rows: integer codes (-1 = label absent) and their vocabulary."""

    codes: NDArray[np.int32]
    vocab: dict[str, int]
    numbers: IntArray  # the value parsed as an integer (for Gt/Lt)
    is_number: BoolArray


class NodeColumns:
    """The nodes as rows of numpy columns; `snapshot.Snapshot` adds the pods accounted on them."""

    def __init__(self, initial_capacity: int = 64) -> None:
        self.uid = next(_snapshot_ids)
        self.resource_names: list[str] = list(FIXED_RESOURCES)
        self._resource_pos: dict[str, int] = {n: i for i, n in enumerate(self.resource_names)}
        self._pod_columns = 0  # columns added for names no node offered then (bounded by MAX_POD_RESOURCE_COLUMNS)
        cap = max(initial_capacity, 1)
        r = len(self.resource_names)
        self._allocatable = np.zeros((r, cap), np.int64)
        self._requested = np.zeros((r, cap), np.int64)
        self._nonzero = np.zeros((2, cap), np.int64)  # (milli-cpu, memory) with scoring defaults
        self._valid = np.zeros(cap, np.bool_)
        self._unschedulable = np.zeros(cap, np.bool_)
        self._generation = np.zeros(cap, np.int64)
        self._taint_set_ids = np.zeros(cap, np.int32)
        self._slots = 0  # rows ever used (high-water mark)
        self._free_rows: list[int] = []
        self._nodes: list[NodeInfo | None] = []
        self._node_by_name: dict[str, NodeInfo] = {}
        self._gen_counter = 0
        self.taint_sets: list[tuple[Taint, ...]] = [()]
        self._taint_set_pos: dict[tuple[Taint, ...], int] = {(): 0}
        self._label_columns: dict[str, LabelColumn] = {}
        self._label_key_nodes: dict[str, int] = {}  # label key -> how many nodes carry it
        self._node_indices: IndexArray | None = None
        self.images = ImageTable()  # status.images of every node (ImageLocality)

    # ------------------------------------------------------------------ array views
    @property
    def num_slots(self) -> int:
        return self._slots

    @property
    def num_nodes(self) -> int:
        return len(self._node_by_name)

    @property
    def allocatable(self) -> IntArray:
        """(resources, rows): status.allocatable."""
        return self._allocatable[:, : self._slots]

    @property
    def requested(self) -> IntArray:
        """(resources, rows): sum of requests of the pods bound or assumed on the node; `pods` counts them."""
        return self._requested[:, : self._slots]

    @property
    def nonzero_requested(self) -> IntArray:
        """(2, rows): milli-cpu and memory requests with kube-scheduler's 100m/200Mi for request-less containers."""
        return self._nonzero[:, : self._slots]

    @property
    def unschedulable(self) -> BoolArray:
        return self._unschedulable[: self._slots]

    @property
    def generation(self) -> IntArray:
        """Bumped whenever anything about a row changes (node, its pods, its NodeMetric)."""
        return self._generation[: self._slots]

    @property
    def taint_set_ids(self) -> NDArray[np.int32]:
        return self._taint_set_ids[: self._slots]

    def node_indices(self) -> IndexArray:
        """Rows of the nodes that exist, ascending."""
        if self._node_indices is None:
            self._node_indices = np.flatnonzero(self._valid[: self._slots]).astype(np.intp)
        return self._node_indices

    def node(self, index: int) -> NodeInfo:
        info = self._nodes[index]
        if info is None:
            raise KeyError(f"no node at row {index}")
        return info

    def node_by_name(self, name: str) -> NodeInfo | None:
        return self._node_by_name.get(name)

    def node_name(self, index: int) -> str:
        return self.node(int(index)).name

    # ------------------------------------------------------------------ resources
    def resource_column(self, name: str, *, offered: bool = False) -> int:
        """Column of a resource, adding one (zeros everywhere) if it is new; UNTRACKED's past MAX_RESOURCE_COLUMNS,
        or past MAX_POD_RESOURCE_COLUMNS added for names no node offered (`offered`: a node offers `name`)."""
        pos = self._resource_pos.get(name)
        if pos is None:
            full = len(self.resource_names) >= MAX_RESOURCE_COLUMNS - (UNTRACKED not in self._resource_pos)
            if name != UNTRACKED and (full or (not offered and self._pod_columns >= MAX_POD_RESOURCE_COLUMNS)):
                return self.resource_column(UNTRACKED)
            pos = len(self.resource_names)
            self.resource_names.append(name)
            self._resource_pos[name] = pos
            self._pod_columns += not offered and name != UNTRACKED
            self._allocatable = _add_column(self._allocatable)
            self._requested = _add_column(self._requested)
        return pos

    def has_resource(self, name: str) -> bool:
        return name in self._resource_pos

    def untracked(self, names: Iterable[str], *, offered: bool = False) -> list[str]:
        """Those of `names` that have no column of their own (past the bounds), adding the others."""
        out = []
        for name in names:
            self.resource_column(name, offered=offered)
            if name not in self._resource_pos:
                out.append(name)
        return out

    def vector(self, amounts: Mapping[str, int]) -> IntArray:
        """A resource dict as a row vector in this snapshot's columns (adding columns as needed; names past the
        bound add up in UNTRACKED's)."""
        columns = [(self.resource_column(name), amount) for name, amount in amounts.items()]
        vec = np.zeros(len(self.resource_names), np.int64)
        for j, amount in columns:
            vec[j] += amount
        return vec

    # ------------------------------------------------------------------ nodes
    def _upsert_node_row(self, obj: Mapping[str, Any]) -> tuple[NodeInfo, bool]:
        """Add or update a node's row from its JSON, and whether it is new. Raises MalformedObjectError
        (the node is then left as it was)."""
        digest = digest_node(obj)
        if digest.problem is not None:
            # The scheduler's policy for a malformed node: it keeps its last readable version (a new node is
            # not added); the caller counts it.
            raise digest.problem
        name, labels, taints, allocatable = digest.name, digest.labels, digest.taints, digest.allocatable
        info = self._node_by_name.get(name)
        raw_images = (obj.get("status") or {}).get("images")
        # Parsed only when they changed: a node's status updates (conditions, heartbeats) rarely touch them.
        images = None if info is not None and raw_images == _images_of(info.raw) else parse_node_images(raw_images)
        untracked = self.untracked(allocatable, offered=True)

        info = self._node_by_name.get(name)
        is_new = info is None
        if info is None:
            info = NodeInfo(self._allocate_row(), name)
            self._node_by_name[name] = info
            self._nodes[info.index] = info
            self._node_indices = None
        i = info.index
        labels_changed = is_new or labels != info.labels
        if labels_changed:
            self._count_label_keys(info.labels if not is_new else {}, -1)
            self._count_label_keys(labels, 1)
        info.labels = labels
        info.annotations = digest.annotations
        info.taints = taints
        info.unschedulable = digest.unschedulable
        info.allocatable = allocatable
        info.raw_allocatable = digest.raw_allocatable
        info.part_problem = digest.part_problem or untracked_problem("Node", name, untracked, "not offered")
        info.raw = obj
        info.taint_set_id = self._intern_taints(taints)
        self._valid[i] = True
        self._unschedulable[i] = info.unschedulable
        self._taint_set_ids[i] = info.taint_set_id
        self._allocatable[:, i] = 0
        for resource, amount in allocatable.items():
            if resource not in untracked:
                self._allocatable[self._resource_pos[resource], i] = amount
        if images is not None:
            self.images.set_row(i, images)
        if labels_changed:
            for key, column in self._label_columns.items():
                _set_label_cell(column, i, labels.get(key))
        self._touch(i)
        return info, is_new

    def _remove_node_row(self, name: str) -> None:
        info = self._node_by_name.pop(name, None)
        if info is None:
            return
        i = info.index
        self._count_label_keys(info.labels, -1)
        self._nodes[i] = None
        self._valid[i] = False
        self._allocatable[:, i] = 0
        self._requested[:, i] = 0
        self._nonzero[:, i] = 0
        self.images.set_row(i, {})
        for column in self._label_columns.values():
            _set_label_cell(column, i, None)
        self._free_rows.append(i)
        self._node_indices = None
        self._touch(i)

    def _allocate_row(self) -> int:
        if self._free_rows:
            return self._free_rows.pop()
        i = self._slots
        if i >= len(self._valid):
            self._grow_rows(max(2 * len(self._valid), 16))
        self._slots += 1
        self._nodes.append(None)
        for column in self._label_columns.values():
            _extend_label_column(column, self._slots)
        return i

    def _grow_rows(self, capacity: int) -> None:
        def grow(arr: NDArray[Any], fill: Any = 0) -> NDArray[Any]:
            out = np.full((*arr.shape[:-1], capacity), fill, arr.dtype)
            out[..., : arr.shape[-1]] = arr
            return out

        self._allocatable = grow(self._allocatable)
        self._requested = grow(self._requested)
        self._nonzero = grow(self._nonzero)
        self._valid = grow(self._valid, False)
        self._unschedulable = grow(self._unschedulable, False)
        self._generation = grow(self._generation)
        self._taint_set_ids = grow(self._taint_set_ids)

    def _intern_taints(self, taints: tuple[Taint, ...]) -> int:
        pos = self._taint_set_pos.get(taints)
        if pos is None:
            pos = len(self.taint_sets)
            self.taint_sets.append(taints)
            self._taint_set_pos[taints] = pos
        return pos

    def _touch(self, i: int) -> None:
        self._gen_counter += 1
        self._generation[i] = self._gen_counter

    # ------------------------------------------------------------------ labels
    def _count_label_keys(self, labels: Mapping[str, str], sign: int) -> None:
        counts = self._label_key_nodes
        for key in labels:
            left = counts.get(key, 0) + sign
            if left:
                counts[key] = left
            else:
                counts.pop(key, None)

    def has_label_key(self, key: str) -> bool:
        """Whether any node carries the label (without materialising a column for a key no node has)."""
        return key in self._label_key_nodes

    def label_column(self, key: str) -> LabelColumn:
        column = self._label_columns.get(key)
        if column is None:
            n = len(self._valid)
            column = LabelColumn(np.full(n, -1, np.int32), {}, np.zeros(n, np.int64), np.zeros(n, np.bool_))
            for info in self._node_by_name.values():
                _set_label_cell(column, info.index, info.labels.get(key))
            self._label_columns[key] = column
        return column

    def touch_node(self, name: str) -> None:
        """Something a plugin derives per node changed (its NodeMetric): the row is dirty."""
        info = self._node_by_name.get(name)
        if info is not None:
            self._touch(info.index)


def untracked_problem(kind: str, key: str, names: list[str], consequence: str) -> MalformedObjectError | None:
    """The part problem of an object naming resources past the column bounds, or None."""
    if not names:
        return None
    shown = ", ".join(sorted(names)[:5]) + (", ..." if len(names) > 5 else "")
    return MalformedObjectError(
        f"{len(names)} resource names past the scheduler's bound ({shown}; {MAX_RESOURCE_COLUMNS} distinct names, "
        f"{MAX_POD_RESOURCE_COLUMNS} of them for names pods request and no node offers): {consequence}",
        kind=kind,
        name=key,
        field="status.allocatable" if kind == "Node" else "spec.containers[*].resources.requests",
        reason=MalformedReason.OUT_OF_RANGE,
    )


def _images_of(node: Mapping[str, Any]) -> Any:
    status = node.get("status")
    return status.get("images") if isinstance(status, Mapping) else None


def _add_column(arr: IntArray) -> IntArray:
    """One more resource: a new row of zeros (resource-major layout)."""
    return np.concatenate([arr, np.zeros((1, arr.shape[1]), arr.dtype)], axis=0)


def _set_label_cell(column: LabelColumn, i: int, value: str | None) -> None:
    if value is None:
        column.codes[i] = -1
        column.is_number[i] = False
        return
    code = column.vocab.setdefault(value, len(column.vocab))
    column.codes[i] = code
    number = parse_int64(value)
    column.numbers[i] = number if number is not None else 0
    column.is_number[i] = number is not None


def _extend_label_column(column: LabelColumn, rows: int) -> None:
    if len(column.codes) >= rows:
        return
    extra = max(rows, 2 * len(column.codes)) - len(column.codes)
    column.codes = np.concatenate([column.codes, np.full(extra, -1, np.int32)])
    column.numbers = np.concatenate([column.numbers, np.zeros(extra, np.int64)])
    column.is_number = np.concatenate([column.is_number, np.zeros(extra, np.bool_)])
