"""Go ``time.Duration`` strings ("1m", "5m0s", "500ms") as they appear in Koordinator configs."""

from __future__ import annotations

import math
import re

_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> float:
    """Seconds in a Go duration string; raises ValueError on anything Go would reject."""
    s = text.strip()
    sign = 1.0
    if s and s[0] in "+-":
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f"invalid duration {text!r}")
    pos, total = 0, 0.0
    while pos < len(s):
        m = _PART.match(s, pos)
        if m is None:
            raise ValueError(f"invalid duration {text!r}")
        total += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
        pos = m.end()
    return sign * total


def format_go_duration(seconds: float) -> str:
    """Go's ``Duration.String()`` for the values configs use (e.g. 60 -> "1m0s", 0.5 -> "500ms")."""
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 1:
        ms = seconds * 1e3
        return f"{sign}{_trim(ms)}ms"
    hours = int(seconds // 3600)
    minutes = int((seconds - hours * 3600) // 60)
    rest = seconds - hours * 3600 - minutes * 60
    out = sign
    if hours:
        out += f"{hours}h"
    if hours or minutes:
        out += f"{minutes}m"
    return out + f"{_trim(rest)}s"


def _trim(value: float) -> str:
    if math.isclose(value, round(value), abs_tol=1e-9):
        return str(round(value))
    return f"{value:.9f}".rstrip("0").rstrip(".")
