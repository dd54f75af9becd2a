"""Against this machine's real cgroup v1 hierarchy (writable as root): a pod-shaped tree with real processes.

Layout built under each controller (cgroupfs driver, Burstable tier), below a random parent so nothing of
the host is touched:  loadline-test-<rand>/kubepods/burstable/pod<uid>/<64 hex container id>

- container "burner": a process holding 64 MiB of touched anonymous memory and burning 50 % of one core
  with a self-regulating busy/sleep duty cycle;
- container "capped": a process spinning flat out under a CFS quota of 20 ms per 100 ms (0.2 cores), so it
  is throttled in nearly every period, holding 16 MiB.

The agent's collector + sampler + aggregation must report them: CPU within +-15 %, memory within +-10 %.
Everything created is removed in the fixture's finally, also on failure. The box is shared and noisy, so
targets are modest and the check averages over several seconds.

An integration test: it needs root and the host's cgroup v1 hierarchy (cpu, cpuacct and memory mounted
under /sys/fs/cgroup). Without them it fails and says which is missing, as the rest of the suite does for
a missing tool.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agent.collectors.base import SeriesErrors
from agent.collectors.cgroup_layout import CgroupDriver, CgroupVersion
from agent.collectors.cgroups import CgroupCollector
from agent.collectors.pods import ContainerRef, PodRef
from agent.sampler import Sampler
from agent.series import (
    CPU_CFS_THROTTLED_RATIO,
    CPU_USAGE_CORES,
    MEMORY_ANON_USAGE_BYTES,
    MEMORY_WORKING_SET_BYTES,
    SeriesKey,
)
from agent.store import build_report
from common.api.pod import KubeQoSClass
from tests.cgroup_util import rmdir_cgroup
from tests.fakes.cgroup_trees import BatchCountingReader

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpu", "cpuacct", "memory")
MiB = 1024 * 1024
INTERVAL = 0.5
MEASURE_SECONDS = 5.0

# Says "started" once the interpreter is up, waits for a line on stdin (the parent has moved it into its
# cgroups by then: moving it during interpreter start-up would charge a variable part of the start-up
# allocations to the new cgroup), touches `size` bytes of anonymous memory so they are charged there, says
# "ready", then burns `share` of a core.
# The duty cycle regulates on the process' own CPU time, forgiving debt beyond 0.2 s so a starved
# process does not later burst far above its share.
CHILD = r"""
import sys, time
share, size = float(sys.argv[1]), int(sys.argv[2])
print("started", flush=True)
sys.stdin.readline()
buf = bytearray(size)
for i in range(0, size, 4096):
    buf[i] = 1
print("ready", flush=True)
wall0, cpu0 = time.monotonic(), time.process_time()
while True:
    debt = share * (time.monotonic() - wall0) - (time.process_time() - cpu0)
    if debt > 0.2:
        cpu0 -= debt - 0.2
    if debt > 0:
        end = time.perf_counter() + 0.002
        while time.perf_counter() < end:
            pass
    else:
        time.sleep(0.004)
"""


@dataclass
class RealPod:
    parent: str
    pod: PodRef
    container_dirs: dict[str, dict[str, Path]]  # container name -> controller -> dir
    pids: dict[str, int] = field(default_factory=dict)


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process from /proc/<pid>/stat (fields 14 and 15, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")



def missing_prerequisites() -> list[str]:
    """What this machine lacks for the test, in words (empty when it has everything)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (the test creates cgroups and moves processes into them)")
    for ctrl in CONTROLLERS:
        if not (CGROUP_ROOT / ctrl / "cgroup.procs").is_file():
            missing.append(f"the cgroup v1 '{ctrl}' controller mounted at {CGROUP_ROOT / ctrl}")
    return missing


