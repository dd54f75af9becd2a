"""The selectors of Services, ReplicationControllers, ReplicaSets and StatefulSets, and the selector kube-scheduler
deduces from them for a pod's default spread constraints (pkg/scheduler/framework/plugins/helper/spread.go,
DefaultSelector): the labels of every Service in the pod's namespace whose selector matches the pod, plus the
selector of the ReplicationController, ReplicaSet or StatefulSet that controls it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.api.malformed import MalformedObjectError
from common.api.scheduling import LabelSelector, Requirement, parse_label_selector, string_map
from scheduler_plugin.framework.events import WORKLOAD_CHANGE
from scheduler_plugin.framework.interfaces import WatchedResource
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.podmatch import selector_matcher
from scheduler_plugin.framework.snapshot import Snapshot

Selector = dict[str, str] | LabelSelector | None  # a Service's/RC's label map, a ReplicaSet's/StatefulSet's selector


def _namespaced_name(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    if not isinstance(meta, Mapping) or not meta.get("name"):
        raise MalformedObjectError("metadata.name: required")
    return str(meta.get("namespace") or "default"), str(meta["name"])


class _Selectors:
    """namespace -> name -> selector of one kind; `generation` changes with every change of a selector."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.by_namespace: dict[str, dict[str, Selector]] = {}
        self.generation = 0

    def __len__(self) -> int:
        return sum(len(names) for names in self.by_namespace.values())

    def _parse(self, spec: Mapping[str, Any]) -> Selector:
        raise NotImplementedError

    def upsert(self, obj: Mapping[str, Any]) -> None:
        namespace, name = _namespaced_name(obj)
        spec = obj.get("spec") or {}
        if not isinstance(spec, Mapping):
            raise MalformedObjectError("spec: expected an object")
        selector = self._parse(spec)
        names = self.by_namespace.setdefault(namespace, {})
        if name not in names or names[name] != selector:
            names[name] = selector
            self.generation += 1

    def remove(self, obj: Mapping[str, Any]) -> None:
        namespace, name = _namespaced_name(obj)
        names = self.by_namespace.get(namespace, {})
        if name in names:
            del names[name]
            self.generation += 1
        if not names:
            self.by_namespace.pop(namespace, None)

    def get(self, namespace: str, name: str) -> Selector:
        return self.by_namespace.get(namespace, {}).get(name)

    def in_namespace(self, namespace: str) -> Mapping[str, Selector]:
        return self.by_namespace.get(namespace, {})


class ServiceSelectors(_Selectors):
    def _parse(self, spec: Mapping[str, Any]) -> Selector:
        raw = spec.get("selector")
        return None if raw is None else string_map(raw, "spec.selector")  # nil: the Service selects nothing


class ReplicationControllerSelectors(_Selectors):
    def _parse(self, spec: Mapping[str, Any]) -> Selector:
        return string_map(spec.get("selector"), "spec.selector")


class ReplicaSetSelectors(_Selectors):
    def _parse(self, spec: Mapping[str, Any]) -> Selector:
        raw = spec.get("selector")
        return None if raw is None else parse_label_selector(raw, "spec.selector")


class StatefulSetSelectors(ReplicaSetSelectors):
    pass


SERVICES = WatchedResource("Service", "", "v1", "services", WORKLOAD_CHANGE, ServiceSelectors)
REPLICATION_CONTROLLERS = WatchedResource("ReplicationController", "", "v1", "replicationcontrollers",
                                          WORKLOAD_CHANGE, ReplicationControllerSelectors)
REPLICA_SETS = WatchedResource("ReplicaSet", "apps", "v1", "replicasets", WORKLOAD_CHANGE, ReplicaSetSelectors)
STATEFUL_SETS = WatchedResource("StatefulSet", "apps", "v1", "statefulsets", WORKLOAD_CHANGE, StatefulSetSelectors)
WORKLOADS = (SERVICES, REPLICATION_CONTROLLERS, REPLICA_SETS, STATEFUL_SETS)
_CONTROLLERS = {("v1", "ReplicationController"): ReplicationControllerSelectors,
                ("apps/v1", "ReplicaSet"): ReplicaSetSelectors,
                ("apps/v1", "StatefulSet"): StatefulSetSelectors}


def controller_of(pod: PodInfo) -> tuple[str, str, str] | None:
    """(apiVersion, kind, name) of the pod's controller ownerReference (metav1.GetControllerOf)."""
    refs = (pod.raw.get("metadata") or {}).get("ownerReferences")
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""), str(ref.get("name") or "")
    return None


def default_selector(pod: PodInfo, snapshot: Snapshot) -> LabelSelector | None:
    """kube-scheduler's DefaultSelector for the pod; None when it is empty (no default constraints then)."""
    services = snapshot.store(ServiceSelectors).in_namespace(pod.namespace)
    owner = controller_of(pod)
    controllers = _CONTROLLERS.get(owner[:2]) if owner is not None else None
    if not services and controllers is None:
        return None  # (a bare pod, the common case in a backlog: nothing to deduce)
    merged: dict[str, str] = {}
    for selector in services.values():
        if isinstance(selector, dict) and selector_matcher(LabelSelector(tuple(selector.items())))(pod.labels):
            merged.update(selector)
    extra: tuple[Requirement, ...] = ()
    if owner is not None and controllers is not None:
        selector = snapshot.store(controllers).get(pod.namespace, owner[2])
        if isinstance(selector, dict):
            merged.update(selector)
        elif isinstance(selector, LabelSelector):
            extra = tuple(Requirement(k, "In", (v,)) for k, v in selector.match_labels) + selector.match_expressions
    result = LabelSelector(tuple(sorted(merged.items())), extra)
    return None if result.is_empty else result
