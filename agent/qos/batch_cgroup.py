"""A batch pod's cgroup files: where they are, what they hold, and writing them without reaching anything else.

    v1  cpu.shares    cpu.cfs_quota_us (+ cpu.cfs_period_us)   memory.limit_in_bytes   (cpu and memory hierarchies)
    v2  cpu.weight    cpu.max                                  memory.max              (one unified directory)

The directories come from the pod's own UID (checked like the collectors check it, agent.collectors.pods) and its
own containers' IDs, under the kubepods tree agent.collectors.cgroup_layout finds: `<kubepods>/<tier>/pod<uid>` and
`.../pod<uid>/<container>`. A directory that is, or lies below, a symlink is refused (it could lead into another pod's
cgroup); files are opened for writing without O_CREAT and without following a symlink, so a write never creates
anything. Values are compared in the file's own terms: a v2 weight converted from shares as the kubelet converts
pod shares, a quota scaled to the cgroup's own period, a memory limit rounded down to the page as the kernel stores it.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final

from agent.collectors.cgroup_layout import CgroupLayout, CgroupVersion
from agent.collectors.pods import split_container_id, valid_pod_uid
from agent.qos.batch_resource import CFS_PERIOD_US, UNLIMITED, CgroupTargets, shares_to_weight
from agent.qos.formulas import parse_cpu_max, render_cpu_max
from common.api.pod import KubeQoSClass

PAGE_SIZE: Final = os.sysconf("SC_PAGE_SIZE")
V1_UNLIMITED_FLOOR: Final = 1 << 62  # v1 reads an unlimited memory.limit_in_bytes as PAGE_COUNTER_MAX pages
GONE_ERRNOS: Final = frozenset({errno.ENOENT, errno.ENODEV, errno.ESRCH})  # the cgroup was removed under us


class Knob(StrEnum):
    CPU_SHARES = "cpu_shares"
    CFS_QUOTA = "cfs_quota"
    MEMORY_LIMIT = "memory_limit"


FILES: Final = {
    CgroupVersion.V1: {Knob.CPU_SHARES: "cpu.shares", Knob.CFS_QUOTA: "cpu.cfs_quota_us",
                       Knob.MEMORY_LIMIT: "memory.limit_in_bytes"},
    CgroupVersion.V2: {Knob.CPU_SHARES: "cpu.weight", Knob.CFS_QUOTA: "cpu.max", Knob.MEMORY_LIMIT: "memory.max"},
}  # fmt: skip


class UnsafePath(ValueError):
    """A pod or container directory that could lead outside the pod's own cgroup."""


def is_gone(exc: OSError) -> bool:
    return exc.errno in GONE_ERRNOS


