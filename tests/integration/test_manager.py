"""`loadline manager` as real subprocesses on a real control plane (etcd + kube-apiserver + kwok + schedulers).

The manager acts on every Node, NodeMetric and NodeSLO in its cluster (and deletes NodeMetrics and NodeSLOs whose
node is gone), so these tests share a control plane of their own (module scope), not the session one other tests
put their objects in. Batch pods are placed twice: by the real kube-scheduler (interoperability: it reads the batch
resources from Node status like any extended resource) and by `loadline scheduler`.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from common.api.constants import BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY
from common.api.quantity import Quantity
from tests import objects
from tests.conftest import module_plane, namespace_in
from tests.harness.controlplane import REPO_ROOT, ControlPlane, fake_node
from tests.harness.processes import Component, free_port, http_ok
from tests.integration.scheduler_support import SCHEDULER_NAME, running_scheduler
from tests.objects import MakeNodeMetric

pytestmark = pytest.mark.integration

NAMESPACE = "loadline-system"
CONFIG_MAP = "slo-controller-config"
GI = 1024**3


# --- helpers -------------------------------------------------------------------------------------
@dataclass
class ManagerProcess:
    component: Component
    port: int
    replica: str

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def metric(self, name: str, **labels: str) -> float | None:
        """One sample from /metrics, None when absent."""
        _, text = self.get("/metrics")
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return float(sample.value)
        return None


def wait_for(what: str, check: Callable[[], Any], timeout: float, *, alive: Sequence[Component] = ()) -> Any:
    """Poll until `check()` returns something truthy and return it; fail naming `what`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        for comp in alive:
            assert comp.alive(), f"{comp.name} exited while waiting for {what}:\n{comp.log_tail()}"
        try:
            last = check()
            if last:
                return last
        except Exception as exc:  # e.g. the object does not exist yet
            last = exc
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})"
        time.sleep(0.25)


