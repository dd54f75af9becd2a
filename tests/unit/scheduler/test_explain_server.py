"""`loadline explain` finds the local cluster's scheduler, and says how to point it elsewhere when it cannot."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from common.cli import explain


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_default_server_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOADLINE_CACHE", str(tmp_path))
    monkeypatch.delenv("LOADLINE_SCHEDULER_URL", raising=False)
    assert explain.default_server() == (explain.DEFAULT_SERVER, "the default")
    state = tmp_path / "cluster" / "state.json"
    state.parent.mkdir()
    state.write_text(json.dumps({"kubeconfig": "/k", "scheduler_url": "http://127.0.0.1:4242"}))
    url, source = explain.default_server()
    assert url == "http://127.0.0.1:4242" and str(state) in source
    monkeypatch.setenv("LOADLINE_SCHEDULER_URL", "http://sched:1")
    assert explain.default_server() == ("http://sched:1", "$LOADLINE_SCHEDULER_URL")


def test_unreachable_scheduler_names_source_and_remedy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LOADLINE_CACHE", str(tmp_path))
    monkeypatch.delenv("LOADLINE_SCHEDULER_URL", raising=False)
    state = tmp_path / "cluster" / "state.json"
    state.parent.mkdir()
    url = f"http://127.0.0.1:{_closed_port()}"
    state.write_text(json.dumps({"scheduler_url": url}))
    assert explain.main(["default/web-0", "--timeout", "2"]) == 1
    err = capsys.readouterr().err
    assert url in err and "local cluster" in err
    assert "--server" in err and "LOADLINE_SCHEDULER_URL" in err
