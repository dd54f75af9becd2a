"""Linux cpu lists (`0-3,8,10-11`): `cpuset.cpus`, `/sys/devices/system/cpu/online`, reservation annotations."""

from __future__ import annotations

from collections.abc import Iterable


def parse_cpu_list(text: str) -> list[int]:
    """`0-3,8` → [0, 1, 2, 3, 8]; raises ValueError naming the list on garbage."""
    cpus: set[int] = set()
    for raw_part in text.strip().split(","):
        part = raw_part.strip()
        if not part:
            continue
        first, sep, last = part.partition("-")
        try:
            low, high = int(first), int(last) if sep else int(first)
        except ValueError:
            raise ValueError(f"invalid cpu list {text!r}: {part!r} is not a cpu or a range") from None
        if low < 0 or high < low:
            raise ValueError(f"invalid cpu range {part!r} in {text!r}")
        cpus.update(range(low, high + 1))
    return sorted(cpus)


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
