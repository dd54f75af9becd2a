from __future__ import annotations

import errno
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from agent.collectors.base import SeriesErrors
from agent.collectors.cgroup_layout import CgroupDriver, CgroupVersion
from agent.collectors.cgroups import CgroupCollector, PsiScope
from agent.collectors.files import PseudoFileReader
from agent.collectors.pods import ContainerRef, PodRef
from agent.series import (
    CPU_CFS_PERIODS,
    CPU_CFS_THROTTLED_PERIODS,
    CPU_CFS_THROTTLED_SECONDS,
    CPU_USAGE_SECONDS,
    MEMORY_ANON_USAGE_BYTES,
    MEMORY_WORKING_SET_BYTES,
    Kind,
    Sample,
    SeriesKey,
)
from common.api.pod import KubeQoSClass
from tests.fakes.cgroup_trees import BatchCountingReader, CgroupValues, FakeCgroupTree, MiB, Psi, make_pod

V1, V2 = CgroupVersion.V1, CgroupVersion.V2
SYSTEMD, CGROUPFS = CgroupDriver.SYSTEMD, CgroupDriver.CGROUPFS
COMBOS = [(V1, CGROUPFS), (V1, SYSTEMD), (V2, SYSTEMD), (V2, CGROUPFS)]
IDS = ["v1-cgroupfs", "v1-systemd", "v2-systemd", "v2-cgroupfs"]


def index(samples: Sequence[Sample]) -> dict[SeriesKey, Sample]:
    out = {s.key: s for s in samples}
    assert len(out) == len(samples), "duplicate series in one cycle"
    return out


def write_everywhere(tree: FakeCgroupTree, pods: Sequence[PodRef], values: CgroupValues) -> None:
    """`values` in every pod and container cgroup of `pods`."""
    for pod in pods:
        tree.write(tree.pod_rel(pod), values)
        for ref in pod.containers:
            tree.write(tree.container_rel(pod, ref), values)


def cpu_of(got: dict[SeriesKey, Sample], uid: str, name: str) -> float:
    return got[SeriesKey(CPU_USAGE_SECONDS, uid, name)].value


def anon_of(got: dict[SeriesKey, Sample], uid: str, name: str) -> float:
    return got[SeriesKey(MEMORY_ANON_USAGE_BYTES, uid, name)].value


def three_tier_pods() -> list[PodRef]:
    return [make_pod(1, KubeQoSClass.GUARANTEED), make_pod(2, KubeQoSClass.BURSTABLE), make_pod(3, KubeQoSClass.BEST_EFFORT)]


def collector(tree: FakeCgroupTree, pods: Callable[[], Sequence[PodRef]], **kw) -> CgroupCollector:
    return CgroupCollector(pods, tree.root, **kw)


