"""The webhooks' HTTPS server (aiohttp): POST /mutate-pod, /validate-pod, /validate-profile; GET /healthz.

One TLS context for the life of the server; a new certificate is loaded into it in place (on the event loop, so
no handshake sees half of it): connections made after that get the new one, open ones keep theirs. The PEMs go
through an anonymous in-memory file (memfd), never a file system: the manager's root file system is read-only.

A body larger than `MAX_BODY_BYTES` (above anything the API server sends: an object is at most ~1.5 MiB in etcd
and an update carries two) is refused with 413 by aiohttp before it is read; a client that sends its body too
slowly is cut off after `BODY_TIMEOUT_SECONDS`.
"""

from __future__ import annotations

import asyncio
import os
import ssl

from aiohttp import web

from common.http_server import start_site
from manager.admission import metrics
from manager.admission.webhooks import Webhooks

MAX_BODY_BYTES = 8 * 1024 * 1024
BODY_TIMEOUT_SECONDS = 10.0
PATHS = {f"/{webhook}": webhook for webhook in metrics.WEBHOOKS}


def server_context() -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def load_serving(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """Put a certificate and its key into `context` (in place). Raises ssl.SSLError / OSError when they are bad."""
    fd = os.memfd_create("loadline-webhook-cert", os.MFD_CLOEXEC)
    try:
        os.write(fd, cert_pem + b"\n" + key_pem)
        context.load_cert_chain(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def webhook_app(webhooks: Webhooks) -> web.Application:
    async def admit(request: web.Request) -> web.Response:
        webhook = PATHS[request.path]
        try:
            async with asyncio.timeout(BODY_TIMEOUT_SECONDS):
                body = await request.read()
        except TimeoutError:
            metrics.ADMISSIONS.labels(webhook, "", "bad_request").inc()
            return web.Response(status=408, text="request body not received in time\n")
        status, answer = await webhooks.handle(webhook, body)
        content_type = "application/json" if status == 200 else "text/plain"
        return web.Response(status=status, body=answer, content_type=content_type)

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    for path in PATHS:
        app.router.add_post(path, admit)
    app.router.add_get("/healthz", healthz)
    return app


async def start_webhook_server(
    webhooks: Webhooks, host: str, port: int, context: ssl.SSLContext
) -> tuple[web.AppRunner, str]:
    """Serve over HTTPS with `context` (holding a certificate already) until the runner is cleaned up."""
    return await start_site(webhook_app(webhooks), host, port, ssl_context=context)
