"""`loadline descheduler` start-up: configuration errors stop it with the field named; probes and metrics."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from common.cli import main as cli_main
from scheduler_plugin.descheduler.health import health_app
from scheduler_plugin.descheduler.main import main


@pytest.fixture(autouse=True)
def _keep_root_logger() -> Iterator[None]:
    """main() sets up daemon logging on the root logger; give it back to pytest afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "args.yaml"
    path.write_text(text)
    return path


def test_invalid_args_exit_2_naming_every_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "highThresholds: {cpu: 75}\nlowThresholds: {cpu: 45}\nnumberOfNodes: -1\nbogus: 1\n")
    assert main(["--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"invalid --config {path}" in err
    assert "numberOfNodes: Input should be greater than or equal to 0" in err
    assert "bogus: Extra inputs are not permitted" in err


def test_threshold_errors_name_the_resource(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "highThresholds: {cpu: 175}\nlowThresholds: {cpu: 45}\n")
    assert cli_main(["descheduler", "--config", str(path)]) == 2  # through the `loadline` command
    assert "highThresholds.cpu: 175 must be a percentage between 0 and 100" in capsys.readouterr().err


def test_bad_flags_and_missing_kubeconfig_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "highThresholds: {cpu: 75}\nlowThresholds: {cpu: 45}\n")
    assert main(["--config", str(path), "--bind-address", "nowhere:80", "--port", "70000"]) == 2
    assert "--port: 70000 is not a TCP port" in capsys.readouterr().err
    assert main(["--config", str(path), "--lease-duration", "1", "--renew-deadline", "5"]) == 2
    assert "--lease-duration > --renew-deadline" in capsys.readouterr().err
    assert main(["--config", str(path), "--kubeconfig", str(tmp_path / "missing"), "--bind-address", "127.0.0.1", "--port", "0"]) == 2
    assert "cannot load the cluster configuration" in capsys.readouterr().err


def test_probes_and_metrics() -> None:
    state = {"ready": False}

    async def run() -> None:
        app = health_app(healthy=lambda: (True, "ok"), ready=lambda: (state["ready"], "caches not synced: pods"))
        async with TestClient(TestServer(app)) as client:
            assert (await client.get("/healthz")).status == 200
            response = await client.get("/readyz")
            assert response.status == 503 and "caches not synced: pods" in await response.text()
            state["ready"] = True
            assert (await client.get("/readyz")).status == 200
            metrics = await client.get("/metrics")
            assert metrics.status == 200 and metrics.headers["Content-Type"].startswith("text/plain")
            text = await metrics.text()
            assert "loadline_descheduler_rounds_total" in text
            assert "loadline_descheduler_evictions_total" in text

    asyncio.run(run())


def test_health_server_binds_an_ephemeral_port() -> None:
    from scheduler_plugin.descheduler.health import start_health_server

    async def run() -> None:
        runner, port = await start_health_server("127.0.0.1", 0, healthy=lambda: (True, "ok"), ready=lambda: (True, "ok"))
        try:
            assert port > 0
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /healthz HTTP/1.0\r\n\r\n")
            await writer.drain()
            assert (await reader.read()).split(b"\r\n")[0].endswith(b" 200 OK")
            writer.close()
        finally:
            await runner.cleanup()

    asyncio.run(run())
