"""Batch pods held to their batch resources on fixture cgroup trees: v1 and v2, cgroupfs and systemd (issue 33)."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from agent.collectors.cgroup_layout import CgroupDriver, CgroupVersion
from agent.collectors.pods import PodRef
from agent.qos.batch_cgroup import CgroupDirs
from agent.qos.batch_isolation import BatchIsolator, RoundResult
from agent.qos.batch_resource import NodeLimits
from common.api.pod import KubeQoSClass as QoSClass
from common.kube.events import EventRecorder
from tests import objects
from tests.fakes.cgroup_trees import FakeCgroupTree, make_pod
from tests.unit.manager.fakes import FakeHTTP

MI = 1024**2
UNLIMITED_V1 = "9223372036854771712"
TREES = [
    (CgroupVersion.V1, CgroupDriver.CGROUPFS),
    (CgroupVersion.V1, CgroupDriver.SYSTEMD),
    (CgroupVersion.V2, CgroupDriver.CGROUPFS),
    (CgroupVersion.V2, CgroupDriver.SYSTEMD),
]
ONE_CORE = {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "512Mi"}
HALF_CORE = {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "256Mi"}


def pod_object(ref: PodRef, resources: dict[str, dict[str, str]] | None = None, **labels: str) -> dict[str, Any]:
    """The API object of a fixture pod; every container gets `resources`."""
    containers = [{"name": c.name, "resources": resources or {}} for c in ref.containers]
    obj = objects.pod(ref.name, namespace=ref.namespace, uid=ref.uid, rv="1", labels=labels, phase="Running",
                      qos_class=ref.qos.value, containers=containers)  # fmt: skip
    obj["status"]["containerStatuses"] = [{"name": c.name, "containerID": c.container_id} for c in ref.containers]
    return obj


def batch(ref: PodRef, requests: dict[str, str] = ONE_CORE, limits: dict[str, str] = ONE_CORE) -> dict[str, Any]:
    return pod_object(ref, {"requests": requests, "limits": limits}, **{"koordinator.sh/qosClass": "BE"})


class Rig:
    def __init__(self, tmp_path: Path, version: CgroupVersion = CgroupVersion.V1,
                 driver: CgroupDriver = CgroupDriver.CGROUPFS, *, dry_run: bool = False) -> None:  # fmt: skip
        self.tree = FakeCgroupTree(tmp_path / "cg", version, driver)
        self.http = FakeHTTP()
        self.isolator = BatchIsolator(
            tmp_path / "cg", EventRecorder(self.http.as_kube(), "loadline-agent", "n1"), dry_run=dry_run
        )
        self.pods: dict[str, dict[str, Any]] = {}
        self.node = NodeLimits(2000, 8 * 1024 * MI)

    def add(self, ref: PodRef, obj: dict[str, Any], *, cgroups: bool = True) -> None:
        self.pods[ref.uid] = obj
        if cgroups:
            self.cgroups(ref)

    def cgroups(self, ref: PodRef) -> None:
        """What the kubelet and the runtime create for a pod: its cgroup and its containers'."""
        self.tree.add_pod(ref)
        self.tree.write_limits(self.tree.pod_rel(ref))
        for c in ref.containers:
            self.tree.write_limits(self.tree.container_rel(ref, c))

    def step(self, cfs_quota: bool = True) -> RoundResult:
        return asyncio.run(self.isolator.round(self.pods, self.node, cfs_quota=cfs_quota))

    def file(self, ref: PodRef, name: str, container: int | None = None) -> str:
        rel = self.tree.pod_rel(ref) if container is None else self.tree.container_rel(ref, ref.containers[container])
        controller = "memory" if name.startswith("memory") else "cpu"
        return (self.tree.path(controller, rel) / name).read_text().strip()

    def limits(self, ref: PodRef, container: int | None = None) -> tuple[str, str, str]:
        if self.tree.version is CgroupVersion.V1:
            names = ("cpu.shares", "cpu.cfs_quota_us", "memory.limit_in_bytes")
        else:
            names = ("cpu.weight", "cpu.max", "memory.max")
        a, b, c = (self.file(ref, n, container) for n in names)
        return a, b, c

    def events(self) -> list[dict[str, Any]]:
        return [b for m, p, b in self.http.calls if m == "POST" and p.endswith("/events")]


