"""Device collectors' cost: netdev (/proc/net/dev vs netlink), InfiniBand (sysfs) and GPU (NVML overhead).

    .venv/bin/python bench/agent_netdev_bench.py [--cycles 2000] [--repeat 200]

1. Sources, per call on this machine: /proc/net/dev pread + parse; one sysfs statistics file; a pyroute2
   `IPRoute()` open, one `get_links()` dump, and our whole `netlink_links()` (open + dump + extraction + sysfs
   speed); the sysfs alternative (`netlink=False`); the import of pyroute2 (time and RSS, in a fresh
   interpreter, bare and after what the agent imports anyway).
2. NetdevCollector per cycle (process CPU time, all threads) on the real /proc, and on synthetic
   /proc/net/dev files of a node with 100 and 300 pod veths (excluded by default; once more with nothing
   excluded); the amortised cost at a 1 s interval with the netlink inventory every 30 s, % of one core.
3. InfinibandCollector per cycle on sysfs fixture trees (2 and 8 mlx5-like ports, on /dev/shm).
4. GpuCollector per cycle against the fake NVML of the unit tests (8 GPUs x 4 processes): our own
   overhead (thread hop, parsing, PID -> pod mapping); real NVML calls add their driver time on top.
Budget (issue 3): the whole agent <= 1 % of one core at a 1 s interval.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.collectors.files import PseudoFileReader
from agent.collectors.gpu import GpuCollector
from agent.collectors.infiniband import InfinibandCollector
from agent.collectors.netdev import NetdevCollector, netlink_links, parse_proc_net_dev, sysfs_links
from tests.fakes.gpu import WALL, FakeGpu, FakeNvml, v2_cgroup_cgroupfs, write_process
from tests.fakes.infiniband import write_hca, write_port
from tests.fakes.netdev import HEADER, line

INVENTORY_SECONDS = 30.0


def per_call(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median wall and CPU time of one call, in milliseconds."""
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        cpus.append(time.process_time() - c)
        walls.append(time.perf_counter() - w)
    return statistics.median(walls) * 1e3, statistics.median(cpus) * 1e3


def cpu_per_cycle(collect: Callable[[float], object], cycles: int) -> float:
    """Mean process CPU (all threads) per cycle in ms, after a warm-up, with fake 1 s timestamps."""
    for i in range(3):
        collect(float(i))
    started = time.process_time()
    for i in range(cycles):
        collect(3.0 + i)
    return (time.process_time() - started) / cycles * 1e3


def pyroute2_import_cost(prelude: str) -> tuple[float, float, float]:
    """(ms, MB of RSS) to import pyroute2 after `prelude`, and MB more after the first dump; fresh interpreter."""
    code = (
        f"{prelude}\n"
        "import time, psutil; p = psutil.Process(); r0 = p.memory_info().rss; t = time.perf_counter()\n"
        "from pyroute2 import IPRoute\n"
        "ms = (time.perf_counter() - t) * 1e3; r1 = p.memory_info().rss\n"
        "ipr = IPRoute(); ipr.get_links(); ipr.close()\n"
        "print(ms, (r1 - r0) / 2**20, (p.memory_info().rss - r1) / 2**20)"
    )
    root = str(Path(__file__).resolve().parent.parent)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=root)
    ms, imported, dumped = out.stdout.split()
    return float(ms), float(imported), float(dumped)


def synthetic_net_dev(root: Path, host_interfaces: int, pod_veths: int) -> None:
    """A node's /proc/net/dev: lo, a few host interfaces and one host-side veth per pod."""
    (root / "net").mkdir(parents=True, exist_ok=True)
    lines = [line("lo", 10**9, 10**6, 10**9, 10**6)]
    lines += [line(f"eth{i}", 10**12 + i, 10**9, 10**11, 10**8) for i in range(host_interfaces)]
    lines += [line(f"veth{i:08x}", 10**10 + i, 10**7, 10**10, 10**7) for i in range(pod_veths)]
    (root / "net" / "dev").write_text(HEADER + "".join(lines))


