"""The scheduler's HTTP port: /healthz, /readyz, /metrics and /explain/<namespace>/<pod>."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from common.kube.reflector import LIVENESS_STALL_SECONDS, STALL_SECONDS

ExplainFn = Callable[[str, str], tuple[int, dict[str, Any]]]


def build_app(
    *,
    ready: Callable[[], bool],
    is_leader: Callable[[], bool],
    explain: ExplainFn,
    not_progressing: Callable[[float], str | None] = lambda _seconds: None,
) -> web.Application:
    """`not_progressing(stall_seconds)`: why a watch or the scheduling loop makes no progress, or None."""

    async def healthz(_request: web.Request) -> web.Response:
        if (problem := not_progressing(LIVENESS_STALL_SECONDS)) is not None:
            return web.Response(status=503, text=problem)
        return web.Response(text="ok")

    async def readyz(_request: web.Request) -> web.Response:
        if (problem := not_progressing(STALL_SECONDS)) is not None:
            return web.Response(status=503, text=problem)
        # Ready once the informers have synced, on the leader and on a standby alike: a standby
        # with warm caches is exactly what a failover needs.
        if ready():
            return web.Response(text=f"ok ({'leader' if is_leader() else 'standby'})")
        return web.Response(status=503, text="informers not synced yet")

    async def metrics(_request: web.Request) -> web.Response:
        body = generate_latest(REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def explain_pod(request: web.Request) -> web.Response:
        status, doc = explain(request.match_info["namespace"], request.match_info["name"])
        return web.json_response(doc, status=status)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/livez", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/explain/{namespace}/{name}", explain_pod)
    return app
