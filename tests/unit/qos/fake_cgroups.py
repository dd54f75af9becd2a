"""Fake cgroup trees (plain directories and files) shaped like kubelet's, for v1 and v2."""

from __future__ import annotations

from pathlib import Path


def v1_tree(root: Path, *, parent: str = "", cpus: str = "0-7", pods: dict[str, list[str]] | None = None) -> Path:
    """cgroupfs-driver v1 hierarchies with a besteffort QoS cgroup; returns the BE cpu dir."""
    base = Path(parent) if parent else Path()
    for ctrl in ("cpu", "cpuacct", "memory", "cpuset"):
        (root / ctrl / base / "kubepods" / "besteffort").mkdir(parents=True)
    be_cpu = root / "cpu" / base / "kubepods" / "besteffort"
    (be_cpu / "cpu.cfs_quota_us").write_text("-1\n")
    (be_cpu / "cpu.cfs_period_us").write_text("100000\n")
    be_cpuset = root / "cpuset" / base / "kubepods" / "besteffort"
    (be_cpuset / "cpuset.cpus").write_text(cpus + "\n")
    for pod, containers in (pods or {}).items():
        (be_cpuset / f"pod{pod}").mkdir()
        (be_cpuset / f"pod{pod}" / "cpuset.cpus").write_text(cpus + "\n")
        for container in containers:
            (be_cpuset / f"pod{pod}" / container).mkdir()
            (be_cpuset / f"pod{pod}" / container / "cpuset.cpus").write_text(cpus + "\n")
    return be_cpu


def v2_tree(root: Path, *, cpu_max: str = "max 100000", cpus: str = "0-3") -> Path:
    """systemd-driver unified hierarchy; returns the BE slice."""
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    be = root / "kubepods.slice" / "kubepods-besteffort.slice"
    be.mkdir(parents=True)
    (be / "cpu.max").write_text(cpu_max + "\n")
    (be / "cpuset.cpus").write_text(cpus + "\n")
    return be
