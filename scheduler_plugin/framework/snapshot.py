"""The scheduler's view of the cluster: nodes as numpy rows, pods, and the plugins' stores.

Fed from plain Kubernetes JSON (as list/watch deliver it) and updated incrementally, so
the same object serves as the scheduler cache and as the per-cycle snapshot: scheduling
is serial, and a pod placed in one cycle is visible ("assumed") to the next.

Layout: resource-major. `allocatable[r, i]` is resource r of node row i, so a plugin
reads one resource for its candidates as a contiguous 1-D `take`, and reductions over
resources are element-wise (numpy is slow at reducing a 2-wide axis). Node i owns
column i of every array (a "row" of the cluster); rows of removed nodes are marked
invalid and reused. Resources are append-only (cpu, memory, pods, ephemeral-storage
first, then extended resources as they appear), so a vector built for fewer resources
stays a valid prefix. Labels, taints and annotations stay Python per node; label
columns are materialised lazily per key for vectorised selector matching.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from common.api import constants as c
from common.api.malformed import MalformedObjectError
from common.api.pod import scalar
from common.api.quantity import Quantity, QuantityError
from common.api.scheduling import Taint, parse_taints, string_map
from scheduler_plugin.framework.disruption import DisruptionBudget
from scheduler_plugin.framework.podinfo import PodInfo, pod_key
from scheduler_plugin.framework.stores import ObjectStore

FIXED_RESOURCES = (c.RESOURCE_CPU, c.RESOURCE_MEMORY, c.RESOURCE_PODS, "ephemeral-storage")
CPU, MEMORY, PODS = 0, 1, 2

IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]
IndexArray = NDArray[np.intp]

StoreT = TypeVar("StoreT", bound=ObjectStore)

_snapshot_ids = itertools.count(1)
_INTEGER = re.compile(r"[+-]?[0-9]+")


class NodeInfo:
    """The Python side of one node row."""

    __slots__ = (
        "allocatable",
        "annotations",
        "index",
        "labels",
        "name",
        "pods",
        "raw",
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
        self.raw: Mapping[str, Any] = {}
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


@dataclass(slots=True)
class LabelColumn:
    """One label key across all node rows: integer codes (-1 = label absent) and their vocabulary."""

    codes: NDArray[np.int32]
    vocab: dict[str, int]
    numbers: IntArray  # the value parsed as an integer (for Gt/Lt)
    is_number: BoolArray


def parse_resource_list(value: Any, field: str) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise MalformedObjectError(f"{field}: expected an object")
    out = {}
    for name, raw in value.items():
        try:
            out[str(name)] = scalar(str(name), Quantity.parse(raw, field=f"{field}.{name}"))
        except QuantityError as exc:
            raise MalformedObjectError(str(exc)) from None
    return out


class Snapshot:
    def __init__(self, initial_capacity: int = 64) -> None:
        self.uid = next(_snapshot_ids)
        self.resource_names: list[str] = list(FIXED_RESOURCES)
        self._resource_pos: dict[str, int] = {n: i for i, n in enumerate(self.resource_names)}
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
        self._node_indices: IndexArray | None = None
        # pods
        self.pods: dict[str, PodInfo] = {}  # every known pod, pending or not
        self.records: dict[str, PodRecord] = {}  # pods accounted on a node
        self._orphans: dict[str, dict[str, PodInfo]] = {}  # node name -> pods bound to a node we have not seen
        self._pod_indexes: dict[str, tuple[Callable[[PodInfo], Hashable | None], dict[Hashable, set[str]]]] = {}
        self._stores: dict[Callable[[Snapshot], ObjectStore], ObjectStore] = {}
        # Objects of resources out-of-tree plugins watch (see `interfaces.WatchedResource`), as they came.
        self.custom_objects: dict[str, dict[str, Mapping[str, Any]]] = {}
        self.disruption_budgets: dict[str, DisruptionBudget] = {}  # namespace/name -> budget
        # Pending pods preemption made room for, and where (kube-scheduler's nominator): their
        # requests count as taken there for pods of lower priority until they are placed.
        self.nominations: dict[str, str] = {}
        # Preemption victims whose eviction was asked for, until their deletion shows up here.
        self.evicting: set[str] = set()

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_objects(
        cls,
        nodes: Iterable[Mapping[str, Any]] = (),
        pods: Iterable[Mapping[str, Any]] = (),
        stores: Mapping[Callable[[Snapshot], ObjectStore], Iterable[Mapping[str, Any]]] | None = None,
        disruption_budgets: Iterable[Mapping[str, Any]] = (),
    ) -> Snapshot:
        node_list = list(nodes)
        snap = cls(initial_capacity=max(len(node_list), 1))
        for node in node_list:
            snap.upsert_node(node)
        for factory, objects in (stores or {}).items():
            store = snap.store(factory)
            for obj in objects:
                store.upsert(obj)
        for budget in disruption_budgets:
            snap.upsert_disruption_budget(budget)
        for pod in pods:
            snap.upsert_pod(pod)
        return snap

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
    def resource_column(self, name: str) -> int:
        """Column of a resource, adding one (zeros everywhere) if it is new."""
        pos = self._resource_pos.get(name)
        if pos is None:
            pos = len(self.resource_names)
            self.resource_names.append(name)
            self._resource_pos[name] = pos
            self._allocatable = _add_column(self._allocatable)
            self._requested = _add_column(self._requested)
        return pos

    def has_resource(self, name: str) -> bool:
        return name in self._resource_pos

    def vector(self, amounts: Mapping[str, int]) -> IntArray:
        """A resource dict as a row vector in this snapshot's columns (adding columns as needed)."""
        for name in amounts:
            self.resource_column(name)
        vec = np.zeros(len(self.resource_names), np.int64)
        for name, amount in amounts.items():
            vec[self._resource_pos[name]] = amount
        return vec

    def pod_vector(self, pod: PodInfo) -> IntArray:
        """The pod's requests as a row vector, `pods` = 1 (every pod takes one pod slot)."""
        cached = pod.memo.get("snapshot_vector")
        if cached is not None and cached[0] == self.uid and len(cached[1]) == len(self.resource_names):
            vec: IntArray = cached[1]
            return vec
        vec = self.vector(pod.requests)
        vec[PODS] = 1
        pod.memo["snapshot_vector"] = (self.uid, vec)
        return vec

    # ------------------------------------------------------------------ nodes
    def upsert_node(self, obj: Mapping[str, Any]) -> NodeInfo:
        """Add or update a node from its JSON. Raises MalformedObjectError (the node is then left as it was)."""
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if not isinstance(name, str) or not name:
            raise MalformedObjectError("node metadata.name: required")
        labels = string_map(meta.get("labels"), "metadata.labels")
        annotations = string_map(meta.get("annotations"), "metadata.annotations")
        taints = parse_taints(spec.get("taints"))
        allocatable = parse_resource_list(status.get("allocatable"), "status.allocatable")
        for resource in allocatable:
            self.resource_column(resource)

        info = self._node_by_name.get(name)
        is_new = info is None
        if info is None:
            info = NodeInfo(self._allocate_row(), name)
            self._node_by_name[name] = info
            self._nodes[info.index] = info
            self._node_indices = None
        i = info.index
        labels_changed = is_new or labels != info.labels
        info.labels = labels
        info.annotations = annotations
        info.taints = taints
        info.unschedulable = bool(spec.get("unschedulable", False))
        info.allocatable = allocatable
        info.raw = obj
        info.taint_set_id = self._intern_taints(taints)
        self._valid[i] = True
        self._unschedulable[i] = info.unschedulable
        self._taint_set_ids[i] = info.taint_set_id
        self._allocatable[:, i] = 0
        for resource, amount in allocatable.items():
            self._allocatable[self._resource_pos[resource], i] = amount
        if labels_changed:
            for key, column in self._label_columns.items():
                _set_label_cell(column, i, labels.get(key))
        if is_new:
            for pod in self._orphans.pop(name, {}).values():
                self._account(pod, info, assumed=False, assigned_at=_assigned_time(pod, None))
        self._touch(i)
        return info

    def remove_node(self, name: str) -> None:
        info = self._node_by_name.pop(name, None)
        if info is None:
            return
        i = info.index
        for key, record in list(info.pods.items()):
            self._unaccount(key)
            if not record.assumed:
                self._orphans.setdefault(name, {})[key] = record.pod
        self._nodes[i] = None
        self._valid[i] = False
        self._allocatable[:, i] = 0
        self._requested[:, i] = 0
        self._nonzero[:, i] = 0
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
    def label_column(self, key: str) -> LabelColumn:
        column = self._label_columns.get(key)
        if column is None:
            n = len(self._valid)
            column = LabelColumn(np.full(n, -1, np.int32), {}, np.zeros(n, np.int64), np.zeros(n, np.bool_))
            for info in self._node_by_name.values():
                _set_label_cell(column, info.index, info.labels.get(key))
            self._label_columns[key] = column
        return column

    # ------------------------------------------------------------------ pods
    def upsert_pod(self, obj: Mapping[str, Any]) -> PodInfo:
        """Add or update a pod. A pod with spec.nodeName is accounted on that node (once it exists)."""
        pod = PodInfo.from_dict(obj)
        self._store_pod(pod)
        return pod

    def _store_pod(self, pod: PodInfo) -> None:
        key = pod.key
        old = self.pods.get(key)
        if old is not None:
            self._unindex(old)
        self.pods[key] = pod
        self._index(pod)
        if pod.node_name or pod.is_terminated or pod.deleting:
            self.nominations.pop(key, None)
        elif pod.nominated_node_name and (old is None or old.nominated_node_name != pod.nominated_node_name):
            self.nominations[key] = pod.nominated_node_name  # (set by another scheduler instance, or us earlier)
        record = self.records.get(key)
        target = pod.node_name if not pod.is_terminated else ""
        if record is not None:
            current = self.node(record.node_index).name
            if record.assumed and (not target or target == current):
                # The API server has not caught up with (or just confirmed) our assumption.
                record.pod = pod if target else record.pod
                record.assumed = not target
                return
            if target == current and pod.requests == record.pod.requests:
                record.pod = pod  # a status-only update of a bound pod: nothing to re-account
                self._touch(record.node_index)
                return
            self._unaccount(key)
        for orphans in self._orphans.values():
            orphans.pop(key, None)
        if target:
            info = self._node_by_name.get(target)
            if info is None:
                self._orphans.setdefault(target, {})[key] = pod
            else:
                self._account(pod, info, assumed=False, assigned_at=_assigned_time(pod, old))

    def remove_pod(self, key: str) -> None:
        self.nominations.pop(key, None)
        self.evicting.discard(key)
        pod = self.pods.pop(key, None)
        if pod is not None:
            self._unindex(pod)
        if key in self.records:
            self._unaccount(key)
        for orphans in self._orphans.values():
            orphans.pop(key, None)

    def upsert_pod_info(self, pod: PodInfo) -> None:
        """Add or update a pod that is already parsed (pending or bound, like `upsert_pod`)."""
        self._store_pod(pod)

    def assume_pod(self, pod: PodInfo, node_name: str, now: float) -> None:
        """Account a pod on a node before it is bound (kube-scheduler's AssumePod)."""
        info = self._node_by_name.get(node_name)
        if info is None:
            raise KeyError(f"node {node_name!r} not in snapshot")
        if pod.key in self.records:
            raise ValueError(f"pod {pod.key} is already assumed or bound")
        if pod.key not in self.pods:
            self.pods[pod.key] = pod
            self._index(pod)
        self.nominations.pop(pod.key, None)  # placed: it holds the node itself now
        self._account(pod, info, assumed=True, assigned_at=now)

    def nominate(self, key: str, node_name: str) -> None:
        """Record (or with "" clear) where preemption made room for a pending pod."""
        if node_name:
            self.nominations[key] = node_name
        else:
            self.nominations.pop(key, None)

    def nominated_pods(self, at_least_priority: int, *, excluding: str) -> tuple[IndexArray, list[PodInfo]]:
        """Nominated pods of at least that priority (not `excluding`) and the rows they are nominated to."""
        rows: list[int] = []
        pods: list[PodInfo] = []
        for key, node_name in self.nominations.items():
            pod = self.pods.get(key)
            info = self._node_by_name.get(node_name)
            if pod is None or info is None or key == excluding or pod.priority < at_least_priority:
                continue
            rows.append(info.index)
            pods.append(pod)
        return np.asarray(rows, np.intp), pods

    def forget_pod(self, key: str) -> None:
        """Undo an assumption (after Unreserve); a bound pod is left alone."""
        record = self.records.get(key)
        if record is not None and record.assumed:
            self._unaccount(key)

    def finish_binding(self, key: str) -> None:
        record = self.records.get(key)
        if record is not None:
            record.assumed = False

    def node_of(self, key: str) -> str | None:
        """Node a pod is accounted on (assumed or bound), or None."""
        record = self.records.get(key)
        return None if record is None else self.node(record.node_index).name

    def _account(self, pod: PodInfo, info: NodeInfo, assumed: bool, assigned_at: float) -> None:
        vec = self.pod_vector(pod)
        i = info.index
        self._requested[: len(vec), i] += vec
        nonzero = pod.nonzero_requests
        self._nonzero[0, i] += nonzero[0]
        self._nonzero[1, i] += nonzero[1]
        record = PodRecord(pod, i, assumed, assigned_at, vec, nonzero)
        self.records[pod.key] = record
        info.pods[pod.key] = record
        self._touch(i)

    def _unaccount(self, key: str) -> None:
        record = self.records.pop(key)
        i = record.node_index
        self._requested[: len(record.vector), i] -= record.vector
        self._nonzero[0, i] -= record.nonzero[0]
        self._nonzero[1, i] -= record.nonzero[1]
        info = self._nodes[i]
        if info is not None:
            info.pods.pop(key, None)
        self._touch(i)

    # ------------------------------------------------------------------ pod indexes
    def pod_index(self, name: str, key_of: Callable[[PodInfo], Hashable | None]) -> dict[Hashable, set[str]]:
        """An index of pod keys by `key_of(pod)`, built on first use and kept current afterwards."""
        entry = self._pod_indexes.get(name)
        if entry is None:
            index: dict[Hashable, set[str]] = {}
            for pod in self.pods.values():
                value = key_of(pod)
                if value is not None:
                    index.setdefault(value, set()).add(pod.key)
            entry = (key_of, index)
            self._pod_indexes[name] = entry
        return entry[1]

    def _index(self, pod: PodInfo) -> None:
        for key_of, index in self._pod_indexes.values():
            value = key_of(pod)
            if value is not None:
                index.setdefault(value, set()).add(pod.key)

    def _unindex(self, pod: PodInfo) -> None:
        for key_of, index in self._pod_indexes.values():
            value = key_of(pod)
            if value is not None and value in index:
                index[value].discard(pod.key)
                if not index[value]:
                    del index[value]

    # ------------------------------------------------------------------ plugins' stores
    def store(self, factory: Callable[[Snapshot], StoreT]) -> StoreT:
        """The snapshot's store of that type (`stores.ObjectStore`), made on first use."""
        found = self._stores.get(factory)
        if found is None:
            found = self._stores[factory] = factory(self)
        return found  # type: ignore[return-value]  # keyed by the factory that made it

    def touch_node(self, name: str) -> None:
        """Something a plugin derives per node changed (its NodeMetric): the row is dirty."""
        info = self._node_by_name.get(name)
        if info is not None:
            self._touch(info.index)

    # ------------------------------------------------------------------ PodDisruptionBudgets
    def upsert_disruption_budget(self, obj: Mapping[str, Any]) -> DisruptionBudget:
        budget = DisruptionBudget.from_dict(obj)
        self.disruption_budgets[pod_key(budget.namespace, budget.name)] = budget
        return budget

    def remove_disruption_budget(self, namespace: str, name: str) -> None:
        self.disruption_budgets.pop(pod_key(namespace, name), None)


def _assigned_time(pod: PodInfo, previous: PodInfo | None) -> float:
    """When the pod was placed: its PodScheduled condition, else its creation time."""
    if pod.scheduled_at is not None:
        return pod.scheduled_at
    if previous is not None and previous.scheduled_at is not None:
        return previous.scheduled_at
    return pod.creation_timestamp


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
    if _INTEGER.fullmatch(value) is None:  # strconv.ParseInt(value, 10, 64): no spaces or underscores
        column.is_number[i] = False
        return
    number = int(value)
    in_range = -(2**63) <= number < 2**63
    column.numbers[i] = number if in_range else 0
    column.is_number[i] = in_range


def _extend_label_column(column: LabelColumn, rows: int) -> None:
    if len(column.codes) >= rows:
        return
    extra = max(rows, 2 * len(column.codes)) - len(column.codes)
    column.codes = np.concatenate([column.codes, np.full(extra, -1, np.int32)])
    column.numbers = np.concatenate([column.numbers, np.zeros(extra, np.int64)])
    column.is_number = np.concatenate([column.is_number, np.zeros(extra, np.bool_)])
