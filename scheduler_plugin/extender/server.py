"""HTTP side of the extender (aiohttp).

Routes (prefix configurable, kube-scheduler calls `urlPrefix + "/" + verb`):
  POST <prefix>/filter       ExtenderArgs -> ExtenderFilterResult
  POST <prefix>/prioritize   ExtenderArgs -> HostPriorityList
  POST <prefix>/preempt      ExtenderPreemptionArgs -> ExtenderPreemptionResult (candidates our filters accept)
  GET  /healthz              200 while the process serves
  GET  /readyz               200 once the caches have synced, else 503
  GET  /metrics              Prometheus text format

Status codes: 400 with the reason for a malformed body (kube-scheduler treats any non-200 as
an error for that call); 503 before the caches have synced; 500 for an unexpected failure
(logged with its traceback). A plugin that cannot decide is not a transport failure: the filter
answers 200 with `Error` set (kube-scheduler then fails the attempt and retries the pod);
prioritize answers 500, which kube-scheduler logs and ignores. No request can stop the server.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from common.kube.reflector import LIVENESS_STALL_SECONDS, STALL_SECONDS
from scheduler_plugin.extender import metrics
from scheduler_plugin.extender.engine import ExtenderEngine, InvalidPod, PluginError
from scheduler_plugin.extender.wire import (
    BadRequest,
    ExtenderArgs,
    PreemptionArgs,
    host_priority_list,
    parse_args,
    parse_preemption_args,
    preemption_result,
)

log = logging.getLogger("loadline.extender.server")

DEFAULT_MAX_BODY_BYTES = 256 * 1024 * 1024  # full-Node mode on 15,000 nodes sends tens of MB

Ready = Callable[[], bool]
NotProgressing = Callable[[float], str | None]  # stall seconds -> why a loop makes no progress, or None
Args = TypeVar("Args", ExtenderArgs, PreemptionArgs)


def normalize_prefix(prefix: str) -> str:
    """'' / '/' -> ''; 'scheduler' / '/scheduler/' -> '/scheduler'."""
    stripped = prefix.strip().strip("/")
    return f"/{stripped}" if stripped else ""


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


class ExtenderServer:
    def __init__(
        self,
        engine: ExtenderEngine,
        *,
        ready: Ready = lambda: True,
        not_progressing: NotProgressing = lambda _seconds: None,
        prefix: str = "",
    ) -> None:
        self.engine = engine
        self.ready = ready
        self.not_progressing = not_progressing
        self.prefix = normalize_prefix(prefix)

    def app(self, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> web.Application:
        app = web.Application(client_max_size=max_body_bytes)
        app.router.add_post(f"{self.prefix}/filter", self._verb("filter", self._filter, parse_args))
        app.router.add_post(f"{self.prefix}/prioritize", self._verb("prioritize", self._prioritize, parse_args))
        app.router.add_post(f"{self.prefix}/preempt", self._verb("preempt", self._preempt, parse_preemption_args))
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        return app

    # ------------------------------------------------------------------ verbs
    def _filter(self, args: ExtenderArgs) -> web.Response:
        return web.Response(text=_dumps(self.engine.filter(args)), content_type="application/json")

    def _prioritize(self, args: ExtenderArgs) -> web.Response:
        try:
            scores = self.engine.prioritize(args)
        except PluginError as exc:
            metrics.PLUGIN_ERRORS.labels("prioritize").inc()
            return _error(500, str(exc))
        return web.Response(text=_dumps(host_priority_list(scores)), content_type="application/json")

    def _preempt(self, args: PreemptionArgs) -> web.Response:
        try:
            kept = self.engine.preempt(args)
        except PluginError as exc:
            metrics.PLUGIN_ERRORS.labels("preempt").inc()
            return _error(500, str(exc))
        return web.Response(text=_dumps(preemption_result(kept)), content_type="application/json")

    def _verb(
        self, verb: str, answer: Callable[[Args], web.Response], parse: Callable[[bytes], Args],
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            started = time.perf_counter()
            response = await self._handle(verb, request, answer, parse)
            metrics.LATENCY.labels(verb).observe(time.perf_counter() - started)
            metrics.REQUESTS.labels(verb, str(response.status)).inc()
            return response

        return handle

    async def _handle(
        self, verb: str, request: web.Request, answer: Callable[[Args], web.Response], parse: Callable[[bytes], Args]
    ) -> web.Response:
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge as exc:
            metrics.BAD_REQUESTS.labels(verb).inc()
            return _error(413, exc.text or "request body too large")
        try:
            if not self.ready():
                metrics.NOT_READY.labels(verb).inc()
                return _error(503, "extender caches have not synced yet")
            args = parse(body)
            metrics.NODES_PER_REQUEST.labels(verb).observe(len(args.candidate_names()))
            return answer(args)
        except (BadRequest, InvalidPod) as exc:
            metrics.BAD_REQUESTS.labels(verb).inc()
            log.info("bad %s request: %s", verb, exc)
            return _error(400, str(exc))
        except Exception as exc:  # a bug of ours must cost one request, not the process
            metrics.INTERNAL_ERRORS.labels(verb).inc()
            log.exception("%s request failed", verb)
            return _error(500, f"internal error: {type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ probes
    async def _healthz(self, _request: web.Request) -> web.Response:
        if (problem := self.not_progressing(LIVENESS_STALL_SECONDS)) is not None:
            return web.Response(status=503, text=problem)
        return web.Response(text="ok")

    async def _readyz(self, _request: web.Request) -> web.Response:
        if (problem := self.not_progressing(STALL_SECONDS)) is not None:
            return web.Response(status=503, text=problem)
        if self.ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="caches not synced")

    async def _metrics(self, _request: web.Request) -> web.Response:
        response = web.Response(body=generate_latest(REGISTRY))
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response


def _error(status: int, reason: str) -> web.Response:
    """An error answer: the reason as JSON (`{"Error": ...}`, what a Go client would look for) ."""
    return web.Response(status=status, text=_dumps({"Error": reason}), content_type="application/json")
