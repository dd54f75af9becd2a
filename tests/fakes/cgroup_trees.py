"""Fake /proc and cgroup trees written to disk, shaped like the real thing (also used by bench/)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from agent.collectors.cgroup_layout import KUBEPODS_DIR, CgroupDriver, CgroupLayout, CgroupVersion
from agent.collectors.files import PseudoFileReader
from agent.collectors.pods import ContainerRef, PodRef, split_container_id
from common.api.pod import KubeQoSClass

MiB = 1024 * 1024


@dataclass
class Psi:
    some_avg10: float = 1.5  # percent, as the kernel writes it
    some_total_us: int = 1_000_000
    full_avg10: float | None = 0.5
    full_total_us: int | None = 250_000

    def render(self) -> str:
        text = f"some avg10={self.some_avg10:.2f} avg60=0.00 avg300=0.00 total={self.some_total_us}\n"
        if self.full_avg10 is not None:
            text += f"full avg10={self.full_avg10:.2f} avg60=0.00 avg300=0.00 total={self.full_total_us}\n"
        return text


@dataclass
class CgroupValues:
    cpu_ns: int = 5_000_000_000
    periods: int = 100
    throttled: int = 10
    throttled_ns: int = 200_000_000
    inactive_anon: int = 10 * MiB
    active_anon: int = 20 * MiB
    unevictable: int = 1 * MiB
    inactive_file: int = 8 * MiB
    active_file: int = 4 * MiB
    usage: int = 50 * MiB  # memory.usage_in_bytes / memory.current
    psi: dict[str, Psi] | None = field(default_factory=lambda: {r: Psi() for r in ("cpu", "memory", "io")})

    @property
    def anon_usage(self) -> int:
        return self.inactive_anon + self.active_anon + self.unevictable

    @property
    def working_set(self) -> int:
        return max(self.usage - self.inactive_file, 0)


def container_id(n: int, runtime: str = "containerd") -> str:
    return f"{runtime}://{n:064x}"


def make_pod(n: int, qos: KubeQoSClass, containers: int = 2, runtime: str = "containerd") -> PodRef:
    uid = f"{n:08x}-1111-2222-3333-{n:012x}"
    refs = tuple(ContainerRef(f"c{i}", container_id(n * 100 + i + 1, runtime)) for i in range(containers))
    return PodRef(uid=uid, namespace="default", name=f"pod-{n}", qos=qos, containers=refs)


class FakeCgroupTree:
    """A kubepods hierarchy under `root` in one of the four version x driver combinations."""

    def __init__(
        self,
        root: Path,
        version: CgroupVersion,
        driver: CgroupDriver,
        parent: str = "",
        *,
        hybrid: bool = False,
        psi: bool | None = None,  # kernel exposes PSI in cgroups; default: v2 yes, v1 no
    ) -> None:
        self.root = root
        self.version = version
        self.driver = driver
        if version is CgroupVersion.V2:
            root.mkdir(parents=True, exist_ok=True)
            (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
            self.hierarchies = {"cpu": root, "cpuacct": root, "memory": root}
        else:
            self.hierarchies = {c: root / c for c in ("cpu", "cpuacct", "memory")}
            if hybrid:  # a controller-less v2 mount next to the v1 controllers
                (root / "unified").mkdir(parents=True, exist_ok=True)
                (root / "unified" / "cgroup.controllers").write_text("")
        self.kubepods = {c: (h / parent if parent else h) / KUBEPODS_DIR[driver] for c, h in self.hierarchies.items()}
        for d in self.kubepods.values():
            d.mkdir(parents=True, exist_ok=True)
        if psi if psi is not None else version is CgroupVersion.V2:
            _put(self.kubepods["cpuacct"] / "cpu.pressure", Psi().render())

    def layout(self) -> CgroupLayout:
        return CgroupLayout(
            self.version,
            self.driver,
            str(self.kubepods["cpu"]),
            str(self.kubepods["cpuacct"]),
            str(self.kubepods["memory"]),
            psi=False,
        )

    def pod_rel(self, pod: PodRef) -> str:
        return self.layout().pod_dir(pod.qos, pod.uid)

    def container_rel(self, pod: PodRef, ref: ContainerRef) -> str:
        parsed = split_container_id(ref.container_id)
        assert parsed is not None
        return f"{self.pod_rel(pod)}/{self.layout().container_dirs(*parsed)[-1 if parsed[0] == 'cri-o' else 0]}"

    def path(self, controller: str, rel: str) -> Path:
        return self.kubepods[controller] / rel

    def add_pod(
        self, pod: PodRef, pod_values: CgroupValues | None = None, containers: dict[str, CgroupValues] | None = None
    ) -> None:
        self.write(self.pod_rel(pod), pod_values or CgroupValues())
        for ref in pod.containers:
            self.write(self.container_rel(pod, ref), (containers or {}).get(ref.name) or CgroupValues())

    def remove(self, rel: str) -> None:
        for d in {str(self.path(c, rel)) for c in self.hierarchies}:
            shutil.rmtree(d, ignore_errors=True)

    def write_limits(self, rel: str) -> None:
        """The CPU and memory limit files of a cgroup as the kubelet leaves a BestEffort pod's: shares 2 (v2
        weight 1), no quota, no memory limit."""
        if self.version is CgroupVersion.V1:
            _put(self.path("cpu", rel) / "cpu.shares", "2\n")
            _put(self.path("cpu", rel) / "cpu.cfs_quota_us", "-1\n")
            _put(self.path("cpu", rel) / "cpu.cfs_period_us", "100000\n")
            _put(self.path("memory", rel) / "memory.limit_in_bytes", "9223372036854771712\n")
        else:
            _put(self.path("cpu", rel) / "cpu.weight", "1\n")
            _put(self.path("cpu", rel) / "cpu.max", "max 100000\n")
            _put(self.path("memory", rel) / "memory.max", "max\n")

    def write(self, rel: str, v: CgroupValues) -> None:
        if self.version is CgroupVersion.V1:
            self._write_v1(rel, v)
        else:
            self._write_v2(rel, v)
        if v.psi is not None:
            for res, psi in v.psi.items():
                _put(self.path("cpuacct", rel) / f"{res}.pressure", psi.render())

    def _write_v1(self, rel: str, v: CgroupValues) -> None:
        _put(self.path("cpuacct", rel) / "cpuacct.usage", f"{v.cpu_ns}\n")
        _put(
            self.path("cpu", rel) / "cpu.stat",
            f"nr_periods {v.periods}\nnr_throttled {v.throttled}\nthrottled_time {v.throttled_ns}\n"
            "nr_bursts 0\nburst_time 0\n",
        )
        local = (
            f"cache {v.inactive_file + v.active_file}\nrss {v.inactive_anon + v.active_anon}\nrss_huge 0\n"
            f"shmem 0\nmapped_file 0\ndirty 0\nwriteback 0\npgpgin 10\npgpgout 5\npgfault 100\npgmajfault 0\n"
            f"inactive_anon {v.inactive_anon}\nactive_anon {v.active_anon}\ninactive_file {v.inactive_file}\n"
            f"active_file {v.active_file}\nunevictable {v.unevictable}\n"
            "hierarchical_memory_limit 9223372036854771712\nhierarchical_memsw_limit 9223372036854771712\n"
        )
        totals = "".join(f"total_{line}\n" for line in local.splitlines() if not line.startswith("hierarchical"))
        _put(self.path("memory", rel) / "memory.stat", local + totals)
        _put(self.path("memory", rel) / "memory.usage_in_bytes", f"{v.usage}\n")

    def _write_v2(self, rel: str, v: CgroupValues) -> None:
        d = self.path("cpu", rel)
        _put(
            d / "cpu.stat",
            f"usage_usec {v.cpu_ns // 1000}\nuser_usec {v.cpu_ns // 2000}\nsystem_usec {v.cpu_ns // 2000}\n"
            f"nr_periods {v.periods}\nnr_throttled {v.throttled}\nthrottled_usec {v.throttled_ns // 1000}\n"
            "nr_bursts 0\nburst_usec 0\n",
        )
        _put(
            d / "memory.stat",
            f"anon {v.inactive_anon + v.active_anon}\nfile {v.inactive_file + v.active_file}\nkernel 0\n"
            f"kernel_stack 0\nsock 0\nshmem 0\nfile_mapped 0\nfile_dirty 0\n"
            f"inactive_anon {v.inactive_anon}\nactive_anon {v.active_anon}\ninactive_file {v.inactive_file}\n"
            f"active_file {v.active_file}\nunevictable {v.unevictable}\nslab 0\npgfault 10\npgmajfault 0\n",
        )
        _put(d / "memory.current", f"{v.usage}\n")


def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# ---------------------------------------------------------------------------------------------- /proc
@dataclass
class ProcValues:
    # ticks: user nice system idle iowait irq softirq steal guest guest_nice
    cpu: tuple[int, ...] = (1000, 10, 300, 5000, 50, 5, 15, 7, 0, 0)
    cpus: int = 4
    mem_total_kb: int = 16 * 1024 * 1024
    mem_free_kb: int = 4 * 1024 * 1024
    mem_available_kb: int | None = 10 * 1024 * 1024
    psi: dict[str, Psi] | None = field(
        default_factory=lambda: {"cpu": Psi(full_avg10=None), "memory": Psi(), "io": Psi()}
    )


def write_proc(root: Path, v: ProcValues) -> None:
    lines = ["cpu  " + " ".join(str(x) for x in v.cpu)]
    lines += [f"cpu{i} " + " ".join(str(x // v.cpus) for x in v.cpu) for i in range(v.cpus)]
    lines += ["intr 12345 0 0", "ctxt 999", "btime 1700000000", "processes 42", "procs_running 2"]
    _put(root / "stat", "\n".join(lines) + "\n")
    mem = [f"MemTotal:       {v.mem_total_kb} kB", f"MemFree:        {v.mem_free_kb} kB"]
    if v.mem_available_kb is not None:
        mem.append(f"MemAvailable:   {v.mem_available_kb} kB")
    mem += [
        "Buffers:          1024 kB",
        "Cached:         2048 kB",
        "Active(file):   1000 kB",
        "Inactive(file):  2000 kB",
        "SReclaimable:    300 kB",
        "HugePages_Total:       0",
    ]
    _put(root / "meminfo", "\n".join(mem) + "\n")
    if v.psi is not None:
        for res, psi in v.psi.items():
            _put(root / "pressure" / res, psi.render())


class BatchCountingReader(PseudoFileReader):
    """Counts the paths read one by one (`read`), the batches read in Python and those the C reader read."""

    def __init__(self, compiled: bool = False) -> None:
        super().__init__(compiled=compiled)
        self.single: list[str] = []
        self.batches = 0
        self.compiled_batches = 0

    def read_keyed(self, paths: list[str], keys: tuple[bytes, ...]) -> npt.NDArray[np.int64] | None:
        out = super().read_keyed(paths, keys)
        self.compiled_batches += out is not None
        return out

    def read_ints(self, paths: list[str]) -> npt.NDArray[np.int64] | None:
        out = super().read_ints(paths)
        self.compiled_batches += out is not None
        return out

    def read(self, path: str) -> bytes:
        self.single.append(path)
        return super().read(path)

    def read_many(self, paths: list[str], kind: str = "") -> list[bytes] | None:
        self.batches += 1
        return super().read_many(paths, kind)
