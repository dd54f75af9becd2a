"""Parsers for the cgroup files we sample. CPU times leave here in ONE unit, integer nanoseconds.

- CPU time: v1 `cpuacct.usage` (ns); v2 `cpu.stat` usage_usec (us, x1000).
- CFS throttling: `cpu.stat` nr_periods, nr_throttled, and v1 throttled_time (ns) / v2 throttled_usec (x1000).
- Memory: `memory.stat` (v1 hierarchical total_* keys) and v1 `memory.usage_in_bytes` / v2 `memory.current`.

Normalising at parse time is koordlet's approach (`ParseCPUAcctUsageV2` returns usage_usec*1000); unit
mix-ups here are the classic bug (kata-containers #10278: v2 usec passed on as ns, 1000x off).
"""

from __future__ import annotations

import re
from itertools import chain
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

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


def _lru_pattern(prefix: bytes, n: bytes = _N) -> tuple[bytes, re.Pattern[bytes]]:
    """Where the LRU block starts (found with bytes.find), and the regex matching it from there (`n`: a number)."""
    p = prefix
    start = b"\n" + p + b"inactive_anon "
    return start, re.compile(
        re.escape(start)
        + n
        + p
        + b"active_anon "
        + n
        + p
        + b"inactive_file "
        + n
        + p
        + rb"active_file \d+\n"
        + p
        + b"unevictable "
        + n
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


# ---------------------------------------------------------------------------------------------- batches
# One collect cycle reads the same file of hundreds of cgroups; parsing them as one batch (a regex match per file
# in a comprehension, the numbers converted together into an array) avoids a Python call, a tuple and an
# exception frame per file. A batch is all or nothing: any file not in the kernel's usual layout, or a number
# the arrays cannot hold exactly, raises BatchMiss and the caller parses that cycle's files one by one with the
# functions above (which say what exactly is wrong with which file). The batch regexes take at most 18 digits
# (below 2^60), so int64 holds every field, the sums of a few and the unit scalings exactly, as the integer
# arithmetic of the one-by-one path.
_D = rb"(\d{1,18})\n"
_BATCH_V1_CFS = re.compile(rb"nr_periods " + _D + rb"nr_throttled " + _D + rb"throttled_time " + _D)
# v2 in the kernel's order (core_sched.force_idle_usec with CONFIG_SCHED_CORE); else the CFS keys anywhere after
_BATCH_V2_CPU = re.compile(
    rb"usage_usec " + _D + rb"user_usec \d+\nsystem_usec \d+\n(?:core_sched\.force_idle_usec \d+\n)?"
    rb"nr_periods " + _D + rb"nr_throttled " + _D + rb"throttled_usec " + _D
)
_BATCH_V2_CPU_ANY = re.compile(
    rb"usage_usec " + _D + rb"(?:.*?\nnr_periods " + _D + rb"nr_throttled " + _D + rb"throttled_usec " + _D + rb")?",
    re.DOTALL,
)
_BATCH_V1_LRU = _lru_pattern(b"total_", _D)
_BATCH_V2_LRU = _lru_pattern(b"", _D)
_US_LIMIT = (1 << 63) // 1000  # microseconds that are still an int64 in nanoseconds (292 CPU-years)


class BatchMiss(ValueError):
    """A batch that must be parsed file by file instead."""


def _fields(fields: list[bytes]) -> npt.NDArray[np.int64]:
    """Regex groups of at most 18 digits as int64 (one C-level parse of them all)."""
    return np.fromstring(b" ".join(fields), dtype=np.int64, sep=" ")


def batch_ints(datas: list[bytes]) -> npt.NDArray[np.int64]:
    """`parse_int` of every file (cpuacct.usage, memory.current, memory.usage_in_bytes)."""
    try:
        out = np.array(list(map(int, datas)), dtype=np.int64)  # int() on bytes, as parse_u64
    except (ValueError, OverflowError) as exc:
        raise BatchMiss(f"integer file: {exc}") from exc
    if out.size and not (out.min() >= 0 and out.max() < 1 << 60):
        raise BatchMiss("integer file: value out of the batch range")
    return out


def batch_cpu_stat(datas: list[bytes], version: int) -> npt.NDArray[np.int64]:
    """`parse_cpu_stat` of every file as rows (usage ns or -1 on v1, CFS periods, throttled periods, throttled
    ns), the CFS columns -1 where the cgroup has no CFS stats (v2 without the cpu controller)."""
    matches = [(_BATCH_V1_CFS if version == 1 else _BATCH_V2_CPU).match(d) for d in datas]
    if None in matches and version == 2:  # other keys in between, or no CFS keys: look further
        matches = [m or _BATCH_V2_CPU_ANY.match(d) for m, d in zip(matches, datas, strict=True)]
        if None not in matches:
            groups = [m.groups() for m in matches]  # type: ignore[union-attr]  # no None (checked)
            if any(g[1] is None and b"\nnr_periods " in d for g, d in zip(groups, datas, strict=True)):
                raise BatchMiss("cpu.stat with CFS keys out of the usual order")
            fields = [b"-1" if f is None else f for f in chain.from_iterable(groups)]  # no CFS keys: -1
            return _v2_cpu_rows(_fields(fields))
    if None in matches:
        raise BatchMiss("cpu.stat not in the usual layout")
    fields = list(chain.from_iterable(m.groups() for m in matches))  # type: ignore[union-attr]  # no None (above)
    if version == 2:
        return _v2_cpu_rows(_fields(fields))
    out = np.empty((len(datas), 4), dtype=np.int64)
    out[:, 0] = -1
    out[:, 1:] = _fields(fields).reshape(-1, 3)
    return out


def _v2_cpu_rows(fields: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """v2 cpu.stat fields (usage usec, periods, throttled, throttled usec; -1 without CFS) as batch_cpu_stat rows."""
    out = fields.reshape(-1, 4)
    if out.size and max(out[:, 0].max(), out[:, 3].max()) >= _US_LIMIT:
        raise BatchMiss("cpu.stat: microseconds beyond int64 nanoseconds")
    out[:, 0] *= 1000
    cfs = out[:, 1] >= 0
    out[cfs, 3] *= 1000
    return out


# The compiled reader (`PseudoFileReader.read_keyed`) picks these keys; the functions below turn its rows into the
# arrays of `batch_cpu_stat` and `batch_memory_stat`, with the same checks (BatchMiss: parse those files in Python).
CPU_STAT_KEYS = {1: _V1_CFS, 2: (*_V2_USAGE, *_V2_CFS)}
MEMORY_STAT_KEYS = {1: _V1_KEYS, 2: _V1_LOCAL_KEYS}  # v2 has the same LRU keys as v1's local ones


def keyed_cpu_stat(rows: npt.NDArray[np.int64], version: int) -> npt.NDArray[np.int64]:
    """`batch_cpu_stat`'s rows from the values of CPU_STAT_KEYS[version] (-1: absent)."""
    # The usual batch has every key in every file: one whole-array reduction says so, where the per-row checks of
    # the other case cost ~15 us each on a few hundred rows.
    complete = not rows.size or rows.min() >= 0
    has_cfs: npt.NDArray[np.bool_] | slice = slice(None)
    if not complete:
        cfs = rows[:, -3:]
        has_cfs = cfs[:, 0] >= 0
        if np.any((cfs >= 0).any(axis=1) != has_cfs) or np.any((cfs[has_cfs] < 0).any(axis=1)):
            raise BatchMiss("cpu.stat with only some of the CFS keys")
        if version == 1:  # v1's keys are the CFS keys only
            raise BatchMiss("cpu.stat without its CFS keys")
    out = np.empty((len(rows), 4), dtype=np.int64)
    if version == 1:
        out[:, 0] = -1
        out[:, 1:] = rows
        return out
    if rows.size and ((not complete and rows[:, 0].min() < 0) or max(rows[:, 0].max(), rows[:, 3].max()) >= _US_LIMIT):
        raise BatchMiss("cpu.stat without usage_usec, or microseconds beyond int64 nanoseconds")
    out[:] = rows
    out[:, 0] *= 1000
    out[has_cfs, 3] *= 1000
    return out


def keyed_memory_stat(rows: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """`batch_memory_stat`'s rows from the values of MEMORY_STAT_KEYS (-1: absent)."""
    if rows.size and rows.min() < 0:
        raise BatchMiss("memory.stat without the LRU keys (v1: without use_hierarchy)")
    out = np.empty((len(rows), 2), dtype=np.int64)
    out[:, 0] = rows[:, 0] + rows[:, 1] + rows[:, 2]  # inactive_anon + active_anon + unevictable
    out[:, 1] = rows[:, 3]
    return out


def batch_memory_stat(datas: list[bytes], version: int) -> npt.NDArray[np.int64]:
    """`parse_memory_stat` of every file as rows (anon usage, inactive_file)."""
    start, pattern = _BATCH_V1_LRU if version == 1 else _BATCH_V2_LRU
    matches = [pattern.match(d, d.find(start)) for d in datas]
    if None in matches:
        raise BatchMiss("memory.stat not in the usual layout")
    fields = _fields(list(chain.from_iterable(m.groups() for m in matches))).reshape(-1, 4)  # type: ignore[union-attr]
    out = np.empty((len(datas), 2), dtype=np.int64)
    out[:, 0] = fields[:, 0] + fields[:, 1] + fields[:, 3]  # inactive_anon + active_anon + unevictable
    out[:, 1] = fields[:, 2]
    return out