@pytest.mark.parametrize(("version", "driver"), COMBOS, ids=IDS)
def test_all_tiers_pods_and_containers(tmp_path: Path, version: CgroupVersion, driver: CgroupDriver) -> None:
    tree = FakeCgroupTree(tmp_path, version, driver)
    pods = three_tier_pods()
    values: dict[tuple[str, str], CgroupValues] = {}
    for n, pod in enumerate(pods):
        pod_values = CgroupValues(cpu_ns=(n + 1) * 7_000_000_123, usage=(n + 1) * 100 * MiB)
        containers = {
            ref.name: CgroupValues(cpu_ns=(n + 1) * 1_000_000_000 + i * 1000, inactive_anon=(i + 1) * MiB)
            for i, ref in enumerate(pod.containers)
        }
        tree.add_pod(pod, pod_values, containers)
        values[(pod.uid, "")] = pod_values
        values.update({(pod.uid, name): v for name, v in containers.items()})
    c = collector(tree, lambda: pods, psi=PsiScope.OFF)
    got = index(c.collect(0.0))
    assert c.errors.total == 0
    assert c.layout is not None and (c.layout.version, c.layout.driver) == (version, driver)
    for (uid, container), v in values.items():

        def val(metric: str, uid: str = uid, container: str = container) -> float:
            return got[SeriesKey(metric, uid, container)].value

        # one internal unit: seconds from v1 ns and from v2 usec (x1000 -> ns -> s)
        expected_cpu = v.cpu_ns / 1e9 if version is V1 else (v.cpu_ns // 1000) * 1000 / 1e9
        assert val(CPU_USAGE_SECONDS) == pytest.approx(expected_cpu, rel=1e-12)
        assert got[SeriesKey(CPU_USAGE_SECONDS, uid, container)].kind is Kind.COUNTER
        assert got[SeriesKey(CPU_USAGE_SECONDS, uid, container)].source != ""
        assert val(CPU_CFS_PERIODS) == v.periods and val(CPU_CFS_THROTTLED_PERIODS) == v.throttled
        assert val(CPU_CFS_THROTTLED_SECONDS) == pytest.approx(v.throttled_ns / 1e9)
        assert val(MEMORY_ANON_USAGE_BYTES) == v.anon_usage  # koordlet: anon + unevictable, no page cache
        assert val(MEMORY_WORKING_SET_BYTES) == v.working_set  # kubelet: usage - inactive_file
    assert len(got) == len(values) * 6


@pytest.mark.parametrize("version", [V1, V2])
def test_cpu_rate_in_cores(tmp_path: Path, version: CgroupVersion) -> None:
    tree = FakeCgroupTree(tmp_path, version, SYSTEMD)
    pod = make_pod(1, KubeQoSClass.BURSTABLE, containers=1)
    tree.add_pod(pod, CgroupValues(cpu_ns=10_000_000_000))
    c = collector(tree, lambda: [pod])
    key = SeriesKey(CPU_USAGE_SECONDS, pod.uid)
    first = index(c.collect(0.0))[key]
    tree.write(tree.pod_rel(pod), CgroupValues(cpu_ns=10_750_000_000))  # +0.75 s of CPU
    second = index(c.collect(1.0))[key]
    assert second.source == first.source  # the same counter: the sampler rates it
    assert second.value - first.value == pytest.approx(0.75)


def test_working_set_is_clamped_at_zero(tmp_path: Path) -> None:
    tree = FakeCgroupTree(tmp_path, V2, CGROUPFS)
    pod = make_pod(1, KubeQoSClass.GUARANTEED, containers=0)
    tree.add_pod(pod, CgroupValues(usage=5 * MiB, inactive_file=8 * MiB))
    got = index(collector(tree, lambda: [pod]).collect(0.0))
    assert got[SeriesKey(MEMORY_WORKING_SET_BYTES, pod.uid)].value == 0


@pytest.mark.parametrize("scope", list(PsiScope))
def test_psi_scopes_on_v2(tmp_path: Path, scope: PsiScope) -> None:
    tree = FakeCgroupTree(tmp_path, V2, SYSTEMD)
    pod = make_pod(1, KubeQoSClass.BURSTABLE, containers=1)
    tree.add_pod(pod)
    got = index(collector(tree, lambda: [pod], psi=scope).collect(0.0))
    pod_psi = {k.metric for k in got if "pressure" in k.metric and not k.container}
    container_psi = {k.metric for k in got if "pressure" in k.metric and k.container}
    if scope is PsiScope.OFF:
        assert not pod_psi and not container_psi
    else:
        assert "pressure_memory_stalled_seconds_total" in pod_psi and "pressure_io_some_avg10_ratio" in pod_psi
        assert len(pod_psi) == 12  # 3 resources x some/full x avg10/total
        assert bool(container_psi) == (scope is PsiScope.ALL)
    key = SeriesKey("pressure_cpu_some_avg10_ratio", pod.uid)
    if key in got:
        assert got[key].value == pytest.approx(0.015)  # 1.50 % -> ratio


def test_no_psi_files_on_plain_v1(tmp_path: Path) -> None:
    tree = FakeCgroupTree(tmp_path, V1, CGROUPFS)  # the kernel has no cgroup PSI on v1
    pod = make_pod(1, KubeQoSClass.BURSTABLE)
    tree.add_pod(pod)
    c = collector(tree, lambda: [pod], psi=PsiScope.ALL)
    got = c.collect(0.0)
    assert not any("pressure" in s.key.metric for s in got) and c.errors.total == 0


def test_vendor_v1_kernel_with_psi_under_cpuacct(tmp_path: Path) -> None:
    tree = FakeCgroupTree(tmp_path, V1, CGROUPFS, psi=True)
    pod = make_pod(1, KubeQoSClass.BURSTABLE, containers=0)
    tree.add_pod(pod)
    got = index(collector(tree, lambda: [pod]).collect(0.0))
    assert SeriesKey("pressure_cpu_some_avg10_ratio", pod.uid) in got


def test_cri_o_cgroupfs_and_docker_systemd_names(tmp_path: Path) -> None:
    crio = FakeCgroupTree(tmp_path / "a", V1, CGROUPFS)
    pod = make_pod(1, KubeQoSClass.BURSTABLE, containers=1, runtime="cri-o")
    crio.add_pod(pod)
    assert (crio.path("memory", crio.pod_rel(pod)) / f"crio-{pod.containers[0].container_id[8:]}").is_dir()
    got = index(collector(crio, lambda: [pod]).collect(0.0))
    assert SeriesKey(CPU_USAGE_SECONDS, pod.uid, "c0") in got
    docker = FakeCgroupTree(tmp_path / "b", V2, SYSTEMD)
    dpod = make_pod(2, KubeQoSClass.GUARANTEED, containers=1, runtime="docker")
    docker.add_pod(dpod)
    got = index(collector(docker, lambda: [dpod]).collect(0.0))
    assert SeriesKey(MEMORY_ANON_USAGE_BYTES, dpod.uid, "c0") in got


def test_garbage_contents_cost_only_their_series(tmp_path: Path) -> None:
    tree = FakeCgroupTree(tmp_path, V1, CGROUPFS)
    pod = make_pod(1, KubeQoSClass.BURSTABLE)
    tree.add_pod(pod)
    c0 = tree.container_rel(pod, pod.containers[0])
    (tree.path("cpuacct", c0) / "cpuacct.usage").write_text("lots of cpu\n")
    (tree.path("memory", c0) / "memory.stat").write_text("total_rss 1\nhalf a line\n")
    (tree.path("cpu", tree.pod_rel(pod)) / "cpu.stat").write_text("")
    c = collector(tree, lambda: [pod])
    got = index(c.collect(0.0))
    assert c.errors.by_reason == {SeriesErrors.GARBAGE: 3}
    assert SeriesKey(CPU_USAGE_SECONDS, pod.uid, "c0") not in got
    assert SeriesKey(MEMORY_ANON_USAGE_BYTES, pod.uid, "c0") not in got
    assert SeriesKey(CPU_CFS_PERIODS, pod.uid, "c0") in got  # other files of the same cgroup are fine
    assert SeriesKey(CPU_CFS_PERIODS, pod.uid) not in got
    assert SeriesKey(CPU_USAGE_SECONDS, pod.uid) in got
    assert SeriesKey(CPU_USAGE_SECONDS, pod.uid, "c1") in got


def test_missing_keys_are_garbage_and_negative_values_out_of_range(tmp_path: Path) -> None:
    tree = FakeCgroupTree(tmp_path, V2, CGROUPFS)
    pod = make_pod(1, KubeQoSClass.GUARANTEED, containers=0)
    tree.add_pod(pod)
    d = tree.path("cpu", tree.pod_rel(pod))
    (d / "cpu.stat").write_text("user_usec 5\nsystem_usec 5\n")  # no usage_usec
    (d / "memory.current").write_text("-5\n")
    c = collector(tree, lambda: [pod])
    got = index(c.collect(0.0))
    assert c.errors.by_reason == {SeriesErrors.GARBAGE: 1, SeriesErrors.OUT_OF_RANGE: 1}
    assert set(k.metric for k in got if "pressure" not in k.metric) == {MEMORY_ANON_USAGE_BYTES}


class FlakyReader(PseudoFileReader):
    """Fails reads of paths containing `needle` with `error`, optionally running `hook` first."""

    def __init__(self, needle: str, error: OSError | None, hook: Callable[[], None] | None = None) -> None:
        super().__init__(compiled=False)  # sees every read: no C reader
        self.needle, self.error, self.hook = needle, error, hook

    def read(self, path: str) -> bytes:
        if self.needle in path:
            if self.hook is not None:
                self.hook()
                self.hook = None
            if self.error is not None:
                raise self.error
        return super().read(path)

    def read_many(self, paths: list[str], kind: str = "") -> list[bytes] | None:
        return [self.read(path) for path in paths]  # a batch fails as a whole on the first injected error


def test_permission_denied_is_counted_per_series(tmp_path: Path) -> None:
    tree = FakeCgroupTree(tmp_path, V1, CGROUPFS)
    pod = make_pod(1, KubeQoSClass.BURSTABLE)
    tree.add_pod(pod)
    reader = FlakyReader("memory.stat", PermissionError(errno.EACCES, "denied"))
    c = collector(tree, lambda: [pod], reader=reader)
    got = index(c.collect(0.0))
    assert c.errors.by_reason == {SeriesErrors.PERMISSION: 3}  # pod + 2 containers
    assert not any(k.metric == MEMORY_ANON_USAGE_BYTES for k in got)
    assert sum(k.metric == CPU_USAGE_SECONDS for k in got) == 3


def test_cgroup_vanishing_mid_read(tmp_path: Path) -> None:
    """The container exits between listing and reading: its cgroup disappears after the first file read."""
    tree = FakeCgroupTree(tmp_path, V1, CGROUPFS)
    pod = make_pod(1, KubeQoSClass.BURSTABLE)
    tree.add_pod(pod)
    c0 = tree.container_rel(pod, pod.containers[0])
    reader = FlakyReader(f"{pod.containers[0].container_id[13:]}/cpuacct.usage", None, lambda: tree.remove(c0))
    reader.keep_open = False  # on a plain fs an unlinked file stays readable through a kept fd
    c = collector(tree, lambda: [pod], reader=reader)
    got = index(c.collect(0.0))
    assert c.errors.by_reason[SeriesErrors.VANISHED] >= 1
    assert SeriesKey(MEMORY_ANON_USAGE_BYTES, pod.uid, "c0") not in got
    assert SeriesKey(MEMORY_ANON_USAGE_BYTES, pod.uid, "c1") in got  # the rest of the cycle goes on
    assert SeriesKey(CPU_USAGE_SECONDS, pod.uid) in got
    got = index(c.collect(1.0))  # still listed by the API, cgroup gone: skipped and counted
    assert not any(k.container == "c0" for k in got) and len(got) == 12


def test_kept_fd_of_a_removed_cgroup_is_dropped_on_enodev(tmp_path: Path) -> None:
    tree = FakeCgroupTree(tmp_path, V2, CGROUPFS)
    pod = make_pod(1, KubeQoSClass.BURSTABLE, containers=1)
    tree.add_pod(pod)
    reader = FlakyReader("never-matches", None)
    c = collector(tree, lambda: [pod], reader=reader, psi=PsiScope.OFF)
    assert len(c.collect(0.0)) == 12
    open_before = reader.open_count
    assert open_before == 6  # 3 files x 2 cgroups, kept open
    # kernfs answers ENODEV on a kept fd once the cgroup is removed
    reader.needle, reader.error = pod.containers[0].container_id[13:], OSError(errno.ENODEV, "No such device")
    tree.remove(tree.container_rel(pod, pod.containers[0]))
    got = c.collect(1.0)
    assert len(got) == 6 and c.errors.by_reason[SeriesErrors.VANISHED] == 3
    assert reader.open_count == 3  # the container's fds were closed, the pod's are kept


def test_pod_list_changes_release_and_add_targets(tmp_path: Path) -> None:
    tree = FakeCgroupTree(tmp_path, V1, SYSTEMD)
    a, b = make_pod(1, KubeQoSClass.BURSTABLE), make_pod(2, KubeQoSClass.BEST_EFFORT)
    tree.add_pod(a)
    tree.add_pod(b)
    pods: list[PodRef] = [a, b]
    reader = PseudoFileReader()
    c = collector(tree, lambda: pods, reader=reader, psi=PsiScope.OFF)  # one list, mutated in place
    c.collect(0.0)
    assert c.targets == 6 and reader.open_count == 24  # 4 files x 6 cgroups on v1
    pods.remove(b)
    c.collect(1.0)
    assert c.targets == 3 and reader.open_count == 12  # b's cgroups are no longer pinned
    restarted = ContainerRef("c0", "containerd://" + "f" * 64)  # new container ID after a restart
    a2 = PodRef(a.uid, a.namespace, a.name, a.qos, (restarted, a.containers[1]))
    tree.write(tree.container_rel(a2, restarted), CgroupValues())
    pods[0] = a2
    got = index(c.collect(2.0))
    assert got[SeriesKey(CPU_USAGE_SECONDS, a.uid, "c0")].source == restarted.container_id
    assert reader.open_count == 12


def test_unstarted_and_malformed_containers(tmp_path: Path) -> None:
    tree = FakeCgroupTree(tmp_path, V2, SYSTEMD)
    pod = make_pod(1, KubeQoSClass.BURSTABLE, containers=1)
    tree.add_pod(pod)
    odd = PodRef(
        pod.uid,
        "ns",
        "p",
        pod.qos,
        (*pod.containers, ContainerRef("pending", ""), ContainerRef("evil", "containerd://../../../etc")),
    )
    bad_uid = PodRef("../../etc", "ns", "x", KubeQoSClass.BURSTABLE)
    c = collector(tree, lambda: [odd, bad_uid], psi=PsiScope.OFF)
    got = c.collect(0.0)
    assert len(got) == 12 and c.errors.by_reason == {SeriesErrors.BAD_ID: 2}


def test_waits_for_kubepods_to_appear(tmp_path: Path) -> None:
    pod = make_pod(1, KubeQoSClass.BURSTABLE, containers=0)
    c = CgroupCollector(lambda: [pod], tmp_path)
    assert c.collect(0.0) == [] and c.layout is None and c.errors.total == 0
    tree = FakeCgroupTree(tmp_path, V2, CGROUPFS)  # kubelet started
    tree.add_pod(pod)
    assert len(c.collect(1.0)) > 0 and c.layout is not None


def test_pod_listed_before_its_cgroup_exists(tmp_path: Path) -> None:
    tree = FakeCgroupTree(tmp_path, V1, CGROUPFS)
    pod = make_pod(1, KubeQoSClass.GUARANTEED, containers=1)
    c = collector(tree, lambda: [pod])
    assert c.collect(0.0) == [] and c.errors.by_reason == {SeriesErrors.VANISHED: 2}
    tree.add_pod(pod)
    assert len(c.collect(1.0)) == 12


def test_missing_whole_pod_tree_midway(tmp_path: Path) -> None:
    tree = FakeCgroupTree(tmp_path, V2, SYSTEMD)
    pods = [make_pod(i, KubeQoSClass.BURSTABLE) for i in range(3)]
    for p in pods:
        tree.add_pod(p)
    reader = PseudoFileReader(keep_open=False)
    c = collector(tree, lambda: pods, reader=reader, psi=PsiScope.OFF)
    assert len(c.collect(0.0)) == 3 * 3 * 6
    shutil.rmtree(tree.path("cpu", tree.pod_rel(pods[1])))
    assert len(c.collect(1.0)) == 2 * 3 * 6


@pytest.mark.parametrize("version", [V1, V2])
def test_no_cfs_quota_means_no_throttling_series(tmp_path: Path, version: CgroupVersion) -> None:
    tree = FakeCgroupTree(tmp_path, version, CGROUPFS)
    pod = make_pod(1, KubeQoSClass.BEST_EFFORT, containers=1)
    tree.add_pod(pod, CgroupValues(periods=0, throttled=0, throttled_ns=0))  # nr_periods never moved
    got = index(collector(tree, lambda: [pod], psi=PsiScope.OFF).collect(0.0))
    assert SeriesKey(CPU_CFS_PERIODS, pod.uid) not in got and SeriesKey(CPU_USAGE_SECONDS, pod.uid) in got
    assert SeriesKey(CPU_CFS_PERIODS, pod.uid, "c0") in got  # the container has a quota (default values)


class CountingReader(PseudoFileReader):
    """Counts reads per file name (the last path component)."""

    def __init__(self) -> None:
        super().__init__(compiled=False)  # sees every read: no C reader
        self.reads: dict[str, int] = {}

    def read(self, path: str) -> bytes:
        name = path.rsplit("/", 1)[-1]
        self.reads[name] = self.reads.get(name, 0) + 1
        return super().read(path)

    def read_once(self, path: str) -> bytes:
        name = path.rsplit("/", 1)[-1]
        self.reads[name] = self.reads.get(name, 0) + 1
        return super().read_once(path)

    def read_many(self, paths: list[str], kind: str = "") -> list[bytes] | None:
        return [self.read(path) for path in paths]


def test_v1_cpu_stat_not_read_without_cfs_quota_until_one_appears(tmp_path: Path) -> None:
    """v1 cpu.stat only carries throttling: skipped while cpu.cfs_quota_us is -1, read again once a quota
    shows up at the next re-check (QUOTA_RECHECK_SECONDS later), without keeping an fd for the quota file."""
    from agent.collectors.cgroups import QUOTA_RECHECK_SECONDS

    tree = FakeCgroupTree(tmp_path, V1, CGROUPFS)
    pod = make_pod(1, KubeQoSClass.BURSTABLE, containers=1)
    tree.add_pod(pod)
    rel, c0_rel = tree.pod_rel(pod), tree.container_rel(pod, pod.containers[0])
    for r in (rel, c0_rel):
        (tree.path("cpu", r) / "cpu.cfs_quota_us").write_text("-1\n")
    reader = CountingReader()
    c = collector(tree, lambda: [pod], psi=PsiScope.OFF, reader=reader)

    got = index(c.collect(0.0))
    assert SeriesKey(CPU_USAGE_SECONDS, pod.uid) in got and SeriesKey(MEMORY_ANON_USAGE_BYTES, pod.uid, "c0") in got
    assert not any(k.metric in (CPU_CFS_PERIODS, CPU_CFS_THROTTLED_PERIODS) for k in got)
    assert "cpu.stat" not in reader.reads and reader.reads["cpu.cfs_quota_us"] == 2
    assert not any(p.endswith("cpu.cfs_quota_us") for p in reader._fds)  # no fd kept for a rare read
    assert c.errors.total == 0

    # a quota appears on the container: not noticed before the re-check, then throttling is read again
    (tree.path("cpu", c0_rel) / "cpu.cfs_quota_us").write_text("50000\n")
    got = index(c.collect(QUOTA_RECHECK_SECONDS / 2))
    assert SeriesKey(CPU_CFS_PERIODS, pod.uid, "c0") not in got and reader.reads["cpu.cfs_quota_us"] == 2
    got = index(c.collect(QUOTA_RECHECK_SECONDS + 1.0))
    assert reader.reads["cpu.cfs_quota_us"] == 4
    assert got[SeriesKey(CPU_CFS_PERIODS, pod.uid, "c0")].value == 100.0
    assert SeriesKey(CPU_CFS_THROTTLED_SECONDS, pod.uid, "c0") in got
    assert SeriesKey(CPU_CFS_PERIODS, pod.uid) not in got  # the pod cgroup is still unlimited
    assert reader.reads["cpu.stat"] == 1
    got = index(c.collect(QUOTA_RECHECK_SECONDS + 2.0))  # between re-checks: the limited cgroup keeps being read
    assert SeriesKey(CPU_CFS_PERIODS, pod.uid, "c0") in got and reader.reads["cpu.stat"] == 2

    # and back to unlimited: throttling series stop at the next re-check
    (tree.path("cpu", c0_rel) / "cpu.cfs_quota_us").write_text("-1\n")
    got = index(c.collect(2 * QUOTA_RECHECK_SECONDS + 2.0))
    assert SeriesKey(CPU_CFS_PERIODS, pod.uid, "c0") not in got and reader.reads["cpu.stat"] == 2


def test_v1_unreadable_cfs_quota_still_reads_cpu_stat(tmp_path: Path) -> None:
    """No quota file (or garbage in it) means "maybe a quota": cpu.stat is read, nothing counted as an error."""
    tree = FakeCgroupTree(tmp_path, V1, CGROUPFS)
    pod = make_pod(1, KubeQoSClass.BURSTABLE, containers=1)
    tree.add_pod(pod)
    (tree.path("cpu", tree.pod_rel(pod)) / "cpu.cfs_quota_us").write_text("garbage\n")  # container: no file
    c = collector(tree, lambda: [pod], psi=PsiScope.OFF)
    got = index(c.collect(0.0))
    assert SeriesKey(CPU_CFS_PERIODS, pod.uid) in got and SeriesKey(CPU_CFS_PERIODS, pod.uid, "c0") in got
    assert c.errors.total == 0


def test_v1_quota_is_rechecked_when_a_cgroup_is_found_again(tmp_path: Path) -> None:
    tree = FakeCgroupTree(tmp_path, V1, CGROUPFS)
    pod = make_pod(1, KubeQoSClass.BURSTABLE, containers=0)
    tree.add_pod(pod)
    quota = tree.path("cpu", tree.pod_rel(pod)) / "cpu.cfs_quota_us"
    quota.write_text("-1\n")
    # on a plain fs an unlinked file stays readable through a kept fd (kernfs answers ENODEV)
    c = collector(tree, lambda: [pod], psi=PsiScope.OFF, reader=PseudoFileReader(keep_open=False))
    assert SeriesKey(CPU_CFS_PERIODS, pod.uid) not in index(c.collect(0.0))
    tree.remove(tree.pod_rel(pod))
    c.collect(1.0)  # gone: released
    assert c.errors.by_reason[SeriesErrors.VANISHED] >= 1
    tree.add_pod(pod)  # recreated, now with a quota (no quota file written: "maybe a quota")
    c.collect(2.0)  # found again
    assert SeriesKey(CPU_CFS_PERIODS, pod.uid) in index(c.collect(3.0))


def test_containers_and_psi_are_held_between_staggered_reads(tmp_path: Path) -> None:
    """Container cgroups every 3 cycles and pod PSI every 2 (the kernel's averaging period): in between their
    last values are held, never dropped or mixed up with another cgroup's; pods' CPU and memory are read every
    cycle, and a container is read whole (CPU, memory and PSI of one moment)."""
    tree = FakeCgroupTree(tmp_path, V2, SYSTEMD)
    pods = [make_pod(n, KubeQoSClass.BURSTABLE, containers=3) for n in (1, 2)]
    old = CgroupValues()
    for pod in pods:
        tree.add_pod(pod, old, dict.fromkeys((c.name for c in pod.containers), old))
    c = collector(tree, lambda: pods, psi=PsiScope.ALL, interval=1.0, container_interval=3.0)
    first = index(c.collect(0.0))
    new = CgroupValues(
        cpu_ns=9_000_000_000, inactive_anon=50 * MiB, psi={r: Psi(some_avg10=7.0) for r in ["cpu", "memory", "io"]}
    )
    write_everywhere(tree, pods, new)
    cpu, anon = cpu_of, anon_of
    psi = lambda got, uid, name: got[SeriesKey("pressure_cpu_some_avg10_ratio", uid, name)].value  # noqa: E731
    refreshed: list[set[tuple[str, str]]] = []
    refreshed_psi: list[set[tuple[str, str]]] = []
    containers = {(p.uid, r.name) for p in pods for r in p.containers}
    for t in (1.0, 2.0, 3.0):
        got = index(c.collect(t))
        assert got.keys() == first.keys() and c.errors.total == 0
        assert all(cpu(got, p.uid, "") == 9.0 and anon(got, p.uid, "") == new.anon_usage for p in pods)  # pods
        now_new = {(u, n) for u, n in containers if cpu(got, u, n) == 9.0}
        for u, n in containers:
            fresh = (u, n) in now_new
            assert cpu(got, u, n) == (9.0 if fresh else old.cpu_ns / 1e9)
            assert anon(got, u, n) == (new.anon_usage if fresh else old.anon_usage)  # one read, one moment
            assert psi(got, u, n) == (0.07 if fresh else 0.015)
        refreshed.append(now_new)
        refreshed_psi.append({(p.uid, "") for p in pods if psi(got, p.uid, "") == 0.07})
    assert 0 < len(refreshed[0]) < len(containers)  # staggered: a share per cycle ...
    assert refreshed[0] < refreshed[1] < refreshed[2] == containers  # ... all within 3
    assert len(refreshed_psi[1]) == len(pods)  # pod PSI within 2 cycles


@pytest.mark.parametrize("version", [V1, V2])
def test_containers_read_when_scraped(tmp_path: Path, version: CgroupVersion) -> None:
    """container_interval=0 (the agent's default): a container is read once when found, then only by
    `read_on_scrape`, whose values the cycles after it hold; pods are read every cycle. A container that fails
    at scrape time costs its own series only, counted."""
    tree = FakeCgroupTree(tmp_path, version, SYSTEMD if version is V2 else CGROUPFS)
    pods = [make_pod(n, KubeQoSClass.BURSTABLE, containers=2) for n in (1, 2)]
    old, new = CgroupValues(), CgroupValues(cpu_ns=9_000_000_000, inactive_anon=50 * MiB)
    for pod in pods:
        tree.add_pod(pod, old, dict.fromkeys((r.name for r in pod.containers), old))
    c = collector(tree, lambda: pods, interval=1.0, container_interval=0)
    assert c.read_on_scrape(0.0) is None  # no cycle yet
    first = index(c.collect(0.0))
    write_everywhere(tree, pods, new)
    cpu, anon = cpu_of, anon_of
    containers = [(p.uid, r.name) for p in pods for r in p.containers]
    for t in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0):
        got = index(c.collect(t))
        assert got.keys() == first.keys() and all(cpu(got, p.uid, "") == 9.0 for p in pods)  # pods: every cycle
        assert all(cpu(got, u, n) == old.cpu_ns / 1e9 for u, n in containers)  # containers: held
    scraped = c.read_on_scrape(6.5)
    assert scraped is not None
    got = index(scraped)
    assert got.keys() == first.keys() and c.errors.total == 0
    assert all(cpu(got, u, n) == 9.0 and anon(got, u, n) == new.anon_usage for u, n in containers)
    assert all(cpu(got, p.uid, "") == 9.0 for p in pods)
    assert all(cpu(index(c.collect(7.0)), u, n) == 9.0 for u, n in containers)  # the next cycle holds them
    broken = pods[0].containers[0]
    (tree.path("memory", tree.container_rel(pods[0], broken)) / "memory.stat").write_text("garbage\n")
    tree.write(tree.container_rel(pods[1], pods[1].containers[0]), old)
    scraped = c.read_on_scrape(7.5)
    assert scraped is not None
    got = index(scraped)
    assert c.errors.total > 0
    assert SeriesKey(MEMORY_ANON_USAGE_BYTES, pods[0].uid, broken.name) not in got  # its memory only
    assert cpu(got, pods[0].uid, broken.name) == 9.0
    assert cpu(got, pods[1].uid, pods[1].containers[0].name) == old.cpu_ns / 1e9  # the others read as usual
    assert c.read_on_scrape(8.0) is not None and collector(tree, lambda: pods).read_on_scrape(8.0) is None


