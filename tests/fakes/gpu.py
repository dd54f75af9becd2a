"""A fake NVML module (pynvml's functions and error classes) and a fake /proc of GPU processes."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

GiB = 1024**3


WALL = 1_700_000_000.0  # fake wall clock: NVML stamps process samples in wall-clock microseconds


class NVMLError(Exception):
    """pynvml's base class: carries the NVML return code in `value`."""

    value = 999

    def __init__(self, value: int | None = None) -> None:
        super().__init__()
        if value is not None:
            self.value = value

    def __str__(self) -> str:
        return f"{type(self).__name__}({self.value})"


class NVMLError_NotFound(NVMLError):
    value = 6


@dataclass
class FakeGpu:
    uuid: str
    minor: int
    bus_id: str = "00000000:3B:00.0"
    util_gpu: int = 60
    util_memory: int = 25
    used: int = 4 * GiB
    total: int = 16 * GiB
    power_mw: int = 250_500
    temperature: int = 61
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, usedGpuMemory)
    samples: list[tuple[int, float, int]] = field(default_factory=list)  # (pid, wall seconds, smUtil %)
    fail: dict[str, Exception] = field(default_factory=dict)  # NVML function name -> error it raises


class FakeNvml:
    """A module-like object with the pynvml functions the collector calls."""

    NVML_TEMPERATURE_GPU = 0
    NVMLError = NVMLError

    def __init__(self, gpus: list[FakeGpu], init_error: Exception | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.calls: list[tuple[str, int, str]] = []  # (function, thread id, GPU UUID or "")
        self.initialised = False
        self.gate: threading.Event | None = None  # when set, calls wait for it (a hung driver)

    def _enter(self, name: str, gpu: FakeGpu | None = None) -> None:
        self.calls.append((name, threading.get_ident(), gpu.uuid if gpu is not None else ""))
        if self.gate is not None:
            self.gate.wait(10)
        if gpu is not None and name in gpu.fail:
            raise gpu.fail[name]

    def count(self, name: str) -> int:
        return sum(1 for n, _, _ in self.calls if n == name)

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        if self.init_error is not None:
            raise self.init_error
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._enter("nvmlDeviceGetHandleByIndex", self.gpus[index])
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        self._enter("nvmlDeviceGetUUID", h)
        return h.uuid

    def nvmlDeviceGetMinorNumber(self, h: FakeGpu) -> int:
        self._enter("nvmlDeviceGetMinorNumber", h)
        return h.minor

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> Any:
        self._enter("nvmlDeviceGetPciInfo", h)
        return SimpleNamespace(busId=h.bus_id.encode())  # old pynvml versions hand out bytes

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> Any:
        self._enter("nvmlDeviceGetUtilizationRates", h)
        return SimpleNamespace(gpu=h.util_gpu, memory=h.util_memory)

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu) -> Any:
        self._enter("nvmlDeviceGetMemoryInfo", h)
        return SimpleNamespace(total=h.total, used=h.used, free=h.total - h.used)

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        self._enter("nvmlDeviceGetPowerUsage", h)
        return h.power_mw

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        self._enter("nvmlDeviceGetTemperature", h)
        assert sensor == self.NVML_TEMPERATURE_GPU
        return h.temperature

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list[Any]:
        self._enter("nvmlDeviceGetComputeRunningProcesses", h)
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in h.processes]

    def nvmlDeviceGetProcessUtilization(self, h: FakeGpu, last_seen_us: int) -> list[Any]:
        self._enter("nvmlDeviceGetProcessUtilization", h)
        fresh = [
            SimpleNamespace(pid=pid, timeStamp=int(t * 1e6), smUtil=sm, memUtil=0, encUtil=0, decUtil=0)
            for pid, t, sm in h.samples
            if int(t * 1e6) > last_seen_us
        ]
        if not fresh:
            raise NVMLError_NotFound()  # what NVML answers when no sample is newer than the timestamp
        return fresh


def write_process(proc: Path, pid: int, cgroup: str, start: int = 1000, comm: str = "python3") -> None:
    d = proc / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "cgroup").write_text(cgroup)
    # fields after "(comm) ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    # cutime cstime priority nice threads itrealvalue starttime ...
    (d / "stat").write_text(f"{pid} ({comm}) S 1 1 1 0 -1 4194560 0 0 0 0 5 3 0 0 20 0 4 0 {start} 1000 10\n")


def v1_cgroup_systemd(uid: str, cid: str = "ab" * 32) -> str:
    slice_uid = uid.replace("-", "_")
    path = (
        f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{slice_uid}.slice/cri-containerd-{cid}.scope"
    )
    return f"12:memory:{path}\n11:cpu,cpuacct:{path}\n1:name=systemd:{path}\n"


def v2_cgroup_cgroupfs(uid: str, cid: str = "cd" * 32) -> str:
    return f"0::/kubepods/besteffort/pod{uid}/{cid}\n"
