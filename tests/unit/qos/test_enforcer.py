"""One enforcement round at a time, against fake cgroup trees and an in-memory API server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from agent.qos.enforcer import QoSEnforcer
from agent.qos.usage import PodUsageSample, UsageSnapshot
from common.kube.http import KubeError
from tests import objects
from tests.unit.manager.fakes import FakeHTTP
from tests.unit.qos.fake_cgroups import v1_tree

GI = 1024**3
NODE = "n1"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def sysfs(root: Path, cpus: int) -> Path:
    cpu = root / "devices" / "system" / "cpu"
    cpu.mkdir(parents=True)
    (cpu / "online").write_text(f"0-{cpus - 1}\n")
    for i in range(cpus):  # 2 hyper-threads per core
        (cpu / f"cpu{i}" / "topology").mkdir(parents=True)
        (cpu / f"cpu{i}" / "topology" / "core_id").write_text(f"{i // 2}\n")
    return root


def pod(
    name: str, uid: str, *, qos: str | None, priority: int | None = None, requests: dict[str, str] | None = None
) -> dict[str, Any]:
    return objects.pod(name, None, None, namespace="ns", uid=uid, koord_qos=qos, node_name=NODE, priority=priority,
                       requests=requests)  # fmt: skip


class Rig:
    def __init__(self, tmp_path: Path, *, cpus: int = 8, memory: str = "32Gi") -> None:
        self.http = FakeHTTP()
        self.clock = Clock()
        self.be_cpu = v1_tree(tmp_path / "cg", cpus=f"0-{cpus - 1}", pods={"be1": ["c1"]})
        self.cpuset = tmp_path / "cg" / "cpuset" / "kubepods" / "besteffort"
        self.usage: UsageSnapshot | None = None
        self.enforcer = QoSEnforcer(
            NODE,
            self.http.as_kube(),
            tmp_path / "cg",
            lambda: self.usage,
            sys_root=sysfs(tmp_path / "sys", cpus),
            clock=self.clock,
        )
        self.enforcer.node_watch.store[NODE] = objects.node(NODE, cpu=str(cpus), memory=memory, pods=None)
        for p in (pod("ls", "ls1", qos="LS", requests={"cpu": "1"}), pod("be", "be1", qos="BE", priority=5000)):
            self.enforcer.pod_watch.store[f"ns/{p['metadata']['name']}"] = p

    def slo(self, **thresholds: Any) -> None:
        self.enforcer.slo_watch.store[NODE] = objects.node_slo(NODE, resourceUsedThresholdWithBE=thresholds)

    def use(
        self, *, node_cpu: float, ls_cpu: float, be_cpu: float, node_memory: int = 4 * GI, be_memory: int = GI
    ) -> None:
        self.usage = UsageSnapshot(
            self.clock.now,
            node_cpu,
            node_memory,
            {"ls1": PodUsageSample(ls_cpu, GI), "be1": PodUsageSample(be_cpu, be_memory)},
        )

    def step(self) -> None:
        asyncio.run(self.enforcer.step())

    def quota(self) -> int:
        return int((self.be_cpu / "cpu.cfs_quota_us").read_text())

    def cpus(self, rel: str = "") -> str:
        return (self.cpuset / rel / "cpuset.cpus").read_text().strip()


def test_cfs_quota_follows_the_suppress_formula_and_is_restored_when_disabled(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.slo(enable=True, cpuSuppressPolicy="cfsQuota", cpuSuppressThresholdPercent=65)
    # 8000m x 65% = 5200 - LS pod 2000 - system max(node 5.5 - pods 3.5 = 2.0, reserved 0) -> 1200m -> 120000 us
    rig.use(node_cpu=5.5, ls_cpu=2.0, be_cpu=1.5)
    rig.step()
    assert rig.enforcer.last_breakdown is not None and rig.enforcer.last_breakdown.suppress_milli == 1200
    assert rig.quota() == 120_000
    rig.use(node_cpu=7.0, ls_cpu=4.0, be_cpu=1.5)  # LS grows: BE shrinks at once (5200-4000-1500 -> floor)
    rig.step()
    assert rig.quota() == 2_000
    rig.use(node_cpu=2.0, ls_cpu=0.5, be_cpu=0.1)  # LS falls: BE ramps up by 10 % of the node per round
    rig.step()
    assert rig.quota() == 2_000 + 80_000
    rig.slo(enable=False, cpuSuppressPolicy="cfsQuota")
    rig.step()
    assert rig.quota() == -1


def test_no_fresh_usage_means_no_action(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.slo(enable=True, cpuSuppressPolicy="cfsQuota", cpuSuppressThresholdPercent=10)
    rig.step()  # no usage at all
    rig.use(node_cpu=1.0, ls_cpu=0.5, be_cpu=0.5)
    rig.clock.now += 11  # the samples are older than max_usage_age_seconds
    rig.step()
    assert rig.quota() == -1
    assert (REGISTRY.get_sample_value("loadline_agent_qos_skipped_rounds_total", {"reason": "usage_stale"}) or 0) >= 2


def test_cpuset_policy_resizes_the_be_cpuset_and_switching_policy_restores_it(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    (rig.be_cpu / "cpu.cfs_quota_us").write_text("50000\n")  # left over from the cfsQuota policy
    rig.slo(enable=True, cpuSuppressPolicy="cpuset", cpuSuppressThresholdPercent=50)
    # 8000 x 50% = 4000 - LS 1000 - system 1000 = 2000m -> 2 CPUs, one whole core
    rig.use(node_cpu=3.0, ls_cpu=1.0, be_cpu=1.0)
    rig.step()
    assert rig.quota() == -1  # the other policy's setting recovered, as koordlet does
    assert (rig.cpus(), rig.cpus("podbe1"), rig.cpus("podbe1/c1")) == ("0-1", "0-1", "0-1")
    rig.use(node_cpu=1.0, ls_cpu=0.2, be_cpu=0.3)  # 4000-200-500 = 3300 -> 4 CPUs, within +1 (10 % of 8) per round?
    rig.step()
    assert rig.cpus() == "0-2"  # grows by at most ceil(8 x 10 %) = 1 CPU per round
    rig.step()
    assert rig.cpus() == "0-3"
    rig.slo(enable=True, cpuSuppressPolicy="cfsQuota", cpuSuppressThresholdPercent=50)
    rig.step()
    assert (rig.cpus(), rig.cpus("podbe1/c1")) == ("0-7", "0-7")  # the cpuset it changed is given back
    assert rig.quota() == 330_000


def test_cpuset_writes_never_leave_a_child_outside_its_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.qos.becgroup import BECgroup

    rig = Rig(tmp_path)
    rig.slo(enable=True, cpuSuppressPolicy="cpuset", cpuSuppressThresholdPercent=50)
    rig.use(node_cpu=1.0, ls_cpu=0.2, be_cpu=0.3)
    for _ in range(6):
        rig.step()  # grown to 4 CPUs
    writes: list[tuple[str, str]] = []
    original = BECgroup.write_cpus

    def record(directory: Path, cpus: list[int]) -> None:
        parent = directory.parent / "cpuset.cpus"
        if directory != rig.cpuset:  # the kernel's rule: a child's CPUs are a subset of its parent's
            from common.cpulist import parse_cpu_list

            assert set(cpus) <= set(parse_cpu_list(parent.read_text())), (directory, cpus)
        writes.append((directory.name, ",".join(map(str, cpus))))
        original(directory, cpus)

    monkeypatch.setattr(BECgroup, "write_cpus", staticmethod(record))
    rig.use(node_cpu=6.0, ls_cpu=3.0, be_cpu=1.0)  # 4000 - 3000 - 2000 < 0 -> the 2-CPU minimum
    rig.step()
    assert rig.cpus("podbe1/c1") == "0-1"
    assert [w[0] for w in writes] == ["besteffort", "podbe1", "c1", "c1", "podbe1", "besteffort"]


def pod_path(name: str) -> str:
    return f"/api/v1/namespaces/ns/pods/{name}"


def deletions(rig: Rig) -> list[tuple[str, Any]]:
    return [(path, body) for method, path, body in rig.http.calls if method == "DELETE"]


def test_memory_pressure_deletes_be_pods_with_uid_preconditions_events_and_cool_down(tmp_path: Path) -> None:
    rig = Rig(tmp_path, memory="10Gi")
    big = pod("big", "be2", qos="BE", priority=5000)
    low = pod("low", "be3", qos="BE", priority=3000)
    for p in (big, low):
        rig.enforcer.pod_watch.store[f"ns/{p['metadata']['name']}"] = p
    for p in rig.enforcer.pod_watch.store.values():  # what the API server holds: DELETE answers from here
        rig.http.objects[pod_path(p["metadata"]["name"])] = p
    rig.slo(enable=True, cpuSuppressPolicy="cfsQuota")
    # 9 GiB of 10 GiB = 90 % >= 70 %: release 10Gi x (90 - 68) % = 2.2 GiB. Order: lowest priority first (low,
    # 0.5 GiB), then the biggest of the rest (big 3 GiB) -> released 3.5 GiB >= 2.2 GiB; be1 (1 GiB) stays.
    rig.usage = UsageSnapshot(
        rig.clock.now,
        1.0,
        9 * GI,
        {"be1": PodUsageSample(0.1, GI), "be2": PodUsageSample(0.1, 3 * GI), "be3": PodUsageSample(0.1, GI // 2)},
    )
    evicted_before = REGISTRY.get_sample_value("loadline_agent_qos_actions_total", {"action": "evicted"}) or 0
    rig.step()
    # A pod DELETE (admission sees the pod: the chart's policy holds it to this node), never the Eviction API,
    # with the planned pod's UID as a precondition and the pod's own grace period (none given).
    assert deletions(rig) == [
        (pod_path("low"), {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": "be3"}}),
        (pod_path("big"), {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": "be2"}}),
    ]
    assert not [c for c in rig.http.calls if c[1].endswith("/eviction")]
    assert REGISTRY.get_sample_value("loadline_agent_qos_actions_total", {"action": "evicted"}) == evicted_before + 2
    events = [b for m, p, b in rig.http.calls if m == "POST" and p.endswith("/events")]
    assert [e["reason"] for e in events] == ["evictPodSuccess", "evictPodSuccess"]
    assert events[0]["regarding"]["name"] == "low" and "usage 90% >= threshold 70%" in events[0]["note"]

    rig.http.calls.clear()
    rig.clock.now += 1  # within the 4 s cool-down: nothing, even though the usage has not dropped yet
    rig.usage = UsageSnapshot(rig.clock.now, 1.0, 9 * GI, {"be1": PodUsageSample(0.1, GI)})
    rig.step()
    assert deletions(rig) == []

    rig.clock.now += 4  # cooled down; the API server refuses this time (the own-node policy): evictPodFail
    rig.usage = UsageSnapshot(rig.clock.now, 1.0, 9 * GI, {"be1": PodUsageSample(0.1, GI)})
    refusal = "loadline-agent on node n1 may delete only pods on node n1, not ns/be on n2"
    rig.http.fail[("DELETE", pod_path("be"))] = KubeError(403, "Forbidden", {"message": refusal})
    failed_before = REGISTRY.get_sample_value("loadline_agent_qos_actions_total", {"action": "evict_failed"}) or 0
    rig.step()
    events = [b for m, p, b in rig.http.calls if m == "POST" and p.endswith("/events")]
    assert [e["reason"] for e in events] == ["evictPodFail"]
    assert refusal in events[0]["note"] and events[0]["type"] == "Warning"
    assert REGISTRY.get_sample_value("loadline_agent_qos_actions_total", {"action": "evict_failed"}) == failed_before + 1


def test_a_namesake_pod_is_never_deleted_and_not_retried(tmp_path: Path) -> None:
    """409 (the UID precondition: the pod was replaced by a namesake) counts as gone: no event, no retry."""
    rig = Rig(tmp_path, memory="10Gi")
    rig.slo(enable=True, cpuSuppressPolicy="cfsQuota")
    rig.usage = UsageSnapshot(rig.clock.now, 1.0, 9 * GI, {"be1": PodUsageSample(0.1, 3 * GI)})
    rig.http.fail[("DELETE", pod_path("be"))] = KubeError(
        409, "Conflict", {"message": 'Operation cannot be fulfilled on Pod "be": the UID in the precondition (be1) '
                          "does not match the UID in record (other)"}
    )
    failed_before = REGISTRY.get_sample_value("loadline_agent_qos_actions_total", {"action": "evict_failed"}) or 0
    rig.step()
    assert [path for path, _ in deletions(rig)] == [pod_path("be")]
    assert not [c for c in rig.http.calls if c[1].endswith("/events")]
    assert (REGISTRY.get_sample_value("loadline_agent_qos_actions_total", {"action": "evict_failed"}) or 0) == failed_before
    rig.http.calls.clear()
    rig.clock.now += 5  # past the cool-down, still under pressure: the replaced pod's UID is not a candidate
    rig.usage = UsageSnapshot(rig.clock.now, 1.0, 9 * GI, {"be1": PodUsageSample(0.1, 3 * GI)})
    rig.step()
    assert deletions(rig) == []


def test_no_nodeslo_or_disabled_means_hands_off_except_restoring(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.use(node_cpu=7.9, ls_cpu=7.0, be_cpu=0.9, node_memory=31 * GI)
    rig.step()  # no NodeSLO for the node
    assert rig.quota() == -1 and rig.http.writes() == []
    (rig.be_cpu / "cpu.cfs_quota_us").write_text("30000\n")  # left behind by an earlier run
    rig.slo(cpuSuppressPolicy="cfsQuota")  # enable unset = false
    rig.step()
    assert rig.quota() == -1 and rig.http.writes() == []
    assert REGISTRY.get_sample_value("loadline_agent_qos_enabled") == 0


def test_pods_can_come_from_the_agents_own_pod_watch(tmp_path: Path) -> None:
    rig = Rig(tmp_path, memory="10Gi")
    shared = [pod("ls", "ls1", qos="LS", requests={"cpu": "1"}), pod("shared-be", "be1", qos="BE")]
    enforcer = QoSEnforcer(
        NODE, rig.http.as_kube(), tmp_path / "cg", lambda: rig.usage, pods=lambda: shared, clock=rig.clock
    )
    enforcer.node_watch.store.update(rig.enforcer.node_watch.store)
    enforcer.slo_watch.store[NODE] = objects.node_slo(NODE, resourceUsedThresholdWithBE={"enable": True})
    rig.usage = UsageSnapshot(rig.clock.now, 1.0, 9 * GI, {"be1": PodUsageSample(0.1, 3 * GI)})
    asyncio.run(enforcer.step())
    assert [path for path, _ in deletions(rig)] == [pod_path("shared-be")]


def test_batch_quotas_give_way_to_cfs_quota_suppression_and_come_back_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """koordlet's rule (batchresource/rule.go): while BE suppression runs with the cfsQuota policy the batch pods'
    quotas are -1 and the besteffort cgroup's quota holds them. The order keeps cgroup v1 content: the pod's quota is
    lifted before the besteffort quota is set, and set again only after that quota is lifted."""
    from agent.qos.batch_cgroup import CgroupDirs
    from agent.qos.becgroup import BECgroup

    rig = Rig(tmp_path)
    batch = pod("batch", "bt1", qos="BE")
    batch["spec"]["containers"][0]["resources"] = {"limits": {"kubernetes.io/batch-cpu": "1000"}}
    batch["status"]["containerStatuses"] = []
    rig.enforcer.pod_watch.store["ns/batch"] = batch
    pod_cpu = rig.be_cpu / "podbt1"
    for controller, files in (("cpu", {"cpu.shares": "2", "cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"}),
                              ("memory", {"memory.limit_in_bytes": "9223372036854771712"})):  # fmt: skip
        d = tmp_path / "cg" / controller / "kubepods" / "besteffort" / "podbt1"
        d.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (d / name).write_text(text + "\n")
    writes: list[str] = []
    write_knob, write_quota = CgroupDirs.write, BECgroup.write_quota

    def knob(self: CgroupDirs, k: Any, text: str) -> None:
        writes.append(f"{self.path(k).name}={text}")
        write_knob(self, k, text)

    def tier(self: BECgroup, quota_us: int) -> None:
        writes.append(f"besteffort={quota_us}")
        write_quota(self, quota_us)

    monkeypatch.setattr(CgroupDirs, "write", knob)
    monkeypatch.setattr(BECgroup, "write_quota", tier)
    rig.step()  # no NodeSLO: the batch pod gets its quota at once
    assert writes == ["cpu.cfs_quota_us=100000"] and rig.quota() == -1  # (shares: 2 without a request, as they are)
    writes.clear()
    rig.slo(enable=True, cpuSuppressPolicy="cfsQuota", cpuSuppressThresholdPercent=65)
    rig.use(node_cpu=5.5, ls_cpu=2.0, be_cpu=1.5)
    rig.step()
    assert writes == ["cpu.cfs_quota_us=-1", "besteffort=120000"]
    writes.clear()
    rig.slo(enable=False, cpuSuppressPolicy="cfsQuota")
    rig.step()
    assert writes == ["besteffort=-1", "cpu.cfs_quota_us=100000"]
    assert (pod_cpu / "cpu.cfs_quota_us").read_text() == "100000"


def test_objects_it_cannot_read_are_counted_once_per_version_and_never_acted_on(tmp_path: Path) -> None:
    def counted(kind: str, reason: str) -> float:
        value = REGISTRY.get_sample_value("loadline_malformed_objects_total", {"kind": kind, "reason": reason})
        assert value is not None, (kind, reason)  # the enforcer's kinds are counted from 0
        return value

    rig = Rig(tmp_path, memory="10Gi")
    before = {k: counted(*k) for k in (("NodeSLO", "wrong_type"), ("Pod", "invalid_quantity"), ("Node", "invalid_quantity"))}
    rig.enforcer.slo_watch.store[NODE] = objects.node_slo(NODE, resourceUsedThresholdWithBE=[])
    rig.step()
    rig.step()  # the same version again: not counted again
    assert counted("NodeSLO", "wrong_type") - before[("NodeSLO", "wrong_type")] == 1 and rig.quota() == -1
    # A best-effort pod whose requests do not parse is not taken for best-effort: never evicted.
    rig.slo(enable=True, memoryEvictThresholdPercent=70)
    bad = pod("bad-be", "be1", qos="BE", requests={"cpu": "lots"})
    rig.enforcer.pod_watch.store["ns/be"] = bad
    rig.usage = UsageSnapshot(rig.clock.now, 1.0, 9 * GI, {"be1": PodUsageSample(0.1, 3 * GI)})
    rig.step()
    rig.step()
    assert deletions(rig) == [] and counted("Pod", "invalid_quantity") - before[("Pod", "invalid_quantity")] == 1
    # A Node that does not read stops the rounds, and is counted.
    rig.enforcer.node_watch.store[NODE] = objects.node(NODE, status={"capacity": {"cpu": "eight"}})
    rig.step()
    assert counted("Node", "invalid_quantity") - before[("Node", "invalid_quantity")] == 1
    assert (REGISTRY.get_sample_value("loadline_agent_qos_skipped_rounds_total", {"reason": "node_malformed"}) or 0) >= 1
