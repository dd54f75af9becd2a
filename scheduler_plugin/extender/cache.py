"""The extender's own view of the cluster: nodes, assigned pods and NodeMetrics, list+watched
into one `Snapshot` (what `nodeCacheCapable: true` relies on).

kube-scheduler sends only the pod being scheduled and the candidate node names (or Nodes);
LoadAwareScheduling also needs the NodeMetrics and the pods already on each node (its
estimates for pods the last NodeMetric has not seen yet), so those are cached even in
full-Node mode. Only assigned, non-terminated pods are watched — the same field selector
kube-scheduler's own scheduled-pod cache uses — which keeps the store small on clusters with
many pending or finished pods.

Malformed objects are logged, counted in `loadline_extender_invalid_objects_total` and
skipped (a node or NodeMetric keeps its previous good state); the watch keeps running.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from common.api.malformed import MalformedObjectError
from common.kube.http import JSON, KubeHTTP, resource_path
from common.kube.reflector import EventType, Handler, Reflector, object_key
from scheduler_plugin.extender import metrics
from scheduler_plugin.framework.snapshot import Snapshot

log = logging.getLogger("loadline.extender.cache")

NODES_PATH = resource_path("", "v1", "nodes")
PODS_PATH = resource_path("", "v1", "pods")
NODE_METRICS_PATH = resource_path("slo.koordinator.sh", "v1alpha1", "nodemetrics")
ASSIGNED_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


class ClusterCache:
    def __init__(self, http: KubeHTTP, snapshot: Snapshot | None = None) -> None:
        self.snapshot = snapshot if snapshot is not None else Snapshot()
        self.nodes = Reflector(http, NODES_PATH, name="extender-nodes")
        self.pods = Reflector(http, PODS_PATH, name="extender-pods", field_selector=ASSIGNED_PODS)
        self.node_metrics = Reflector(http, NODE_METRICS_PATH, name="extender-nodemetrics")
        self.nodes.add_handler(self._guarded("node", self.on_node))
        self.pods.add_handler(self._guarded("pod", self.on_pod))
        self.node_metrics.add_handler(self._guarded("nodemetric", self.on_node_metric))
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def reflectors(self) -> tuple[Reflector, ...]:
        return (self.nodes, self.pods, self.node_metrics)

    @property
    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors)

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
    def on_node(self, kind: EventType, obj: JSON) -> None:
        if kind == "DELETED":
            self.snapshot.remove_node(object_key(obj))
        else:
            self.snapshot.upsert_node(obj)
        metrics.CACHE_OBJECTS.labels("node").set(self.snapshot.num_nodes)

    def on_pod(self, kind: EventType, obj: JSON) -> None:
        if kind == "DELETED":
            self.snapshot.remove_pod(object_key(obj))
        else:
            self.snapshot.upsert_pod(obj)
        metrics.CACHE_OBJECTS.labels("pod").set(len(self.snapshot.pods))

    def on_node_metric(self, kind: EventType, obj: JSON) -> None:
        if kind == "DELETED":
            self.snapshot.remove_node_metric(object_key(obj))
        else:
            self.snapshot.upsert_node_metric(obj)
        metrics.CACHE_OBJECTS.labels("nodemetric").set(len(self.node_metrics.store))

    @staticmethod
    def _guarded(kind: str, handle: Callable[[EventType, JSON], None]) -> Handler:
        def handler(event: EventType, obj: JSON, _old: JSON | None) -> None:
            try:
                handle(event, obj)
            except MalformedObjectError as exc:
                metrics.INVALID_OBJECTS.labels(kind).inc()
                log.warning("skipping invalid %s %s: %s", kind, object_key(obj), exc)

        return handler