def test_a_new_container_is_read_whole_at_once(tmp_path: Path) -> None:
    tree = FakeCgroupTree(tmp_path, V2, SYSTEMD)
    pod = make_pod(1, KubeQoSClass.BURSTABLE, containers=1)
    tree.add_pod(pod)
    pods = [pod]
    c = collector(tree, lambda: pods, interval=1.0, container_interval=60.0)
    c.collect(0.0)
    restarted = ContainerRef("c0", "containerd://" + "e" * 64)
    tree.write(tree.container_rel(pod, restarted), CgroupValues(inactive_anon=70 * MiB))
    pods[0] = PodRef(pod.uid, pod.namespace, pod.name, pod.qos, (restarted,))
    got = index(c.collect(1.0))
    assert (
        got[SeriesKey(MEMORY_ANON_USAGE_BYTES, pod.uid, "c0")].value == CgroupValues(inactive_anon=70 * MiB).anon_usage
    )


class OneByOneReader(PseudoFileReader):
    """Never reads a batch: the collector reads every cgroup on its own (the path a failed batch takes)."""

    def __init__(self) -> None:
        super().__init__(compiled=False)

    def read_many(self, paths: list[str], kind: str = "") -> list[bytes] | None:
        return None


@pytest.mark.parametrize("compiled", [True, False], ids=["C reader", "Python"])
@pytest.mark.parametrize(("version", "driver"), COMBOS, ids=IDS)
def test_batch_reads_give_the_values_of_one_by_one_reads(
    tmp_path: Path, version: CgroupVersion, driver: CgroupDriver, compiled: bool
) -> None:
    """Bit for bit, over cycles that hold containers and PSI, with cgroups without CFS stats or quota, a PSI
    file without a `full` line, and sums beyond float precision; batches read by the C reader and in Python."""
    tree = FakeCgroupTree(tmp_path, version, driver, psi=True)
    pods = [make_pod(i, qos, containers=2) for i, qos in enumerate(KubeQoSClass)]
    for i, pod in enumerate(pods):
        tree.add_pod(pod, CgroupValues(periods=0 if i == 1 else 100, inactive_anon=2**53 + 1))
    rel = tree.pod_rel(pods[2])
    (tree.path("cpuacct", rel) / "cpu.pressure").write_text(Psi(full_avg10=None).render())
    if version is V1:
        (tree.path("cpu", rel) / "cpu.cfs_quota_us").write_text("-1\n")
    else:  # no cpu controller in this cgroup: usage only
        (tree.path("cpu", rel) / "cpu.stat").write_text("usage_usec 12345\nuser_usec 1\nsystem_usec 1\n")

    def build(reader: PseudoFileReader) -> CgroupCollector:
        return collector(tree, lambda: pods, psi=PsiScope.ALL, reader=reader, container_interval=3.0)

    reader = BatchCountingReader(compiled)
    batched, one_by_one = build(reader), build(OneByOneReader())
    for now in range(7):
        for n, pod in enumerate(pods):  # every counter moves, so a held value differs from a read one
            for ref in pod.containers:
                tree.write(tree.container_rel(pod, ref), CgroupValues(cpu_ns=10**9 * (now + 1) + n))
        a, b = batched.collect(float(now)), one_by_one.collect(float(now))
        assert a.layout.keys == b.layout.keys
        assert np.array_equal(a.array(), b.array(), equal_nan=True)
        if now == 0:
            reader.single.clear()  # the first cycle opens the files (through `read`)
    assert batched.errors.by_reason == one_by_one.errors.by_reason == {}
    assert reader.single == [] and reader.batches >= 7
    assert (reader.compiled_batches >= 6 * 3) == compiled  # cpu.stat, memory.stat and memory usage, from cycle 2