def section_sources(repeat: int) -> float:
    print("1. sources, per call (median of", repeat, "calls)")
    reader = PseudoFileReader()
    wall, cpu = per_call(lambda: parse_proc_net_dev(reader.read("/proc/net/dev")), repeat)
    print(f"   /proc/net/dev pread + parse          {wall:8.3f} ms wall  {cpu:8.3f} ms CPU")
    stat = "/sys/class/net/lo/statistics/rx_bytes"
    wall, cpu = per_call(lambda: int(reader.read(stat)), repeat)
    print(f"   one sysfs statistics file (pread)    {wall:8.3f} ms wall  {cpu:8.3f} ms CPU")
    from pyroute2 import IPRoute

    wall, cpu = per_call(lambda: IPRoute().close(), max(repeat // 4, 5))
    print(f"   IPRoute() open + close               {wall:8.3f} ms wall  {cpu:8.3f} ms CPU")
    ipr = IPRoute()
    wall, cpu = per_call(ipr.get_links, max(repeat // 4, 5))
    ipr.close()
    print(f"   IPRoute.get_links() dump             {wall:8.3f} ms wall  {cpu:8.3f} ms CPU")
    wall, dump_cpu = per_call(netlink_links, max(repeat // 4, 5))
    print(f"   netlink_links() (our inventory)      {wall:8.3f} ms wall  {dump_cpu:8.3f} ms CPU")
    wall, cpu = per_call(sysfs_links, max(repeat // 4, 5))
    print(f"   sysfs_links() (netlink=False)        {wall:8.3f} ms wall  {cpu:8.3f} ms CPU")
    agent_like = "import asyncio, aiohttp, numpy, agent.sampler, agent.collectors"
    for label, prelude in (("bare interpreter", ""), ("after the agent's own imports", agent_like)):
        import_ms, import_mb, dump_mb = pyroute2_import_cost(prelude)
        print(
            f"   import pyroute2, {label}: {import_ms:.0f} ms, +{import_mb:.1f} MB RSS "
            f"(+{dump_mb:.1f} MB after the first dump)"
        )
    print(f"   links on this machine: {len(netlink_links())}")
    return dump_cpu


def section_netdev(cycles: int, dump_cpu_ms: float) -> None:
    print(f"\n2. NetdevCollector, process CPU per cycle (mean of {cycles} cycles, inventory excluded)")
    c = NetdevCollector(inventory_seconds=1e9)  # steady state: one dump at start, then counters only
    c.collect(0.0)
    while c.inventory_pending:
        time.sleep(0.01)
        c.collect(0.5)
    ms = cpu_per_cycle(c.collect, cycles)
    amortised = ms + dump_cpu_ms / INVENTORY_SECONDS
    every_cycle = ms + dump_cpu_ms
    for label, value in (
        (f"this machine ({len(c.links)} links), counters only", ms),
        (f"+ netlink every {INVENTORY_SECONDS:g} s (1 s interval)", amortised),
        ("(netlink every cycle instead)", every_cycle),
    ):
        print(f"   {label:38s} {value:8.3f} ms/cycle = {value / 10:.4f} % of one core")
    c.close()
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as tmp:
        for hosts, veths, exclude in ((9, 100, True), (9, 300, True), (9, 100, False)):
            root = Path(tmp) / f"proc{hosts}-{veths}"
            synthetic_net_dev(root, hosts, veths)
            synthetic = NetdevCollector(root, list_links=list, inventory_seconds=1e9, exclude=None)
            if exclude:
                synthetic = NetdevCollector(root, list_links=list, inventory_seconds=1e9)
            ms = cpu_per_cycle(synthetic.collect, cycles)
            kept = len({s.key.device for s in synthetic.collect(1e6)})
            label = f"lo + {hosts} eth + {veths} veth, {kept} kept"
            print(f"   {label:38s} {ms:8.3f} ms/cycle = {ms / 10:.4f} % of one core")
            synthetic.close()


def section_infiniband(cycles: int) -> None:
    print(f"\n3. InfinibandCollector, process CPU per cycle (mean of {cycles} cycles, fixture sysfs on tmpfs)")
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as tmp:
        for hcas, ports in ((1, 2), (4, 2)):
            root = Path(tmp) / f"sys{hcas}x{ports}"
            for h in range(hcas):
                write_hca(root, f"mlx5_{h}", pci=f"0000:{0x3B + h:02x}:00.0", uverbs=h)
                for p in range(1, ports + 1):
                    write_port(root, f"mlx5_{h}", p, link_layer="Ethernet", hw={"out_of_buffer": 0, "np_cnp_sent": 0})
            c = InfinibandCollector(root)
            ms = cpu_per_cycle(c.collect, cycles)
            files = sum(len(port.counters) + 3 for port in c._ports)
            label = f"{hcas * ports} ports ({files} files)"
            print(f"   {label:38s} {ms:8.3f} ms/cycle = {ms / 10:.4f} % of one core")
            c.close()
            shutil.rmtree(root)


def section_gpu(cycles: int) -> None:
    print(f"\n4. GpuCollector, process CPU per cycle (mean of {cycles} cycles, fake NVML: our overhead only)")
    with tempfile.TemporaryDirectory() as tmp:
        proc = Path(tmp)
        gpus = []
        for g in range(8):
            gpu = FakeGpu(f"GPU-{g:04d}", g)
            for k in range(4):
                pid = 1000 + g * 10 + k
                write_process(proc, pid, v2_cgroup_cgroupfs(f"{pid:08x}-1111-2222-3333-{pid:012x}"))
                gpu.processes.append((pid, 1 << 30))
                gpu.samples.append((pid, WALL - 0.2, 10))
            gpus.append(gpu)
        c = GpuCollector(proc, load_nvml=lambda: FakeNvml(gpus), wall_clock=lambda: WALL)

        async def run() -> float:
            for i in range(3):
                await c.collect(float(i))
            started = time.process_time()
            for i in range(cycles):
                await c.collect(3.0 + i)
            return (time.process_time() - started) / cycles * 1e3

        ms = asyncio.run(run())
        label = "8 GPUs x 4 processes (32 pods)"
        print(f"   {label:38s} {ms:8.3f} ms/cycle = {ms / 10:.4f} % of one core")
        c.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    dump_cpu = section_sources(args.repeat)
    section_netdev(args.cycles, dump_cpu)
    section_infiniband(args.cycles)
    section_gpu(max(args.cycles // 4, 50))


if __name__ == "__main__":
    main()