@dataclass(frozen=True, slots=True)
class CgroupDirs:
    """One pod or container cgroup, in the cpu and memory hierarchies (the same directory on v2)."""

    version: CgroupVersion
    level: str  # "pod" or "container"
    name: str  # "" for the pod, the container's name
    cpu: Path
    memory: Path

    def path(self, knob: Knob) -> Path:
        base = self.memory if knob is Knob.MEMORY_LIMIT else self.cpu
        return base / FILES[self.version][knob]

    def exists(self) -> bool:
        return self.cpu.is_dir() and self.memory.is_dir()

    # --- reading --------------------------------------------------------------------------------
    def period_us(self) -> int:
        if self.version is CgroupVersion.V2:
            return parse_cpu_max(_read(self.cpu / "cpu.max"))[1]
        return int(_read(self.cpu / "cpu.cfs_period_us"))

    def current(self, knob: Knob) -> int:
        """The file's value in the terms `wanted` gives (raises OSError, or ValueError on garbage)."""
        text = _read(self.path(knob))
        if knob is Knob.CPU_SHARES:
            return int(text)
        if knob is Knob.CFS_QUOTA:
            quota = parse_cpu_max(text)[0] if self.version is CgroupVersion.V2 else int(text)
            return UNLIMITED if quota < 0 else quota
        if text == "max":
            return UNLIMITED
        value = int(text)
        return UNLIMITED if value < 0 or (self.version is CgroupVersion.V1 and value >= V1_UNLIMITED_FLOOR) else value

    def wanted(self, knob: Knob, targets: CgroupTargets, period_us: int) -> int:
        """What `current` reads once the target is written."""
        if knob is Knob.CPU_SHARES:
            return shares_to_weight(targets.cpu_shares) if self.version is CgroupVersion.V2 else targets.cpu_shares
        if knob is Knob.CFS_QUOTA:
            quota = targets.cfs_quota_us
            return UNLIMITED if quota < 0 else quota * period_us // CFS_PERIOD_US
        limit = targets.memory_limit_bytes
        return UNLIMITED if limit < 0 else limit // PAGE_SIZE * PAGE_SIZE

    def render(self, knob: Knob, value: int, period_us: int) -> str:
        """File content for a `wanted` value."""
        if knob is Knob.CFS_QUOTA and self.version is CgroupVersion.V2:
            return render_cpu_max(value, period_us)
        if value == UNLIMITED and self.version is CgroupVersion.V2:
            return "max"
        return str(value)

    def working_set(self) -> int:
        """Memory the kernel cannot simply drop: usage less inactive file pages (the kubelet's working set)."""
        v2 = self.version is CgroupVersion.V2
        usage = int(_read(self.memory / ("memory.current" if v2 else "memory.usage_in_bytes")))
        key = "inactive_file" if v2 else "total_inactive_file"
        for line in _read(self.memory / "memory.stat").splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return max(usage - int(value), 0)
        return usage

    # --- writing ---------------------------------------------------------------------------------
    def write(self, knob: Knob, text: str) -> None:
        """Write an existing cgroup file (never creating one, never through a symlink); raises OSError."""
        fd = os.open(self.path(knob), os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)  # as `echo >` does
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def _read(path: Path) -> str:
    with open(path, "rb") as f:
        return f.read(4096).decode("ascii", "replace").strip()


def _checked(base: str, rel: str) -> Path:
    """`base/rel`, refused if any part of `rel` is a symlink or leads elsewhere (a pod's dir into another's)."""
    lexical = os.path.normpath(os.path.join(base, rel))
    real_base = os.path.realpath(base)
    if os.path.realpath(lexical) != os.path.normpath(os.path.join(real_base, rel)) or not lexical.startswith(
        os.path.normpath(base) + os.sep
    ):
        raise UnsafePath(f"{lexical} is not a directory of its own under {base}")
    return Path(lexical)


def pod_dirs(layout: CgroupLayout, qos: KubeQoSClass, uid: str) -> CgroupDirs:
    """The pod's cgroup (it may not exist yet). Raises UnsafePath for a UID that is no UID."""
    if not valid_pod_uid(uid):
        raise UnsafePath(f"pod UID {uid!r} is not a UID")
    rel = layout.pod_dir(qos, uid)
    return CgroupDirs(layout.version, "pod", "", _checked(layout.cpu, rel), _checked(layout.memory, rel))


def container_dirs(layout: CgroupLayout, pod: CgroupDirs, name: str, container_id: str) -> CgroupDirs | None:
    """The container's cgroup below its pod's; None when the ID is unusable or its directory is not there (yet).
    Raises UnsafePath when the directory could lead outside the pod."""
    parsed = split_container_id(container_id)
    if parsed is None:
        return None
    for candidate in layout.container_dirs(*parsed):
        if "/" in candidate or candidate in (".", ".."):
            raise UnsafePath(f"container ID {container_id!r} does not name a directory")
        dirs = CgroupDirs(
            layout.version, "container", name, _checked(str(pod.cpu), candidate), _checked(str(pod.memory), candidate)
        )
        if dirs.exists():
            return dirs
    return None