@pytest.fixture
def real_pod() -> Iterator[RealPod]:
    missing = missing_prerequisites()
    if missing:
        pytest.fail("this test needs " + "; ".join(missing))
    parent = f"loadline-test-{secrets.token_hex(4)}"
    uid = str(uuid.uuid4())
    containers = {"burner": secrets.token_hex(32), "capped": secrets.token_hex(32)}
    created: list[Path] = []
    procs: list[subprocess.Popen[str]] = []
    try:
        dirs: dict[str, dict[str, Path]] = {name: {} for name in containers}
        for ctrl in CONTROLLERS:
            pod_dir = CGROUP_ROOT / ctrl / parent / "kubepods" / "burstable" / f"pod{uid}"
            for d in reversed([*pod_dir.parents][: len(pod_dir.relative_to(CGROUP_ROOT / ctrl).parts) - 1]):
                d.mkdir()
                created.append(d)
            pod_dir.mkdir()
            created.append(pod_dir)
            for name, cid in containers.items():
                (pod_dir / cid).mkdir()
                created.append(pod_dir / cid)
                dirs[name][ctrl] = pod_dir / cid
        (dirs["capped"]["cpu"] / "cpu.cfs_quota_us").write_text("20000\n")  # 20 ms per 100 ms period
        # The box is shared: give the test tree a large CFS weight against the other top-level groups so the
        # processes get the share they ask for (as kubelet's cpu.shares from requests would).
        (CGROUP_ROOT / "cpu" / parent / "cpu.shares").write_text("102400\n")

        pods_spec = {"burner": (0.5, 64 * MiB), "capped": (1.0, 16 * MiB)}
        pids = {}
        for name, (share, size) in pods_spec.items():
            proc = subprocess.Popen(
                [sys.executable, "-c", CHILD, str(share), str(size)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            procs.append(proc)
            assert proc.stdin is not None and proc.stdout is not None
            assert proc.stdout.readline().strip() == "started"
            for ctrl in CONTROLLERS:
                (dirs[name][ctrl] / "cgroup.procs").write_text(f"{proc.pid}\n")
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "ready"
            pids[name] = proc.pid
        pod = PodRef(
            uid,
            "default",
            "real-pod",
            KubeQoSClass.BURSTABLE,
            tuple(ContainerRef(name, f"containerd://{cid}") for name, cid in containers.items()),
        )
        yield RealPod(parent, pod, dirs, pids)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
        for d in reversed(created):
            rmdir_cgroup(d)
        assert not any((CGROUP_ROOT / c / parent).exists() for c in CONTROLLERS)


def test_agent_reports_real_processes_in_real_cgroups(real_pod: RealPod) -> None:
    pod = real_pod.pod
    reader = BatchCountingReader(compiled=True)
    collector = CgroupCollector(lambda: [pod], CGROUP_ROOT, cgroup_parent=real_pod.parent, reader=reader)
    sampler = Sampler([collector], interval=INTERVAL, windows=(MEASURE_SECONDS,))
    time.sleep(1.0)  # let both processes settle into their duty cycles
    cycles = int(MEASURE_SECONDS / INTERVAL) + 1
    next_at = time.monotonic()
    kernel_start: dict[str, float] = {}
    for i in range(cycles):
        asyncio.run(sampler.cycle())
        if i == 0:  # the first cycle only sets rate baselines
            kernel_start = {name: process_cpu_seconds(pid) for name, pid in real_pod.pids.items()}
            kernel_t0 = time.monotonic()
        next_at += INTERVAL
        if i < cycles - 1:
            time.sleep(max(next_at - time.monotonic(), 0))
    kernel_cores = {
        name: (process_cpu_seconds(pid) - kernel_start[name]) / (time.monotonic() - kernel_t0)
        for name, pid in real_pod.pids.items()
    }
    assert collector.layout is not None
    assert (collector.layout.version, collector.layout.driver) == (CgroupVersion.V1, CgroupDriver.CGROUPFS)
    assert sampler.stats["cgroups"].last_success and collector.errors.total == 0
    # cpuacct.usage, memory.stat and memory.usage_in_bytes as the kernel writes them: read by the C reader
    assert reader.compiled_batches >= 3 * (cycles - 1)

    now = sampler.ring.times[sampler.ring.head]
    report = build_report(sampler.ring, now, (MEASURE_SECONDS,))

    def avg(metric: str, container: str = "") -> float:
        usage = report.usage(SeriesKey(metric, pod.uid, container), MEASURE_SECONDS)
        assert usage is not None, (metric, container)
        return usage["avg"]

    # what the kernel says each process got over the same interval: the agent must agree with it ...
    assert avg(CPU_USAGE_CORES, "burner") == pytest.approx(kernel_cores["burner"], rel=0.15)
    assert avg(CPU_USAGE_CORES, "capped") == pytest.approx(kernel_cores["capped"], rel=0.15)
    # ... and with the shares the processes were built to burn
    assert avg(CPU_USAGE_CORES, "burner") == pytest.approx(0.5, rel=0.15)
    assert avg(CPU_USAGE_CORES, "capped") == pytest.approx(0.2, rel=0.15)
    # the pod cgroup holds both (and nothing else here)
    assert avg(CPU_USAGE_CORES) == pytest.approx(0.7, rel=0.15)
    assert avg(CPU_CFS_THROTTLED_RATIO, "capped") > 0.8  # wants a full core, gets 20 ms of every 100 ms
    assert SeriesKey(CPU_CFS_THROTTLED_RATIO, pod.uid, "burner") not in sampler.ring  # no quota, no ratio

    assert avg(MEMORY_ANON_USAGE_BYTES, "burner") == pytest.approx(64 * MiB, rel=0.10)
    assert avg(MEMORY_ANON_USAGE_BYTES, "capped") == pytest.approx(16 * MiB, rel=0.10)
    assert avg(MEMORY_ANON_USAGE_BYTES) == pytest.approx(80 * MiB, rel=0.10)
    working_set = avg(MEMORY_WORKING_SET_BYTES, "burner")
    assert 0.9 * 64 * MiB <= working_set <= 1.25 * 64 * MiB

    # The container exits and its cgroup is removed while the collector holds its files open: kernfs now
    # answers ENODEV. The cycle goes on, the loss is counted, and the dead cgroup is no longer pinned.
    open_before = reader.open_count
    os.kill(real_pod.pids["capped"], signal.SIGKILL)
    time.sleep(0.2)
    for d in real_pod.container_dirs["capped"].values():
        rmdir_cgroup(d)
    samples = collector.collect(time.monotonic())
    assert collector.errors.by_reason.get(SeriesErrors.VANISHED, 0) >= 1
    assert not any(s.key.container == "capped" for s in samples)
    assert any(s.key.container == "burner" for s in samples) and any(not s.key.container for s in samples)
    assert reader.open_count == open_before - 4  # cpuacct.usage, cpu.stat, memory.stat, usage_in_bytes
    reader.close()
