"""Node-wide CPU, memory and PSI from procfs (the proc root is configurable for tests and host mounts).

CPU follows koordlet (`pkg/koordlet/util/stat.go`): busy ticks = user + nice + system + irq + softirq from
the first `cpu` line of /proc/stat (idle, iowait and steal excluded); cores in use = d(busy seconds)/dt.
Per-field deltas are clamped at 0 (the kernel lets iowait and friends step backwards; psutil does the same)
and folded into a synthesized counter that therefore never decreases.

Memory follows koordlet (`pkg/koordlet/util/meminfo.go`): usage without page cache = MemTotal -
MemAvailable, with page cache = MemTotal - MemFree. Kernels without MemAvailable (<3.14) get koordlet's
per-NUMA estimate of available memory: MemFree + Active(file) + Inactive(file) + SReclaimable.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agent.collectors.base import SeriesErrors
from agent.collectors.checked import check_all_u64, check_u64
from agent.collectors.devices import Device
from agent.collectors.files import PseudoFileReader
from agent.collectors.psi import PsiKeys, parse_psi, psi_samples
from agent.series import (
    NODE_CPU_CAPACITY_CORES,
    NODE_CPU_USAGE_SECONDS,
    NODE_MEMORY_TOTAL_BYTES,
    NODE_MEMORY_USAGE_BYTES,
    NODE_MEMORY_USAGE_WITH_PAGE_CACHE_BYTES,
    PSI_RESOURCES,
    BlockBuilder,
    Kind,
    Sample,
    SampleBlock,
    SeriesKey,
    block_of,
)

# Positions in the `cpu` line after the label: user nice system idle iowait irq softirq steal guest guest_nice
_BUSY_FIELDS = (0, 1, 2, 5, 6)  # user, nice, system, irq, softirq


@dataclass(frozen=True, slots=True)
class CpuTicks:
    busy: tuple[int, ...]  # the _BUSY_FIELDS, in ticks
    cpus: int  # number of `cpuN` lines


def parse_proc_stat(data: bytes) -> CpuTicks:
    cpus = 0
    busy: tuple[int, ...] | None = None
    for line in data.splitlines():
        if not line.startswith(b"cpu"):
            continue
        fields = line.split()
        if fields[0] == b"cpu":
            values = check_all_u64(tuple(int(f) for f in fields[1:]), "/proc/stat cpu ticks")
            if len(values) < 7:
                raise ValueError("short aggregate cpu line in /proc/stat")
            busy = tuple(values[i] for i in _BUSY_FIELDS)
        elif fields[0][3:].isdigit():
            cpus += 1
    if busy is None or cpus == 0:
        raise ValueError("/proc/stat without cpu lines")
    return CpuTicks(busy, cpus)


def parse_meminfo(data: bytes) -> dict[str, int]:
    """Key -> bytes for the `kB` lines of /proc/meminfo. ValueError on a value that is not a number,
    OutOfRangeError on one outside [0, 2^64) (in bytes)."""
    out: dict[str, int] = {}
    for line in data.splitlines():
        name, sep, rest = line.partition(b":")
        if not sep:
            continue
        parts = rest.split()
        if not parts:
            continue
        key = name.decode("ascii", "replace")
        value = int(parts[0])
        out[key] = check_u64(value * 1024 if len(parts) > 1 and parts[1] == b"kB" else value, key)
    return out


@dataclass(frozen=True, slots=True)
class NodeMemory:
    total: int
    usage: int  # without page cache
    usage_with_page_cache: int


def node_memory(meminfo: dict[str, int]) -> NodeMemory:
    try:
        total, free = meminfo["MemTotal"], meminfo["MemFree"]
    except KeyError as exc:
        raise ValueError(f"/proc/meminfo lacks {exc}") from exc
    available = meminfo.get("MemAvailable")
    if available is None:
        available = free + sum(meminfo.get(k, 0) for k in ("Active(file)", "Inactive(file)", "SReclaimable"))
    if total <= 0 or not 0 <= free <= total:
        raise ValueError("implausible MemTotal/MemFree")
    return NodeMemory(total, max(total - min(available, total), 0), total - free)


class NodeCollector:
    def __init__(
        self,
        proc_root: str | Path = "/proc",
        *,
        clock_ticks: int | None = None,
        reader: PseudoFileReader | None = None,
    ) -> None:
        self._root = str(proc_root).rstrip("/")
        self._hz = clock_ticks or os.sysconf("SC_CLK_TCK")
        self._reader = reader or PseudoFileReader()
        self._errors = SeriesErrors("node")
        self._builder = BlockBuilder()
        self._prev_busy: tuple[int, ...] | None = None
        self._busy_ticks = 0  # synthesized, never decreasing
        self._psi_absent: set[str] = set()
        self._psi_keys = {r: PsiKeys.build(r, SeriesKey(""), node=True) for r in PSI_RESOURCES}

    @property
    def name(self) -> str:
        return "node"

    @property
    def errors(self) -> SeriesErrors:
        return self._errors

    @property
    def devices(self) -> Sequence[Device]:
        return ()

    def close(self) -> None:
        self._reader.close()

    def collect(self, now: float) -> SampleBlock:
        samples: list[Sample] = []
        failed_before = self._errors.total
        self._collect_cpu(samples)
        self._collect_memory(samples)
        self._collect_psi(samples)
        if not samples and self._errors.total > failed_before:
            raise RuntimeError(f"nothing readable under {self._root}")
        return block_of(samples, self._builder)

    def _read(self, name: str) -> bytes | None:
        try:
            return self._reader.read(f"{self._root}/{name}")
        except OSError as exc:
            self._errors.record_os_error(exc)
            return None

    def _collect_cpu(self, out: list[Sample]) -> None:
        data = self._read("stat")
        if data is None:
            return
        try:
            ticks = parse_proc_stat(data)
        except ValueError as exc:
            self._errors.bad_value(f"{self._root}/stat", exc)
            return
        if self._prev_busy is not None:
            self._busy_ticks += sum(max(cur - old, 0) for cur, old in zip(ticks.busy, self._prev_busy, strict=True))
        self._prev_busy = ticks.busy
        out.append(Sample(SeriesKey(NODE_CPU_USAGE_SECONDS), self._busy_ticks / self._hz, Kind.COUNTER))
        out.append(Sample(SeriesKey(NODE_CPU_CAPACITY_CORES), float(ticks.cpus)))

    def _collect_memory(self, out: list[Sample]) -> None:
        data = self._read("meminfo")
        if data is None:
            return
        try:
            mem = node_memory(parse_meminfo(data))
        except ValueError as exc:
            self._errors.bad_value(f"{self._root}/meminfo", exc)
            return
        out.append(Sample(SeriesKey(NODE_MEMORY_TOTAL_BYTES), float(mem.total)))
        out.append(Sample(SeriesKey(NODE_MEMORY_USAGE_BYTES), float(mem.usage)))
        out.append(Sample(SeriesKey(NODE_MEMORY_USAGE_WITH_PAGE_CACHE_BYTES), float(mem.usage_with_page_cache)))

    def _collect_psi(self, out: list[Sample]) -> None:
        for resource in PSI_RESOURCES:
            if resource in self._psi_absent:
                continue
            path = f"{self._root}/pressure/{resource}"
            try:
                data = self._reader.read(path)
            except OSError as exc:
                if isinstance(exc, FileNotFoundError) or exc.errno == errno.EOPNOTSUPP:
                    # No PSI in this kernel (CONFIG_PSI off: no file; psi=0 on the command line:
                    # EOPNOTSUPP). Normal, not an error, and a kernel does not grow PSI at runtime.
                    self._psi_absent.add(resource)
                else:
                    self._errors.record_os_error(exc)
                continue
            try:
                reading = parse_psi(data)
            except ValueError as exc:
                self._errors.bad_value(path, exc)
                continue
            psi_samples(reading, self._psi_keys[resource], "", out)
