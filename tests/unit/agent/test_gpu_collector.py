"""GPU collector against a fake NVML module (pynvml's interface and error classes) and a fake /proc."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.collectors.base import Collector, CollectorStats, SeriesErrors, run_collector
from agent.collectors.devices import DEVICE_TYPE_GPU, device_info
from agent.collectors.gpu import (
    GPU_CORE_USAGE_RATIO,
    GPU_MEMORY_COPY_UTILIZATION_RATIO,
    GPU_MEMORY_TOTAL_BYTES,
    GPU_MEMORY_USAGE_RATIO,
    GPU_MEMORY_USED_BYTES,
    GPU_POWER_WATTS,
    GPU_TEMPERATURE_CELSIUS,
    GPU_UTILIZATION_RATIO,
    GpuCollector,
)
from agent.collectors.pid_pods import pod_uid_from_cgroup, process_start_time
from agent.series import Sample, SeriesKey
from tests.fakes.gpu import (
    WALL,
    FakeGpu,
    FakeNvml,
    GiB,
    NVMLError,
    v1_cgroup_systemd,
    v2_cgroup_cgroupfs,
    write_process,
)

POD_A = "0b5d2c3e-8f1a-4c6b-9d7e-1a2b3c4d5e6f"
POD_B = "7c9e1f20-3a4b-4c5d-8e6f-708192a3b4c5"
STATIC_POD = "d41d8cd98f00b204e9800998ecf8427e"  # static pods: 32 hex, no dashes


# ---------------------------------------------------------------------------------------------- fake NVML


class NVMLError_Uninitialized(NVMLError):
    value = 1


class NVMLError_NotSupported(NVMLError):
    value = 3


class NVMLError_NoPermission(NVMLError):
    value = 4




class NVMLError_DriverNotLoaded(NVMLError):
    value = 9


class NVMLError_LibraryNotFound(NVMLError):
    value = 12


class NVMLError_GpuIsLost(NVMLError):
    value = 15






# ---------------------------------------------------------------------------------------------- fake /proc
LOGGER = "loadline.agent.gpu"


def logged(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[str]:
    """Messages of this collector's logger at `level` or above (other tests may leave loggers chatty)."""
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= level]








def collector(proc: Path, nvml: FakeNvml, **kw: Any) -> GpuCollector:
    return GpuCollector(proc, load_nvml=lambda: nvml, wall_clock=lambda: WALL, **kw)


def collect(c: GpuCollector, now: float) -> list[Sample]:
    return list(asyncio.run(c.collect(now)))


def run(c: GpuCollector, stats: CollectorStats, now: float) -> list[Sample]:
    """One cycle with the collector bookkeeping the sampler does."""
    return list(asyncio.run(run_collector(c, stats, now)))


def values(samples: list[Sample]) -> dict[SeriesKey, float]:
    return {s.key: s.value for s in samples}


def two_gpus() -> list[FakeGpu]:
    return [FakeGpu("GPU-aaaa", 0), FakeGpu("GPU-bbbb", 1, bus_id="00000000:AF:00.0", used=0, util_gpu=0)]


# ---------------------------------------------------------------------------------------------- tests
def test_pid_to_pod_mapping_rules() -> None:
    assert pod_uid_from_cgroup(v1_cgroup_systemd(POD_A).encode()) == POD_A  # systemd: '_' back to '-'
    assert pod_uid_from_cgroup(v2_cgroup_cgroupfs(POD_B).encode()) == POD_B
    assert pod_uid_from_cgroup(f"0::/kubepods.slice/kubepods-pod{STATIC_POD}.slice/x\n".encode()) == STATIC_POD
    assert pod_uid_from_cgroup(b"0::/system.slice/containerd.service\n") is None
    assert pod_uid_from_cgroup(b"0::/kubepods/podabc/x\n") is None  # shorter than a UID
    assert pod_uid_from_cgroup(b"garbage without colons\n") is None
    stat = b"42 (my (weird) proc) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 987654 0 0\n"
    assert process_start_time(stat) == 987654


