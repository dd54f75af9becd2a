"""Pods -> the cgroup collector's PodRefs and the report's PodIdentity; pods found in the cgroup tree (`--once`)."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from agent import podwatch
from agent.collectors.cgroup_layout import CgroupDriver, CgroupVersion
from agent.collectors.pods import ContainerRef
from agent.inotify import DirectoryWatch
from agent.podwatch import CgroupPodDiscovery, PodIndex, pod_ref, scan_pods
from common.api.pod import KubeQoSClass
from tests import objects
from tests.fakes.cgroup_trees import CgroupValues, FakeCgroupTree, container_id, make_pod

CID = "containerd://" + "ab" * 32


def pod(
    uid: str = "u1", node: str = "n1", *, phase: str = "Running", qos: str | None = None, rv: str = "1"
) -> dict[str, Any]:
    """A pod with one app container (running) and two init containers: one done, one a running sidecar."""
    one = {"cpu": "1", "memory": "1Gi"}
    obj = objects.pod(f"p-{uid}", namespace="ns", uid=uid, rv=rv, node_name=node, phase=phase, qos_class=qos,
                      containers=[{"name": "app", "resources": {"requests": one, "limits": one}}])  # fmt: skip
    obj["status"]["containerStatuses"] = [{"name": "app", "containerID": CID, "state": {"running": {}}}]
    obj["status"]["initContainerStatuses"] = [
        {"name": "setup", "containerID": "containerd://" + "cd" * 32, "state": {"terminated": {}}},
        {"name": "proxy", "containerID": "containerd://" + "ef" * 32, "state": {"running": {}}},
    ]
    return obj


def test_pod_ref_from_json() -> None:
    ref = pod_ref(pod())
    assert ref is not None
    assert (ref.uid, ref.namespace, ref.name, ref.qos) == ("u1", "ns", "p-u1", KubeQoSClass.GUARANTEED)
    # the finished init container has no cgroup any more; the running sidecar has one
    assert ref.containers == (ContainerRef("proxy", "containerd://" + "ef" * 32), ContainerRef("app", CID))
    assert pod_ref(pod(qos="BestEffort")).qos is KubeQoSClass.BEST_EFFORT  # type: ignore[union-attr]
    assert pod_ref(pod(phase="Succeeded")) is None
    assert pod_ref({"metadata": {}}) is None


def test_index_rebuilds_only_on_relevant_changes() -> None:
    index = PodIndex()
    changed: list[str] = []
    index.listeners.append(changed.append)
    index.handle("ADDED", pod("u1"), None)
    index.handle("ADDED", pod("u2", "n2"), None)
    refs = index.refs("n1")
    assert [r.uid for r in refs] == ["u1"] and index.infos("n1")["u1"].qos == "LSR"
    touched = pod("u1", rv="2")
    touched["status"]["podIP"] = "10.0.0.7"  # not something the agent reads
    index.handle("MODIFIED", touched, pod("u1"))
    assert index.refs("n1") is refs  # same tuple: the collector's fast path holds
    relabelled = pod("u1", rv="3")
    relabelled["metadata"]["labels"]["koordinator.sh/qosClass"] = "BE"
    index.handle("MODIFIED", relabelled, touched)
    assert index.refs("n1") is not refs and index.infos("n1")["u1"].qos == "BE"
    index.handle("MODIFIED", pod("u1", phase="Failed", rv="4"), relabelled)
    assert index.refs("n1") == ()
    index.handle("DELETED", pod("u2", "n2"), None)
    assert index.refs("n2") == () and index.nodes() == ["n1"]
    assert changed.count("n1") == 3


def test_a_pod_moving_nodes_leaves_the_old_one() -> None:
    index = PodIndex()
    index.handle("ADDED", pod("u1", "n1"), None)
    index.handle("MODIFIED", pod("u1", "n2"), pod("u1", "n1"))
    assert index.refs("n1") == () and [r.uid for r in index.refs("n2")] == ["u1"]


def test_a_malformed_pod_is_counted_once_per_version_and_still_measured() -> None:
    from prometheus_client import REGISTRY

    from common.kube.malformed import MalformedObjects

    def counted() -> float:
        labels = {"kind": "Pod", "reason": "invalid_quantity"}
        return REGISTRY.get_sample_value("loadline_malformed_objects_total", labels) or 0.0

    index = PodIndex(MalformedObjects(("Pod",)))
    before = counted()
    bad = pod("u9", qos="Guaranteed")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    index.handle("ADDED", bad, None)
    index.handle("MODIFIED", bad, bad)  # a re-list delivers the same version again
    assert counted() - before == 1
    # It runs on this node all the same: measured in the kubelet's tier, named without classes.
    (ref,) = index.refs("n1")
    assert ref.qos is KubeQoSClass.GUARANTEED and index.infos("n1")["u9"].qos == ""
    assert index.malformed is not None and index.malformed.current() == [("Pod", "ns/p-u9")]
    index.handle("MODIFIED", pod("u9", rv="2"), bad)  # fixed
    assert index.malformed.current() == [] and index.infos("n1")["u9"].qos == "LSR"


@pytest.mark.parametrize(
    ("version", "driver"),
    [
        (CgroupVersion.V1, CgroupDriver.CGROUPFS),
        (CgroupVersion.V2, CgroupDriver.SYSTEMD),
        (CgroupVersion.V1, CgroupDriver.SYSTEMD),
    ],
)
def test_pods_found_in_the_cgroup_tree(tmp_path: Path, version: CgroupVersion, driver: CgroupDriver) -> None:
    tree = FakeCgroupTree(tmp_path, version, driver)
    pods = [
        make_pod(1, KubeQoSClass.GUARANTEED),
        make_pod(2, KubeQoSClass.BURSTABLE, containers=1),
        make_pod(3, KubeQoSClass.BEST_EFFORT),
    ]
    for p in pods:
        tree.add_pod(p)
    found = {p.uid: p for p in scan_pods(tree.layout())}
    assert set(found) == {p.uid for p in pods}
    for p in pods:
        assert found[p.uid].qos is p.qos
        assert {c.container_id for c in found[p.uid].containers} == {c.container_id for c in p.containers}
    discovery = CgroupPodDiscovery(tmp_path)
    assert {p.uid for p in discovery.pods()} == set(found)
    infos = discovery.infos()
    assert infos[pods[0].uid].qos == "LSR" and infos[pods[2].uid].priority == "koord-batch"


def test_pods_are_named_by_the_kubelets_pod_log_directories(tmp_path: Path) -> None:
    tree = FakeCgroupTree(tmp_path / "cgroup", CgroupVersion.V1, CgroupDriver.CGROUPFS)
    named, unnamed = make_pod(1, KubeQoSClass.BURSTABLE), make_pod(2, KubeQoSClass.BEST_EFFORT)
    tree.add_pod(named)
    tree.add_pod(unnamed)
    logs = tmp_path / "pod-logs"
    for entry in (f"shop_web-0_{named.uid}", "two_parts", f"a_b_c_{unnamed.uid}", f"ns__{unnamed.uid}", "x_y_../z"):
        (logs / entry).mkdir(parents=True, exist_ok=True)
    (logs / f"kube-system_file_{unnamed.uid}.log").touch()  # not a directory name the kubelet makes: no UID shape
    infos = CgroupPodDiscovery(tmp_path / "cgroup", pod_logs_dir=logs).infos()
    assert (infos[named.uid].namespace, infos[named.uid].name) == ("shop", "web-0")
    assert (infos[unnamed.uid].namespace, infos[unnamed.uid].name) == ("", unnamed.uid)
    # No directory at all, or none given: every pod keeps its UID.
    for discovery in (
        CgroupPodDiscovery(tmp_path / "cgroup", pod_logs_dir=tmp_path / "missing"),
        CgroupPodDiscovery(tmp_path / "cgroup"),
    ):
        assert {(i.namespace, i.name) for i in discovery.infos().values()} == {("", named.uid), ("", unnamed.uid)}


def test_known_pods_containers_are_listed_again_staggered(tmp_path: Path) -> None:
    """A new pod is read whole at once; a known pod's containers are listed every `rescan_rounds` rounds."""
    tree = FakeCgroupTree(tmp_path, CgroupVersion.V2, CgroupDriver.SYSTEMD)
    pods = [make_pod(n, KubeQoSClass.BURSTABLE, containers=1) for n in (1, 2, 3)]
    for p in pods:
        tree.add_pod(p)
    first = scan_pods(tree.layout())
    for p in pods:  # every pod's container restarted (a new ID)
        restarted = ContainerRef("c0", container_id(900 + int(p.name.split("-")[1])))
        tree.write(tree.container_rel(p, restarted), CgroupValues())
    newcomer = make_pod(4, KubeQoSClass.BURSTABLE, containers=2)
    tree.add_pod(newcomer)
    known = {p.uid: p for p in first}
    rounds = []
    for round_ in range(3):
        found = {p.uid: p for p in scan_pods(tree.layout(), known, round_, 3)}
        assert len(found[newcomer.uid].containers) == 2  # new: listed at once
        rounds.append({uid for uid, p in found.items() if len(p.containers) == 2 and uid != newcomer.uid})
    assert all(len(r) == 1 for r in rounds) and set().union(*rounds) == {p.uid for p in pods}


