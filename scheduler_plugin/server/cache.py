"""The scheduler's informers: list + watch of nodes, pods and the resources the enabled plugins
declare (`WatchedResource`: NodeMetrics for LoadAware, PodGroups for Coscheduling and
NetworkTopology, anything an out-of-tree plugin names) into the Snapshot.

Each watch event updates the snapshot incrementally and tells the scheduler what
happened in scheduling terms (a pod became pending, a node was added, a reservation
was freed, a gang changed), so it can move the pods the event may help.

* Pods: every pod in the cluster, so assigned pods of any scheduler are accounted; the
  pending ones of our profiles feed the queue. A pod we assumed keeps its accounting
  until the watch shows it bound — a late event from before the binding must not free
  its node for a moment.
* Node updates that change nothing scheduling reads (kubelet/kwok heartbeats, status
  conditions) are dropped before they touch the snapshot.
* Those CRDs may not be installed: their watches start once discovery shows the
  resource, checked again every `crd_retry_seconds` and logged once.
* Objects that do not parse are logged once per version, counted and skipped; for a
  NodeMetric or PodGroup the last readable version stays in effect (a NodeMetric then
  expires by its own updateTime, which is LoadAware's rule for stale data).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from common.api.malformed import MalformedObjectError
from common.kube.http import JSON, KubeError, KubeHTTP, resource_path
from common.kube.malformed import MalformedObjects
from common.kube.reflector import EventType, Reflector, object_key, stalled_watch
from scheduler_plugin.framework.events import (
    ASSIGNED_POD_ADD,
    ASSIGNED_POD_DELETE,
    ASSIGNED_POD_UPDATE,
    NODE_ADD,
    NODE_DELETE,
    NODE_UPDATE,
)
from scheduler_plugin.framework.interfaces import WatchedResource
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.framework.stores import ObjectStore

log = logging.getLogger("loadline.scheduler.cache")


class ClusterListener(Protocol):
    """The scheduler's side of the informers."""

    def pod_changed(self, pod: PodInfo, *, is_new: bool, spec_changed: bool) -> None:
        """A pod was added or updated (pending or not); the snapshot already has it."""

    def pod_deleted(self, key: str, pod: PodInfo | None) -> None:
        """A pod is gone, or its latest version cannot be read."""

    def cluster_event(self, event: str, pod: PodInfo | None = None, old: PodInfo | None = None) -> None:
        """Something that may let unschedulable pods fit (see `framework.events`); for an event about a pod,
        the pod (`pod`, None when deleted) and its previous version (`old`), for the plugins' queueing hints."""

    def gang_changed(self, gang_key: str) -> None:
        """A PodGroup was created, changed or deleted."""


def _crd_name(resource: WatchedResource) -> str:
    return f"{resource.plural}.{resource.group}" if resource.group else resource.plural


# What scheduling reads from a Node; anything else changing (heartbeats) is not an event.
_NODE_FIELDS = (("metadata", "labels"), ("metadata", "annotations"), ("spec",), ("status", "allocatable"))


