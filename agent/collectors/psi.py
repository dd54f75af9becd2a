"""Pressure stall information (PSI) files: /proc/pressure/<res> and <cgroup>/<res>.pressure.

Format, one line per kind: `some avg10=1.23 avg60=0.50 avg300=0.10 total=123456` and, for memory/io (and
cpu on newer kernels), a `full ...` line. avgN are kernel running averages in percent; total is cumulative
stall time in microseconds. A missing `full` line means "not supported" (koordlet treats it the same).
"""

from __future__ import annotations

import math
import re
from itertools import chain
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from agent.collectors.cgroup_stats import BatchMiss
from agent.collectors.checked import OutOfRangeError, check_u64
from agent.series import Kind, Sample, SeriesKey, psi_avg10_metric, psi_total_metric


class PsiReading(NamedTuple):
    some_avg10_ratio: float  # 0..1
    some_total_seconds: float
    full_avg10_ratio: float | None  # None: no `full` line
    full_total_seconds: float | None


# The kernel's exact layout; read for every pod every second, so the common case is one regex match. Totals of
# at most 19 digits (below 2^64) need no range check here; longer ones take the general path, which checks.
_FAST = re.compile(
    rb"some avg10=(\d+\.\d+) avg60=\d+\.\d+ avg300=\d+\.\d+ total=(\d{1,19})\n"
    rb"(?:full avg10=(\d+\.\d+) avg60=\d+\.\d+ avg300=\d+\.\d+ total=(\d{1,19})\n)?\Z"
)


def psi_values(data: bytes) -> tuple[float, float, float, float]:
    """(some avg10 ratio, some total s, full avg10 ratio, full total s), NaN without a `full` line: the
    per-cgroup form, which builds no `PsiReading`. Raises ValueError on anything that is not PSI."""
    m = _FAST.match(data)
    if m is not None:
        some_avg, some_total, full_avg, full_total = m.groups()
        values = (
            float(some_avg) / 100.0,
            int(some_total) / 1e6,
            math.nan if full_avg is None else float(full_avg) / 100.0,
            math.nan if full_total is None else int(full_total) / 1e6,
        )
    else:
        values = _parse_general(data)
    if values[0] > 1.0 or values[2] > 1.0:  # NaN (no `full` line) compares False
        raise OutOfRangeError("PSI average above 100 %")
    return values


def parse_psi(data: bytes) -> PsiReading:
    """Raises ValueError on anything that is not PSI."""
    some_avg, some_total, full_avg, full_total = psi_values(data)
    if math.isnan(full_avg):
        return PsiReading(some_avg, some_total, None, None)
    return PsiReading(some_avg, some_total, full_avg, full_total)


def _parse_general(data: bytes) -> tuple[float, float, float, float]:
    lines: dict[bytes, tuple[float, float]] = {}
    for line in data.splitlines():
        fields = line.split()
        if not fields:
            continue
        if fields[0] not in (b"some", b"full"):
            raise ValueError(f"unexpected PSI line {line!r}")
        values = dict(f.split(b"=", 1) for f in fields[1:] if b"=" in f)
        try:
            avg10, total_us = float(values[b"avg10"]), int(values[b"total"])
        except (KeyError, ValueError) as exc:
            raise ValueError(f"bad PSI line {line!r}") from exc
        if not 0.0 <= avg10 <= 100.0:  # also NaN, which float() accepts
            raise OutOfRangeError(f"PSI average {avg10} outside 0..100 in {line!r}")
        check_u64(total_us, "PSI total")
        lines[fields[0]] = (avg10 / 100.0, total_us / 1e6)
    if b"some" not in lines:
        raise ValueError("PSI file without a 'some' line")
    return (*lines[b"some"], *lines.get(b"full", (math.nan, math.nan)))


class PsiKeys(NamedTuple):
    """Series keys of one PSI file, built once per cgroup: some/full x avg10/total."""

    some_avg10: SeriesKey
    some_total: SeriesKey
    full_avg10: SeriesKey
    full_total: SeriesKey

    @classmethod
    def build(cls, resource: str, base: SeriesKey, *, node: bool) -> PsiKeys:
        return cls(
            base._replace(metric=psi_avg10_metric(resource, "some", node=node)),
            base._replace(metric=psi_total_metric(resource, "some", node=node)),
            base._replace(metric=psi_avg10_metric(resource, "full", node=node)),
            base._replace(metric=psi_total_metric(resource, "full", node=node)),
        )


def psi_samples(reading: PsiReading, keys: PsiKeys, source: str, out: list[Sample]) -> None:
    out.append(Sample(keys.some_avg10, reading.some_avg10_ratio))
    out.append(Sample(keys.some_total, reading.some_total_seconds, Kind.COUNTER, source))
    if reading.full_avg10_ratio is not None and reading.full_total_seconds is not None:
        out.append(Sample(keys.full_avg10, reading.full_avg10_ratio))
        out.append(Sample(keys.full_total, reading.full_total_seconds, Kind.COUNTER, source))


def batch_psi_values(datas: list[bytes]) -> npt.NDArray[np.float64]:
    """`psi_values` of every file as rows (see `agent.collectors.cgroup_stats.BatchMiss`: all in the kernel's
    layout or BatchMiss, and the caller parses them one by one)."""
    matches = [_FAST.match(d) for d in datas]
    if None in matches:
        raise BatchMiss("PSI file not in the usual layout")
    fields = list(chain.from_iterable(m.groups() for m in matches))  # type: ignore[union-attr]  # no None (above)
    if None in fields:  # no `full` line: NaN, as psi_values
        fields = [b"nan" if f is None else f for f in fields]
    out = np.array(list(map(float, fields)), dtype=np.float64).reshape(-1, 4)
    out[:, 0::2] /= 100.0  # avg10 percent -> ratio
    out[:, 1::2] /= 1e6  # total us -> s
    if np.any(out[:, 0::2] > 1.0):  # NaN (no `full` line) compares False
        raise BatchMiss("PSI average above 100 %")
    return out
