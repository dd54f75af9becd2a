"""Numbers for people: cores and binary byte units (`--once`, `loadline top`)."""

from __future__ import annotations

import math

_BINARY = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def human_cores(cores: float) -> str:
    """`1.25`, `0.35`, `12m` below 0.01 of a core."""
    if not math.isfinite(cores):
        return "-"
    if 0 < abs(cores) < 0.01:
        return f"{cores * 1000:.0f}m"
    return f"{cores:.2f}"


def human_bytes(value: float) -> str:
    """`1.5 GiB`, `512 MiB`, `900 B`."""
    if not math.isfinite(value):
        return "-"
    for unit, size in _BINARY:
        if abs(value) >= size:
            scaled = value / size
            return f"{scaled:.1f} {unit}" if scaled < 100 else f"{scaled:.0f} {unit}"
    return f"{value:.0f} B"
