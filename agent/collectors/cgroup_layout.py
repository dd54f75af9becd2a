"""Where kubelet put the pods: cgroup version, driver, and the path of every pod and container cgroup.

kubelet's abstract hierarchy is `kubepods/<qos>/pod<uid>/<container>`; the driver spells it (koordinator
`pkg/koordlet/util/system/cgroup_driver.go`):

- Guaranteed: systemd `kubepods.slice/kubepods-pod<uid_>.slice/<scope>`, cgroupfs `kubepods/pod<uid>/<id>`
- Burstable: systemd `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/<scope>`,
  cgroupfs `kubepods/burstable/pod<uid>/<id>`
- BestEffort: systemd `kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid_>.slice/<scope>`,
  cgroupfs `kubepods/besteffort/pod<uid>/<id>`

(<uid_> has '-' replaced by '_'; <scope> is cri-containerd-<id>.scope, crio-<id>.scope, docker-<id>.scope.)

Detection, against a configurable root (the host's /sys/fs/cgroup mounted somewhere in the agent's pod):
- version 2 iff `<root>/cgroup.controllers` exists. A hybrid host has a controller-less v2 mount at
  `<root>/unified` but v1 controllers: that is v1 for accounting, which is why the root itself is tested.
- driver systemd iff `<cpu hierarchy>/<parent>/kubepods.slice` exists, cgroupfs iff `.../kubepods` does
  (koordlet's directory probe). `parent` is kubelet's `--cgroup-root` below the mount ("" by default).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from pathlib import Path

from common.api.pod import KubeQoSClass


class CgroupVersion(IntEnum):
    V1 = 1
    V2 = 2


class CgroupDriver(StrEnum):
    SYSTEMD = "systemd"
    CGROUPFS = "cgroupfs"


KUBEPODS_DIR = {CgroupDriver.SYSTEMD: "kubepods.slice", CgroupDriver.CGROUPFS: "kubepods"}

# status.containerStatuses[].containerID runtime prefix -> systemd scope name prefix
_SYSTEMD_SCOPE_PREFIX = {
    "containerd": "cri-containerd-",
    "cri-o": "crio-",
    "docker": "docker-",
    "pouch": "pouch-",
}


@dataclass(frozen=True, slots=True)
class CgroupLayout:
    version: CgroupVersion
    driver: CgroupDriver
    # Absolute kubepods directory in each hierarchy read (all three equal on v2).
    cpu: str  # v1 cpu.stat (throttling); v2 everything CPU
    cpuacct: str  # v1 cpuacct.usage (and PSI on vendor v1 kernels)
    memory: str
    psi: bool  # <kubepods>/cpu.pressure exists

    def pod_dir(self, qos: KubeQoSClass, uid: str) -> str:
        """Pod cgroup relative to the kubepods directory."""
        if self.driver is CgroupDriver.CGROUPFS:
            tier = {
                KubeQoSClass.GUARANTEED: "",
                KubeQoSClass.BURSTABLE: "burstable/",
                KubeQoSClass.BEST_EFFORT: "besteffort/",
            }
            return f"{tier[qos]}pod{uid}"
        escaped = uid.replace("-", "_")  # '-' is systemd's hierarchy separator
        if qos is KubeQoSClass.GUARANTEED:
            return f"kubepods-pod{escaped}.slice"
        level = "burstable" if qos is KubeQoSClass.BURSTABLE else "besteffort"
        return f"kubepods-{level}.slice/kubepods-{level}-pod{escaped}.slice"

    def container_dirs(self, runtime: str, digest: str) -> tuple[str, ...]:
        """Candidate container cgroup names below the pod cgroup, most likely first."""
        if self.driver is CgroupDriver.CGROUPFS:
            # CRI-O names its cgroupfs container cgroups crio-<id>; containerd and docker use the bare ID.
            return (digest, f"crio-{digest}") if runtime == "cri-o" else (digest,)
        prefix = _SYSTEMD_SCOPE_PREFIX.get(runtime, f"{runtime}-")
        return (f"{prefix}{digest}.scope",)


def _hierarchy(root: Path, controller: str) -> Path | None:
    """v1 mount of `controller`: <root>/<controller> (often a symlink to cpu,cpuacct) or a co-mount dir."""
    direct = root / controller
    if direct.is_dir():
        return direct
    try:
        entries = list(os.scandir(root))
    except OSError:
        return None
    for entry in entries:
        if controller in entry.name.split(",") and entry.is_dir():
            return Path(entry.path)
    return None


def detect_version(root: str | Path) -> CgroupVersion:
    return CgroupVersion.V2 if (Path(root) / "cgroup.controllers").exists() else CgroupVersion.V1


def detect_layout(
    root: str | Path = "/sys/fs/cgroup",
    parent: str = "",
    *,
    version: CgroupVersion | None = None,
    driver: CgroupDriver | None = None,
) -> CgroupLayout | None:
    """The layout under `root`, or None if there is no kubepods hierarchy (yet): retry later."""
    root = Path(root)
    parent = parent.strip("/")
    if ".." in Path(parent).parts:
        raise ValueError("cgroup parent must not contain '..'")
    version = version or detect_version(root)
    if version is CgroupVersion.V2:
        cpu = cpuacct = memory = root
    else:
        found = [_hierarchy(root, c) for c in ("cpu", "cpuacct", "memory")]
        if any(h is None for h in found):
            return None
        cpu, cpuacct, memory = (h for h in found if h is not None)

    def base(h: Path) -> Path:
        return h / parent if parent else h

    if driver is None:
        for candidate in (CgroupDriver.SYSTEMD, CgroupDriver.CGROUPFS):
            if (base(cpu) / KUBEPODS_DIR[candidate]).is_dir():
                driver = candidate
                break
        else:
            return None
    kubepods = KUBEPODS_DIR[driver]
    dirs = [str(base(h) / kubepods) for h in (cpu, cpuacct, memory)]
    psi = os.path.exists(os.path.join(dirs[1], "cpu.pressure"))
    return CgroupLayout(version, driver, dirs[0], dirs[1], dirs[2], psi)