def test_no_kubepods_tree_means_no_pods(tmp_path: Path) -> None:
    assert CgroupPodDiscovery(tmp_path / "nothing").pods() == ()


# ---------------------------------------------------------------------------------------------- the watched tree
def settled(discovery: CgroupPodDiscovery) -> int:
    """List the tree and let the watch settle (new pod directories are listed once more after they are watched);
    the number of listings so far."""
    discovery.pods()
    discovery.pods()
    return discovery.scans


def test_a_watched_tree_is_listed_again_only_when_a_cgroup_comes_or_goes(tmp_path: Path) -> None:
    """With inotify, a pod or container made or removed is seen at the next call, long before `refresh_seconds`;
    with nothing changed (a cgroup's files written to do not count) the tree is not listed at all."""
    tree = FakeCgroupTree(tmp_path, CgroupVersion.V2, CgroupDriver.SYSTEMD)
    first = make_pod(1, KubeQoSClass.BURSTABLE, containers=1)
    tree.add_pod(first)
    discovery = CgroupPodDiscovery(tmp_path, refresh_seconds=1e9)  # polled, nothing after the first listing
    try:
        assert [p.uid for p in discovery.pods()] == [first.uid] and discovery.watched
        scans = settled(discovery)
        for _ in range(5):
            tree.write(tree.pod_rel(first), CgroupValues(cpu_ns=7))  # files, not cgroups
            assert [p.uid for p in discovery.pods()] == [first.uid]
        assert discovery.scans == scans

        second = make_pod(2, KubeQoSClass.BEST_EFFORT, containers=2)
        tree.add_pod(second)
        assert {p.uid for p in discovery.pods()} == {first.uid, second.uid}
        settled(discovery)

        restarted = ContainerRef("c0", container_id(999))  # a container of a known pod: its directory changed
        tree.write(tree.container_rel(first, restarted), CgroupValues())
        found = {p.uid: p for p in discovery.pods()}
        assert restarted.container_id in {c.container_id for c in found[first.uid].containers}
        assert len(found[second.uid].containers) == 2

        tree.remove(tree.pod_rel(first))
        assert [p.uid for p in discovery.pods()] == [second.uid]
        scans = settled(discovery)
        assert discovery.pods() and discovery.scans == scans and discovery.watched
    finally:
        discovery.close()


