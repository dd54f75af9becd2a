"""The one range rule for numbers the agent reads from `/proc` and `/sys` (issue 12).

The kernel prints its counters and sizes as unsigned 64-bit integers, so a value outside [0, 2^64) is not
something the kernel wrote: a corrupted or hostile file (a bind-mounted fake procfs, a FUSE cgroupfs, a
buggy driver's sysfs attribute). Such a value is refused where it is parsed, as `OutOfRangeError` (a
`ValueError`, so every caller that already skips a garbage series skips this one too), and counted under its
own reason. Python's `int()` never wraps, but an integer that large makes float conversion raise
`OverflowError` or gives a value no consumer can hold.

What is published is bounded again at the end (`agent.report`): a NodeMetric quantity above
`common.api.quantity.MAX_CONSUMER_UNITS` would make the node's NodeMetric malformed for every consumer.
"""

from __future__ import annotations

from typing import Final

U64_LIMIT: Final = 2**64


class OutOfRangeError(ValueError):
    """A number that is well formed but outside what the kernel can have written."""


def check_u64(value: int, what: str = "value") -> int:
    """`value` if it is in [0, 2^64), else OutOfRangeError."""
    if not 0 <= value < U64_LIMIT:
        raise OutOfRangeError(f"{what} {_short(value)} outside [0, 2^64)")
    return value


def parse_u64(data: bytes | str, what: str = "value") -> int:
    """One decimal unsigned 64-bit integer. ValueError on garbage (`int()` rejects it), OutOfRangeError on a
    well-formed number outside [0, 2^64)."""
    return check_u64(int(data), what)


def check_all_u64(values: tuple[int, ...], what: str = "values") -> tuple[int, ...]:
    """`values` if every one is in [0, 2^64) (the several counters of one line or file)."""
    if values and not (min(values) >= 0 and max(values) < U64_LIMIT):
        bad = next(v for v in values if not 0 <= v < U64_LIMIT)
        raise OutOfRangeError(f"{what}: {_short(bad)} outside [0, 2^64)")
    return values


def _short(value: int) -> str:
    """A number as a log line can hold it: a 4,000-digit value is shown by its first digits and length."""
    text = str(value)
    return text if len(text) <= 24 else f"{text[:12]}...({len(text.lstrip('-'))} digits)"
