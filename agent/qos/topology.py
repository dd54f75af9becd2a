"""This machine's logical CPUs with their core, socket and NUMA node, from sysfs (root configurable)."""

from __future__ import annotations

from pathlib import Path

from agent.qos.cpuset import Processor
from common.cpulist import parse_cpu_list


def _read_int(path: Path, default: int) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return default


def read_processors(sys_root: str | Path = "/sys") -> list[Processor]:
    """Online CPUs; a CPU whose topology files are missing counts as its own core on socket 0, NUMA 0."""
    base = Path(sys_root) / "devices" / "system"
    try:
        online = parse_cpu_list((base / "cpu" / "online").read_text())
    except (OSError, ValueError):
        online = sorted(int(p.name[3:]) for p in (base / "cpu").glob("cpu[0-9]*") if p.name[3:].isdigit())
    numa_of: dict[int, int] = {}
    for node in sorted((base / "node").glob("node[0-9]*")):
        try:
            for cpu in parse_cpu_list((node / "cpulist").read_text()):
                numa_of[cpu] = int(node.name[4:])
        except (OSError, ValueError):
            continue
    processors = []
    for cpu in online:
        topo = base / "cpu" / f"cpu{cpu}" / "topology"
        socket = _read_int(topo / "physical_package_id", 0)
        # core ids repeat across sockets: make them unique per socket
        core = _read_int(topo / "core_id", cpu) + 100_000 * socket
        processors.append(Processor(cpu, core, socket, numa_of.get(cpu, 0)))
    return processors