def start_manager(plane: ControlPlane, replica: str, *args: str) -> ManagerProcess:
    port = free_port()
    component = Component(
        f"manager-{replica}",
        [
            sys.executable, "-m", "manager",
            f"--kubeconfig={plane.kubeconfig}", f"--namespace={NAMESPACE}", f"--config-map={CONFIG_MAP}",
            "--bind-address=127.0.0.1", f"--port={port}", *args,
        ],
        plane.root / "logs" / f"manager-{replica}.log",
        env={**os.environ, "POD_NAME": replica, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    component.start()
    plane.extra.append(component)  # in the failure report; stopped by the fixture at the latest
    wait_for(f"{replica} /healthz", lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 60, alive=[component])
    return ManagerProcess(component, port, replica)


def get_or_none(plane: ControlPlane, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    argv = ["get", kind, name, "-o", "json", "--ignore-not-found"]
    if namespace:
        argv += ["-n", namespace]
    out = plane.kubectl(*argv).stdout.strip()
    return json.loads(out) if out else None


def set_configmap(plane: ControlPlane, data: Mapping[str, Any]) -> None:
    """Write slo-controller-config. Non-string values are JSON-encoded; strings go as they are (broken JSON)."""
    body = {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG_MAP, "namespace": NAMESPACE},
        "data": {k: v if isinstance(v, str) else json.dumps(v) for k, v in data.items()},
    }  # fmt: skip
    plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(body))


def make_nodes(plane: ControlPlane, *nodes: dict[str, Any]) -> None:
    plane.apply(list(nodes))
    names = [n["metadata"]["name"] for n in nodes]
    plane.kubectl("wait", "--for=condition=Ready", *(f"node/{n}" for n in names), "--timeout=120s", timeout=130)


def write_nodemetric_status(
    plane: ControlPlane,
    node: str,
    *,
    age: timedelta = timedelta(0),
    system: tuple[str, str],
    pods: Sequence[tuple[str, str, str, str, str]],  # namespace, name, priority class, cpu, memory
) -> None:
    """What the agent writes, through the status subresource."""
    built = MakeNodeMetric(node).updated(datetime.now(UTC) - age).node_usage("4", "20Gi").system(*system).pods([])
    for ns, name, priority, cpu, memory in pods:
        built.pod(ns, name, cpu, memory, priority=priority, qos="BE" if priority in ("koord-batch", "koord-free") else "LS")
    status = built.status()
    plane.kubectl(
        "patch", "nodemetric", node, "--subresource=status", "--type=merge", "-p", json.dumps({"status": status})
    )


def batch_of(plane: ControlPlane, node: str) -> dict[str, dict[str, int]]:
    """{"capacity": {...}, "allocatable": {...}} batch resources of a node, as integers."""
    obj = get_or_none(plane, "node", node) or {}
    out: dict[str, dict[str, int]] = {}
    for field in ("capacity", "allocatable"):
        values = (obj.get("status") or {}).get(field) or {}
        out[field] = {k: Quantity.parse(v).value() for k, v in values.items() if k in (BATCH_CPU, BATCH_MEMORY)}
    return out


def events_for(plane: ControlPlane, name: str, reason: str) -> list[dict[str, Any]]:
    items = json.loads(plane.kubectl("get", "events.events.k8s.io", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    return [e for e in items if e.get("regarding", {}).get("name") == name and e.get("reason") == reason]


def pod(
    name: str, namespace: str, *, priority: str, requests: Mapping[str, str], node: str | None = None
) -> dict[str, Any]:
    """A pod of a Koordinator priority class (batch ones BE) whose limits are its requests."""
    return objects.for_api_server(objects.pod(
        name, None, None, namespace=namespace, requests=dict(requests), limits=dict(requests), image="fake",
        node_name=node, scheduler_name=None, labels={"koordinator.sh/priority-class": priority},
        koord_qos="BE" if priority == "koord-batch" else None,
    ))  # fmt: skip


def threshold_of(plane: ControlPlane, node: str) -> int | None:
    slo = get_or_none(plane, "nodeslo", node)
    if slo is None:
        return None
    return int(slo["spec"]["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"])


# --- fixtures ------------------------------------------------------------------------------------
own_plane, plane = module_plane(lambda plane: plane.kubectl("create", "namespace", NAMESPACE))


@pytest.fixture(autouse=True)
def dump_manager_logs(plane: ControlPlane) -> Iterator[None]:
    """DUMP_MANAGER_LOGS=1: the logs of what each test started, also when it passed (for reading what they did)."""
    before = len(plane.extra)
    yield
    if os.environ.get("DUMP_MANAGER_LOGS"):
        for comp in plane.extra[before:]:
            print(f"----- {comp.name}\n{comp.log_tail(200)}")


@pytest.fixture
def test_namespace(plane: ControlPlane) -> Iterator[str]:
    yield from namespace_in(plane)


# --- tests ---------------------------------------------------------------------------------------
def test_batch_resources_from_the_nodemetric_schedulable_by_both_schedulers_and_removed_when_stale(
    plane: ControlPlane, test_namespace: str
) -> None:
    ns = test_namespace
    set_configmap(plane, {"colocation-config": {"enable": True}})
    make_nodes(
        plane,
        fake_node("batch-a", cpu="16", memory="64Gi", labels={"suite": "batch"}),
        fake_node("batch-b", cpu="16", memory="64Gi", labels={"suite": "batch"}),
    )
    plane.apply([
        pod("web", ns, priority="koord-prod", requests={"cpu": "2", "memory": "8Gi"}, node="batch-a"),  # measured
        pod("api", ns, priority="koord-prod", requests={"cpu": "1", "memory": "2Gi"}, node="batch-a"),  # not yet
        pod("etl", ns, priority="koord-batch", requests={}, node="batch-a"),  # batch: never charged
    ])  # fmt: skip
    manager = start_manager(plane, "solo")
    wait_for("NodeMetric batch-a created by the manager", lambda: get_or_none(plane, "nodemetric", "batch-a"), 60)
    nm = get_or_none(plane, "nodemetric", "batch-a")
    assert nm is not None
    assert nm["spec"]["metricCollectPolicy"] == {
        "aggregateDurationSeconds": 300, "reportIntervalSeconds": 60,
        "nodeAggregatePolicy": {"durations": ["5m0s", "10m0s", "30m0s"]},
        "nodeMemoryCollectPolicy": "usageWithoutPageCache",
    }  # fmt: skip

    system = ("1", "4Gi")
    measured = [(ns, "web", "koord-prod", "1500m", "6Gi"), (ns, "etl", "koord-batch", "3", "10Gi")]
    write_nodemetric_status(plane, "batch-a", system=system, pods=measured)

    # By hand (koordinator pkg/slo-controller/noderesource/plugins/util/util.go, policy "usage"): capacity 16 cores / 64 GiB = 68719476736 bytes, nothing reserved.
    # cpu:    16000 - 40% margin 6400 - system 1000 - HP used (web 1500 + api's request 1000, no metric yet) = 6100
    # memory: 68719476736 - int(68719476736 * 0.35) = 44667659879, - system 4Gi 4294967296 = 40372692583,
    #         - web 6Gi 6442450944 - api's request 2Gi 2147483648 = 31782757991; etl (koord-batch) not charged
    expected = {BATCH_CPU: 6100, BATCH_MEMORY: 31782757991}
    wait_for(
        "batch resources in capacity and allocatable of batch-a",
        lambda: batch_of(plane, "batch-a") == {"capacity": expected, "allocatable": expected},
        60,
        alive=[manager.component],
    )
    assert batch_of(plane, "batch-b") == {"capacity": {}, "allocatable": {}}  # its NodeMetric has no status yet
    # The leader's per-node gauges carry the same numbers in base units; batch-b has no batch resources, no series.
    written = batch_of(plane, "batch-a")["allocatable"]

    def exported(node: str) -> tuple[float | None, float | None]:
        return (
            manager.metric("loadline_manager_node_batch_allocatable", node=node, resource="cpu"),
            manager.metric("loadline_manager_node_batch_allocatable", node=node, resource="memory"),
        )

    wait_for(
        "per-node batch gauges of batch-a as written",
        lambda: exported("batch-a") == (written[BATCH_CPU] / 1000, written[BATCH_MEMORY]),
        30,
        alive=[manager.component],
    )
    assert exported("batch-b") == (None, None)

    # The real kube-scheduler: the node with batch resources takes a batch pod; more than it has stays pending.
    plane.start_kube_scheduler(name=f"kube-scheduler-{uuid.uuid4().hex[:6]}")
    plane.apply([
        pod("fits", ns, priority="koord-batch", requests={BATCH_CPU: "3000", BATCH_MEMORY: "8Gi"}),
        pod("too-big", ns, priority="koord-batch", requests={BATCH_CPU: "7000", BATCH_MEMORY: "1Gi"}),
    ])  # fmt: skip
    plane.kubectl("wait", "-n", ns, "--for=condition=PodScheduled", "pod/fits", "--timeout=90s", timeout=100)
    placed = plane.kubectl("get", "pod", "fits", "-n", ns, "-o", "jsonpath={.spec.nodeName}").stdout
    assert placed == "batch-a"

    def unschedulable() -> str | None:
        obj = get_or_none(plane, "pod", "too-big", ns) or {}
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
                return str(cond.get("message"))
        return None

    message = wait_for("too-big reported unschedulable", unschedulable, 60)
    assert f"Insufficient {BATCH_CPU}" in message
    assert not (get_or_none(plane, "pod", "too-big", ns) or {}).get("spec", {}).get("nodeName")

    # The Loadline scheduler places batch pods on the same numbers: 3100 batch-cpu are left on batch-a.
    with running_scheduler(plane):
        ours = [
            pod("fits-loadline", ns, priority="koord-batch", requests={BATCH_CPU: "3000", BATCH_MEMORY: "8Gi"}),
            pod("too-big-loadline", ns, priority="koord-batch", requests={BATCH_CPU: "3200", BATCH_MEMORY: "1Gi"}),
        ]
        for obj in ours:
            obj["spec"]["schedulerName"] = SCHEDULER_NAME
        plane.apply(ours)
        plane.kubectl("wait", "-n", ns, "--for=condition=PodScheduled", "pod/fits-loadline", "--timeout=90s", timeout=100)
        placed = plane.kubectl("get", "pod", "fits-loadline", "-n", ns, "-o", "jsonpath={.spec.nodeName}").stdout
        assert placed == "batch-a"

        def ours_unschedulable() -> str | None:
            obj = get_or_none(plane, "pod", "too-big-loadline", ns) or {}
            for cond in (obj.get("status") or {}).get("conditions") or []:
                if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
                    return str(cond.get("message"))
            return None

        assert f"Insufficient {BATCH_CPU}" in wait_for("too-big-loadline reported unschedulable", ours_unschedulable, 60)

    # A change within resourceDiffThreshold (10 %) is not written: web 1600m -> batch-cpu 6000, |6000-6100| < 610.
    write_nodemetric_status(plane, "batch-a", system=("1", "4Gi"), pods=[(ns, "web", "koord-prod", "1600m", "6Gi")])
    time.sleep(5)
    assert batch_of(plane, "batch-a")["allocatable"][BATCH_CPU] == 6100
    # ... one beyond it is: web 4 cores -> 16000 - 6400 - 1000 - 4000 - 1000 = 3600.
    write_nodemetric_status(plane, "batch-a", system=("1", "4Gi"), pods=[(ns, "web", "koord-prod", "4", "6Gi")])
    wait_for("batch-cpu 3600", lambda: batch_of(plane, "batch-a")["capacity"].get(BATCH_CPU) == 3600, 60)
    assert batch_of(plane, "batch-a")["allocatable"][BATCH_CPU] == 3600

    # A NodeMetric older than degradeTimeMinutes (15) removes them from capacity and allocatable.
    write_nodemetric_status(plane, "batch-a", age=timedelta(minutes=20), system=system, pods=measured)
    wait_for(
        "batch resources removed (stale NodeMetric)",
        lambda: batch_of(plane, "batch-a") == {"capacity": {}, "allocatable": {}},
        60,
    )
    assert exported("batch-a") == (None, None)  # dropped in the reconcile that removed them, before the write

    # Fresh again: back. Then colocation disabled for this node by its annotation: removed again.
    write_nodemetric_status(plane, "batch-a", system=system, pods=measured)
    wait_for("batch resources back", lambda: batch_of(plane, "batch-a")["allocatable"] == expected, 60)
    plane.kubectl("annotate", "node", "batch-a", 'node.koordinator.sh/colocation-strategy={"enable": false}')
    wait_for(
        "batch resources removed (colocation disabled)",
        lambda: batch_of(plane, "batch-a") == {"capacity": {}, "allocatable": {}},
        60,
    )

    assert (manager.metric("loadline_manager_object_writes_total", kind="Node", action="update-batch") or 0) >= 3
    assert (manager.metric("loadline_manager_object_writes_total", kind="Node", action="remove-batch") or 0) >= 2
    assert manager.metric("loadline_leader", lease="loadline-manager") == 1
    assert manager.get("/readyz")[0] == 200
    plane.kubectl("delete", "node", "batch-a", "batch-b", "--wait=false")
    wait_for("NodeMetric of a deleted node deleted", lambda: get_or_none(plane, "nodemetric", "batch-a") is None, 60)


def test_nodeslo_per_node_and_a_broken_configmap_keeps_the_last_good_config(plane: ControlPlane) -> None:
    good = {
        "colocation-config": {"enable": True},
        "resource-threshold-config": {
            "clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 55, "cpuSuppressPolicy": "cfsQuota"},
            "nodeStrategies": [
                {"name": "gpu", "nodeSelector": {"matchLabels": {"pool": "gpu"}}, "cpuSuppressThresholdPercent": 45}
            ],
        },
    }
    set_configmap(plane, good)
    make_nodes(
        plane,
        fake_node("slo-general", cpu="8", memory="16Gi", labels={"pool": "general"}),
        fake_node("slo-gpu", cpu="8", memory="16Gi", labels={"pool": "gpu"}),
    )
    manager = start_manager(plane, "slo")
    wait_for(
        "NodeSLOs rendered per node",
        lambda: (threshold_of(plane, "slo-general"), threshold_of(plane, "slo-gpu")) == (55, 45),
        60,
    )
    slo = get_or_none(plane, "nodeslo", "slo-gpu")
    assert slo is not None
    assert slo["spec"]["resourceUsedThresholdWithBE"] == {
        "enable": True, "cpuSuppressThresholdPercent": 45, "cpuSuppressPolicy": "cfsQuota",
        "memoryEvictThresholdPercent": 70, "cpuEvictPolicy": "evictByRealLimit",
    }  # fmt: skip
    # the printer columns show the watermarks a person looks for
    header, row = plane.kubectl("get", "nodeslo", "slo-gpu").stdout.splitlines()
    assert header.split() == ["NAME", "BE", "CPU-SUPPRESS", "SUPPRESS-POLICY", "MEM-EVICT", "AGE"]
    assert row.split()[:5] == ["slo-gpu", "true", "45", "cfsQuota", "70"]
    versions = {n: get_or_none(plane, "nodeslo", n)["metadata"]["resourceVersion"] for n in ("slo-general", "slo-gpu")}  # type: ignore[index]

    # Broken JSON: refused with an event on the ConfigMap and a metric naming the key; NodeSLOs untouched.
    set_configmap(plane, {**good, "resource-threshold-config": '{"clusterStrategy": {"enable": true,'})
    event = wait_for(
        "SLOConfigRejected event (broken JSON)", lambda: events_for(plane, CONFIG_MAP, "SLOConfigRejected"), 60
    )
    assert event[0]["type"] == "Warning"
    assert "resource-threshold-config" in event[0]["note"] and "invalid JSON" in event[0]["note"]
    assert event[0]["regarding"]["kind"] == "ConfigMap"
    assert manager.metric("loadline_manager_config_rejected", key="resource-threshold-config", field="") == 1
    assert manager.metric("loadline_manager_config_valid") == 0

    # Out of range: refused naming the field.
    broken = json.loads(json.dumps(good))
    broken["resource-threshold-config"]["clusterStrategy"]["cpuSuppressThresholdPercent"] = 150
    set_configmap(plane, broken)
    field = "clusterStrategy.cpuSuppressThresholdPercent"
    events = wait_for(
        "SLOConfigRejected event naming the field",
        lambda: [e for e in events_for(plane, CONFIG_MAP, "SLOConfigRejected") if field in e["note"]],
        60,
    )
    assert "150" in events[0]["note"]
    wait_for(
        "metric naming key and field",
        lambda: manager.metric("loadline_manager_config_rejected", key="resource-threshold-config", field=field) == 1,
        30,
    )
    assert manager.metric("loadline_manager_config_rejected", key="resource-threshold-config", field="") == 0
    assert (
        manager.metric("loadline_manager_config_rejections_total", key="resource-threshold-config", field=field) or 0
    ) >= 1
    time.sleep(3)  # give a wrong reconcile the time to happen
    assert {n: get_or_none(plane, "nodeslo", n)["metadata"]["resourceVersion"] for n in versions} == versions  # type: ignore[index]
    assert manager.component.alive() and manager.get("/healthz")[0] == 200

    # A manager (re)started while the ConfigMap is broken has no last good config: it holds off instead of
    # rendering the defaults over everything.
    manager.component.stop()
    restarted = start_manager(plane, "slo-restarted")
    wait_for(
        "not ready without a valid config",
        lambda: restarted.get("/readyz") == (503, "no valid slo-controller-config yet\n"),
        60,
    )
    time.sleep(3)
    assert {n: get_or_none(plane, "nodeslo", n)["metadata"]["resourceVersion"] for n in versions} == versions  # type: ignore[index]

    # Fixed: accepted, rendered, flags cleared.
    fixed = json.loads(json.dumps(good))
    fixed["resource-threshold-config"]["clusterStrategy"]["cpuSuppressThresholdPercent"] = 60
    set_configmap(plane, fixed)
    wait_for(
        "NodeSLOs follow the fixed config",
        lambda: (threshold_of(plane, "slo-general"), threshold_of(plane, "slo-gpu")) == (60, 45),
        60,
    )
    assert restarted.metric("loadline_manager_config_valid") == 1
    assert restarted.metric("loadline_manager_config_rejected", key="resource-threshold-config", field=field) == 0
    assert restarted.get("/readyz")[0] == 200

    # A node that goes takes its NodeSLO and NodeMetric with it.
    plane.kubectl("delete", "node", "slo-gpu")
    wait_for(
        "NodeSLO and NodeMetric of slo-gpu deleted",
        lambda: (
            get_or_none(plane, "nodeslo", "slo-gpu") is None and get_or_none(plane, "nodemetric", "slo-gpu") is None
        ),
        60,
    )
    plane.kubectl("delete", "node", "slo-general", "--wait=false")


def test_two_replicas_the_standby_takes_over_when_the_leader_is_killed(plane: ControlPlane) -> None:
    set_configmap(
        plane,
        {"colocation-config": {"enable": True}, "resource-threshold-config": {"clusterStrategy": {"enable": True}}},
    )
    lease = f"failover-{uuid.uuid4().hex[:6]}"
    timing = ["--lease-duration=6", "--renew-deadline=4", "--retry-period=1", f"--lease-name={lease}"]
    replicas = {r: start_manager(plane, r, *timing) for r in ("replica-a", "replica-b")}

    def holder() -> str | None:
        obj = get_or_none(plane, "lease", lease, NAMESPACE)
        return ((obj or {}).get("spec") or {}).get("holderIdentity")

    leader_identity = wait_for("a leader", holder, 60)
    leader_name = leader_identity.split("_", 1)[0]
    leader = replicas[leader_name]
    standby = next(r for name, r in replicas.items() if name != leader_name)
    make_nodes(plane, fake_node("fo-first", cpu="4", memory="8Gi"))
    wait_for("leader creates NodeSLO fo-first", lambda: get_or_none(plane, "nodeslo", "fo-first"), 60)
    wait_for("leader metric", lambda: leader.metric("loadline_leader", lease=lease) == 1, 30)
    assert standby.metric("loadline_leader", lease=lease) == 0
    assert not standby.metric(
        "loadline_manager_object_writes_total", kind="NodeSLO", action="create"
    )  # only the leader writes
    assert standby.get("/readyz")[0] == 200  # warm caches: ready to take over

    leader.component.kill()  # SIGKILL: no release of the Lease, the standby must wait it out
    killed_at = time.monotonic()
    make_nodes(plane, fake_node("fo-second", cpu="4", memory="8Gi"))
    wait_for(
        "the standby reconciles the new node",
        lambda: get_or_none(plane, "nodeslo", "fo-second") and get_or_none(plane, "nodemetric", "fo-second"),
        90,
        alive=[standby.component],
    )
    took = time.monotonic() - killed_at
    print(f"\nstandby reconciled a new node {took:.1f}s after the leader was killed (lease 6 s)")
    assert holder() is not None and holder().startswith(standby.replica)  # type: ignore[union-attr]
    assert standby.metric("loadline_leader", lease=lease) == 1
    # lease 6 s + retry jitter + the node's creation and readiness; generous for a shared 2-core box
    assert took < 45, took
    plane.kubectl("delete", "node", "fo-first", "fo-second", "--wait=false")


def mid_of(plane: ControlPlane, node: str) -> dict[str, dict[str, int]]:
    """{"capacity": {...}, "allocatable": {...}} mid resources of a node, as integers."""
    obj = get_or_none(plane, "node", node) or {}
    out: dict[str, dict[str, int]] = {}
    for field in ("capacity", "allocatable"):
        values = (obj.get("status") or {}).get(field) or {}
        out[field] = {k: Quantity.parse(v).value() for k, v in values.items() if k in (MID_CPU, MID_MEMORY)}
    return out


def test_mid_resources_from_prod_reclaimable_take_a_koord_mid_pod_and_go_when_stale(
    plane: ControlPlane, test_namespace: str
) -> None:
    """Issue 30: the manager turns the agent's prodReclaimableMetric into kubernetes.io/mid-cpu / mid-memory as
    Koordinator's midresource plugin does; loadline-scheduler places a koord-mid pod on them; a stale NodeMetric
    removes them (the numbers of the formula are in tests/unit/manager/test_mid_formulas.py)."""
    ns = test_namespace
    set_configmap(plane, {"colocation-config": {"enable": True, "midCPUThresholdPercent": 15}})
    make_nodes(
        plane,
        fake_node("mid-a", cpu="16", memory="64Gi", labels={"suite": "mid"}),
        fake_node("mid-b", cpu="16", memory="64Gi", labels={"suite": "mid"}),
    )
    # web's estimate (LoadAware: 85 % of its request, less its 2 measured cores) keeps the node below 65 % CPU
    plane.apply([pod("web", ns, priority="koord-prod", requests={"cpu": "4", "memory": "32Gi"}, node="mid-a")])
    manager = start_manager(plane, "mid")
    wait_for("NodeMetric mid-a created by the manager", lambda: get_or_none(plane, "nodemetric", "mid-a"), 60)

    def report(age: timedelta = timedelta(0)) -> None:
        """The agent's status with its prediction: of web's 4 cores / 32Gi, 3 cores / 16Gi are lent."""
        built = MakeNodeMetric("mid-a").updated(datetime.now(UTC) - age).node_usage("4", "20Gi").system("1", "4Gi")
        status = built.pod(ns, "web", "2", "10Gi", priority="koord-prod").status()
        status["prodReclaimableMetric"] = {"resource": {"resources": {"cpu": "3", "memory": "16Gi"}}}
        patch = json.dumps({"status": status})
        plane.kubectl("patch", "nodemetric", "mid-a", "--subresource=status", "--type=merge", "-p", patch)

    report()
    # cpu: min(min(reclaimable 3000, unused 16000 - 4000), capacity 16000 x 15 %) = 2400 (the threshold caps it);
    # memory: min(reclaimable 16Gi, unused 64Gi - 20Gi) = 16Gi, below the 100 % threshold.
    expected = {MID_CPU: 2400, MID_MEMORY: 16 * GI}
    wait_for(
        "mid resources in capacity and allocatable of mid-a",
        lambda: mid_of(plane, "mid-a") == {"capacity": expected, "allocatable": expected},
        60,
        alive=[manager.component],
    )
    assert mid_of(plane, "mid-b") == {"capacity": {}, "allocatable": {}}  # no NodeMetric status: nothing
    wait_for(
        "per-node mid gauge",
        lambda: manager.metric("loadline_manager_node_mid_allocatable", node="mid-a", resource="cpu") == 2.4,
        30,
    )

    # A koord-mid pod (what a ClusterColocationProfile makes of a plain pod: mid-* requests, priority koord-mid)
    # fits in 2400 mid-cpu; a second one of 1000 does not.
    with running_scheduler(plane):
        mids = [
            pod("mid-fits", ns, priority="koord-mid", requests={MID_CPU: "2000", MID_MEMORY: "8Gi"}),
            pod("mid-too-big", ns, priority="koord-mid", requests={MID_CPU: "1000", MID_MEMORY: "1Gi"}),
        ]
        for obj in mids:
            obj["spec"]["schedulerName"] = SCHEDULER_NAME
            obj["spec"]["nodeSelector"] = {"suite": "mid"}

        def placement(name: str) -> tuple[str, str]:
            """(node, why not) of a pod: the node once bound, else the scheduler's Unschedulable message."""
            obj = get_or_none(plane, "pod", name, ns) or {}
            for cond in (obj.get("status") or {}).get("conditions") or []:
                if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
                    return "", str(cond.get("message"))
            return str((obj.get("spec") or {}).get("nodeName") or ""), ""

        plane.apply(mids[:1])
        wait_for("mid-fits placed or refused", lambda: any(placement("mid-fits")), 90)
        assert placement("mid-fits") == ("mid-a", "")
        plane.apply(mids[1:])
        _, why = wait_for("mid-too-big refused", lambda: placement("mid-too-big")[1] and placement("mid-too-big"), 60)
        assert f"Insufficient {MID_CPU}" in why

    # Stale beyond degradeTimeMinutes (15): removed, as Koordinator's plugin degrades.
    report(age=timedelta(minutes=20))
    wait_for(
        "mid resources removed (stale NodeMetric)",
        lambda: mid_of(plane, "mid-a") == {"capacity": {}, "allocatable": {}},
        60,
        alive=[manager.component],
    )
    plane.kubectl("delete", "node", "mid-a", "mid-b", "--wait=false")
