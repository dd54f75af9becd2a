"""Every option of every `loadline` subcommand explains itself in `--help`."""

from __future__ import annotations

import argparse
import re

import pytest

from common.cli import SUBCOMMANDS, main
from common.flags import is_deprecated_alias


def _parser_of(command: str, monkeypatch: pytest.MonkeyPatch) -> tuple[argparse.ArgumentParser, str]:
    """The parser a subcommand builds, caught when it prints its help, and the help text itself."""
    seen: list[argparse.ArgumentParser] = []
    original = argparse.ArgumentParser.format_help

    def recording(self: argparse.ArgumentParser) -> str:
        seen.append(self)
        return original(self)

    monkeypatch.setattr(argparse.ArgumentParser, "format_help", recording)
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert seen, f"loadline {command} --help printed no argparse help"
    parser = seen[-1]
    return parser, original(parser)


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_every_option_has_help(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    parser, text = _parser_of(command, monkeypatch)
    options = [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)
               and not is_deprecated_alias(a)]  # fmt: skip
    assert options, f"loadline {command} has no options"
    missing = [a.option_strings[0] for a in options if not (a.help and a.help.strip() and a.help != argparse.SUPPRESS)]
    assert not missing, f"loadline {command}: options without help text: {missing}"
    # a default said twice ("(default: x) (default: None)") comes from help text plus a defaults formatter
    doubled = re.findall(r"\(default:?[^)]*\)\s*\(default:?[^)]*\)", " ".join(text.split()))
    assert not doubled, f"loadline {command}: doubled defaults {doubled}"


def test_manager_help_defaults_come_from_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from manager.settings import ManagerSettings

    _, text = _parser_of("manager", monkeypatch)
    flat = " ".join(text.split())
    defaults = ManagerSettings()
    assert f"(default {defaults.workers})" in flat
    assert f"(default {defaults.config_map})" in flat
    assert f"(default {defaults.port})" in flat


# Every daemon's HTTP server (/healthz, /readyz, /metrics) is `--bind-address` and `--port`; old spellings of a
# renamed flag still parse, hidden from --help, and say they are deprecated.
DAEMONS = ("agent", "manager", "scheduler", "extender", "descheduler")
DEPRECATED = {"agent": {"--metrics-port": "--port", "--metrics-address": "--bind-address"},
              "manager": {"--metrics-port": "--port"}}  # fmt: skip


@pytest.mark.parametrize("command", DAEMONS)
def test_every_daemon_spells_its_http_server_the_same(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    parser, text = _parser_of(command, monkeypatch)
    flags = {flag for a in parser._actions if not is_deprecated_alias(a) for flag in a.option_strings}
    assert {"--port", "--bind-address", "--kubeconfig", "--config", "--log-level", "--log-json"} <= flags
    assert not {f for f in flags if f.startswith("--metrics-") and f != "--metrics-enabled"}, flags
    for old in DEPRECATED.get(command, {}):
        assert old not in parser.format_usage(), f"{old} shown in the usage"
        assert f"formerly{old}" in "".join(text.split()), f"--help does not name the old spelling {old}"
    port = next(a for a in parser._actions if "--port" in a.option_strings)
    assert "0: any free port" in " ".join((port.help or "").split())


@pytest.mark.parametrize(("command", "old", "new"), [(c, o, n) for c, m in DEPRECATED.items() for o, n in m.items()])
def test_an_old_flag_sets_the_new_one_and_warns(command: str, old: str, new: str, monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    parser, _ = _parser_of(command, monkeypatch)
    value = "127.0.0.2" if "address" in new else "9999"
    target = next(a for a in parser._actions if new in a.option_strings)
    dest = target.dest
    with caplog.at_level("WARNING", logger="loadline.flags"):
        args = parser.parse_args([f"{old}={value}"] + (["--config=x"] if command == "descheduler" else []))
    assert str(getattr(args, dest)) == value
    assert f"{old} is deprecated, use {new}" in caplog.text
    # absent, the old spelling leaves the new flag's default alone
    assert getattr(parser.parse_args(["--config=x"] if command == "descheduler" else []), dest) == target.default
