"""`loadline <command>` imports its component with the cyclic collector off, and turns it back on."""

from __future__ import annotations

import gc

import pytest

from common import cli


def test_the_component_is_imported_without_the_collector_which_runs_again_for_the_component(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, bool] = {}

    def entry(argv: list[str]) -> int:
        seen["running"] = gc.isenabled()
        return 0

    def load(name: str) -> object:
        seen["importing"] = gc.isenabled()
        return entry

    monkeypatch.setattr(cli, "_load", load)
    monkeypatch.setattr(cli, "disable_created_series", lambda: None)
    assert cli.main(["top"]) == 0
    assert seen == {"importing": False, "running": True}


def test_the_collector_runs_again_when_the_component_is_not_built(monkeypatch: pytest.MonkeyPatch) -> None:
    def load(name: str) -> object:
        raise cli._NotBuilt

    monkeypatch.setattr(cli, "_load", load)
    assert cli.main(["top"]) == 2
    assert gc.isenabled()
