"""/healthz, /readyz and /metrics on one aiohttp port."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from common.http_server import start_site


async def start_http_server(
    host: str, port: int, *, healthy: Callable[[], str | None], ready: Callable[[], str | None]
) -> tuple[web.AppRunner, str]:
    """Serve until the returned runner is cleaned up; returns it and the bound address. `healthy`/`ready` return
    None when fine, else the reason, which becomes the 503 body."""

    def probe(check: Callable[[], str | None]) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handler(_request: web.Request) -> web.Response:
            problem = check()
            if problem is None:
                return web.Response(text="ok\n")
            return web.Response(status=503, text=problem + "\n")

        return handler

    async def metrics_handler(_request: web.Request) -> web.Response:
        body = generate_latest(REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", probe(healthy))
    app.router.add_get("/readyz", probe(ready))
    app.router.add_get("/metrics", metrics_handler)
    return await start_site(app, host, port)
