"""The manager's controller: watches feed per-node reconciles through one coalescing work queue.

Watches (list + watch, every replica, so a standby takes over with warm caches):
  Nodes, Pods (non-terminal), NodeMetrics, NodeSLOs, and the slo-controller-config ConfigMap.
Each event enqueues the node(s) it concerns; the leader's workers reconcile a node at a time:

  1. the node is gone -> delete its NodeMetric and NodeSLO;
  2. NodeMetric exists with `spec.metricCollectPolicy` from the node's colocation strategy;
  3. NodeSLO exists with the spec rendered from the ConfigMap for the node's labels;
  4. batch-cpu / batch-memory and mid-cpu / mid-memory in the Node status, or removed (stale metric, colocation off).

A ConfigMap change enqueues every node; a periodic resync does too. Clock-driven changes (a
NodeMetric going stale) are scheduled as delayed adds for the moment they fall due.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from common.api.constants import NODEMETRIC_PLURAL, NODESLO_PLURAL, SLO_GROUP, SLO_VERSION
from common.api.malformed import MalformedObjectError
from common.api.nodemetric_digest import NodeMetricDigest
from common.api.poddigest import digest_pod
from common.kube.events import EventRecorder
from common.kube.http import JSON, KubeError, KubeHTTP, resource_path
from common.kube.malformed import MalformedObjects
from common.kube.reflector import EventType, Reflector, stalled_watch
from common.supervise import Supervised
from manager import metrics
from manager.adapters import node_metric, pod_node_name, pod_on_node
from manager.batch import BatchWriter
from manager.configsource import SLOConfigSource
from manager.noderesource.model import PodOnNode
from manager.nodeslo.config import SLOControllerConfig
from manager.nodeslo.merge import JSONDict, canonical_json
from manager.nodeslo.render import (
    NodeColocation,
    batch_strategy_for_node,
    colocation_for_node,
    mid_strategy_for_node,
    node_metric_collect_policy,
    render_node_slo_spec,
)
from manager.objects import NODE_METRIC, NODE_SLO, SpecWriter
from manager.workqueue import ShutDown, WorkQueue

log = logging.getLogger("loadline.manager")

# Node fields a reconcile reads; a heartbeat that changes none of them is ignored.
_NODE_META_FIELDS = ("labels", "annotations", "deletionTimestamp")
_NODE_STATUS_FIELDS = ("capacity", "allocatable")


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _pod_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _node_relevant(node: Mapping[str, Any]) -> tuple[Any, ...]:
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    return tuple(meta.get(f) for f in _NODE_META_FIELDS) + tuple(status.get(f) for f in _NODE_STATUS_FIELDS)


class Controller:
    def __init__(
        self,
        http: KubeHTTP,
        *,
        namespace: str,
        config_map: str,
        recorder: EventRecorder,
        workers: int = 4,
        resync_seconds: float = 60,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.http = http
        self.recorder = recorder
        self.workers = workers
        self.resync_seconds = resync_seconds
        self.now = now
        self.queue = WorkQueue()
        self.leading = False
        self.loops = Supervised()
        self._api_unreachable = False
        self.config = SLOConfigSource(namespace, config_map, on_change=self._config_changed)
        self._config_ready = asyncio.Event()

        self.nodes = Reflector(http, "/api/v1/nodes", name="nodes")
        # Terminal pods hold no resources; a pod turning terminal arrives as a DELETED event.
        self.pods = Reflector(
            http, "/api/v1/pods", name="pods", field_selector="status.phase!=Succeeded,status.phase!=Failed"
        )
        self.nodemetrics = Reflector(http, resource_path(SLO_GROUP, SLO_VERSION, NODEMETRIC_PLURAL), name="nodemetrics")
        self.nodeslos = Reflector(http, resource_path(SLO_GROUP, SLO_VERSION, NODESLO_PLURAL), name="nodeslos")
        self.configmap = Reflector(
            http,
            f"/api/v1/namespaces/{namespace}/configmaps",
            name="slo-controller-config",
            field_selector=f"metadata.name={config_map}",
        )
        self.reflectors = (self.nodes, self.pods, self.nodemetrics, self.nodeslos, self.configmap)

        # Indexes kept up to date by the handlers (converted once per event, read per reconcile).
        self.pods_by_node: dict[str, dict[str, PodOnNode]] = {}
        self._pod_node: dict[str, str] = {}
        self.metrics_by_node: dict[str, NodeMetricDigest | None] = {}
        # objects that cannot be read: logged and counted once per version
        self.malformed = MalformedObjects(("Pod", "NodeMetric", "Node"))

        self.nodemetric_writer = SpecWriter(http, NODE_METRIC)
        self.nodeslo_writer = SpecWriter(http, NODE_SLO)
        self.batch = BatchWriter(http)
        # Rendered specs by node: (config, labels) they were rendered for, canonical JSON. Canonical texts are
        # shared between nodes (`_canonical`), so memory grows with the distinct specs, not the nodes.
        self._slo_rendered: dict[str, tuple[SLOControllerConfig, dict[str, str], str]] = {}
        self._policies: dict[Any, tuple[JSONDict, str]] = {}
        self._canonical: dict[str, str] = {}

        self.nodes.add_handler(self._on_node)
        self.pods.add_handler(self._on_pod)
        self.nodemetrics.add_handler(self._on_nodemetric)
        self.nodeslos.add_handler(self._on_nodeslo)
        self.configmap.add_handler(self._on_configmap)
        self._config_seen = asyncio.Event()

    # --- readiness -------------------------------------------------------------------------
    @property
    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors)

    @property
    def ready(self) -> bool:
        return self.synced and self.config.ready

    def not_progressing(self, stall_seconds: float) -> str | None:
        """Why the controller is not making progress (a watch failing, a worker gone, queued nodes not taken
        for `stall_seconds`), or None; /readyz and /healthz read it with their thresholds."""
        if (problem := stalled_watch(self.reflectors, stall_seconds)) is not None:
            return problem
        if down := self.loops.down():
            return f"restarting: {', '.join(down)}"
        if self.leading and (stuck := self.queue.stuck_seconds()) >= stall_seconds:
            return f"no reconcile taken or finished for {stuck:.0f}s with {len(self.queue)} nodes queued"
        return None

    async def wait_synced(self) -> None:
        await asyncio.gather(*(r.synced.wait() for r in self.reflectors))
        if not self.configmap.store:
            self.config.missing()

    # --- event handlers (every replica) -----------------------------------------------------
    def _enqueue(self, name: str) -> None:
        if name:
            self.queue.add(name)
            metrics.QUEUE_DEPTH.set(len(self.queue))

    def _on_node(self, kind: EventType, obj: JSON, old: JSON | None) -> None:
        if kind != "MODIFIED" or old is None or _node_relevant(obj) != _node_relevant(old):
            self._enqueue(_name(obj))

    def _on_pod(self, kind: EventType, obj: JSON, old: JSON | None) -> None:
        key = _pod_key(obj)
        previous_node = self._pod_node.get(key, "")
        node = "" if kind == "DELETED" else pod_node_name(obj)
        previous = self.pods_by_node.get(previous_node, {}).get(key) if previous_node else None
        current: PodOnNode | None = None
        if node:
            try:
                digest = digest_pod(obj)
                current = pod_on_node(obj, digest)
                self.malformed.account("Pod", key, obj, None, digest.part_problem)
            except MalformedObjectError as exc:
                self.malformed.report("Pod", key, obj, exc)
                current = None
        if previous_node and (previous_node != node or current is None):
            self.pods_by_node.get(previous_node, {}).pop(key, None)
            self._pod_node.pop(key, None)
            self._enqueue(previous_node)
        if node and current is not None:
            self.pods_by_node.setdefault(node, {})[key] = current
            self._pod_node[key] = node
            if current != previous or previous_node != node:
                self._enqueue(node)

    def _on_nodemetric(self, kind: EventType, obj: JSON, old: JSON | None) -> None:
        name = _name(obj)
        if kind == "DELETED":
            self.metrics_by_node.pop(name, None)
            self.malformed.clear("NodeMetric", name)
        elif old is None or obj.get("status") != old.get("status") or name not in self.metrics_by_node:
            try:
                self.metrics_by_node[name] = node_metric(obj)
                self.malformed.clear("NodeMetric", name)
            except MalformedObjectError as exc:
                # Unusable usage data is no data: the batch resources degrade as for a missing metric.
                self.metrics_by_node[name] = None
                self.malformed.report("NodeMetric", name, obj, exc)
        self._enqueue(name)

    def _on_nodeslo(self, kind: EventType, obj: JSON, old: JSON | None) -> None:
        if kind != "MODIFIED" or old is None or obj.get("spec") != old.get("spec"):
            self._enqueue(_name(obj))

    def _on_configmap(self, kind: EventType, obj: JSON, old: JSON | None) -> None:
        self.config.handle(kind, obj, old)
        self._config_seen.set()  # the leader reports a refusal at once, not at the next resync

    def _config_changed(self) -> None:
        self._policies.clear()
        self._canonical.clear()
        self._config_ready.set()
        self._enqueue_all()

    def _enqueue_all(self) -> None:
        # Nodes, plus names of owned objects whose node may be gone (orphans to delete).
        for store in (self.nodes.store, self.nodemetrics.store, self.nodeslos.store):
            self.queue.add_all(store.keys())
        metrics.QUEUE_DEPTH.set(len(self.queue))

    # --- leading ------------------------------------------------------------------------------
    async def lead(self) -> None:
        """Run while this replica holds the Lease: workers, resync, config events."""
        await self.wait_synced()
        if not self.config.ready:
            log.warning("waiting for a valid slo-controller-config before reconciling")
            await self._config_ready.wait()
        self.queue = WorkQueue()
        self.leading = True
        log.info("leading: reconciling %d nodes", len(self.nodes.store))
        queue = self.queue
        tasks = [
            asyncio.create_task(
                self.loops.run(
                    f"reconcile-{i}", functools.partial(self._worker, i), finished=lambda: queue.is_shut_down
                )
            )
            for i in range(self.workers)
        ]
        tasks.append(asyncio.create_task(self.loops.run("config-events", self._report_config)))
        try:
            self._enqueue_all()
            while True:
                await asyncio.sleep(self.resync_seconds)
                self._enqueue_all()
        finally:
            self.leading = False
            self.queue.shut_down()
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            self.batch.unexport_all()  # after the workers stopped: none of them sets a series again

    async def _report_config(self) -> None:
        while True:
            await self.config.report(self.recorder)
            with contextlib.suppress(TimeoutError):  # a failed event write is retried at the resync
                await asyncio.wait_for(self._config_seen.wait(), self.resync_seconds)
            self._config_seen.clear()

    async def _worker(self, index: int) -> None:
        while True:
            try:
                name = await self.queue.get()
            except ShutDown:
                return
            started = time.perf_counter()
            try:
                await self.reconcile(name)
            except asyncio.CancelledError:
                raise
            except KubeError as exc:
                metrics.RECONCILES.labels("error").inc()
                delay = self.queue.add_rate_limited(name)
                if exc.status == 0:  # the API server is away: one line for the outage, not one per node
                    if not self._api_unreachable:
                        self._api_unreachable = True
                        log.warning("API server unreachable, reconciles retry with backoff: %s", exc)
                else:
                    log_fn = log.debug if exc.is_conflict else log.warning
                    log_fn("reconcile of %s failed, retrying in %.1fs: %s", name, delay, exc)
            except Exception:  # a bug for one node must not stop the others
                metrics.RECONCILES.labels("error").inc()
                delay = self.queue.add_rate_limited(name)
                log.exception("reconcile of %s failed, retrying in %.1fs", name, delay)
            else:
                metrics.RECONCILES.labels("ok").inc()
                self.queue.forget(name)
                if self._api_unreachable:
                    self._api_unreachable = False
                    log.info("API server reachable again")
            finally:
                metrics.RECONCILE_DURATION_SECONDS.observe(time.perf_counter() - started)
                self.queue.done(name)
                metrics.QUEUE_DEPTH.set(len(self.queue))

    # --- one node ----------------------------------------------------------------------------
    async def reconcile(self, name: str) -> None:
        config = self.config.current
        if config is None:
            return
        node = self.nodes.store.get(name)
        if node is None:
            await self._node_gone(name)
            return
        meta = node.get("metadata") or {}
        labels = meta.get("labels") or {}
        colocation = colocation_for_node(config, labels, meta.get("annotations"))
        for warning in colocation.warnings:
            self.malformed.report("Node", name, node, MalformedObjectError(warning, kind="Node", name=name))

        policy, want = self._collect_policy(colocation)
        stored = await self.nodemetric_writer.ensure(name, self.nodemetrics.store.get(name), policy, want)
        if stored is not None:
            self.nodemetrics.store[name] = stored  # see the note on the Node below
        current_slo = self.nodeslos.store.get(name)
        want = self._slo_canonical(name, config, labels)
        if not self.nodeslo_writer.in_sync(name, current_slo, None, want):
            stored = await self.nodeslo_writer.ensure(name, current_slo, render_node_slo_spec(config, labels), want)
            if stored is not None:
                self.nodeslos.store[name] = stored

        try:
            result = await self.batch.sync(
                node,
                self.pods_by_node.get(name, {}).values(),
                self.metrics_by_node.get(name),
                batch_strategy_for_node(config, colocation),
                self.now(),
                mid=mid_strategy_for_node(config, colocation),
            )
        except MalformedObjectError as exc:
            # A Node we cannot read (manager/adapters.py node_digest): counted once per version, not retried;
            # its next version is reconciled when the watch delivers it.
            self.malformed.report("Node", name, node, exc)
            return
        if not colocation.warnings:
            self.malformed.account("Node", name, node, None, result.node_part_problem)
        if result.stored is not None:
            # Until the watch delivers our own write, later reconciles must compare against it,
            # not against the Node as it was before (which would write the same change again).
            self.nodes.store[name] = result.stored
        if result.recheck_after is not None:
            self.queue.add_after(name, result.recheck_after)

    def _shared(self, text: str) -> str:
        return self._canonical.setdefault(text, text)

    def _collect_policy(self, colocation: NodeColocation) -> tuple[JSONDict, str]:
        key = colocation.cache_key
        cached = self._policies.get(key) if key is not None else None
        if cached is None:
            policy = node_metric_collect_policy(colocation)
            cached = (policy, self._shared(canonical_json(policy)))
            if key is not None:
                self._policies[key] = cached
        return cached

    def _slo_canonical(self, name: str, config: SLOControllerConfig, labels: dict[str, str]) -> str:
        cached = self._slo_rendered.get(name)
        if cached is not None and cached[0] is config and cached[1] == labels:
            return cached[2]
        text = self._shared(canonical_json(render_node_slo_spec(config, labels)))
        self._slo_rendered[name] = (config, dict(labels), text)
        return text

    async def _node_gone(self, name: str) -> None:
        self._slo_rendered.pop(name, None)
        self.batch.forget(name)
        if name in self.nodemetrics.store:
            await self.nodemetric_writer.delete(name)
        else:
            self.nodemetric_writer.forget(name)
        if name in self.nodeslos.store:
            await self.nodeslo_writer.delete(name)
        else:
            self.nodeslo_writer.forget(name)
