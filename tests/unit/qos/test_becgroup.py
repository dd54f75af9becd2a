"""Finding and writing the besteffort QoS cgroup's CPU knobs on v1 and v2."""

from __future__ import annotations

from pathlib import Path

from agent.collectors.cgroup_layout import CgroupVersion
from agent.qos.becgroup import locate_be_cgroup
from agent.qos.cpu_enforce import quota_step
from agent.qos.topology import read_processors
from tests.unit.qos.fake_cgroups import v1_tree, v2_tree


def test_v1_cgroupfs_quota_and_cpuset_dirs_parents_first(tmp_path: Path) -> None:
    be_cpu = v1_tree(tmp_path, parent="test", pods={"u1": ["c1", "c2"], "u0": []})
    be = locate_be_cgroup(tmp_path, "test")
    assert be is not None and be.version is CgroupVersion.V1 and be.cpu_dir == be_cpu
    assert be.read_quota() == -1
    be.write_quota(50_000)
    assert (be_cpu / "cpu.cfs_quota_us").read_text() == "50000\n"
    assert be.read_quota() == 50_000
    cpuset = tmp_path / "cpuset" / "test" / "kubepods" / "besteffort"
    assert be.cpuset_dirs() == [
        cpuset,
        cpuset / "podu0",
        cpuset / "podu1",
        cpuset / "podu1" / "c1",
        cpuset / "podu1" / "c2",
    ]
    assert be.read_cpus(cpuset) == list(range(8))


def test_a_group_with_another_cfs_period_gets_the_same_share(tmp_path: Path) -> None:
    be_cpu = v1_tree(tmp_path)
    (be_cpu / "cpu.cfs_period_us").write_text("50000\n")
    be = locate_be_cgroup(tmp_path)
    assert be is not None
    be.write_quota(50_000)  # 0.5 cores
    assert (be_cpu / "cpu.cfs_quota_us").read_text() == "25000\n"
    assert be.read_quota() == 50_000


def test_v2_systemd_cpu_max(tmp_path: Path) -> None:
    be_dir = v2_tree(tmp_path)
    be = locate_be_cgroup(tmp_path)
    assert be is not None and be.version is CgroupVersion.V2 and be.cpuset_dir == be_dir
    assert be.read_quota() == -1
    be.write_quota(120_000)
    assert (be_dir / "cpu.max").read_text() == "120000 100000"
    assert be.read_quota() == 120_000
    be.write_quota(-1)
    assert (be_dir / "cpu.max").read_text() == "max 100000"


def test_no_kubepods_yet_means_no_be_cgroup(tmp_path: Path) -> None:
    for ctrl in ("cpu", "cpuacct", "memory"):
        (tmp_path / ctrl).mkdir()
    assert locate_be_cgroup(tmp_path) is None


def test_quota_step_ramps_then_lifts_at_the_whole_node() -> None:
    cap = 2_000  # 2 cores: the whole node is 200000 us per 100 ms
    assert quota_step(500, -1, cap) == 50_000  # first write goes straight to the target
    assert quota_step(2_000, 50_000, cap) == 70_000  # up by at most 10 % of the node per round
    assert quota_step(2_000, 190_000, cap) == -1  # the step reaches the whole node: lifted
    assert quota_step(2_000, 199_500, cap) == -1  # even inside the 1 % dead band
    assert quota_step(2_000, -1, cap) is None  # already unlimited
    assert quota_step(2_500, -1, cap) is None
    assert quota_step(505, 50_000, cap) is None  # within 1 % of the node: no churn
    assert quota_step(300, 50_000, cap) == 30_000  # decreases at once
    assert quota_step(-400, 50_000, cap) == 2_000  # never below the floor


def test_topology_from_sysfs(tmp_path: Path) -> None:
    cpu = tmp_path / "devices" / "system" / "cpu"
    (cpu).mkdir(parents=True)
    (cpu / "online").write_text("0-3\n")
    for i, (core, socket) in enumerate([(0, 0), (1, 0), (0, 1), (1, 1)]):
        (cpu / f"cpu{i}" / "topology").mkdir(parents=True)
        (cpu / f"cpu{i}" / "topology" / "core_id").write_text(f"{core}\n")
        (cpu / f"cpu{i}" / "topology" / "physical_package_id").write_text(f"{socket}\n")
    for n, cpus in enumerate(("0-1", "2-3")):
        (tmp_path / "devices" / "system" / "node" / f"node{n}").mkdir(parents=True)
        (tmp_path / "devices" / "system" / "node" / f"node{n}" / "cpulist").write_text(cpus + "\n")
    procs = read_processors(tmp_path)
    assert [(p.cpu_id, p.socket_id, p.numa_node_id) for p in procs] == [(0, 0, 0), (1, 0, 0), (2, 1, 1), (3, 1, 1)]
    assert len({p.core_id for p in procs}) == 4  # core ids repeat across sockets but are kept apart
