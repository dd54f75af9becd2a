"""HTTP endpoints for probes and Prometheus: /healthz (liveness), /readyz (caches synced), /metrics."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from common.http_server import port_of, start_site

Check = Callable[[], tuple[bool, str]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def health_app(*, healthy: Check, ready: Check) -> web.Application:
    def probe(check: Check) -> Handler:
        async def handler(_request: web.Request) -> web.StreamResponse:
            ok, detail = check()
            return web.Response(status=200 if ok else 503, text=detail + "\n")

        return handler

    async def metrics(_request: web.Request) -> web.StreamResponse:
        response = web.Response(body=generate_latest(REGISTRY))
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    app = web.Application()
    app.router.add_get("/healthz", probe(healthy))
    app.router.add_get("/readyz", probe(ready))
    app.router.add_get("/metrics", metrics)
    return app


async def start_health_server(host: str, port: int, *, healthy: Check, ready: Check) -> tuple[web.AppRunner, int]:
    """Serve until ``runner.cleanup()``; returns the runner and the bound port (``port=0`` picks one)."""
    runner, address = await start_site(health_app(healthy=healthy, ready=ready), host, port)
    return runner, port_of(address)
