"""The scheduler's view of the cluster: node columns (`nodecolumns.py`), the pods accounted on
them, and the plugins' stores.

Fed from plain Kubernetes JSON (as list/watch deliver it) and updated incrementally, so
the same object serves as the scheduler cache and as the per-cycle snapshot: scheduling
is serial, and a pod placed in one cycle is visible ("assumed") to the next.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, TypeVar

import numpy as np

from common.api.malformed import MalformedObjectError
from scheduler_plugin.framework.disruption import DisruptionBudget
from scheduler_plugin.framework.hostports import HostPortTable
from scheduler_plugin.framework.nodecolumns import (
    CPU,
    FIXED_RESOURCES,
    MEMORY,
    PODS,
    BoolArray,
    IndexArray,
    IntArray,
    LabelColumn,
    NodeColumns,
    NodeInfo,
    PodRecord,
    untracked_problem,
)
from scheduler_plugin.framework.podinfo import PodInfo, pod_key
from scheduler_plugin.framework.podmatch import PodMatchIndex
from scheduler_plugin.framework.stores import ObjectStore

# The node side is re-exported: plugins read one `Snapshot`.
__all__ = [
    "CPU",
    "FIXED_RESOURCES",
    "MEMORY",
    "PODS",
    "BoolArray",
    "IndexArray",
    "IntArray",
    "LabelColumn",
    "NodeInfo",
    "PodRecord",
    "Snapshot",
]

StoreT = TypeVar("StoreT", bound=ObjectStore)


class Snapshot(NodeColumns):
    def __init__(self, initial_capacity: int = 64) -> None:
        super().__init__(initial_capacity)
        # pods
        self.pods: dict[str, PodInfo] = {}  # every known pod, pending or not
        self.records: dict[str, PodRecord] = {}  # pods accounted on a node
        self._orphans: dict[str, dict[str, PodInfo]] = {}  # node name -> pods bound to a node we have not seen
        self._pod_indexes: dict[str, tuple[Callable[[PodInfo], Hashable | None], dict[Hashable, set[str]]]] = {}
        self._pod_multi_indexes: dict[str, tuple[Callable[[PodInfo], Iterable[Hashable]],
                                                 dict[Hashable, set[str]]]] = {}  # fmt: skip
        # Accounted pods per node row by label selector and by carried (anti-)affinity term (`podmatch`).
        self.pod_matches = PodMatchIndex(self)
        self._stores: dict[Callable[[Snapshot], ObjectStore], ObjectStore] = {}
        # Objects of resources out-of-tree plugins watch (see `interfaces.WatchedResource`), as they came.
        self.custom_objects: dict[str, dict[str, Mapping[str, Any]]] = {}
        self.disruption_budgets: dict[str, DisruptionBudget] = {}  # namespace/name -> budget
        # Pending pods preemption made room for, and where (kube-scheduler's nominator): their
        # requests count as taken there for pods of lower priority until they are placed.
        self.nominations: dict[str, str] = {}
        # Preemption victims whose eviction was asked for, until their deletion shows up here.
        self.evicting: set[str] = set()
        # Host ports the pods accounted on each node row hold (NodePorts).
        self.host_ports = HostPortTable()

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

    def part_problem(self, pod: PodInfo) -> MalformedObjectError | None:
        """The pod's part problem: its digest's, else requests naming resources past MAX_RESOURCE_COLUMNS (they add up
        in the UNTRACKED column, which no node offers: a pending pod fits nowhere, a bound one keeps them counted)."""
        if pod.part_problem is not None:
            return pod.part_problem
        return untracked_problem("Pod", pod.key, self.untracked(pod.requests), "a pending pod fits no node")

    # ------------------------------------------------------------------ nodes and their pods
    def upsert_node(self, obj: Mapping[str, Any]) -> NodeInfo:
        """Add or update a node from its JSON. Raises MalformedObjectError (the node is then left as it was)."""
        info, is_new = self._upsert_node_row(obj)
        if is_new:
            for pod in self._orphans.pop(info.name, {}).values():
                self._account(pod, info, assumed=False, assigned_at=_assigned_time(pod, None))
        return info

    def remove_node(self, name: str) -> None:
        info = self._node_by_name.get(name)
        if info is None:
            return
        for key, record in list(info.pods.items()):
            self._unaccount(key)
            if not record.assumed:
                self._orphans.setdefault(name, {})[key] = record.pod
        self._remove_node_row(name)

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
                if target:
                    self._replace_record_pod(record, pod)
                record.assumed = not target
                return
            if target == current and pod.requests == record.pod.requests and pod.host_ports == record.host_ports:
                self._replace_record_pod(record, pod)  # a status-only update of a bound pod: nothing to re-account
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
        record = PodRecord(pod, i, assumed, assigned_at, vec, nonzero, pod.host_ports)
        if pod.host_ports:
            self.host_ports.add(i, pod.host_ports)
        self.records[pod.key] = record
        info.pods[pod.key] = record
        self.pod_matches.add(pod, i)
        self._touch(i)

    def _replace_record_pod(self, record: PodRecord, pod: PodInfo) -> None:
        old, record.pod = record.pod, pod
        self.pod_matches.replace(old, pod, record.node_index)

    def _unaccount(self, key: str) -> None:
        record = self.records.pop(key)
        i = record.node_index
        self._requested[: len(record.vector), i] -= record.vector
        self._nonzero[0, i] -= record.nonzero[0]
        self._nonzero[1, i] -= record.nonzero[1]
        if record.host_ports:
            self.host_ports.add(i, record.host_ports, -1)
        info = self._nodes[i]
        if info is not None:
            info.pods.pop(key, None)
        self.pod_matches.remove(record.pod, i)
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

    def pod_multi_index(self, name: str, keys_of: Callable[[PodInfo], Iterable[Hashable]]) -> dict[Hashable, set[str]]:
        """Like `pod_index`, for a pod that has several keys (e.g. the claims its volumes use)."""
        entry = self._pod_multi_indexes.get(name)
        if entry is None:
            index: dict[Hashable, set[str]] = {}
            for pod in self.pods.values():
                for value in keys_of(pod):
                    index.setdefault(value, set()).add(pod.key)
            entry = (keys_of, index)
            self._pod_multi_indexes[name] = entry
        return entry[1]

    def _index(self, pod: PodInfo) -> None:
        for key_of, index in self._pod_indexes.values():
            value = key_of(pod)
            if value is not None:
                index.setdefault(value, set()).add(pod.key)
        for keys_of, index in self._pod_multi_indexes.values():
            for value in keys_of(pod):
                index.setdefault(value, set()).add(pod.key)

    def _unindex(self, pod: PodInfo) -> None:
        for key_of, index in self._pod_indexes.values():
            _drop(index, key_of(pod), pod.key)
        for keys_of, index in self._pod_multi_indexes.values():
            for value in keys_of(pod):
                _drop(index, value, pod.key)

    # ------------------------------------------------------------------ plugins' stores
    def store(self, factory: Callable[[Snapshot], StoreT]) -> StoreT:
        """The snapshot's store of that type (`stores.ObjectStore`), made on first use."""
        found = self._stores.get(factory)
        if found is None:
            found = self._stores[factory] = factory(self)
        return found  # type: ignore[return-value]  # keyed by the factory that made it

    # ------------------------------------------------------------------ PodDisruptionBudgets
    def upsert_disruption_budget(self, obj: Mapping[str, Any]) -> DisruptionBudget:
        budget = DisruptionBudget.from_dict(obj)
        self.disruption_budgets[pod_key(budget.namespace, budget.name)] = budget
        return budget

    def remove_disruption_budget(self, namespace: str, name: str) -> None:
        self.disruption_budgets.pop(pod_key(namespace, name), None)


def _drop(index: dict[Hashable, set[str]], value: Hashable | None, pod_key: str) -> None:
    if value is not None and value in index:
        index[value].discard(pod_key)
        if not index[value]:
            del index[value]


def _assigned_time(pod: PodInfo, previous: PodInfo | None) -> float:
    """When the pod was placed: its PodScheduled condition, else its creation time."""
    if pod.scheduled_at is not None:
        return pod.scheduled_at
    if previous is not None and previous.scheduled_at is not None:
        return previous.scheduled_at
    return pod.creation_timestamp