def _field(obj: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = obj
    for part in path:
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def node_changed_for_scheduling(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    return any(_field(old, path) != _field(new, path) for path in _NODE_FIELDS)


def _same_spec_but_node_name(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    if old == new:
        return True
    if old.get("nodeName") == new.get("nodeName") or old.keys() - {"nodeName"} != new.keys() - {"nodeName"}:
        return False
    return all(value == new[key] for key, value in old.items() if key != "nodeName")


def same_scheduling_fields(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Only status, deletionTimestamp or spec.nodeName differ: the parsed PodInfo can be reused
    (`PodInfo.with_status_of` reads those again). The binding of every pod is such a change."""
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    old_spec, new_spec = old.get("spec"), new.get("spec")
    return (
        isinstance(old_spec, Mapping)
        and isinstance(new_spec, Mapping)
        and _same_spec_but_node_name(old_spec, new_spec)
        and old_meta.get("uid") == new_meta.get("uid")
        and old_meta.get("labels") == new_meta.get("labels")
        and old_meta.get("annotations") == new_meta.get("annotations")
        and old_meta.get("creationTimestamp") == new_meta.get("creationTimestamp")
    )


def pod_spec_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """kube-scheduler's isPodUpdated: status and bookkeeping changes (our own condition patch) do not count."""
    if old is None:
        return True
    fields = (("spec",), ("metadata", "labels"), ("metadata", "annotations"))
    return any(_field(old, path) != _field(new, path) for path in fields)


class ClusterCache:
    def __init__(
        self,
        http: KubeHTTP,
        snapshot: Snapshot,
        listener: ClusterListener,
        malformed: MalformedObjects,
        *,
        resources: Sequence[WatchedResource] = (),
        crd_retry_seconds: float = 60.0,
    ) -> None:
        self.http = http
        self.snapshot = snapshot
        self.listener = listener
        self.malformed = malformed
        self.crd_retry_seconds = crd_retry_seconds
        # A scheduler working from a stale view of nodes and pods misplaces pods, so after an
        # outage these re-list sooner than the reflector's default backoff cap.
        self.nodes = Reflector(http, "/api/v1/nodes", name="scheduler-nodes", max_backoff_seconds=8)
        self.pods = Reflector(http, "/api/v1/pods", name="scheduler-pods", max_backoff_seconds=8)
        # Preemption prefers victims whose eviction keeps every PodDisruptionBudget.
        self.budgets = Reflector(http, "/apis/policy/v1/poddisruptionbudgets", name="scheduler-pdbs",
                                 max_backoff_seconds=60)
        # The resources the enabled plugins watch besides nodes and pods (`WatchedResource`).
        self.crds: dict[WatchedResource, Reflector] = {
            resource: Reflector(
                http, resource_path(resource.group, resource.version, resource.plural),
                name=f"scheduler-{_crd_name(resource)}", max_backoff_seconds=60,
            )
            for resource in resources
        }
        self.absent: set[WatchedResource] = set()  # CRDs discovery says are not installed
        # Set once a CRD is known to be absent, or once its watch delivered the initial list.
        self._crd_ready = {resource: asyncio.Event() for resource in self.crds}
        self.nodes.add_handler(self._on_node)
        self.pods.add_handler(self._on_pod)
        self.budgets.add_handler(self._on_budget)
        for resource, reflector in self.crds.items():
            if resource.store is not None:
                reflector.add_handler(self._store_handler(resource, resource.store))
            else:
                reflector.add_handler(self._custom_handler(resource))

    # ------------------------------------------------------------------ running
    async def run(self) -> None:
        tasks = [self.nodes.run(), self.pods.run(), self.budgets.run(), *(self._run_crd(r) for r in self.crds)]
        await asyncio.gather(*tasks)

    def not_progressing(self, stall_seconds: float) -> str | None:
        """A watch failing for `stall_seconds` without progress (an absent CRD's is not running), or None."""
        return stalled_watch((self.nodes, self.pods, self.budgets, *self.crds.values()), stall_seconds)

    def synced(self) -> bool:
        """Every watch has delivered its initial list (a CRD known to be absent counts as synced)."""
        if not (self.nodes.synced.is_set() and self.pods.synced.is_set()):
            return False
        return all(ready.is_set() for ready in self._crd_ready.values())

    async def wait_synced(self) -> None:
        await self.nodes.synced.wait()
        await self.pods.synced.wait()
        for ready in self._crd_ready.values():
            await ready.wait()

    async def _installed(self, resource: WatchedResource) -> bool | None:
        """Whether discovery lists the resource; None when the API server cannot tell us now."""
        try:
            # (the core group's resources, e.g. PersistentVolumes for VolumeBinding, are listed under /api/v1)
            found = await self.http.get(resource_path(resource.group, resource.version, "").rstrip("/"))
        except KubeError as exc:
            return False if exc.status in (403, 404) else None
        return any(isinstance(r, Mapping) and r.get("name") == resource.plural for r in found.get("resources") or [])

    async def _run_crd(self, resource: WatchedResource) -> None:
        """Watch a CRD while discovery lists it; while it is absent, look again every `crd_retry_seconds`.

        Discovery is asked again while watching too: quickly until the first list succeeded
        (the CRD may vanish between discovery and the list, and the reflector alone would
        retry a 404 forever and never count as synced), rarely afterwards."""
        reflector = self.crds[resource]
        absent_logged = False
        while True:
            installed = await self._installed(resource)
            if installed is None:
                await asyncio.sleep(2.0)  # API server unreachable: the node/pod watches log that
                continue
            if not installed:
                self.absent.add(resource)
                self._crd_ready[resource].set()
                if not absent_logged:
                    log.warning("CRD %s is not installed; scheduling without it, looking again every %.0fs",
                                _crd_name(resource), self.crd_retry_seconds)
                    absent_logged = True
                await asyncio.sleep(self.crd_retry_seconds)
                continue
            if absent_logged:
                log.info("CRD %s is installed now; watching it", _crd_name(resource))
                absent_logged = False
            self.absent.discard(resource)
            if await self._watch_while_installed(resource, reflector):
                absent_logged = True
                log.warning("CRD %s was removed; scheduling without it, looking again every %.0fs",
                            _crd_name(resource), self.crd_retry_seconds)

    async def _watch_while_installed(self, resource: WatchedResource, reflector: Reflector) -> bool:
        """Run the watch until discovery stops listing the CRD; True if the watch had synced."""
        ready = self._crd_ready[resource]

        async def mark_ready() -> None:
            await reflector.synced.wait()
            ready.set()

        tasks = [asyncio.create_task(reflector.run()), asyncio.create_task(mark_ready())]
        try:
            while True:
                await asyncio.sleep(self.crd_retry_seconds if reflector.synced.is_set() else 2.0)
                if await self._installed(resource) is False:
                    return reflector.synced.is_set()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------ nodes
    def _on_node(self, kind: EventType, obj: JSON, old: JSON | None) -> None:
        name = object_key(obj)
        if kind == "DELETED":
            known = self.snapshot.node_by_name(name) is not None
            self.snapshot.remove_node(name)
            self.malformed.clear("Node", name)
            if known:
                self.listener.cluster_event(NODE_DELETE)
            return
        known = self.snapshot.node_by_name(name) is not None
        if known and old is not None and not node_changed_for_scheduling(old, obj):
            return
        try:
            info = self.snapshot.upsert_node(obj)
        except MalformedObjectError as exc:
            self.malformed.report("Node", name, obj, exc)
            return
        self.malformed.account("Node", name, obj, None, info.part_problem)
        self.listener.cluster_event(NODE_UPDATE if known else NODE_ADD)

    # ------------------------------------------------------------------ pods
    def _on_pod(self, kind: EventType, obj: JSON, old: JSON | None) -> None:
        key = object_key(obj)
        snap = self.snapshot
        if kind == "DELETED":
            held = key in snap.records
            previous = snap.pods.get(key)
            snap.remove_pod(key)
            self.malformed.clear("Pod", key)
            self.listener.pod_deleted(key, previous)
            if held:
                self.listener.cluster_event(ASSIGNED_POD_DELETE, None, previous)
            return
        previous = snap.pods.get(key)
        try:
            if previous is not None and same_scheduling_fields(previous.raw, obj):
                pod = previous.with_status_of(obj)
            else:
                pod = PodInfo.from_dict(obj)
        except MalformedObjectError as exc:
            self.malformed.report("Pod", key, obj, exc)
            if key not in snap.records:
                snap.remove_pod(key)  # a pending pod we cannot read is not scheduled
            self.listener.pod_deleted(key, None)
            return
        self.malformed.account("Pod", key, obj, None, snap.part_problem(pod))
        held = key in snap.records
        if held and not pod.node_name and not pod.is_terminated:
            # Assumed (or just bound) by us and the watch has not caught up with the binding:
            # keep it accounted where we put it, and out of the queue.
            return
        snap.upsert_pod_info(pod)
        if held and key not in snap.records:
            self.listener.cluster_event(ASSIGNED_POD_DELETE, None, previous)  # finished: its resources are free
        elif pod.node_name and key in snap.records:
            if previous is None or not previous.node_name:
                self.listener.cluster_event(ASSIGNED_POD_ADD, pod)  # bound (by us or anyone): pod affinity may hold
            elif previous.labels != pod.labels:
                self.listener.cluster_event(ASSIGNED_POD_UPDATE, pod, previous)
        self.listener.pod_changed(pod, is_new=kind == "ADDED", spec_changed=pod_spec_changed(old, obj))

    # ------------------------------------------------------------------ plugins' stores
    def _store_handler(self, resource: WatchedResource, factory: Callable[[Snapshot], ObjectStore]) -> Any:
        """A resource whose plugin digests it into its own store (NodeMetrics for LoadAware, PodGroups
        for Coscheduling). A malformed object is reported; whom a change wakes is the resource's `wakes`."""
        store = self.snapshot.store(factory)
        gang = resource.wakes == "gang"
        # Two watched resources of one kind (PodGroup in both API groups) can hold objects of the same
        # name: their malformed versions are reported apart.
        qualify = sum(r.kind == resource.kind for r in self.crds) > 1

        def handle(kind: EventType, obj: JSON, old: JSON | None) -> None:
            key = object_key(obj)
            name = f"{key} ({obj.get('apiVersion') or 'unknown version'})" if qualify else key
            if kind == "DELETED":
                store.remove(obj)
                self.malformed.clear(resource.kind, name)
            else:
                try:
                    store.upsert(obj)
                    self.malformed.clear(resource.kind, name)
                except MalformedObjectError as exc:
                    self.malformed.report(resource.kind, name, obj, exc)
                    if gang:
                        return  # the last readable version stays: nothing changed
            if gang:
                self.listener.gang_changed(key)
            else:
                self.listener.cluster_event(resource.event)

        return handle

    # ------------------------------------------------------------------ PodDisruptionBudgets
    def _on_budget(self, kind: EventType, obj: JSON, old: JSON | None) -> None:
        meta = obj.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        if kind == "DELETED":
            self.snapshot.remove_disruption_budget(namespace, name)
            return
        try:
            self.snapshot.upsert_disruption_budget(obj)
        except MalformedObjectError as exc:
            self.malformed.report("PodDisruptionBudget", f"{namespace}/{name}", obj, exc)
            return
        self.malformed.clear("PodDisruptionBudget", f"{namespace}/{name}")

    # ------------------------------------------------------------------ other resources
    def _custom_handler(self, resource: WatchedResource) -> Any:
        """A resource an out-of-tree plugin watches: kept as it came in the snapshot's
        `custom_objects[kind]`, each change reported as the plugin's event."""
        objects = self.snapshot.custom_objects.setdefault(resource.kind, {})

        def handle(kind: EventType, obj: JSON, old: JSON | None) -> None:
            key = object_key(obj)
            if kind == "DELETED":
                objects.pop(key, None)
            else:
                objects[key] = obj
            self.listener.cluster_event(resource.event)

        return handle