def test_a_failing_cgroup_is_read_alone_and_the_others_stay_batched(tmp_path: Path) -> None:
    tree = FakeCgroupTree(tmp_path, V2, SYSTEMD)
    pods = [make_pod(i, KubeQoSClass.BURSTABLE, containers=1) for i in range(3)]
    for pod in pods:
        tree.add_pod(pod)
    bad = tree.path("memory", tree.pod_rel(pods[1])) / "memory.stat"
    good_text = bad.read_text()
    bad.write_text("garbage\n")
    reader = BatchCountingReader()
    c = collector(tree, lambda: pods, psi=PsiScope.OFF, reader=reader)
    got = index(c.collect(0.0))  # the batch fails on it: all read one by one, its memory dropped and counted
    assert c.errors.by_reason == {SeriesErrors.GARBAGE: 1}
    assert SeriesKey(MEMORY_ANON_USAGE_BYTES, pods[1].uid) not in got
    assert SeriesKey(MEMORY_ANON_USAGE_BYTES, pods[0].uid) in got and SeriesKey(CPU_USAGE_SECONDS, pods[1].uid) in got
    reader.single.clear()
    got = index(c.collect(1.0))  # from now on only it is read alone
    assert c.errors.by_reason == {SeriesErrors.GARBAGE: 2} and SeriesKey(CPU_USAGE_SECONDS, pods[1].uid) in got
    assert reader.single and all(tree.pod_rel(pods[1]) in path for path in reader.single)
    bad.write_text(good_text)  # fixed: read alone once more (cleanly), then batched again
    assert SeriesKey(MEMORY_ANON_USAGE_BYTES, pods[1].uid) in index(c.collect(2.0))
    reader.single.clear()
    assert len(c.collect(3.0)) == len(got) + 2 and reader.single == []
    assert c.errors.by_reason == {SeriesErrors.GARBAGE: 2}


def test_read_many_reads_kept_and_new_files_whole(tmp_path: Path) -> None:
    short, long = tmp_path / "short", tmp_path / "long"
    short.write_bytes(b"1\n")
    long.write_bytes(b"x" * 20000)
    reader = PseudoFileReader()
    assert reader.read_many([str(short), str(short)], "k") == [b"1\n", b"1\n"] and reader.open_count == 1
    assert reader._sizes["k"] < 100  # asks for little more than the longest file of the kind
    short.write_bytes(b"2" * 300 + b"\n")  # grown past it: read again whole
    assert reader.read_many([str(short)], "k") == [b"2" * 300 + b"\n"] and reader._sizes["k"] > 301
    assert reader.read_many([str(short), str(long)], "k") == [b"2" * 300 + b"\n", b"x" * 20000]  # beyond a chunk
    with pytest.raises(FileNotFoundError):
        reader.read_many([str(short), str(tmp_path / "missing")])
    reader.close()
