"""Host PID -> pod UID through `/proc/<pid>/cgroup` (for GPU processes, whose PIDs come from NVML).

As dcgm-exporter's `pidmapper.go` does: the regex `pod([a-f0-9_-]+)` on each cgroup path, `_` -> `-`
(systemd slice names), matches shorter than 32 characters rejected (static pods have 32-hex UIDs, API pods
36-character UUIDs). Works for cgroup v1 (one line per hierarchy) and v2 (`0::/path`), both drivers.

Results are cached by (pid, start time): PIDs are reused, and the start time (field 22 of
`/proc/<pid>/stat`, clock ticks since boot) tells a new process from the old one. NVML reports host PIDs,
so the agent needs `hostPID: true`; without it every lookup fails as "vanished".
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agent.collectors.base import SeriesErrors
from agent.collectors.files import PseudoFileReader

_POD_IN_PATH = re.compile(r"pod([a-f0-9_-]+)")
_MIN_UID_LEN = 32
_STARTTIME_FIELD = 19  # field 22 of /proc/<pid>/stat, counted from field 3 (after "pid (comm)")


def pod_uid_from_cgroup(data: bytes) -> str | None:
    """The pod UID in a /proc/<pid>/cgroup file, or None for a process outside any pod."""
    for line in data.decode("utf-8", "replace").splitlines():
        parts = line.split(":", 2)  # hierarchy-id:controllers:path
        if len(parts) != 3:
            continue
        for match in _POD_IN_PATH.finditer(parts[2]):
            uid = match.group(1).replace("_", "-")
            if len(uid) >= _MIN_UID_LEN:
                return uid
    return None


def process_start_time(stat: bytes) -> int:
    """Start time (clock ticks after boot) from /proc/<pid>/stat. The command name may contain spaces and
    parentheses, so fields are counted after its last ')'."""
    fields = stat[stat.rindex(b")") + 2 :].split()
    return int(fields[_STARTTIME_FIELD])


class PidPodResolver:
    def __init__(self, proc_root: str, reader: PseudoFileReader | None = None) -> None:
        self._root = proc_root.rstrip("/")
        self._reader = reader or PseudoFileReader(keep_open=False)  # few, short-lived processes
        self._cache: dict[int, tuple[int, str | None]] = {}  # pid -> (start time, pod UID or None)

    def resolve(self, pids: Iterable[int], errors: SeriesErrors) -> dict[int, str]:
        """Pod UID of each PID that runs in a pod; PIDs outside pods or gone are left out."""
        found: dict[int, str] = {}
        cache: dict[int, tuple[int, str | None]] = {}
        for pid in pids:
            entry = self._lookup(pid, errors)
            if entry is None:
                continue
            cache[pid] = entry
            if entry[1] is not None:
                found[pid] = entry[1]
        self._cache = cache  # only PIDs still on a GPU stay cached
        return found

    def _lookup(self, pid: int, errors: SeriesErrors) -> tuple[int, str | None] | None:
        try:
            start = self._start_time(pid)
            cached = self._cache.get(pid)
            if cached is not None and cached[0] == start:
                return cached
            uid = pod_uid_from_cgroup(self._reader.read(f"{self._root}/{pid}/cgroup"))
            # The PID may have exited and been reused between the two reads: only trust an unchanged start.
            if self._start_time(pid) != start:
                errors.record(SeriesErrors.VANISHED)
                return None
        except OSError as exc:
            errors.record_os_error(exc)
            return None
        except (ValueError, IndexError):
            errors.record(SeriesErrors.GARBAGE)
            return None
        return start, uid

    def _start_time(self, pid: int) -> int:
        return process_start_time(self._reader.read(f"{self._root}/{pid}/stat"))