def writes(result: RoundResult, outcome: str) -> int:
    return sum(n for (_, _, r), n in result.writes.items() if r == outcome)


def counted(resource: str, level: str, result: str) -> float:
    labels = {"resource": resource, "level": level, "result": result}
    return REGISTRY.get_sample_value("loadline_agent_qos_batch_cgroup_writes_total", labels) or 0.0


@pytest.mark.parametrize(("version", "driver"), TREES)
def test_pod_and_container_cgroups_are_held_and_set_again_when_changed_back(
    tmp_path: Path, version: CgroupVersion, driver: CgroupDriver
) -> None:
    rig = Rig(tmp_path, version, driver)
    be = make_pod(1, QoSClass.BEST_EFFORT, containers=2)
    rig.add(be, batch(be, requests=HALF_CORE, limits=ONE_CORE))
    before = counted("cfs_quota", "pod", "set")
    result = rig.step()
    assert result.pods == 1 and writes(result, "set") == 9  # 3 values x (pod + 2 containers)
    assert counted("cfs_quota", "pod", "set") == before + 1
    if version is CgroupVersion.V1:
        # pod: shares 2 x 500m x 1024/1000 = 1024, quota 2 x 100000, memory 2 x 512Mi
        assert rig.limits(be) == ("1024", "200000", str(1024 * MI))
        assert rig.limits(be, 0) == ("512", "100000", str(512 * MI))
    else:  # weights as the kubelet converts pod shares; cpu.max in the cgroup's period
        assert rig.limits(be) == ("39", "200000 100000", str(1024 * MI))
        assert rig.limits(be, 1) == ("20", "100000 100000", str(512 * MI))
    assert writes(rig.step(), "set") == 0  # held: nothing to write
    # Something puts the kubelet's values back: they are set again the next round.
    rig.tree.write_limits(rig.tree.container_rel(be, be.containers[1]))
    again = rig.step()
    assert writes(again, "set") == 3 and rig.limits(be, 1) == rig.limits(be, 0)


@pytest.mark.parametrize(("version", "driver"), TREES[::3])
def test_a_cgroup_is_held_in_the_first_round_after_it_appears(
    tmp_path: Path, version: CgroupVersion, driver: CgroupDriver
) -> None:
    rig = Rig(tmp_path, version, driver)
    be = make_pod(2, QoSClass.BEST_EFFORT, containers=1)
    rig.add(be, batch(be), cgroups=False)
    assert rig.step().pods == 0  # bound, no cgroup yet: nothing to do, nothing logged
    rig.cgroups(be)
    assert rig.step().pods == 1
    assert rig.limits(be, 0)[2] == str(512 * MI)


def test_quotas_are_written_in_the_order_cgroup_v1_accepts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """v1 refuses a child's quota above its limited parent's, and a parent's below a child's (EINVAL): every write
    here obeys that, through unlimited -> limited, lifted (BE suppression by cfsQuota), limited, loosened, tightened."""
    rig = Rig(tmp_path)
    rig.node = NodeLimits(4000)
    be = make_pod(3, QoSClass.BEST_EFFORT, containers=2)
    rig.add(be, batch(be, requests=HALF_CORE, limits=HALF_CORE))
    original = CgroupDirs.write
    order: list[str] = []

    def kernel(self: CgroupDirs, knob: Any, text: str) -> None:
        if self.path(knob).name == "cpu.cfs_quota_us":
            value = int(text)
            parent = int((self.cpu.parent / "cpu.cfs_quota_us").read_text()) if self.level == "container" else -1
            children = [int((d / "cpu.cfs_quota_us").read_text()) for d in self.cpu.iterdir() if d.is_dir()]
            if value >= 0 and ((parent >= 0 and value > parent) or any(c > value for c in children)):
                raise OSError(errno.EINVAL, "Invalid argument")
            order.append(f"{self.level}={text}")
        original(self, knob, text)

    def quotas(p: dict[str, Any], cfs_quota: bool = True) -> list[str]:
        p["metadata"]["resourceVersion"] = str(int(rig.pods[be.uid]["metadata"]["resourceVersion"]) + 1)  # changed
        rig.pods[be.uid] = p
        order.clear()
        assert writes(rig.step(cfs_quota), "refused") == 0
        return list(order)

    half, more = batch(be, requests=HALF_CORE, limits=HALF_CORE), {"kubernetes.io/batch-cpu": "1500"}
    monkeypatch.setattr(CgroupDirs, "write", kernel)
    assert quotas(half) == ["container=50000", "container=50000", "pod=100000"]
    assert quotas(half, cfs_quota=False) == ["pod=-1", "container=-1", "container=-1"]  # lifting: the pod first
    assert quotas(half) == ["container=50000", "container=50000", "pod=100000"]
    assert quotas(batch(be, requests=more, limits=more)) == ["pod=300000", "container=150000", "container=150000"]
    assert quotas(half) == ["container=50000", "container=50000", "pod=100000"]  # tightening: the pod last


