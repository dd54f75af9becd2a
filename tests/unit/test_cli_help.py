"""Every option of every `loadline` subcommand explains itself in `--help`."""

from __future__ import annotations

import argparse
import re

import pytest

from common.cli import SUBCOMMANDS, main


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
    options = [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]
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
    assert f"(default {defaults.metrics_port})" in flat
