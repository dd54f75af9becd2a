"""Binding through the API server: `POST pods/{name}/binding` (kube-scheduler's
pkg/scheduler/framework/plugins/defaultbinder/default_binder.go).

The answer to a successful binding is a `Status` (HTTP 201), not a Pod. A 409 needs a
closer look, because it means different things: the pod is already bound — possibly by
this very scheduler, when an earlier answer was lost — or it is being deleted, or it
was re-created under the same name (the uid precondition failed). The pod is read back
to tell which; pods that are gone or bound elsewhere are "abandoned": the scheduler
must not requeue them, the informer will show where they are.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from common.kube.http import KubeError, KubeHTTP
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.status import SUCCESS, Status
from scheduler_plugin.server.apihealth import ApiHealth, is_health_problem
from scheduler_plugin.server.metrics import BIND_ERRORS, BINDING_DURATION

log = logging.getLogger("loadline.scheduler.binder")


def binding_body(pod: PodInfo, node_name: str) -> dict[str, object]:
    metadata: dict[str, str] = {"name": pod.name, "namespace": pod.namespace}
    uid = (pod.raw.get("metadata") or {}).get("uid")
    if uid:
        metadata["uid"] = str(uid)  # a precondition: never bind a re-created pod of the same name
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": metadata,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
    }


class APIBinder:
    def __init__(
        self,
        http: KubeHTTP,
        before_bind: Callable[[str], Awaitable[None]] | None = None,
        health: ApiHealth | None = None,
    ) -> None:
        self.http = http
        self._before_bind = before_bind
        self.health = health if health is not None else ApiHealth()
        self.abandoned: set[str] = set()  # pod keys the scheduler must drop instead of requeueing

    async def bind(self, pod: PodInfo, node_name: str) -> Status:
        if self._before_bind is not None:
            # Earlier status writes for this pod land first, so a late PodScheduled=False
            # never overwrites the PodScheduled=True the binding sets.
            await self._before_bind(pod.key)
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding"
        started = time.perf_counter()
        try:
            await self.http.create(path, binding_body(pod, node_name))
        except KubeError as exc:
            BINDING_DURATION.observe(time.perf_counter() - started)
            return await self._failed(pod, node_name, exc)
        BINDING_DURATION.observe(time.perf_counter() - started)
        self.health.succeeded("binding")
        return SUCCESS

    async def _failed(self, pod: PodInfo, node_name: str, exc: KubeError) -> Status:
        if exc.status == 404:
            BIND_ERRORS.labels("not_found").inc()
            self.abandoned.add(pod.key)
            return Status.error(f"binding {pod.key}: pod not found")
        if exc.status == 409:
            return await self._conflict(pod, node_name, exc)
        BIND_ERRORS.labels("unreachable" if exc.status == 0 else "rejected").inc()
        if is_health_problem(exc):
            self.health.failed("binding", exc)
        return Status.error(f"binding {pod.key} to {node_name}: {exc}")

    async def _conflict(self, pod: PodInfo, node_name: str, exc: KubeError) -> Status:
        try:
            current = await self.http.get(f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}")
        except KubeError as read_error:
            if read_error.is_not_found:
                BIND_ERRORS.labels("not_found").inc()
                self.abandoned.add(pod.key)
                return Status.error(f"binding {pod.key}: pod was deleted")
            BIND_ERRORS.labels("conflict").inc()
            return Status.error(f"binding {pod.key} to {node_name}: {exc}")
        meta = current.get("metadata") or {}
        bound_to = str((current.get("spec") or {}).get("nodeName") or "")
        our_uid = (pod.raw.get("metadata") or {}).get("uid")
        if our_uid and meta.get("uid") != our_uid:
            BIND_ERRORS.labels("conflict").inc()
            self.abandoned.add(pod.key)
            return Status.error(f"binding {pod.key}: the pod was re-created")
        if bound_to == node_name:
            log.info("pod %s was already bound to %s (an earlier binding went through)", pod.key, node_name)
            return SUCCESS
        BIND_ERRORS.labels("conflict").inc()
        if bound_to or meta.get("deletionTimestamp"):
            self.abandoned.add(pod.key)
            where = f"bound to {bound_to} by someone else" if bound_to else "being deleted"
            return Status.error(f"binding {pod.key} to {node_name}: the pod is {where}")
        return Status.error(f"binding {pod.key} to {node_name}: {exc.message}")
