"""Pods -> the cgroup collector's PodRefs and the report's PodIdentity; pods found in the cgroup tree (`--once`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.collectors.cgroup_layout import CgroupDriver, CgroupVersion
from agent.collectors.pods import ContainerRef, QoSClass
from agent.podwatch import CgroupPodDiscovery, PodIndex, pod_ref, scan_pods
from tests.unit.agent.fake_trees import CgroupValues, FakeCgroupTree, container_id, make_pod

CID = "containerd://" + "ab" * 32


def pod(
    uid: str = "u1", node: str = "n1", *, phase: str = "Running", qos: str | None = None, rv: str = "1"
) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "namespace": "ns", "name": f"p-{uid}", "resourceVersion": rv, "labels": {}},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "app",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
                }
            ],
        },
        "status": {
            "phase": phase,
            **({"qosClass": qos} if qos else {}),
            "containerStatuses": [{"name": "app", "containerID": CID, "state": {"running": {}}}],
            "initContainerStatuses": [
                {"name": "setup", "containerID": "containerd://" + "cd" * 32, "state": {"terminated": {}}},
                {"name": "proxy", "containerID": "containerd://" + "ef" * 32, "state": {"running": {}}},
            ],
        },
    }


def test_pod_ref_from_json() -> None:
    ref = pod_ref(pod())
    assert ref is not None
    assert (ref.uid, ref.namespace, ref.name, ref.qos) == ("u1", "ns", "p-u1", QoSClass.GUARANTEED)
    # the finished init container has no cgroup any more; the running sidecar has one
    assert ref.containers == (ContainerRef("proxy", "containerd://" + "ef" * 32), ContainerRef("app", CID))
    assert pod_ref(pod(qos="BestEffort")).qos is QoSClass.BEST_EFFORT  # type: ignore[union-attr]
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
        make_pod(1, QoSClass.GUARANTEED),
        make_pod(2, QoSClass.BURSTABLE, containers=1),
        make_pod(3, QoSClass.BEST_EFFORT),
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


def test_known_pods_containers_are_listed_again_staggered(tmp_path: Path) -> None:
    """A new pod is read whole at once; a known pod's containers are listed every `rescan_rounds` rounds."""
    tree = FakeCgroupTree(tmp_path, CgroupVersion.V2, CgroupDriver.SYSTEMD)
    pods = [make_pod(n, QoSClass.BURSTABLE, containers=1) for n in (1, 2, 3)]
    for p in pods:
        tree.add_pod(p)
    first = scan_pods(tree.layout())
    for p in pods:  # every pod's container restarted (a new ID)
        restarted = ContainerRef("c0", container_id(900 + int(p.name.split("-")[1])))
        tree.write(tree.container_rel(p, restarted), CgroupValues())
    newcomer = make_pod(4, QoSClass.BURSTABLE, containers=2)
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
