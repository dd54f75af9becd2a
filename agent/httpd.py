"""A small HTTP/1.1 server on asyncio streams for the agent's few GET endpoints (/metrics, /healthz, ...).

Why not aiohttp.web (which the other components use): importing aiohttp costs the agent ~10 MiB of resident
memory (its package pulls in the client, the HTTP parser and two TLS contexts built at import), and a standalone
agent needs no HTTP client at all; the agent serves a handful of fixed GET paths to Prometheus and probes. What
is served: GET and HEAD, keep-alive (HTTP/1.1 default, `Connection: close` honoured, HTTP/1.0 closes), bounded
request heads, request bodies read and dropped, idle connections closed, every answer with a Content-Length.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

log = logging.getLogger("loadline.agent.httpd")

MAX_LINE = 8192  # bytes of the request line and of each header line
MAX_HEADERS = 100
MAX_BODY = 64 * 1024  # a GET has no business sending more; larger requests are refused
HEAD_TIMEOUT = 10.0  # seconds to send a request head once its first byte came
IDLE_TIMEOUT = 75.0  # seconds a kept-alive connection may wait for its next request (Go's default idle is 90)

REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    after_sent: Callable[[], None] | None = None  # called once the body is written and this response dropped


Handler = Callable[[], Awaitable[Response]]


class _BadRequest(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status


class HTTPServer:
    """Serves `routes` (path -> handler) on `address:port`; `port` 0 lets the kernel pick (see `self.port`)."""

    def __init__(self, routes: Mapping[str, Handler]) -> None:
        self.routes = dict(routes)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()
        self.port: int | None = None

    async def start(self, address: str, port: int) -> int:
        self._server = await asyncio.start_server(
            self._serve, address, port, reuse_address=True, limit=MAX_LINE + 2
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for writer in list(self._connections):  # kept-alive connections would keep serving otherwise
            writer.close()
        with contextlib.suppress(Exception):
            await self._server.wait_closed()
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the client went away or stalled: nothing to answer
        finally:
            self._connections.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; True to keep the connection for another."""
        try:
            first = await asyncio.wait_for(reader.readline(), IDLE_TIMEOUT)
        except (TimeoutError, ValueError):  # idle too long, or a line beyond the limit
            return False
        if not first:
            return False  # closed between requests
        try:
            method, path, version, headers = await asyncio.wait_for(self._head(first, reader), HEAD_TIMEOUT)
            keep_alive = _keep_alive(version, headers.get("connection", ""))
            await self._drop_body(reader, headers)
        except _BadRequest as exc:
            await _send(writer, Response(exc.status, f"{exc}\n".encode()), keep_alive=False, head=False)
            return False
        except TimeoutError:
            await _send(writer, Response(408, b"request head too slow\n"), keep_alive=False, head=False)
            return False
        response = await self._respond(method, path)
        await _send(writer, response, keep_alive=keep_alive, head=method == "HEAD")
        after_sent = response.after_sent
        del response  # the body is freed here (the transport keeps its own copy of what it has not sent yet)
        if after_sent is not None:
            after_sent()
        return keep_alive

    async def _head(self, first: bytes, reader: asyncio.StreamReader) -> tuple[str, str, str, dict[str, str]]:
        if not first.endswith(b"\n"):
            raise _BadRequest(400, "request line not terminated")
        parts = first.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise _BadRequest(400, "malformed request line")
        method, target, version = parts
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            try:
                line = await reader.readline()
            except ValueError:  # asyncio's limit: a header line beyond MAX_LINE
                raise _BadRequest(431, "header line too long") from None
            if not line.endswith(b"\n"):
                raise asyncio.IncompleteReadError(line, None)
            if line in (b"\r\n", b"\n"):
                return method, target.split("?", 1)[0], version, headers
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep or not name or name != name.strip():
                raise _BadRequest(400, "malformed header line")
            headers[name.lower()] = value.strip()
        raise _BadRequest(431, "too many header lines")

    @staticmethod
    async def _drop_body(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> None:
        if "transfer-encoding" in headers:
            raise _BadRequest(501, "request bodies with a transfer encoding are not accepted")
        length_text = headers.get("content-length", "0")
        if not length_text.isdigit():
            raise _BadRequest(400, "malformed Content-Length")
        length = int(length_text)
        if length > MAX_BODY:
            raise _BadRequest(413, "request body too large")
        if length:
            await reader.readexactly(length)

    async def _respond(self, method: str, path: str) -> Response:
        handler = self.routes.get(path)
        if handler is None:
            return Response(404, b"not found\n")
        if method not in ("GET", "HEAD"):
            return Response(405, b"only GET and HEAD\n")
        try:
            return await handler()
        except Exception:
            log.exception("serving %s failed", path)
            return Response(500, b"internal error\n")


def _keep_alive(version: str, connection: str) -> bool:
    tokens = {t.strip().lower() for t in connection.split(",")}
    if version == "HTTP/1.0":
        return "keep-alive" in tokens
    return "close" not in tokens


async def _send(writer: asyncio.StreamWriter, response: Response, *, keep_alive: bool, head: bool) -> None:
    reason = REASONS.get(response.status, "")
    lines = [
        f"HTTP/1.1 {response.status} {reason}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
    ]
    if not keep_alive:
        lines.append("Connection: close")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    if not head:
        writer.write(response.body)
    await writer.drain()