def test_a_memory_limit_below_the_working_set_waits_until_it_fits(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    be = make_pod(4, QoSClass.BEST_EFFORT, containers=1)
    rig.add(be, batch(be))
    pod_memory = rig.tree.path("memory", rig.tree.pod_rel(be))
    (pod_memory / "memory.usage_in_bytes").write_text(f"{900 * MI}\n")  # 900 MiB, 8 MiB of it inactive file pages
    before = counted("memory_limit", "pod", "deferred")
    result = rig.step()
    assert rig.limits(be)[2] == UNLIMITED_V1 and counted("memory_limit", "pod", "deferred") == before + 1
    assert rig.limits(be)[:2] == ("1024", "100000")  # CPU is held all the same
    (pod_memory / "memory.usage_in_bytes").write_text(f"{300 * MI}\n")
    assert writes(rig.step(), "set") == 1 and rig.limits(be)[2] == str(512 * MI)
    assert writes(result, "deferred") == 1


def test_dry_run_reads_and_counts_but_writes_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rig = Rig(tmp_path, CgroupVersion.V2, CgroupDriver.SYSTEMD, dry_run=True)
    be = make_pod(5, QoSClass.BEST_EFFORT, containers=1)
    rig.add(be, batch(be))
    with caplog.at_level(logging.WARNING, "loadline.agent.qos"):
        first = rig.step()
        second = rig.step()
    assert rig.limits(be) == ("1", "max 100000", "max") and rig.limits(be, 0) == ("1", "max 100000", "max")
    assert writes(first, "dry_run") == writes(second, "dry_run") == 6
    said = [r.message for r in caplog.records if "dry run" in r.message]
    assert len(said) == 6 and any("cpu.max to 100000 100000 (now -1)" in m for m in said)  # each once


def test_a_refused_value_is_counted_every_round_logged_once_and_an_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(tmp_path)
    be = make_pod(6, QoSClass.BEST_EFFORT, containers=1)
    rig.add(be, batch(be))
    original = CgroupDirs.write

    def refuse(self: CgroupDirs, knob: Any, text: str) -> None:
        if self.level == "pod" and self.path(knob).name == "cpu.cfs_quota_us":
            raise OSError(errno.EINVAL, "Invalid argument")
        original(self, knob, text)

    monkeypatch.setattr(CgroupDirs, "write", refuse)
    with caplog.at_level(logging.WARNING, "loadline.agent.qos"):
        assert [writes(rig.step(), "refused") for _ in range(3)] == [1, 1, 1]
    assert rig.limits(be) == ("1024", "-1", str(512 * MI))  # what could be set is
    said = [r.message for r in caplog.records if "could not set" in r.message]
    assert len(said) == 1 and "cpu.cfs_quota_us" in said[0] and "Invalid argument" in said[0]
    [event] = rig.events()
    assert event["reason"] == "BatchIsolationFailed" and event["type"] == "Warning"
    assert event["regarding"]["name"] == be.name and "cpu.cfs_quota_us" in event["note"]


def test_a_cgroup_removed_mid_round_is_gone_not_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rig = Rig(tmp_path)
    be = make_pod(7, QoSClass.BEST_EFFORT, containers=1)
    rig.add(be, batch(be))
    original = CgroupDirs.write

    def vanish(self: CgroupDirs, knob: Any, text: str) -> None:
        rig.tree.remove(rig.tree.pod_rel(be))  # the kubelet removes the pod while we write
        original(self, knob, text)

    monkeypatch.setattr(CgroupDirs, "write", vanish)
    result = rig.step()
    assert writes(result, "gone") >= 1 and writes(result, "refused") == 0 and rig.events() == []
    monkeypatch.setattr(CgroupDirs, "write", original)
    assert rig.step().pods == 0


def test_bad_pods_never_reach_another_pods_cgroup(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rig = Rig(tmp_path)
    victim = make_pod(8, QoSClass.BEST_EFFORT, containers=1)
    rig.add(victim, pod_object(victim))  # an ordinary BestEffort pod, no batch resources
    untouched = rig.limits(victim), rig.limits(victim, 0)

    # A pod whose status claims the victim's container: only a directory under its own pod is looked for.
    thief = make_pod(9, QoSClass.BEST_EFFORT, containers=1)
    stolen = batch(thief)
    stolen["status"]["containerStatuses"][0]["containerID"] = victim.containers[0].container_id
    rig.add(thief, stolen)
    # A "UID" that climbs out of the tier.
    climber = batch(make_pod(10, QoSClass.BEST_EFFORT, containers=1))
    rig.pods["../.."] = {**climber, "metadata": {**climber["metadata"], "uid": "../.."}}
    # A pod whose cgroup is a symlink to the victim's.
    linked = make_pod(11, QoSClass.BEST_EFFORT, containers=1)
    rig.pods[linked.uid] = batch(linked)
    for controller in ("cpu", "memory"):
        link = rig.tree.path(controller, rig.tree.pod_rel(linked))
        os.symlink(rig.tree.path(controller, rig.tree.pod_rel(victim)), link)
    # Batch resources on an LS pod; unreadable ones; a finished pod.
    ls = make_pod(12, QoSClass.BEST_EFFORT, containers=1)
    rig.add(ls, pod_object(ls, {"limits": ONE_CORE}, **{"koordinator.sh/qosClass": "LS"}))
    broken = make_pod(13, QoSClass.BEST_EFFORT, containers=1)
    rig.add(broken, pod_object(broken, {"limits": {"kubernetes.io/batch-cpu": "1.5"}}))
    done = make_pod(14, QoSClass.BEST_EFFORT, containers=1)
    rig.add(done, {**batch(done), "status": {**batch(done)["status"], "phase": "Succeeded"}})

    problems = {r: REGISTRY.get_sample_value("loadline_agent_qos_batch_pod_problems_total", {"reason": r}) or 0
                for r in ("unsafe_path", "not_best_effort", "malformed")}  # fmt: skip
    with caplog.at_level(logging.WARNING, "loadline.agent.qos"):
        for _ in range(3):
            rig.step()
    assert (rig.limits(victim), rig.limits(victim, 0)) == untouched
    assert rig.limits(thief) == ("1024", "100000", str(512 * MI))  # its own pod cgroup is held
    assert rig.limits(ls) == ("2", "-1", UNLIMITED_V1) and rig.limits(done) == ("2", "-1", UNLIMITED_V1)
    assert rig.limits(broken) == ("2", "-1", UNLIMITED_V1)
    for reason, n in (("unsafe_path", 2), ("not_best_effort", 1), ("malformed", 1)):
        assert REGISTRY.get_sample_value("loadline_agent_qos_batch_pod_problems_total", {"reason": reason}) == (
            problems[reason] + n
        ), reason
    messages = [r.message for r in caplog.records]
    assert sum("unsafe" in m for m in messages) == 2  # once per pod, not once per round
    assert sum("LS pod" in m for m in messages) == 1
    assert sum("unreadable" in m and "1.5" in m for m in messages) == 1


@pytest.mark.parametrize("version", [CgroupVersion.V1, CgroupVersion.V2])
def test_unreadable_cgroup_files_are_overwritten_and_absurd_values_held_to_the_node(
    tmp_path: Path, version: CgroupVersion
) -> None:
    rig = Rig(tmp_path, version)
    be = make_pod(15, QoSClass.BEST_EFFORT, containers=1)
    huge = {"kubernetes.io/batch-cpu": "1000000", "kubernetes.io/batch-memory": "1Pi"}
    rig.add(be, batch(be, requests=huge, limits=huge))
    name = "cpu.shares" if version is CgroupVersion.V1 else "cpu.weight"
    (rig.tree.path("cpu", rig.tree.pod_rel(be)) / name).write_text("garbage\n")
    rig.step()
    node_quota = "200000" if version is CgroupVersion.V1 else "200000 100000"
    assert rig.limits(be)[1:] == (node_quota, str(8 * 1024 * MI))  # the node's 2 cores and 8 GiB
    assert rig.limits(be)[0] in ("262144", "10000")