def test_no_library_turns_off_with_one_log_line_and_retries_rarely(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    loads = 0

    def missing() -> Any:
        nonlocal loads
        loads += 1
        raise ImportError("No module named 'pynvml'")

    c = GpuCollector(tmp_path, load_nvml=missing, retry_seconds=300.0)
    stats = CollectorStats("gpu")
    caplog.set_level(logging.DEBUG, logger="loadline.agent.gpu")
    for now in range(0, 600, 3):
        assert run(c, stats, float(now)) == []
    assert loads == 2  # at 0 s and at 300 s, not every cycle
    assert stats.last_success and stats.failures == 0  # no GPU is normal, not a failure
    infos = logged(caplog)
    assert len(infos) == 1 and "nvidia-ml-py is not installed" in infos[0]
    assert not c.enabled and c.devices == ()


@pytest.mark.parametrize("error", [NVMLError_LibraryNotFound(), NVMLError_DriverNotLoaded()])
def test_no_driver_turns_off_then_comes_up_when_the_driver_appears(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, error: Exception
) -> None:
    nvml = FakeNvml(two_gpus(), init_error=error)
    c = collector(tmp_path, nvml, retry_seconds=60.0)
    caplog.set_level(logging.INFO, logger="loadline.agent.gpu")
    assert collect(c, 0.0) == []
    assert collect(c, 30.0) == []
    assert nvml.count("nvmlInit") == 1
    nvml.init_error = None  # driver loaded
    assert collect(c, 59.0) == []  # not yet due
    samples = collect(c, 60.0)
    assert nvml.count("nvmlInit") == 2 and c.enabled
    assert values(samples)[SeriesKey(GPU_UTILIZATION_RATIO, "", "", "GPU-aaaa")] == pytest.approx(0.6)
    messages = logged(caplog)
    assert len(messages) == 2 and "off" in messages[0] and "on: 2 GPU(s)" in messages[1]


def test_device_series_units(tmp_path: Path) -> None:
    c = collector(tmp_path, FakeNvml(two_gpus()))
    v = values(collect(c, 0.0))

    def key(metric: str, gpu: str = "GPU-aaaa") -> SeriesKey:
        return SeriesKey(metric, "", "", gpu)

    assert v[key(GPU_UTILIZATION_RATIO)] == pytest.approx(0.60)
    assert v[key(GPU_MEMORY_COPY_UTILIZATION_RATIO)] == pytest.approx(0.25)
    assert v[key(GPU_MEMORY_USED_BYTES)] == 4 * GiB
    assert v[key(GPU_MEMORY_TOTAL_BYTES)] == 16 * GiB
    assert v[key(GPU_MEMORY_USAGE_RATIO)] == pytest.approx(0.25)
    assert v[key(GPU_POWER_WATTS)] == pytest.approx(250.5)  # mW -> W
    assert v[key(GPU_TEMPERATURE_CELSIUS)] == 61
    assert v[key(GPU_CORE_USAGE_RATIO)] == 0.0  # per-process accounting works, and nothing runs
    assert v[key(GPU_MEMORY_USED_BYTES, "GPU-bbbb")] == 0
    devices = {d.id: d for d in c.devices}
    assert isinstance(c, Collector)
    assert devices["GPU-aaaa"].minor == 0 and devices["GPU-aaaa"].bus_id == "0000:3b:00.0"
    assert devices["GPU-bbbb"].bus_id == "0000:af:00.0" and devices["GPU-bbbb"].type == DEVICE_TYPE_GPU


def test_per_pod_usage_from_process_pids(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    write_process(proc, 101, v1_cgroup_systemd(POD_A))  # pod A, two processes on GPU 0
    write_process(proc, 102, v1_cgroup_systemd(POD_A))
    write_process(proc, 201, v2_cgroup_cgroupfs(POD_B))  # pod B on both GPUs
    write_process(proc, 301, "0::/system.slice/sshd.service\n")  # a host process: node only
    gpus = two_gpus()
    gpus[0].processes = [(101, 1 * GiB), (102, 2 * GiB), (201, 512 * 1024**2), (301, 256 * 1024**2)]
    gpus[0].samples = [
        (101, WALL - 0.4, 30),
        (101, WALL - 1.2, 90),  # older sample of the same PID: the newest wins
        (102, WALL - 0.2, 10),
        (201, WALL - 0.3, 5),
        (301, WALL - 0.1, 20),
        (999, WALL - 3.0, 50),  # too old to count (process idle or gone)
    ]
    gpus[1].processes = [(201, None)]  # NVML could not tell its memory
    gpus[1].samples = [(201, WALL - 0.5, 70)]
    c = collector(proc, FakeNvml(gpus))
    v = values(collect(c, 0.0))

    assert v[SeriesKey(GPU_CORE_USAGE_RATIO, "", "", "GPU-aaaa")] == pytest.approx(0.65)  # 30+10+5+20 %
    assert v[SeriesKey(GPU_CORE_USAGE_RATIO, POD_A, "", "GPU-aaaa")] == pytest.approx(0.40)
    assert v[SeriesKey(GPU_MEMORY_USED_BYTES, POD_A, "", "GPU-aaaa")] == 3 * GiB
    assert v[SeriesKey(GPU_MEMORY_USAGE_RATIO, POD_A, "", "GPU-aaaa")] == pytest.approx(3 / 16)
    assert v[SeriesKey(GPU_CORE_USAGE_RATIO, POD_B, "", "GPU-aaaa")] == pytest.approx(0.05)
    assert v[SeriesKey(GPU_CORE_USAGE_RATIO, POD_B, "", "GPU-bbbb")] == pytest.approx(0.70)
    assert SeriesKey(GPU_MEMORY_USED_BYTES, POD_B, "", "GPU-bbbb") not in v  # unknown, not zero
    assert not any(k.pod not in ("", POD_A, POD_B) for k in v)  # the host process is nobody's pod

    # What the report writes into NodeMetric devices[] from these values (avg over a window in real life).
    device = {d.id: d for d in c.devices}["GPU-aaaa"]
    node = device_info(device, v.get)
    pod = device_info(device, v.get, pod=POD_A)
    assert node is not None and pod is not None
    assert node.to_wire() == {
        "type": "gpu",
        "id": "GPU-aaaa",
        "minor": 0,
        "health": True,
        "resources": {
            "koordinator.sh/gpu-core": "65",
            "koordinator.sh/gpu-memory": "4Gi",
            "koordinator.sh/gpu-memory-ratio": "25",
        },
        "topology": {"busID": "0000:3b:00.0"},
    }
    assert pod.to_wire()["resources"] == {
        "koordinator.sh/gpu-core": "40",
        "koordinator.sh/gpu-memory": "3Gi",
        "koordinator.sh/gpu-memory-ratio": "18",  # int(18.75), truncated as Go's int64() does
    }
    assert device_info(device, v.get, pod="no-such-pod") is None


def test_pid_cache_is_keyed_by_start_time(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    write_process(proc, 101, v2_cgroup_cgroupfs(POD_A), start=1000)
    gpus = two_gpus()
    gpus[0].processes = [(101, GiB)]
    c = collector(proc, FakeNvml(gpus))
    assert SeriesKey(GPU_MEMORY_USED_BYTES, POD_A, "", "GPU-aaaa") in values(collect(c, 0.0))
    # PID 101 exits and the number is reused by a process of pod B: same PID, new start time.
    write_process(proc, 101, v2_cgroup_cgroupfs(POD_B), start=5000)
    v = values(collect(c, 1.0))
    assert SeriesKey(GPU_MEMORY_USED_BYTES, POD_B, "", "GPU-aaaa") in v
    assert SeriesKey(GPU_MEMORY_USED_BYTES, POD_A, "", "GPU-aaaa") not in v
    # Same start time: the cached answer is used, the cgroup file is not read again.
    (proc / "101" / "cgroup").write_text(v2_cgroup_cgroupfs(POD_A))
    assert SeriesKey(GPU_MEMORY_USED_BYTES, POD_B, "", "GPU-aaaa") in values(collect(c, 2.0))


def test_vanished_and_garbage_process_entries_skip_only_that_pid(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    write_process(proc, 101, v2_cgroup_cgroupfs(POD_A))
    (proc / "102").mkdir(parents=True)
    (proc / "102" / "stat").write_text("garbage")
    gpus = two_gpus()
    gpus[0].processes = [(101, GiB), (102, GiB), (103, GiB)]  # 103: exited, or no hostPID
    c = collector(proc, FakeNvml(gpus))
    v = values(collect(c, 0.0))
    assert v[SeriesKey(GPU_MEMORY_USED_BYTES, POD_A, "", "GPU-aaaa")] == GiB
    assert v[SeriesKey(GPU_MEMORY_USED_BYTES, "", "", "GPU-aaaa")] == 4 * GiB
    assert c.errors.by_reason == {SeriesErrors.VANISHED: 1, SeriesErrors.GARBAGE: 1}


def test_not_supported_mid_run_drops_only_that_reading_and_is_not_asked_again(tmp_path: Path) -> None:
    nvml = FakeNvml(two_gpus())
    c = collector(tmp_path, nvml)
    assert SeriesKey(GPU_POWER_WATTS, "", "", "GPU-aaaa") in values(collect(c, 0.0))
    nvml.gpus[0].fail["nvmlDeviceGetPowerUsage"] = NVMLError_NotSupported()
    nvml.gpus[0].fail["nvmlDeviceGetProcessUtilization"] = NVMLError_NotSupported()  # e.g. MIG enabled
    for now in (1.0, 2.0, 3.0):
        v = values(collect(c, now))
    assert SeriesKey(GPU_POWER_WATTS, "", "", "GPU-aaaa") not in v
    assert SeriesKey(GPU_POWER_WATTS, "", "", "GPU-bbbb") in v
    # Without per-process accounting the device's utilisation stands in for gpu-core.
    assert v[SeriesKey(GPU_CORE_USAGE_RATIO, "", "", "GPU-aaaa")] == pytest.approx(0.6)
    assert v[SeriesKey(GPU_TEMPERATURE_CELSIUS, "", "", "GPU-aaaa")] == 61
    assert c.errors.total == 0


def test_not_supported_is_remembered_per_gpu(tmp_path: Path) -> None:
    nvml = FakeNvml(two_gpus())
    nvml.gpus[0].fail["nvmlDeviceGetPowerUsage"] = NVMLError_NotSupported()
    c = collector(tmp_path, nvml)
    for now in range(5):
        collect(c, float(now))
    asked = [gpu for name, _, gpu in nvml.calls if name == "nvmlDeviceGetPowerUsage"]
    assert asked.count("GPU-aaaa") == 1 and asked.count("GPU-bbbb") == 5
    assert c.errors.total == 0  # a capability, not an error


def test_other_errors_count_per_reading(tmp_path: Path) -> None:
    nvml = FakeNvml(two_gpus())
    nvml.gpus[1].fail["nvmlDeviceGetTemperature"] = NVMLError_NoPermission()
    nvml.gpus[1].fail["nvmlDeviceGetMemoryInfo"] = NVMLError(999)
    c = collector(tmp_path, nvml)
    v = values(collect(c, 0.0))
    assert SeriesKey(GPU_TEMPERATURE_CELSIUS, "", "", "GPU-bbbb") not in v
    assert SeriesKey(GPU_UTILIZATION_RATIO, "", "", "GPU-bbbb") in v
    # memory info failed twice: at the inventory (total unknown) and as this cycle's reading
    assert c.errors.by_reason == {SeriesErrors.PERMISSION: 1, SeriesErrors.IO: 2}
    nvml.gpus[1].fail.clear()
    assert SeriesKey(GPU_TEMPERATURE_CELSIUS, "", "", "GPU-bbbb") in values(collect(c, 1.0))  # asked again


def test_garbage_readings_are_dropped(tmp_path: Path) -> None:
    gpus = two_gpus()
    gpus[0].util_gpu = 4294967295  # a sentinel, not a percentage
    gpus[0].power_mw = 2**63
    gpus[0].used = 32 * GiB  # more than the board has
    gpus[0].samples = [(1, WALL, 250)]
    c = collector(tmp_path, FakeNvml(gpus))
    v = values(collect(c, 0.0))
    for metric in (GPU_UTILIZATION_RATIO, GPU_POWER_WATTS, GPU_MEMORY_USED_BYTES):
        assert SeriesKey(metric, "", "", "GPU-aaaa") not in v
    assert v[SeriesKey(GPU_CORE_USAGE_RATIO, "", "", "GPU-aaaa")] == 0.0  # the bad sample is skipped
    assert c.errors.by_reason == {SeriesErrors.GARBAGE: 4}


def test_gpu_lost_mid_run_drops_that_gpu_until_the_next_inventory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    nvml = FakeNvml(two_gpus())
    c = collector(tmp_path, nvml, retry_seconds=100.0)
    collect(c, 0.0)
    caplog.set_level(logging.WARNING, logger="loadline.agent.gpu")
    # Lost halfway through its readings: nothing of it this cycle (not half a GPU).
    nvml.gpus[0].fail["nvmlDeviceGetComputeRunningProcesses"] = NVMLError_GpuIsLost()
    v = values(collect(c, 1.0))
    assert not any(k.device == "GPU-aaaa" for k in v)
    assert SeriesKey(GPU_UTILIZATION_RATIO, "", "", "GPU-bbbb") in v
    assert [d.id for d in c.devices] == ["GPU-bbbb"]
    assert c.errors.by_reason == {SeriesErrors.VANISHED: 1}
    calls = len(nvml.calls)
    v = values(collect(c, 2.0))
    assert not any(k.device == "GPU-aaaa" for k in v)
    assert not any(gpu == "GPU-aaaa" for _, _, gpu in nvml.calls[calls:])  # not asked any more
    warnings = logged(caplog, logging.WARNING)
    assert len(warnings) == 1 and "GPU-aaaa lost" in warnings[0]
    # The GPU comes back after a reset; the next inventory (retry_seconds later) finds it.
    nvml.gpus[0].fail.clear()
    assert not any(k.device == "GPU-aaaa" for k in values(collect(c, 100.0)))
    assert any(k.device == "GPU-aaaa" for k in values(collect(c, 101.0)))
    assert sorted(d.id for d in c.devices) == ["GPU-aaaa", "GPU-bbbb"]


def test_driver_unloaded_mid_run_turns_off_and_recovers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    nvml = FakeNvml(two_gpus())
    c = collector(tmp_path, nvml, retry_seconds=50.0)
    stats = CollectorStats("gpu")
    caplog.set_level(logging.INFO, logger="loadline.agent.gpu")
    assert run(c, stats, 0.0)
    nvml.gpus[1].fail["nvmlDeviceGetUtilizationRates"] = NVMLError_Uninitialized()
    nvml.init_error = NVMLError_DriverNotLoaded()
    assert run(c, stats, 1.0) == []
    assert not c.enabled and c.devices == () and nvml.count("nvmlShutdown") == 1
    for now in (2.0, 10.0, 51.0, 60.0):  # retried once, at 51 s; still no driver
        assert run(c, stats, now) == []
    assert nvml.count("nvmlInit") == 2
    nvml.init_error = None
    nvml.gpus[1].fail.clear()
    assert run(c, stats, 101.0)
    assert c.enabled and stats.failures == 0
    messages = logged(caplog)
    assert len(messages) == 3, messages  # on, off (once, not per retry), on again
    assert "NVML stopped working" in messages[1]


def test_nvml_runs_on_a_worker_thread_and_never_blocks_the_loop(tmp_path: Path) -> None:
    nvml = FakeNvml(two_gpus())
    c = collector(tmp_path, nvml, call_timeout=5.0)

    async def main() -> tuple[int, list[Sample]]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.005)

        nvml.gate = threading.Event()
        task = asyncio.create_task(ticker())
        collecting = asyncio.create_task(c.collect(0.0))
        await asyncio.sleep(0.2)  # NVML "hangs" for 0.2 s ...
        nvml.gate.set()  # ... and answers
        samples = await collecting
        task.cancel()
        return ticks, list(samples)

    ticks, samples = asyncio.run(main())
    assert samples
    assert ticks >= 10  # the loop kept running while NVML was blocked
    assert threading.get_ident() not in {tid for _, tid, _ in nvml.calls}


def test_a_hung_call_fails_cycles_without_piling_up(tmp_path: Path) -> None:
    nvml = FakeNvml(two_gpus())
    c = collector(tmp_path, nvml, call_timeout=0.1)
    stats = CollectorStats("gpu")
    assert run(c, stats, 0.0)
    nvml.gate = threading.Event()  # the driver stops answering
    started = time.perf_counter()
    assert run(c, stats, 1.0) == []
    assert stats.last_error is not None and "TimeoutError" in stats.last_error
    assert run(c, stats, 2.0) == []  # fails at once: nothing queued behind it
    assert "still running" in (stats.last_error or "")
    assert time.perf_counter() - started < 5.0  # the hung call blocks for 10 s: nobody waited for it
    calls = len(nvml.calls)
    nvml.gate.set()
    wait_until(lambda: len(nvml.calls) > calls + 10)
    assert len(nvml.calls) > calls  # the stuck cycle finished in the background ...
    assert run(c, stats, 3.0)  # ... and collection resumes
    assert stats.last_success and stats.failures == 2


def test_no_gpu_at_all_is_off(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    nvml = FakeNvml([])
    c = collector(tmp_path, nvml)
    caplog.set_level(logging.INFO, logger="loadline.agent.gpu")
    assert collect(c, 0.0) == []
    assert not c.enabled and nvml.count("nvmlShutdown") == 1
    assert len(logged(caplog)) == 1 and "no GPU" in logged(caplog)[0]


def test_without_the_nvidia_driver_nvml_is_not_loaded(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """No <proc>/driver/nvidia/version: off at once, pynvml not imported (see test_footprint), retried later."""
    c = GpuCollector(tmp_path, retry_seconds=60.0)
    stats = CollectorStats("gpu")
    caplog.set_level(logging.INFO, logger="loadline.agent.gpu")
    assert run(c, stats, 0.0) == [] and run(c, stats, 30.0) == []
    assert stats.last_success and not c.enabled
    assert len(logged(caplog)) == 1 and "no NVIDIA driver loaded" in logged(caplog)[0]
    c.close()


def test_real_pynvml_on_this_machine_is_off_quietly(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The default loader imports the real nvidia-ml-py; this box has no NVIDIA driver, whatever procfs says."""
    (tmp_path / "driver" / "nvidia").mkdir(parents=True)
    (tmp_path / "driver" / "nvidia" / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module\n")
    c = GpuCollector(tmp_path)
    stats = CollectorStats("gpu")
    caplog.set_level(logging.INFO, logger="loadline.agent.gpu")
    assert run(c, stats, 0.0) == []
    assert stats.last_success and not c.enabled
    assert len(logged(caplog)) == 1 and "nvmlInit failed" in logged(caplog)[0]
    c.close()


def wait_until(predicate: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
