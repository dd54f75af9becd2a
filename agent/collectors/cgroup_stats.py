"""Parsers for the cgroup files we sample. CPU times leave here in ONE unit, integer nanoseconds.

- CPU time: v1 `cpuacct.usage` (ns); v2 `cpu.stat` usage_usec (us, x1000).
- CFS throttling: `cpu.stat` nr_periods, nr_throttled, and v1 throttled_time (ns) / v2 throttled_usec (x1000).
- Memory: `memory.stat` (v1 hierarchical total_* keys) and v1 `memory.usage_in_bytes` / v2 `memory.current`.

Normalising at parse time is koordlet's approach (`ParseCPUAcctUsageV2` returns usage_usec*1000); unit
mix-ups here are the classic bug (kata-containers #10278: v2 usec passed on as ns, 1000x off).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from agent.collectors.checked import parse_u64


def parse_int(data: bytes) -> int:
    """A file holding one unsigned 64-bit integer (cpuacct.usage, memory.current, ...). ValueError on garbage
    or empty, OutOfRangeError (a ValueError) when negative or at/above 2^64."""
    return parse_u64(data)


def parse_keyed(data: bytes) -> dict[bytes, int]:
    """All `key value` lines (cpu.stat, memory.stat). Raises ValueError on malformed lines."""
    fields = data.split()
    if not fields or len(fields) % 2:
        raise ValueError("not a flat keyed file")
    pairs = zip(fields[::2], fields[1::2], strict=True)
    return {key: parse_u64(value, key.decode(errors="replace")) for key, value in pairs}


def pick_keyed(data: bytes, keys: tuple[bytes, ...]) -> tuple[int, ...]:
    """The values of `keys` in a `key value` file, without parsing the rest (v1 memory.stat has ~40 lines
    and is read for every cgroup every second: converting only what we use is most of the parse cost).
    Raises KeyError if a key is missing, ValueError if its value is not an integer."""
    data = b"\n" + data  # every key now starts after a newline
    out = []
    for key in keys:
        needle = _NEEDLES.get(key) or _needle(key)
        at = data.find(needle)
        if at < 0:
            raise KeyError(key.decode())
        start = at + len(needle)
        end = data.find(b"\n", start)
        out.append(parse_u64(data[start:] if end < 0 else data[start:end], key.decode()))
    return tuple(out)


_NEEDLES: dict[bytes, bytes] = {}


def _needle(key: bytes) -> bytes:
    needle = _NEEDLES[key] = b"\n" + key + b" "
    return needle


class CfsStat(NamedTuple):
    periods: int
    throttled_periods: int
    throttled_ns: int


class CpuStat(NamedTuple):  # a NamedTuple, not a frozen dataclass: built for every cgroup every second
    usage_ns: int | None  # v2 only; v1 reads cpuacct.usage
    cfs: CfsStat | None  # None when the cgroup has no CFS stats (v2 cpu controller not enabled there)


_V1_CFS = (b"nr_periods", b"nr_throttled", b"throttled_time")
_V2_USAGE = (b"usage_usec",)
_V2_CFS = (b"nr_periods", b"nr_throttled", b"throttled_usec")


# Fast paths: the kernel prints these keys in a fixed order (v1 cpu.stat starts with nr_periods, v2 with
# usage_usec), so an anchored regex match extracts them at a fraction of the cost of key-by-key searches, and
# the results are built with tuple.__new__ (NamedTuple's own __new__ is Python code; this runs for every
# cgroup every second). Anything else (other kernels, reordered keys) takes the general path. At most 19 digits
# (below 10^19 < 2^64): a longer number takes the general path too, which range-checks it
# (`agent.collectors.checked`), so the fast path needs no check of its own.
_N = rb"(\d{1,19})\n"
_FAST_V1_CFS = re.compile(rb"nr_periods (\d{1,19})\nnr_throttled (\d{1,19})\nthrottled_time " + _N)
_FAST_V2_USAGE = re.compile(rb"usage_usec " + _N)
_FAST_V2_CFS = re.compile(rb"\nnr_periods (\d{1,19})\nnr_throttled (\d{1,19})\nthrottled_usec " + _N)
_new = tuple.__new__


def _lru_pattern(prefix: bytes) -> tuple[bytes, re.Pattern[bytes]]:
    """Where the LRU block starts (found with bytes.find), and the regex matching it from there."""
    p = prefix
    start = b"\n" + p + b"inactive_anon "
    return start, re.compile(
        re.escape(start)
        + _N
        + p
        + b"active_anon "
        + _N
        + p
        + b"inactive_file "
        + _N
        + p
        + rb"active_file \d+\n"
        + p
        + b"unevictable "
        + _N
    )


_FAST_V1_LRU = _lru_pattern(b"total_")
_FAST_V2_LRU = _lru_pattern(b"")


def parse_cpu_stat(data: bytes, version: int) -> CpuStat:
    if version == 1:
        m = _FAST_V1_CFS.match(data)
        if m is not None:
            return _new(CpuStat, (None, _new(CfsStat, (int(m[1]), int(m[2]), int(m[3])))))
    else:
        m = _FAST_V2_USAGE.match(data)
        if m is not None:
            usage_ns = int(m[1]) * 1000
            at = data.find(b"\nnr_periods ", m.end() - 1)
            if at < 0:  # no cpu controller in this cgroup: usage only
                return _new(CpuStat, (usage_ns, None))
            m = _FAST_V2_CFS.match(data, at)
            if m is not None:
                return _new(CpuStat, (usage_ns, _new(CfsStat, (int(m[1]), int(m[2]), int(m[3]) * 1000))))
    return _parse_cpu_stat_general(data, version)


def _parse_cpu_stat_general(data: bytes, version: int) -> CpuStat:
    usage: int | None = None
    cfs: CfsStat | None = None
    try:
        if version == 1:
            cfs = CfsStat(*pick_keyed(data, _V1_CFS))
        else:
            usage = pick_keyed(data, _V2_USAGE)[0] * 1000
            # nr_periods & co. only exist where the cpu controller is enabled for the cgroup
            if b"\nnr_periods " in data:
                periods, throttled, throttled_us = pick_keyed(data, _V2_CFS)
                cfs = CfsStat(periods, throttled, throttled_us * 1000)
    except KeyError as exc:
        raise ValueError(f"cpu.stat lacks {exc}") from exc
    if (usage is not None and usage < 0) or (cfs is not None and min(cfs) < 0):
        raise ValueError("negative cpu.stat values")
    return CpuStat(usage, cfs)


class MemoryStat(NamedTuple):
    anon_usage: int  # inactive_anon + active_anon + unevictable (koordlet's usage, no page cache)
    inactive_file: int


_V1_KEYS = (b"total_inactive_anon", b"total_active_anon", b"total_unevictable", b"total_inactive_file")
_V1_LOCAL_KEYS = (b"inactive_anon", b"active_anon", b"unevictable", b"inactive_file")


def parse_cfs_quota(data: bytes) -> int | None:
    """v1 `cpu.cfs_quota_us`: the quota in microseconds per period, None for -1 (unlimited)."""
    value = int(data.strip())  # ValueError on garbage or empty
    if value == -1:
        return None
    if value <= 0:
        raise ValueError("invalid cfs quota")
    return value


def parse_memory_stat(data: bytes, version: int) -> MemoryStat:
    start, pattern = _FAST_V1_LRU if version == 1 else _FAST_V2_LRU
    m = pattern.match(data, data.find(start))  # a miss (-1) matches from 0 and fails: general path
    if m is not None:
        return _new(MemoryStat, (int(m[1]) + int(m[2]) + int(m[4]), int(m[3])))
    # v1 hierarchical totals are total_*; without use_hierarchy only the local keys exist.
    keys = _V1_KEYS if version == 1 and b"\ntotal_inactive_anon " in data else _V1_LOCAL_KEYS
    try:
        inactive_anon, active_anon, unevictable, inactive_file = pick_keyed(data, keys)
    except KeyError as exc:
        raise ValueError(f"memory.stat lacks {exc}") from exc
    if min(inactive_anon, active_anon, unevictable, inactive_file) < 0:
        raise ValueError("negative memory.stat values")
    return MemoryStat(inactive_anon + active_anon + unevictable, inactive_file)


def working_set(usage: int, inactive_file: int) -> int:
    """kubelet/cAdvisor working set: usage - inactive_file, clamped at 0."""
    return max(usage - inactive_file, 0)