class Unreadable(DirectoryWatch):
    """inotify that fails when read (the caller must list the tree itself)."""

    def changed(self) -> frozenset[str] | None:
        self.error = "reading inotify events: broken on purpose"
        return None


class NoWatchesLeft(DirectoryWatch):
    """fs.inotify.max_user_watches reached once the kubepods directory is watched."""

    def watch(self, path: str) -> bool:
        if self.watched:
            self.error = f"inotify_add_watch {path}: {os.strerror(errno.ENOSPC)}"
            return False
        return super().watch(path)


@pytest.mark.parametrize("broken", [Unreadable, NoWatchesLeft])
def test_without_a_watch_the_tree_is_polled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, broken: type[DirectoryWatch]
) -> None:
    tree = FakeCgroupTree(tmp_path, CgroupVersion.V2, CgroupDriver.SYSTEMD)
    tree.add_pod(make_pod(1, KubeQoSClass.BURSTABLE))
    watches: list[DirectoryWatch] = []

    def factory() -> DirectoryWatch:
        watches.append(broken())
        return watches[-1]

    discovery = CgroupPodDiscovery(tmp_path, refresh_seconds=1e9, watch_factory=factory)
    with caplog.at_level(logging.INFO, logger="loadline.agent.pods"):
        for _ in range(3):
            assert len(discovery.pods()) == 1
    assert not discovery.watched and len(watches) == 1 and not watches[0].available  # closed, not made again
    assert [r.getMessage() for r in caplog.records if "listing the kubepods tree every" in r.getMessage()] != []
    tree.add_pod(make_pod(2, KubeQoSClass.BURSTABLE))
    assert len(discovery.pods()) == 1  # polled: not before `refresh_seconds`
    discovery.refresh_seconds = 0.0
    assert len(discovery.pods()) == 2


