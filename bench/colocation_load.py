"""The colocation bench's workloads (bench/colocation_bench.py): the latency-sensitive service, the batch burner,
and the load generator that drives the service from the host.

    SERVICE   runs in a pod (python3 of Loadline's image): HTTP/1.1 keep-alive on :8080 ($PORT), every request the same
              fixed CPU work (WORK iterations of a Python loop), answered in one event loop like a small web service.
    BURNER    runs in a pod: counts units of fixed CPU work (100,000 loop iterations each) as fast as it is allowed,
              holding MIB MiB of touched memory; writes its count with a timestamp to COUNT_FILE (a hostPath the bench
              reads) every second, so work done is known even after the pod is gone.
    loadgen   `python bench/colocation_load.py loadgen --url http://10.244.77.5:8080/ --rate 80 --seconds 300 --out F`:
              an open-loop generator (requests sent on a fixed schedule whatever the answers do, so a slow answer
              never delays the next request: its latency is measured from when it was due, not when it was sent),
              bounded in count (rate x seconds) and time, then exits; F gets one line per request
              "<due, seconds since start> <latency s or -1 for an error>".
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import urllib.parse
from pathlib import Path

SERVICE = r"""
import asyncio, os
WORK, PORT = int(os.environ["WORK"]), int(os.environ.get("PORT", "8080"))

def work():
    x = 0
    for i in range(WORK):
        x += i
    return x

async def handle(reader, writer):
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            while (await reader.readline()) not in (b"\r\n", b""):
                pass
            body = b"%d\n" % (work() & 0xFFFF)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()

async def main():
    server = await asyncio.start_server(handle, os.environ.get("ADDRESS", "0.0.0.0"), PORT, backlog=256)
    print("serving on", server.sockets[0].getsockname()[1], "work", WORK, flush=True)
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""

BURNER = r"""
import os, time
mib, path = int(os.environ["MIB"]), os.environ["COUNT_FILE"]
held = bytearray(mib * 1024 * 1024)
for i in range(0, len(held), 4096):
    held[i] = 1
print("holding", mib, "MiB", flush=True)
units, last = 0, 0.0
while True:
    for _ in range(100000):
        pass
    units += 1
    now = time.time()
    if now - last >= 1.0:
        with open(path + ".tmp", "w") as f:
            f.write(f"{now} {units}\n")
        os.replace(path + ".tmp", path)
        last = now
"""

REQUEST_TIMEOUT = 2.0  # an answer later than this is an error (and its connection is dropped)
MAX_CONNECTIONS = 64


class LoadGenerator:
    def __init__(self, url: str, rate: float, seconds: float) -> None:
        parsed = urllib.parse.urlsplit(url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.request = f"GET {parsed.path or '/'} HTTP/1.1\r\nHost: {parsed.netloc}\r\n\r\n".encode()
        self.rate, self.seconds = rate, seconds
        self.idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
        self.open = 0
        self.results: list[tuple[float, float]] = []

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """An idle keep-alive connection, a new one while fewer than MAX_CONNECTIONS are open, else the next freed."""
        if self.idle.empty() and self.open < MAX_CONNECTIONS:
            self.open += 1
            try:
                return await asyncio.open_connection(self.host, self.port)
            except BaseException:
                self.open -= 1
                raise
        return await self.idle.get()

    async def _one(self, due: float, started: float) -> None:
        conn = None
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT - (time.monotonic() - (started + due))):
                conn = await self._connection()  # every connection busy: the clock runs on while it waits
                reader, writer = conn
                writer.write(self.request)
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                if not line:
                    raise ConnectionError("closed")
                await reader.readexactly(length)
            self.results.append((due, time.monotonic() - (started + due)))
            self.idle.put_nowait(conn)
        except (TimeoutError, OSError, ValueError, asyncio.IncompleteReadError):
            self.results.append((due, -1.0))
            if conn is not None:
                conn[1].close()
                self.open -= 1

    async def run(self) -> None:
        started = time.monotonic()
        tasks = set()
        for i in range(int(self.rate * self.seconds)):
            due = i / self.rate
            delay = started + due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(self._one(due, started))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks, timeout=REQUEST_TIMEOUT + 1)
        while not self.idle.empty():
            self.idle.get_nowait()[1].close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("loadgen", help="drive the service at a fixed rate for a fixed time, then exit")
    gen.add_argument("--url", required=True)
    gen.add_argument("--rate", type=float, required=True, help="requests per second")
    gen.add_argument("--seconds", type=float, required=True)
    gen.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if not (0 < args.rate <= 5000 and 0 < args.seconds <= 3600):
        parser.error("--rate must be in (0, 5000] and --seconds in (0, 3600]")
    generator = LoadGenerator(args.url, args.rate, args.seconds)
    asyncio.run(generator.run())
    args.out.write_text("".join(f"{due:.4f} {latency:.6f}\n" for due, latency in sorted(generator.results)))
    errors = sum(1 for _, latency in generator.results if latency < 0)
    print(f"loadgen: {len(generator.results)} requests, {errors} errors", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
