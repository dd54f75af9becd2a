"""The agent's small HTTP server (`agent.httpd`), spoken to over raw sockets: keep-alive, HEAD, errors, limits."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from agent import httpd
from agent.httpd import HTTPServer, Response


async def hello() -> Response:
    return Response(200, b"hello\n")


async def broken() -> Response:
    raise RuntimeError("boom")


def serve(scenario: Callable[[int, HTTPServer], Awaitable[None]]) -> None:
    async def run() -> None:
        server = HTTPServer({"/hello": hello, "/broken": broken})
        port = await server.start("127.0.0.1", 0)
        try:
            await scenario(port, server)
        finally:
            await server.stop()

    asyncio.run(run())


async def read_response(reader: asyncio.StreamReader, *, head: bool = False) -> tuple[int, dict[str, str], bytes]:
    status = int((await reader.readline()).split()[1])
    headers = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.lower()] = value.strip()
    body = b"" if head else await reader.readexactly(int(headers["content-length"]))
    return status, headers, body


async def exchange(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    try:
        return await read_response(reader)
    finally:
        writer.close()


def test_keep_alive_serves_several_requests_on_one_connection_then_honours_close() -> None:
    async def scenario(port: int, server: HTTPServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(3):
            writer.write(b"GET /hello?x=1 HTTP/1.1\r\nHost: a\r\n\r\n")
            status, headers, body = await read_response(reader)
            assert (status, body) == (200, b"hello\n") and "connection" not in headers
        writer.write(b"HEAD /hello HTTP/1.1\r\nHost: a\r\n\r\n")
        status, headers, _ = await read_response(reader, head=True)
        assert status == 200 and headers["content-length"] == "6"
        writer.write(b"GET /hello HTTP/1.1\r\nConnection: close\r\n\r\n")
        status, headers, body = await read_response(reader)
        assert headers["connection"] == "close" and body == b"hello\n"
        assert await reader.read() == b""  # closed by the server
        writer.close()

    serve(scenario)


def test_http_1_0_closes_and_a_body_sent_with_a_get_is_dropped() -> None:
    async def scenario(port: int, server: HTTPServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /hello HTTP/1.1\r\nContent-Length: 5\r\n\r\nabcdeGET /hello HTTP/1.0\r\n\r\n")
        assert (await read_response(reader))[2] == b"hello\n"
        status, headers, _ = await read_response(reader)
        assert status == 200 and headers["connection"] == "close" and await reader.read() == b""
        writer.close()

    serve(scenario)


def test_errors_have_their_status_and_the_server_keeps_serving() -> None:
    async def scenario(port: int, server: HTTPServer) -> None:
        assert (await exchange(port, b"GET /nope HTTP/1.1\r\n\r\n"))[0] == 404
        assert (await exchange(port, b"POST /hello HTTP/1.1\r\nContent-Length: 0\r\n\r\n"))[0] == 405
        assert (await exchange(port, b"GET /broken HTTP/1.1\r\n\r\n"))[0] == 500
        assert (await exchange(port, b"BREW\r\n\r\n"))[0] == 400
        assert (await exchange(port, b"GET /hello HTTP/1.1\r\nno colon here\r\n\r\n"))[0] == 400
        assert (await exchange(port, b"GET /hello HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"))[0] == 501
        too_big = f"GET /hello HTTP/1.1\r\nContent-Length: {httpd.MAX_BODY + 1}\r\n\r\n".encode()
        assert (await exchange(port, too_big))[0] == 413
        long_header = b"GET /hello HTTP/1.1\r\nX: " + b"a" * httpd.MAX_LINE + b"\r\n\r\n"
        assert (await exchange(port, long_header))[0] == 431
        many = b"GET /hello HTTP/1.1\r\n" + b"X: y\r\n" * (httpd.MAX_HEADERS + 1) + b"\r\n"
        assert (await exchange(port, many))[0] == 431
        status, headers, body = await exchange(port, b"GET /hello HTTP/1.1\r\n\r\n")
        assert (status, headers["content-type"], body) == (200, "text/plain; charset=utf-8", b"hello\n")

    serve(scenario)


def test_stop_closes_kept_alive_connections() -> None:
    async def scenario(port: int, server: HTTPServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /hello HTTP/1.1\r\n\r\n")
        await read_response(reader)
        await asyncio.wait_for(server.stop(), 5)
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()

    serve(scenario)


def test_a_slow_request_head_is_cut_off(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(httpd, "HEAD_TIMEOUT", 0.2)

    async def scenario(port: int, server: HTTPServer) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /hello HTTP/1.1\r\nHost: a\r\n")  # and never the blank line
        status, headers, _ = await asyncio.wait_for(read_response(reader), 5)
        assert status == 408 and headers["connection"] == "close"
        writer.close()

    serve(scenario)


def test_after_sent_runs_once_per_response_when_its_body_is_no_longer_held() -> None:
    import weakref

    calls: list[bool] = []
    bodies: list[weakref.ref[bytearray]] = []

    class Body(bytearray):  # bytes cannot be weakly referenced; the server only needs the buffer protocol
        pass

    async def big() -> Response:
        body = Body(b"x" * 300_000)
        bodies.append(weakref.ref(body))
        # dead: the server dropped the response (and its body) before calling back
        return Response(200, body, after_sent=lambda: calls.append(bodies[-1]() is None))  # type: ignore[arg-type]

    async def run() -> None:
        server = HTTPServer({"/big": big})
        port = await server.start("127.0.0.1", 0)
        try:
            for _ in range(2):
                status, _, body = await exchange(port, b"GET /big HTTP/1.1\r\nHost: a\r\n\r\n")
                assert status == 200 and len(body) == 300_000
        finally:
            await server.stop()

    asyncio.run(run())
    assert calls == [True, True]
