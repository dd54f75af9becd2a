"""bench/colocation_bench.py's parts that need no cluster: the service and the load generator on loopback, and the
figures, table and plot from samples."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.colocation_bench import figures, p99_series, svg, table
from bench.colocation_load import SERVICE, LoadGenerator

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def service() -> Iterator[int]:
    """The service on a free loopback port, with a small fixed work per request."""
    env = {**os.environ, "WORK": "20000", "PORT": "0", "ADDRESS": "127.0.0.1"}
    proc = subprocess.Popen([sys.executable, "-c", SERVICE], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline().split()[2])
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def run_generator(url: str, rate: float, seconds: float, tmp_path: Path) -> tuple[list[tuple[float, float]], float]:
    out = tmp_path / "latencies.txt"
    started = time.monotonic()
    subprocess.run([sys.executable, str(REPO / "bench" / "colocation_load.py"), "loadgen", "--url", url, "--rate",
                    str(rate), "--seconds", str(seconds), "--out", str(out)], check=True, capture_output=True,
                   timeout=30)  # fmt: skip
    rows = [(float(d), float(v)) for d, v in (line.split() for line in out.read_text().splitlines())]
    return rows, time.monotonic() - started


def test_the_generator_sends_on_schedule_and_stops_by_itself(service: int, tmp_path: Path) -> None:
    rows, took = run_generator(f"http://127.0.0.1:{service}/", 50, 1.0, tmp_path)
    assert len(rows) == 50 and [d for d, _ in rows] == pytest.approx([i / 50 for i in range(50)])
    assert all(0 < v < 2 for _, v in rows), "every request answered"
    assert took < 10


def test_requests_nobody_answers_are_errors_within_the_bound(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rows, took = run_generator(f"http://127.0.0.1:{port}/", 20, 0.5, tmp_path)
    assert len(rows) == 10 and all(v == -1 for _, v in rows)
    assert took < 10


def test_latency_is_counted_from_when_a_request_was_due() -> None:
    """Open loop: with every connection busy a request waits, and the wait is part of its latency."""
    import asyncio

    gen = LoadGenerator("http://127.0.0.1:9/", 10, 1)
    assert gen.request.startswith(b"GET / HTTP/1.1\r\nHost: 127.0.0.1:9")
    assert asyncio.run(_timeout_of(gen)) == pytest.approx(-1.0)


async def _timeout_of(gen: LoadGenerator) -> float:
    await gen._one(0.0, time.monotonic() - 5)  # due 5 s ago: already past its 2 s budget
    return gen.results[0][1]


def synthetic_run(config: int, pods_cores: float, batch_cores: float, p99_ms: float) -> dict[str, object]:
    samples = []
    for t in range(0, 61):
        samples.append({"t": float(t), "pods_cpu": pods_cores * t, "ls_cpu": 0.2 * t, "batch_cpu": batch_cores * t,
                        "host_busy": 1.5 * t, "host_idle": 0.5 * t, "pods_memory": 1e9, "host_memory": 4e9,
                        "batch_units": 100.0 * t})  # fmt: skip
    latencies = [(i / 10, 0.002) for i in range(600)]
    latencies[550] = (55.0, p99_ms / 1000)
    latencies[551] = (55.1, -1.0)
    return {"config": config, "name": f"config {config}", "seconds": 90.0, "samples": samples, "latencies": latencies,
            "evicted": 0, "restarts": 0}  # fmt: skip


def test_figures_table_and_plot_from_samples() -> None:
    one, four = synthetic_run(1, 0.4, 0.0, 3.0), synthetic_run(4, 1.0, 0.6, 3.0)
    f1, f4 = figures(one, 20, 2.0, 8e9), figures(four, 20, 2.0, 8e9)
    assert f1.pods_cpu == pytest.approx(0.2) and f4.pods_cpu == pytest.approx(0.5)
    assert f4.batch_cores == pytest.approx(0.6) and f4.host_cpu == pytest.approx(0.75)
    assert f4.pods_memory == pytest.approx(0.125) and f4.work == pytest.approx(4000)
    assert f4.errors == 1 and f4.requests == 400 and f4.p50 == pytest.approx(2.0)
    text = table([f1, f4], "bench/colocation_bench.py --measure 40", ["# context"])
    assert text.startswith("$ bench/colocation_bench.py --measure 40\n# context\n")
    assert "(4) vs (1): pods CPU x2.50 (target >= 2), LS p99 +0.0% (target <= +10 %)" in text
    series = p99_series(four)
    assert len(series) == 6 and series[0] == (5.0, pytest.approx(2.0))
    plot = svg([one, four], 20, 2.0, "title")
    assert plot.startswith("<svg") and plot.count("<polyline") == 2 * 4 and "(4) config 4" in plot
