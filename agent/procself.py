"""The agent process's own `process_*` and `python_*` series, for an agent that never imports prometheus_client.

The families and values are those of prometheus_client's default collectors (ProcessCollector, GCCollector,
PlatformCollector), which the dashboards query (`process_resident_memory_bytes`, `process_cpu_seconds_total`).
A standalone agent has no other use for prometheus_client, whose import (with the http.server, wsgiref, email
and urllib modules it loads) is 2.8 MiB resident; an agent with a cluster has it loaded for the API client's
metrics and renders its default registry instead (`agent.exporter.Exporter.metrics_text`).
"""

from __future__ import annotations

import functools
import gc
import os
import platform

from agent.exposition import Families

_TICKS = float(os.sysconf("SC_CLK_TCK"))
_PAGE = os.sysconf("SC_PAGE_SIZE")


@functools.cache
def _boot_time(proc: str) -> float | None:
    """The host's boot time, read once: the kernel generates all of <proc>/stat (every CPU's counters) for it."""
    try:
        with open(f"{proc}/stat", "rb") as stat:
            for line in stat:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except OSError:
        pass
    return None


def render_process(proc: str = "/proc") -> str:
    """process_* (as ProcessCollector reads them from /proc/self), python_gc_* and python_info."""
    families = Families()
    collected = families.get("python_gc_objects_collected_total", "counter", "Objects collected during gc")
    uncollectable = families.get(
        "python_gc_objects_uncollectable_total", "counter", "Uncollectable objects found during GC"
    )
    collections = families.get(
        "python_gc_collections_total", "counter", "Number of times this generation was collected"
    )
    for generation, stat in enumerate(gc.get_stats()):
        labels = [("generation", str(generation))]
        collected.add(labels, stat["collected"])
        uncollectable.add(labels, stat["uncollectable"])
        collections.add(labels, stat["collections"])
    major, minor, patch = platform.python_version_tuple()
    families.get("python_info", "gauge", "Python platform information").add(
        [
            ("implementation", platform.python_implementation()),
            ("major", major),
            ("minor", minor),
            ("patchlevel", patch),
            ("version", platform.python_version()),
        ],
        1.0,
    )
    btime = _boot_time(proc)
    if btime is None:  # no /proc: ProcessCollector exports nothing either
        return families.render()
    try:
        with open(f"{proc}/self/stat", "rb") as f:
            parts = f.read().rsplit(b")", 1)[-1].split()  # after the command name, which may hold spaces
    except OSError:
        parts = []
    if parts:
        families.get("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.").add([], float(parts[20]))
        families.get("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.").add(
            [], float(parts[21]) * _PAGE
        )
        families.get(
            "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds."
        ).add([], float(parts[19]) / _TICKS + btime)
        families.get("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.").add(
            [], (float(parts[11]) + float(parts[12])) / _TICKS
        )
    try:
        open_fds = _open_fds(proc)
        with open(f"{proc}/self/limits", "rb") as f:
            max_fds = next(float(line.split()[3]) for line in f if line.startswith(b"Max open file"))
    except (OSError, StopIteration, ValueError, IndexError):
        pass
    else:
        families.get("process_open_fds", "gauge", "Number of open file descriptors.").add([], float(open_fds))
        families.get("process_max_fds", "gauge", "Maximum number of open file descriptors.").add([], max_fds)
    return families.render()


def _open_fds(proc: str) -> int:
    """Open file descriptors. Since Linux 6.2 the size of /proc/self/fd is their count: one stat, where listing
    it (prometheus_client's way) builds a name for each of the agent's ~3,600 kept cgroup fds at 300 pods."""
    size = os.stat(f"{proc}/self/fd").st_size
    return size if size > 0 else len(os.listdir(f"{proc}/self/fd"))

