"""The best-effort QoS cgroup's CPU knobs: CFS quota (v1 `cpu.cfs_quota_us`, v2 `cpu.max`) and `cpuset.cpus`.

Located like the collectors find pods (agent.collectors.cgroup_layout): `<kubepods>/besteffort`
(cgroupfs) or `<kubepods.slice>/kubepods-besteffort.slice` (systemd). Suppress quantities are in
koordlet's units, µs per 100 ms period; a group with another period gets the same share of it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from agent.collectors.cgroup_layout import CgroupDriver, CgroupVersion, detect_layout
from agent.qos.formulas import CFS_PERIOD_US, UNLIMITED_CFS_QUOTA, parse_cpu_max, render_cpu_max
from common.cpulist import format_cpu_list, parse_cpu_list

BE_DIR = {CgroupDriver.CGROUPFS: "besteffort", CgroupDriver.SYSTEMD: "kubepods-besteffort.slice"}


@dataclass(frozen=True, slots=True)
class BECgroup:
    version: CgroupVersion
    cpu_dir: Path  # the BE QoS cgroup in the cpu hierarchy (v2: the unified one)
    cpuset_dir: Path | None  # the same in the cpuset hierarchy; None without a cpuset controller

    # --- CFS quota ---------------------------------------------------------------------------
    def _period(self) -> int:
        if self.version is CgroupVersion.V2:
            return parse_cpu_max((self.cpu_dir / "cpu.max").read_text())[1]
        return int((self.cpu_dir / "cpu.cfs_period_us").read_text())

    def read_quota(self) -> int:
        """Current quota in µs per 100 ms (-1: unlimited)."""
        if self.version is CgroupVersion.V2:
            quota, period = parse_cpu_max((self.cpu_dir / "cpu.max").read_text())
        else:
            quota = int((self.cpu_dir / "cpu.cfs_quota_us").read_text())
            period = int((self.cpu_dir / "cpu.cfs_period_us").read_text())
        if quota < 0 or period == CFS_PERIOD_US:
            return quota if quota >= 0 else UNLIMITED_CFS_QUOTA
        return quota * CFS_PERIOD_US // period

    def write_quota(self, quota_us: int) -> None:
        period = self._period()
        scaled = quota_us if quota_us < 0 or period == CFS_PERIOD_US else quota_us * period // CFS_PERIOD_US
        if self.version is CgroupVersion.V2:
            (self.cpu_dir / "cpu.max").write_text(render_cpu_max(scaled, period))
        else:
            (self.cpu_dir / "cpu.cfs_quota_us").write_text(f"{scaled}\n")

    # --- cpuset ------------------------------------------------------------------------------
    def cpuset_dirs(self) -> list[Path]:
        """The BE QoS cgroup, its pods and their containers, parents before children."""
        if self.cpuset_dir is None or not self.cpuset_dir.is_dir():
            return []
        found = [self.cpuset_dir]
        for top, dirs, _files in os.walk(self.cpuset_dir):
            dirs.sort()
            found.extend(Path(top) / d for d in dirs)
        return found

    @staticmethod
    def read_cpus(directory: Path) -> list[int]:
        return parse_cpu_list((directory / "cpuset.cpus").read_text())

    @staticmethod
    def write_cpus(directory: Path, cpus: list[int]) -> None:
        (directory / "cpuset.cpus").write_text(format_cpu_list(cpus) + "\n")


def locate_be_cgroup(root: str | Path = "/sys/fs/cgroup", parent: str = "") -> BECgroup | None:
    """The BE QoS cgroup under `root`, or None when kubelet has not created it (yet)."""
    layout = detect_layout(root, parent)
    if layout is None:
        return None
    name = BE_DIR[layout.driver]
    cpu_dir = Path(layout.cpu) / name
    if not cpu_dir.is_dir():
        return None
    if layout.version is CgroupVersion.V2:
        cpuset_dir: Path | None = cpu_dir if (cpu_dir / "cpuset.cpus").exists() else None
    else:
        kubepods = Path(layout.cpu).name
        base = Path(root) / "cpuset" / parent.strip("/") if parent.strip("/") else Path(root) / "cpuset"
        candidate = base / kubepods / name
        cpuset_dir = candidate if (candidate / "cpuset.cpus").exists() else None
    return BECgroup(layout.version, cpu_dir, cpuset_dir)
