"""GPU utilisation, memory, power and temperature per device, and GPU usage per pod, through NVML.

Series, all gauges; `device` = GPU UUID, `pod` = pod UID for per-pod series ("" for the device itself):

    gpu_utilization_ratio              0..1   NVML utilization.gpu: share of the last sample period (1/6..1 s,
                                              by product) in which a kernel ran
    gpu_memory_copy_utilization_ratio  0..1   NVML utilization.memory: share of time device memory was busy
    gpu_core_usage_ratio               0..1+  sum of per-process SM utilisation (koordlet's gpu-core / 100);
                                              on GPUs without per-process accounting (MIG, old boards) the
                                              device's utilization.gpu. Per pod: the sum over its PIDs.
    gpu_memory_used_bytes              bytes  device: NVML memory info "used"; pod: its processes' usedGpuMemory
    gpu_memory_total_bytes             bytes  device only
    gpu_memory_usage_ratio             0..1   used / total, device and pod
    gpu_power_watts                    W      nvmlDeviceGetPowerUsage (mW) / 1000
    gpu_temperature_celsius            °C     core temperature

NodeMetric `devices[]` (see `devices.Device`): type `gpu`, id = UUID, minor = NVML minor number
(/dev/nvidia<minor>), topology.busID = PCI address, health = true while the GPU answers; resources
`koordinator.sh/gpu-core` = int(100 x gpu_core_usage_ratio), `koordinator.sh/gpu-memory` =
gpu_memory_used_bytes (BinarySI), `koordinator.sh/gpu-memory-ratio` = int(100 x gpu_memory_usage_ratio),
the same three per pod from the pod's series. One deliberate difference from koordlet: the device's
gpu-memory is NVML's device "used" (every context, including ones outside pods and the driver's own)
where koordlet sums the processes it can see; the former is what is really left for new work.

Per-process SM utilisation: NVML returns, per process, its latest sample newer than a timestamp. We ask for
samples of the last `_PROCESS_SAMPLE_MAX_AGE` seconds (NVML's sample period is at most 1 s) and keep the
newest per PID, so a busy process is seen every cycle and an idle one drops out within that age. Per-pod
attribution maps PIDs to pods through /proc/<pid>/cgroup (`pid_pods`), hence `hostPID: true`.

Threads and failures: `import pynvml` happens on first use once the NVIDIA driver is loaded
(`<proc>/driver/nvidia/version`), and every NVML call runs on this collector's
own daemon thread (`worker.BlockingWorker`), never on the event loop; the sampler's cycle waits for it at most
`call_timeout` (1 s): a call that outlives it fails this cycle, and later cycles fail at once (nothing is
queued behind a hung driver) until it returns. No library, no driver or no GPU
turns the collector off with one log line; it tries again every `retry_seconds` (default 5 min; an
`nvmlInit` that fails costs ~1.5 ms). Per call: NotSupported/FunctionNotFound mark that reading
unsupported for the GPU (not an error, not asked again); GpuIsLost/ResetRequired drop the GPU until the
next inventory (`retry_seconds` later); Uninitialized/DriverNotLoaded/LibRmVersionMismatch (driver
unloaded or upgraded underneath us) shut NVML down and turn the collector off; anything else counts as a
series error for that reading only.

Cost of our side (`bench/agent_netdev_bench.py`, fake NVML, 8 GPUs x 4 pod processes): 0.7-1.3 ms of CPU
per cycle including the thread hop and the PID -> pod mapping; the driver's time for the ~7 NVML calls per
GPU comes on top (unmeasured here: no GPU on the build box).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from agent.collectors.base import SeriesErrors
from agent.collectors.devices import DEVICE_TYPE_GPU, Device, DeviceResource
from agent.collectors.pid_pods import PidPodResolver
from agent.collectors.worker import BlockingWorker
from agent.series import BlockBuilder, Sample, SampleBlock, SeriesKey, block_of
from common.api.constants import GPU_CORE, GPU_MEMORY, GPU_MEMORY_RATIO

log = logging.getLogger("loadline.agent.gpu")

GPU_UTILIZATION_RATIO: Final = "gpu_utilization_ratio"
GPU_MEMORY_COPY_UTILIZATION_RATIO: Final = "gpu_memory_copy_utilization_ratio"
GPU_CORE_USAGE_RATIO: Final = "gpu_core_usage_ratio"
GPU_MEMORY_USED_BYTES: Final = "gpu_memory_used_bytes"
GPU_MEMORY_TOTAL_BYTES: Final = "gpu_memory_total_bytes"
GPU_MEMORY_USAGE_RATIO: Final = "gpu_memory_usage_ratio"
GPU_POWER_WATTS: Final = "gpu_power_watts"
GPU_TEMPERATURE_CELSIUS: Final = "gpu_temperature_celsius"

GPU_RESOURCES: Final = (
    DeviceResource(GPU_CORE, GPU_CORE_USAGE_RATIO, scale=100),
    DeviceResource(GPU_MEMORY, GPU_MEMORY_USED_BYTES, binary=True),
    DeviceResource(GPU_MEMORY_RATIO, GPU_MEMORY_USAGE_RATIO, scale=100),
)

# NVML return codes (nvml.h, stable ABI). Errors are classified by code, not class, so any module with
# pynvml's interface (a test fake, a future binding) works.
_SUCCESS = 0
_UNINITIALIZED = 1
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_NOT_FOUND = 6
_DRIVER_NOT_LOADED = 9
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_RESET_REQUIRED = 16
_LIB_RM_VERSION_MISMATCH = 18
_NVML_DOWN = frozenset({_UNINITIALIZED, _DRIVER_NOT_LOADED, _LIB_RM_VERSION_MISMATCH})
_GPU_GONE = frozenset({_GPU_IS_LOST, _RESET_REQUIRED})
_UNSUPPORTED = frozenset({_NOT_SUPPORTED, _FUNCTION_NOT_FOUND})

_PROCESS_SAMPLE_MAX_AGE = 1.5  # seconds; NVML samples per-process utilisation every 1/6..1 s
_MAX_POWER_MILLIWATTS = 10_000_000  # 10 kW: anything above is a sentinel, not a reading
_TEMPERATURE_RANGE = (-40, 200)


def _import_pynvml() -> Any:
    import pynvml  # ~10 ms and a ctypes library handle; only on nodes that run this collector

    return pynvml


class _NvmlDown(Exception):
    """NVML as a whole stopped working (driver unloaded or replaced)."""


class _GpuLost(Exception):
    """One GPU stopped answering (fell off the bus, needs a reset)."""


@dataclass(slots=True)
class _Gpu:
    handle: Any
    device: Device
    keys: dict[str, SeriesKey]  # node-level series of this GPU, by metric
    memory_total: int | None = None
    unsupported: set[str] = field(default_factory=set)  # readings NVML cannot give for this GPU


@dataclass(slots=True)
class _GpuUse:
    """What the processes on one GPU used this cycle."""

    pids: set[int]
    sm_percent: dict[int, float] | None  # newest SM% per PID; None if unavailable this cycle
    memory: dict[int, int]  # usedGpuMemory per PID, where NVML knows it


class GpuCollector:
    def __init__(
        self,
        proc_root: str | Path = "/proc",
        *,
        load_nvml: Callable[[], Any] = _import_pynvml,
        retry_seconds: float = 300.0,
        call_timeout: float = 1.0,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._load = load_nvml
        # NVML needs the NVIDIA kernel driver, which shows itself in procfs: where it is not loaded (most nodes),
        # pynvml is not even imported (~2.6 MiB resident for a library that could only fail). A loader other
        # than the real one (a test fake, another binding) is always asked.
        self._driver_file = Path(proc_root) / "driver" / "nvidia" / "version" if load_nvml is _import_pynvml else None
        self._retry_seconds = retry_seconds
        self._timeout = call_timeout
        self._wall_clock = wall_clock  # NVML stamps process samples with CPU wall-clock microseconds
        self._errors = SeriesErrors()
        self._builder = BlockBuilder()  # used on the event loop only
        self._worker = BlockingWorker("loadline-nvml")
        self._pid_pods = PidPodResolver(str(proc_root))
        # Everything below is touched only on the worker thread, one call at a time; `collect` reads
        # `_nvml`/`_next_attempt` only when no call is in flight.
        self._nvml: Any = None  # the module, once nvmlInit succeeded
        self._gpus: list[_Gpu] = []
        self._devices: tuple[Device, ...] = ()
        self._next_attempt = -math.inf  # while off: monotonic time of the next nvmlInit
        self._rescan_at = math.inf  # while on: when to take a new inventory (after a GPU was lost)
        self._announced_off = False

    @property
    def name(self) -> str:
        return "gpu"

    @property
    def errors(self) -> SeriesErrors:
        return self._errors

    @property
    def devices(self) -> Sequence[Device]:
        return self._devices

    @property
    def enabled(self) -> bool:
        """True while NVML is initialised and at least one GPU was found."""
        return self._nvml is not None

    async def collect(self, now: float) -> SampleBlock:
        if self._worker.busy:
            raise RuntimeError("an earlier NVML call is still running")
        if self._nvml is None and now < self._next_attempt:
            return block_of((), self._builder)  # off: no GPU here is normal, not a failure
        if self._nvml is None and self._driver_file is not None and not self._driver_file.exists():
            # one stat of procfs on the loop: no worker thread and no pynvml where there is no driver
            self._turn_off(now, f"no NVIDIA driver loaded (no {self._driver_file})")
            return block_of((), self._builder)
        samples = await self._worker.run(self._collect_blocking, now, wait_seconds=self._timeout)
        return block_of(samples, self._builder)

    def close(self) -> None:
        if self._nvml is not None and not self._worker.busy:
            self._worker.submit(self._shutdown)
        self._worker.close()

    # ------------------------------------------------------------------ on the worker thread
    def _collect_blocking(self, now: float) -> list[Sample]:
        try:
            if self._nvml is None:
                if not self._start(now):
                    return []
            elif now >= self._rescan_at:
                self._take_inventory(now)
            return self._read(now)
        except _NvmlDown as exc:
            self._shutdown()
            self._turn_off(now, f"NVML stopped working ({exc})", logging.WARNING)
            return []

    def _start(self, now: float) -> bool:
        try:
            nvml = self._load()
        except ImportError as exc:
            return self._turn_off(now, f"nvidia-ml-py is not installed ({exc})")
        try:
            nvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded / anything ctypes throws
            return self._turn_off(now, f"nvmlInit failed: {exc}")
        self._nvml = nvml
        self._take_inventory(now)
        if not self._gpus:
            self._shutdown()
            return self._turn_off(now, "NVML sees no GPU")
        log.info("GPU collector on: %d GPU(s) through NVML", len(self._gpus))
        self._announced_off = False
        return True

    def _turn_off(self, now: float, reason: str, level: int = logging.INFO) -> bool:
        self._next_attempt = now + self._retry_seconds
        if not self._announced_off:  # one line per state change, not one per retry
            log.log(level, "GPU collector off: %s; trying again every %g s", reason, self._retry_seconds)
            self._announced_off = True
        else:
            log.debug("GPU collector still off: %s", reason)
        return False

    def _shutdown(self) -> None:
        nvml, self._nvml = self._nvml, None
        self._gpus, self._devices = [], ()
        if nvml is not None:
            try:
                nvml.nvmlShutdown()
            except Exception as exc:  # already gone; nothing left to release
                log.debug("nvmlShutdown: %s", exc)

    def _classify(self, exc: Exception, gpu: _Gpu | None, what: str) -> None:
        """Handle a failed NVML call: returns if only this reading is lost, raises if more is."""
        code = getattr(exc, "value", None)
        if code in _UNSUPPORTED:
            if gpu is not None:
                gpu.unsupported.add(what)
        elif code in _GPU_GONE:
            raise _GpuLost(f"{what}: {exc}") from exc
        elif code in _NVML_DOWN:
            raise _NvmlDown(f"{what}: {exc}") from exc
        elif code == _NO_PERMISSION:
            self._errors.record(SeriesErrors.PERMISSION)
        else:
            self._errors.record(SeriesErrors.IO)

    def _call(self, gpu: _Gpu | None, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)`, or None if NVML could not give this reading."""
        if gpu is not None and what in gpu.unsupported:
            return None
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:
            self._classify(exc, gpu, what)
            return None

    def _take_inventory(self, now: float) -> None:
        nv = self._nvml
        count = self._call(None, "count", nv.nvmlDeviceGetCount)
        old = {g.device.id: g for g in self._gpus}
        gpus: list[_Gpu] = []
        for index in range(count or 0):
            try:
                gpu = self._describe(index, old)
            except _GpuLost as exc:
                self._errors.record(SeriesErrors.VANISHED)
                log.warning("GPU %d does not answer: %s", index, exc)
                continue
            if gpu is not None:
                gpus.append(gpu)
        self._gpus = gpus
        self._devices = tuple(g.device for g in gpus)
        self._rescan_at = math.inf

    def _describe(self, index: int, old: dict[str, _Gpu]) -> _Gpu | None:
        nv = self._nvml
        handle = self._call(None, "handle", nv.nvmlDeviceGetHandleByIndex, index)
        uuid = _text(self._call(None, "uuid", nv.nvmlDeviceGetUUID, handle)) if handle is not None else None
        if handle is None or not uuid:
            return None
        minor = self._call(None, "minor", nv.nvmlDeviceGetMinorNumber, handle)
        pci = self._call(None, "pci", nv.nvmlDeviceGetPciInfo, handle)
        memory = self._call(None, "memory", nv.nvmlDeviceGetMemoryInfo, handle)
        device = Device(
            type=DEVICE_TYPE_GPU,
            id=uuid,
            minor=int(minor) if minor is not None else None,
            bus_id=_pci_address(_text(getattr(pci, "busId", None))),
            health=True,
            node_resources=GPU_RESOURCES,
            pod_resources=GPU_RESOURCES,
        )
        previous = old.get(uuid)
        gpu = _Gpu(
            handle,
            device,
            {m: SeriesKey(m, "", "", uuid) for m in _NODE_METRICS},
            unsupported=previous.unsupported if previous is not None else set(),
        )
        if memory is not None and int(memory.total) > 0:
            gpu.memory_total = int(memory.total)
        return gpu

    def _read(self, now: float) -> list[Sample]:
        out: list[Sample] = []
        uses: list[tuple[_Gpu, _GpuUse]] = []
        lost: list[_Gpu] = []
        since_us = int((self._wall_clock() - _PROCESS_SAMPLE_MAX_AGE) * 1e6)
        for gpu in self._gpus:
            samples: list[Sample] = []  # kept apart: a GPU lost halfway contributes nothing this cycle
            try:
                use = self._read_gpu(gpu, since_us, samples)
            except _GpuLost as exc:
                self._errors.record(SeriesErrors.VANISHED)
                log.warning("GPU %s lost (%s); looking again in %g s", gpu.device.id, exc, self._retry_seconds)
                lost.append(gpu)
                continue
            out.extend(samples)
            uses.append((gpu, use))
        if lost:
            self._gpus = [g for g in self._gpus if g not in lost]
            self._devices = tuple(g.device for g in self._gpus)
            self._rescan_at = now + self._retry_seconds
        pids = {pid for _, use in uses for pid in use.pids}
        pods = self._pid_pods.resolve(pids, self._errors)
        for gpu, use in uses:
            _pod_samples(gpu, use, pods, out)
        return out

    def _read_gpu(self, gpu: _Gpu, since_us: int, out: list[Sample]) -> _GpuUse:
        nv, h, keys, bad = self._nvml, gpu.handle, gpu.keys, self._errors
        busy: float | None = None
        util = self._call(gpu, "utilization", nv.nvmlDeviceGetUtilizationRates, h)
        if util is not None:
            busy, memory_busy = _percent(util.gpu), _percent(util.memory)
            if busy is None or memory_busy is None:
                bad.record(SeriesErrors.GARBAGE)
                busy = None
            else:
                out.append(Sample(keys[GPU_UTILIZATION_RATIO], busy))
                out.append(Sample(keys[GPU_MEMORY_COPY_UTILIZATION_RATIO], memory_busy))
        memory = self._call(gpu, "memory", nv.nvmlDeviceGetMemoryInfo, h)
        if memory is not None:
            used, total = int(memory.used), int(memory.total)
            if 0 <= used <= total and total > 0:
                gpu.memory_total = total
                out.append(Sample(keys[GPU_MEMORY_USED_BYTES], float(used)))
                out.append(Sample(keys[GPU_MEMORY_TOTAL_BYTES], float(total)))
                out.append(Sample(keys[GPU_MEMORY_USAGE_RATIO], used / total))
            else:
                bad.record(SeriesErrors.GARBAGE)
        milliwatts = self._call(gpu, "power", nv.nvmlDeviceGetPowerUsage, h)
        if milliwatts is not None:
            if 0 <= milliwatts <= _MAX_POWER_MILLIWATTS:
                out.append(Sample(keys[GPU_POWER_WATTS], milliwatts / 1000.0))
            else:
                bad.record(SeriesErrors.GARBAGE)
        celsius = self._call(gpu, "temperature", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        if celsius is not None:
            if _TEMPERATURE_RANGE[0] <= celsius <= _TEMPERATURE_RANGE[1]:
                out.append(Sample(keys[GPU_TEMPERATURE_CELSIUS], float(celsius)))
            else:
                bad.record(SeriesErrors.GARBAGE)

        processes = self._call(gpu, "processes", nv.nvmlDeviceGetComputeRunningProcesses, h) or ()
        use = _GpuUse(set(), self._process_sm(gpu, since_us), {})
        for proc in processes:
            pid = int(proc.pid)
            use.pids.add(pid)
            used_memory = proc.usedGpuMemory  # None when NVML cannot tell (e.g. no permission)
            if used_memory is not None and used_memory >= 0:
                use.memory[pid] = use.memory.get(pid, 0) + int(used_memory)
        if use.sm_percent is not None:
            use.pids.update(use.sm_percent)
            out.append(Sample(keys[GPU_CORE_USAGE_RATIO], sum(use.sm_percent.values()) / 100.0))
        elif "process_utilization" in gpu.unsupported and busy is not None:
            out.append(Sample(keys[GPU_CORE_USAGE_RATIO], busy))  # no per-process accounting on this GPU
        return use

    def _process_sm(self, gpu: _Gpu, since_us: int) -> dict[int, float] | None:
        """Newest SM% per PID from samples newer than `since_us`; None if unavailable this cycle."""
        what = "process_utilization"
        if what in gpu.unsupported:
            return None
        nv = self._nvml
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(gpu.handle, since_us)
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) in (_NOT_FOUND, _SUCCESS):
                return {}  # no sample that new: nothing ran (pynvml raises even for "success, 0 samples")
            self._classify(exc, gpu, what)
            return None
        newest: dict[int, tuple[int, float]] = {}
        for sample in samples:
            sm = _percent(sample.smUtil)
            if sm is None:
                self._errors.record(SeriesErrors.GARBAGE)
                continue
            pid, stamp = int(sample.pid), int(sample.timeStamp)
            if pid not in newest or stamp > newest[pid][0]:
                newest[pid] = (stamp, sm * 100.0)
        return {pid: sm for pid, (_, sm) in newest.items()}


