"""CLI dispatch, configuration loading and logging plumbing."""

from __future__ import annotations

import importlib
import logging
import re
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from common.cli import SUBCOMMANDS, main
from common.config import ConfigError, load_settings
from common.logging import ctx, setup_logging


class Settings(BaseModel):
    interval_seconds: float = Field(1.0, gt=0)
    node_name: str = "local"
    report: bool = True


def test_settings_precedence(tmp_path: Path) -> None:
    file = tmp_path / "c.yaml"
    file.write_text("interval_seconds: 5\nnode_name: from-file\n")
    env = {"LOADLINE_AGENT_NODE_NAME": "from-env", "LOADLINE_AGENT_REPORT": "false"}
    s = load_settings(
        Settings,
        file=file,
        env_prefix="LOADLINE_AGENT",
        flags={"interval_seconds": 2.5, "node_name": None},
        environ=env,
    )
    assert (s.interval_seconds, s.node_name, s.report) == (2.5, "from-env", False)


@pytest.mark.parametrize(
    ("content", "needle"),
    [("interval_seconds: -1\n", "interval_seconds"), ("[1, 2]\n", "mapping"), ("a: [\n", "not valid YAML")],
)
def test_config_errors_name_the_field(tmp_path: Path, content: str, needle: str) -> None:
    file = tmp_path / "c.yaml"
    file.write_text(content)
    with pytest.raises(ConfigError, match=needle):
        load_settings(Settings, file=file)


def test_missing_config_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings(Settings, file=tmp_path / "absent.yaml")


def test_cli_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    """The help lists exactly the table's commands, in its order, each with its own summary,
    and every entry of the table names a module with a `main`."""
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    listed = re.findall(r"^    (\S+)\s", out, re.MULTILINE)
    assert listed == [*SUBCOMMANDS, "version"]
    flat = " ".join(out.split())  # argparse wraps long summaries
    for name, spec in SUBCOMMANDS.items():
        assert f"{name} {spec.summary}" in flat
        assert callable(getattr(importlib.import_module(spec.module), "main", None)), spec.module


def test_cli_unknown_and_unbuilt_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["frobnicate"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
    assert main(["version"]) == 0
    assert "loadline 0.1.0" in capsys.readouterr().out


def test_key_value_logging(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("debug")
    logging.getLogger("loadline.test").info("published", extra=ctx(node="n1", note="two words"))
    err = capsys.readouterr().err
    assert 'loadline.test: published node=n1 note="two words"' in err


def test_components_export_no_created_series() -> None:
    """Every component starts through common.cli, which turns off prometheus_client's `<name>_created` gauges."""
    from prometheus_client import CollectorRegistry, Counter, generate_latest
    from prometheus_client.metrics import enable_created_metrics

    from common.cli import disable_created_series

    enable_created_metrics()  # the default, which an earlier test's `main([...])` has turned off in this process
    registry = CollectorRegistry()
    Counter("probe_events_total", "probe", registry=registry).inc()
    try:
        assert b"probe_events_created" in generate_latest(registry)
        disable_created_series()
        text = generate_latest(registry)
        assert b"probe_events_total 1.0" in text and b"_created" not in text
    finally:
        enable_created_metrics()
