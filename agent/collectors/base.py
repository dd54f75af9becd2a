"""The collector interface and per-collector bookkeeping (node_exporter's duration/success pattern).

A collector reads one source (procfs, cgroups, NVML, sysfs) and returns one `SampleBlock` per cycle: gauges as
they are, counters cumulative (the sampler turns them into rates). It must not raise for one bad series: it
skips that series and tallies the reason in `errors`. Raising means the whole source failed this cycle.
"""

from __future__ import annotations

import errno
import inspect
import logging
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from agent.collectors.checked import OutOfRangeError
from agent.series import BlockLayout, SampleBlock

if TYPE_CHECKING:
    from agent.collectors.devices import Device

log = logging.getLogger("loadline.agent.collectors")

# How many distinct bad series one collector logs (each once); beyond that they are only counted, so a
# hostile tree of thousands of garbage files cannot flood the log or grow the agent's memory.
MAX_LOGGED_SERIES = 1000


class SeriesErrors:
    """Per-series failures by reason. Reasons are a small fixed vocabulary, usable as a metric label."""

    VANISHED = "vanished"  # file or cgroup disappeared (container exited): normal, but counted
    PERMISSION = "permission"
    GARBAGE = "garbage"  # unparsable contents
    IO = "io"  # any other OSError
    BAD_ID = "bad_id"  # pod UID / container ID that cannot name a cgroup
    OUT_OF_RANGE = "out_of_range"  # a number the kernel cannot have written (`agent.collectors.checked`)
    BACKWARDS = "backwards"  # a counter below its previous reading (same source): no rate from that sample
    IMPLAUSIBLE = "implausible"  # a rate beyond what the device or node can do (a counter that jumped)

    def __init__(self, collector: str = "") -> None:
        self.collector = collector
        self.by_reason: dict[str, int] = {}
        self._logged: set[tuple[str, str]] = set()

    @property
    def total(self) -> int:
        return sum(self.by_reason.values())

    def record(self, reason: str) -> None:
        self.by_reason[reason] = self.by_reason.get(reason, 0) + 1

    def record_os_error(self, exc: OSError) -> None:
        self.record(classify_os_error(exc))

    def bad_value(self, series: str, exc: ValueError) -> None:
        """A value of `series` (a file path, or a series key as text) that was refused: counted as garbage or
        out of range, and logged once per series and reason."""
        reason = SeriesErrors.OUT_OF_RANGE if isinstance(exc, OutOfRangeError) else SeriesErrors.GARBAGE
        self.rejected(series, reason, str(exc))

    def rejected(self, series: str, reason: str, detail: str) -> None:
        """One sample of `series` dropped for `reason`: counted, and logged the first time per (series, reason)."""
        self.record(reason)
        logged = self._logged
        if (series, reason) in logged or len(logged) > MAX_LOGGED_SERIES:
            return
        logged.add((series, reason))
        if len(logged) > MAX_LOGGED_SERIES:
            log.warning("%s: more than %d bad series; further ones are only counted", self.collector, MAX_LOGGED_SERIES)
            return
        log.warning("%s: %s: %s (%s); sample dropped, logged once per series", self.collector, series, detail, reason)


SERIES_ERROR_REASONS = (
    SeriesErrors.VANISHED,
    SeriesErrors.PERMISSION,
    SeriesErrors.GARBAGE,
    SeriesErrors.IO,
    SeriesErrors.BAD_ID,
    SeriesErrors.OUT_OF_RANGE,
    SeriesErrors.BACKWARDS,
    SeriesErrors.IMPLAUSIBLE,
)

_VANISHED_ERRNOS = frozenset({errno.ENOENT, errno.ENODEV, errno.ESRCH, errno.ENOTDIR})


def classify_os_error(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError) or exc.errno in _VANISHED_ERRNOS:
        return SeriesErrors.VANISHED
    if isinstance(exc, PermissionError) or exc.errno in (errno.EACCES, errno.EPERM):
        return SeriesErrors.PERMISSION
    return SeriesErrors.IO


@runtime_checkable
class Collector(Protocol):
    """`collect(now)` may be sync or async; `now` is the monotonic time the cycle stamps its samples with.
    `devices` are the devices seen at the last inventory (GPUs, RDMA ports; empty for the rest), replaced as
    a whole so any thread may read it; `close` releases files, threads and libraries."""

    @property
    def name(self) -> str: ...

    @property
    def errors(self) -> SeriesErrors: ...

    @property
    def devices(self) -> Sequence[Device]: ...

    def collect(self, now: float) -> SampleBlock | Awaitable[SampleBlock]: ...

    def close(self) -> None: ...


@runtime_checkable
class ReadsOnScrape(Protocol):
    """A collector with series only a scrape reads (the cgroup collector's containers, by default): `read_on_scrape`
    reads them now and returns the last cycle's block with them, or None when there is nothing to read."""

    def read_on_scrape(self, now: float) -> SampleBlock | None: ...


EMPTY_BLOCK_LAYOUT = BlockLayout((), (), ())


def empty_block() -> SampleBlock:
    return SampleBlock(EMPTY_BLOCK_LAYOUT, [])


@dataclass
class CollectorStats:
    """Self-metrics of one collector (exported to Prometheus later)."""

    name: str
    runs: int = 0
    failures: int = 0
    last_duration_seconds: float = 0.0
    last_success: bool = False
    last_success_unix: float | None = None
    last_error: str | None = None
    last_samples: int = 0
    durations_total_seconds: float = 0.0
    series_errors: dict[str, int] = field(default_factory=dict)


async def run_collector(collector: Collector, stats: CollectorStats, now: float) -> SampleBlock:
    """Run one collection with bookkeeping. Never raises for a collector failure: returns an empty block."""
    started = time.perf_counter()
    try:
        result = collector.collect(now)
        samples = await result if inspect.isawaitable(result) else result
    except Exception as exc:  # one broken source must not stop the others
        stats.failures += 1
        stats.last_success = False
        stats.last_error = f"{type(exc).__name__}: {exc}"
        samples = empty_block()
    else:
        stats.last_success = True
        stats.last_success_unix = time.time()
        stats.last_error = None
    duration = time.perf_counter() - started
    stats.runs += 1
    stats.last_duration_seconds = duration
    stats.durations_total_seconds += duration
    stats.last_samples = len(samples)
    stats.series_errors = dict(collector.errors.by_reason)
    return samples
