"""The extender's own view of the cluster: nodes, assigned pods and the resources its plugins
watch, list+watched into one `Snapshot` (what `nodeCacheCapable: true` relies on).

kube-scheduler sends only the pod being scheduled and the candidate node names (or Nodes);
LoadAwareScheduling also needs the NodeMetrics and the pods already on each node (its
estimates for pods the last NodeMetric has not seen yet), so those are cached even in
full-Node mode. Which resources besides nodes and pods are watched is the plugins' say
(`WatchedResource`, as for the scheduler): each object goes to its plugin's store, or, for a
resource without one, into `Snapshot.custom_objects`. Only assigned, non-terminated pods are
watched — the same field selector kube-scheduler's own scheduled-pod cache uses — which keeps
the store small on clusters with many pending or finished pods.

Malformed objects are logged and counted once per version in `loadline_malformed_objects_total{kind,reason}`
(`common/kube/malformed.py`, as in every Loadline process) and skipped: a node keeps its previous good state, a
pod is left out, a NodeMetric's store decides what it keeps; the watch keeps running.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from common.api.malformed import MalformedObjectError
from common.kube.http import JSON, KubeHTTP, resource_path
from common.kube.malformed import MalformedObjects
from common.kube.reflector import EventType, Handler, Reflector, object_key, stalled_watch
from scheduler_plugin.extender import metrics
from scheduler_plugin.framework.interfaces import WatchedResource
from scheduler_plugin.framework.snapshot import Snapshot

log = logging.getLogger("loadline.extender.cache")

NODES_PATH = resource_path("", "v1", "nodes")
PODS_PATH = resource_path("", "v1", "pods")
ASSIGNED_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


class ExtenderCache:
    """The extender's view of the cluster: nodes, assigned pods and what its plugins watch, into one Snapshot
    (the scheduler's own cache, with its queue and binding, is scheduler_plugin/server/cache.py)."""

    def __init__(
        self, http: KubeHTTP, snapshot: Snapshot | None = None, *, resources: Sequence[WatchedResource] = ()
    ) -> None:
        self.snapshot = snapshot if snapshot is not None else Snapshot()
        self.malformed = MalformedObjects(("Node", "Pod", *(resource.kind for resource in resources)))
        self.nodes = Reflector(http, NODES_PATH, name="extender-nodes")
        self.pods = Reflector(http, PODS_PATH, name="extender-pods", field_selector=ASSIGNED_PODS)
        self.nodes.add_handler(self._guarded("Node", self.on_node))
        self.pods.add_handler(self._guarded("Pod", self.on_pod))
        # The resources the enabled plugins watch, by kind (e.g. "NodeMetric" for LoadAware).
        self.watched: dict[str, Reflector] = {}
        for resource in resources:
            path = resource_path(resource.group, resource.version, resource.plural)
            reflector = Reflector(http, path, name=f"extender-{resource.plural}")
            reflector.add_handler(self._guarded(resource.kind, self._watched_handler(resource)))
            self.watched[resource.kind] = reflector
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def reflectors(self) -> tuple[Reflector, ...]:
        return (self.nodes, self.pods, *self.watched.values())

    @property
    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors)

    def not_progressing(self, stall_seconds: float) -> str | None:
        """A watch ended, or failing for `stall_seconds` without progress; None when all make progress."""
        if ended := [task.get_name() for task in self._tasks if task.done()]:
            return f"watches ended: {', '.join(ended)}"
        return stalled_watch(self.reflectors, stall_seconds)

    async def wait_synced(self) -> None:
        await asyncio.gather(*(r.synced.wait() for r in self.reflectors))
        metrics.CACHE_SYNCED.set(1)

    def start(self) -> None:
        for reflector in self.reflectors:
            self._tasks.append(asyncio.create_task(reflector.run(), name=reflector.name))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    # ------------------------------------------------------------------ handlers (also used by tests)
    def on_node(self, kind: EventType, obj: JSON) -> MalformedObjectError | None:
        """Returns the node's part problem (an annotation read as absent, resources past the column bound)."""
        part_problem = None
        if kind == "DELETED":
            self.snapshot.remove_node(object_key(obj))
        else:
            part_problem = self.snapshot.upsert_node(obj).part_problem
        metrics.CACHE_OBJECTS.labels("node").set(self.snapshot.num_nodes)
        return part_problem

    def on_pod(self, kind: EventType, obj: JSON) -> MalformedObjectError | None:
        """Returns the pod's part problem (it is stored with that part held at its safe value)."""
        part_problem = None
        if kind == "DELETED":
            self.snapshot.remove_pod(object_key(obj))
        else:
            part_problem = self.snapshot.part_problem(self.snapshot.upsert_pod(obj))
        metrics.CACHE_OBJECTS.labels("pod").set(len(self.snapshot.pods))
        return part_problem

    def _watched_handler(self, resource: WatchedResource) -> Callable[[EventType, JSON], None]:
        label = resource.kind.lower()
        if resource.store is not None:
            store = self.snapshot.store(resource.store)

            def into_store(kind: EventType, obj: JSON) -> None:
                if kind == "DELETED":
                    store.remove(obj)
                else:
                    store.upsert(obj)
                metrics.CACHE_OBJECTS.labels(label).set(len(store))

            return into_store
        objects = self.snapshot.custom_objects.setdefault(resource.kind, {})

        def as_they_came(kind: EventType, obj: JSON) -> None:
            if kind == "DELETED":
                objects.pop(object_key(obj), None)
            else:
                objects[object_key(obj)] = obj
            metrics.CACHE_OBJECTS.labels(label).set(len(objects))

        return as_they_came

    def _guarded(self, kind: str, handle: Callable[[EventType, JSON], MalformedObjectError | None]) -> Handler:
        def handler(event: EventType, obj: JSON, _old: JSON | None) -> None:
            key = object_key(obj)
            try:
                part_problem = handle(event, obj)
            except MalformedObjectError as exc:
                self.malformed.report(kind, key, obj, exc)
            else:
                self.malformed.account(kind, key, obj, None, part_problem)

        return handler