def test_close_releases_the_inotify_descriptor(tmp_path: Path) -> None:
    FakeCgroupTree(tmp_path, CgroupVersion.V2, CgroupDriver.SYSTEMD).add_pod(make_pod(1, KubeQoSClass.GUARANTEED))
    discovery = CgroupPodDiscovery(tmp_path)
    discovery.pods()
    assert discovery._watch is not None
    fd = discovery._watch.fd
    assert os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
    discovery.close()
    with pytest.raises(OSError) as raised:
        os.fstat(fd)
    assert raised.value.errno == errno.EBADF
    assert len(discovery.pods()) == 1 and not discovery.watched  # polled from here on


def test_directory_watch_reports_directories_not_files(tmp_path: Path) -> None:
    watch = DirectoryWatch()
    try:
        assert watch.available and watch.changed() == frozenset()
        assert watch.watch(str(tmp_path)) and not watch.watch(str(tmp_path / "missing")) and watch.error is None
        (tmp_path / "cpu.stat").write_text("")
        assert watch.changed() == frozenset()
        (tmp_path / "child").mkdir()
        assert watch.watch(str(tmp_path / "child"))
        assert watch.changed() == frozenset({str(tmp_path)})
        (tmp_path / "child").rmdir()  # the kernel drops the child's watch (IN_IGNORED)
        assert watch.changed() == frozenset({str(tmp_path), str(tmp_path / "child")})
        assert watch.watched == {str(tmp_path)}
        assert watch.changed() == frozenset()
    finally:
        watch.close()
    assert watch.changed() is None


class RacingRuntime(DirectoryWatch):
    """The runtime makes a container between the listing of a new pod's directory and its watch."""

    def watch(self, path: str) -> bool:
        if "-pod" in os.path.basename(path) and path not in self.watched:
            os.mkdir(os.path.join(path, f"cri-containerd-{'ee' * 32}.scope"))
        return super().watch(path)


class Deaf(DirectoryWatch):
    """A watch that reports nothing (a kernel whose cgroup filesystem raises no events)."""

    def changed(self) -> frozenset[str] | None:
        return frozenset() if super().changed() is not None else None


def test_what_the_watch_could_not_see_is_found_by_the_next_listing(tmp_path: Path) -> None:
    """A container made before its pod's directory was watched is listed at the next call; anything the watch does
    not report, at the listing `SAFETY_RESCAN_SECONDS` later."""
    tree = FakeCgroupTree(tmp_path, CgroupVersion.V2, CgroupDriver.SYSTEMD)
    pod = make_pod(1, KubeQoSClass.BURSTABLE, containers=1)
    tree.add_pod(pod)
    racing = CgroupPodDiscovery(tmp_path, refresh_seconds=1e9, watch_factory=RacingRuntime)
    deaf = CgroupPodDiscovery(tmp_path, refresh_seconds=1e9, watch_factory=Deaf)
    try:
        assert len(racing.pods()[0].containers) == 1
        assert len(racing.pods()[0].containers) == 2
        assert len(deaf.pods()[0].containers) == 2 and deaf.watched
        settled(deaf)
        tree.add_pod(make_pod(2, KubeQoSClass.BURSTABLE))
        assert len(deaf.pods()) == 1
        deaf._safety_at -= podwatch.SAFETY_RESCAN_SECONDS
        assert len(deaf.pods()) == 2
    finally:
        racing.close()
        deaf.close()
