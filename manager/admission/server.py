"""The webhooks' HTTPS server (aiohttp): POST /mutate-pod, /validate-pod, /validate-profile; GET /healthz.

One TLS context for the life of the server; a new certificate is loaded into it in place (on the event loop, so
no handshake sees half of it): connections made after that get the new one, open ones keep theirs. The PEMs go
through an anonymous in-memory file (memfd), never a file system: the manager's root file system is read-only.

A body larger than `MAX_BODY_BYTES` (above anything the API server sends: an object is at most ~1.5 MiB in etcd
and an update carries two) is refused with 413 before it is read, one without a Content-Length with 411; a client
that sends its body too slowly is cut off after `BODY_TIMEOUT_SECONDS` (408).
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Awaitable, Callable

from aiohttp import web

from common.http_server import bound_address
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


def webhook_handler(webhooks: Webhooks) -> Callable[[web.BaseRequest], Awaitable[web.Response]]:
    """The request handler of aiohttp's low-level server: no application, router or middleware between the socket
    and the webhook (a third of aiohttp's time per request here)."""

    async def handle(request: web.BaseRequest) -> web.Response:
        webhook = PATHS.get(request.path)
        if request.method == "GET" and request.path == "/healthz":
            return web.Response(text="ok\n")
        if webhook is None or request.method != "POST":
            return web.Response(status=404, text="POST /mutate-pod, /validate-pod or /validate-profile\n")
        length = request.content_length
        if length is None or length > MAX_BODY_BYTES:
            metrics.ADMISSIONS.labels(webhook, "", "bad_request").inc()
            status = 411 if length is None else 413
            return web.Response(status=status, text=f"a body of at most {MAX_BODY_BYTES} bytes, with its length\n")
        try:
            async with asyncio.timeout(BODY_TIMEOUT_SECONDS):
                body = await request.content.readexactly(length) if length else b""
        except (TimeoutError, asyncio.IncompleteReadError):
            metrics.ADMISSIONS.labels(webhook, "", "bad_request").inc()
            return web.Response(status=408, text="request body not received in full in time\n")
        status, answer = await webhooks.handle(webhook, body)
        content_type = "application/json" if status == 200 else "text/plain"
        return web.Response(status=status, body=answer, content_type=content_type)

    return handle


async def start_webhook_server(
    webhooks: Webhooks, host: str, port: int, context: ssl.SSLContext
) -> tuple[web.BaseRunner, str]:
    """Serve over HTTPS with `context` (holding a certificate already) until the runner is cleaned up."""
    runner = web.ServerRunner(web.Server(webhook_handler(webhooks)), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host or None, port, ssl_context=context).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, bound_address(runner, host, port)
