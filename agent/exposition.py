"""The Prometheus text exposition format (0.0.4), written by hand: metric families and their lines.

Used by the agent's /metrics (agent/exporter.py) and its own process series (agent/procself.py), neither of
which imports prometheus_client for it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def joined_labels(labels: Sequence[tuple[str, str]]) -> str:
    """Labels as exposition text, without the braces: `k="v",k="v"`."""
    return ",".join(f'{k}="{_escape(v)}"' for k, v in labels)


@dataclass
class Family:
    name: str
    type: str  # counter, gauge, summary
    help: str
    lines: list[str] = field(default_factory=list)

    def add(self, labels: Sequence[tuple[str, str]], value: float, name: str | None = None) -> None:
        if not math.isfinite(value):
            return
        text = joined_labels(labels)
        self.lines.append(
            f"{name or self.name}{{{text}}} {float(value)!r}" if text else f"{name or self.name} {float(value)!r}"
        )


class Families:
    def __init__(self) -> None:
        self._by_name: dict[str, Family] = {}

    def get(self, name: str, type_: str, help_text: str) -> Family:
        family = self._by_name.get(name)
        if family is None:
            family = self._by_name[name] = Family(name, type_, help_text)
        return family

    def render(self) -> str:
        out: list[str] = []
        for family in self._by_name.values():
            if not family.lines:
                continue
            out.append(f"# HELP {family.name} {escape_help(family.help)}")
            out.append(f"# TYPE {family.name} {family.type}")
            out.extend(family.lines)
        return "\n".join(out) + "\n" if out else ""


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")
