"""Linux cpu lists (`0-3,8,10-11`): `cpuset.cpus`, `/sys/devices/system/cpu/online`, reservation annotations."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

# The highest CPU id a list may name: Linux's NR_CPUS is at most 8192 (x86_64 CONFIG_MAXSMP, arch/x86/Kconfig),
# so no kernel has a CPU past 8191, and a list naming one (`0-4294967295` in a tenant's annotation) is garbage,
# not 4·10⁹ ids to expand.
MAX_CPU_ID: Final = 8191


class CpuListError(ValueError):
    """A cpu list that does not parse, or names a CPU past MAX_CPU_ID."""


def parse_cpu_list(text: str) -> list[int]:
    """`0-3,8` → [0, 1, 2, 3, 8]; raises CpuListError naming the list on garbage or an id past MAX_CPU_ID."""
    cpus: set[int] = set()
    for raw_part in text.strip().split(","):
        part = raw_part.strip()
        if not part:
            continue
        first, sep, last = part.partition("-")
        try:
            low, high = int(first), int(last) if sep else int(first)
        except ValueError:
            raise CpuListError(f"invalid cpu list {_short(text)!r}: {part[:40]!r} is not a cpu or a range") from None
        if low < 0 or high < low:
            raise CpuListError(f"invalid cpu range {part[:40]!r} in {_short(text)!r}")
        if high > MAX_CPU_ID:
            raise CpuListError(f"cpu {high} in {_short(text)!r} is past {MAX_CPU_ID}, the highest id Linux can have")
        cpus.update(range(low, high + 1))
    return sorted(cpus)


def _short(text: str) -> str:
    """The list as an error quotes it: a tenant's annotation may be 256 KiB long."""
    return text if len(text) <= 80 else f"{text[:77]}..."


def format_cpu_list(cpus: Iterable[int]) -> str:
    """[0, 1, 2, 3, 8] → `0-3,8`, the form `cpuset.cpus` expects."""
    parts: list[str] = []
    start = prev = None
    for cpu in sorted(set(cpus)):
        if prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None:
            parts.append(f"{start}-{prev}" if prev != start else f"{start}")
        start = prev = cpu
    if start is not None:
        parts.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(parts)