_NODE_METRICS: Final = (
    GPU_UTILIZATION_RATIO,
    GPU_MEMORY_COPY_UTILIZATION_RATIO,
    GPU_CORE_USAGE_RATIO,
    GPU_MEMORY_USED_BYTES,
    GPU_MEMORY_TOTAL_BYTES,
    GPU_MEMORY_USAGE_RATIO,
    GPU_POWER_WATTS,
    GPU_TEMPERATURE_CELSIUS,
)


def _pod_samples(gpu: _Gpu, use: _GpuUse, pods: dict[int, str], out: list[Sample]) -> None:
    """Per pod on this GPU: SM share, memory and memory ratio summed over the pod's PIDs."""
    sm: dict[str, float] = {}
    memory: dict[str, int] = {}
    for pid in use.pids:
        uid = pods.get(pid)
        if uid is None:
            continue  # not in a pod (host process), or its /proc entry is gone
        sm[uid] = sm.get(uid, 0.0) + (use.sm_percent.get(pid, 0.0) if use.sm_percent is not None else 0.0)
        if pid in use.memory:
            memory[uid] = memory.get(uid, 0) + use.memory[pid]
    uuid, total = gpu.device.id, gpu.memory_total
    for uid, percent in sm.items():
        if use.sm_percent is not None:
            out.append(Sample(SeriesKey(GPU_CORE_USAGE_RATIO, uid, "", uuid), percent / 100.0))
        if uid in memory:
            out.append(Sample(SeriesKey(GPU_MEMORY_USED_BYTES, uid, "", uuid), float(memory[uid])))
            if total:
                out.append(Sample(SeriesKey(GPU_MEMORY_USAGE_RATIO, uid, "", uuid), memory[uid] / total))


def _percent(value: Any) -> float | None:
    """An NVML percentage as a 0..1 ratio; None for values outside 0..100 (sentinels, garbage)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number / 100.0 if 0.0 <= number <= 100.0 else None


def _text(value: Any) -> str | None:
    """pynvml returns str in new versions and bytes in old ones."""
    if isinstance(value, bytes):
        return value.decode("ascii", "replace").strip("\x00 ")
    return value.strip() if isinstance(value, str) else None


def _pci_address(bus_id: str | None) -> str | None:
    """NVML's "00000000:3B:00.0" as sysfs and Kubernetes write it: "0000:3b:00.0"."""
    if not bus_id:
        return None
    domain, sep, rest = bus_id.lower().partition(":")
    if not sep:
        return bus_id.lower()
    return f"{domain[-4:].rjust(4, '0')}:{rest}"
