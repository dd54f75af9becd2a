"""Koordinator v1.8.0's own components beside Loadline on one control plane with kwok nodes (issue 17 §2).

Both ways: koord-scheduler places pods from the NodeMetrics Loadline's agent writes and from the batch resources
Loadline's manager writes; Loadline reads the NodeMetrics and NodeSLOs koord-manager writes; and the two LowNodeLoad
implementations reach the same verdicts on the same NodeMetrics. The plane is this module's own: koord-manager acts
on every Node it sees.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from common.api.constants import BATCH_CPU, BATCH_MEMORY
from common.api.nodemetric import NodeMetric
from common.api.nodeslo import NodeSLO
from common.api.quantity import Quantity
from scheduler_plugin.plugins.loadaware.formulas import combine_scores, estimate_pod, least_used_score
from tests.conftest import module_plane, namespace_in
from tests.harness import koordinator
from tests.harness.controlplane import REPO_ROOT, ControlPlane, fake_node
from tests.harness.koordinator import DEFAULT_LOAD_AWARE_ARGS
from tests.harness.processes import Component, free_port, http_ok, wait_until
from tests.integration.scheduler_support import (
    NM_PATH,
    SCHEDULER_NAME,
    Api,
    events_for,
    placements,
    pod,
    running_scheduler,
    scheduler_config,
    wait_for,
    write_node_metric,
)
from tests.integration.test_descheduler import nm_status, owned_pod, replicaset, wait_pods_ready, write_nodemetric
from tests.objects import MakeNodeMetric

pytestmark = pytest.mark.integration

SUITE = "koordcompat.loadline.test/suite"
GI = 1024**3
LOAD_AWARE_REASON = "node(s) cpu usage exceed threshold"  # Koordinator's own filter message (loadaware.go)

Obj = dict[str, Any]


# --- fixtures --------------------------------------------------------------------------------------------------
own_plane, plane = module_plane(koordinator.install_koord_crds)


@pytest.fixture
def namespace(plane: ControlPlane) -> Iterator[str]:
    yield from namespace_in(plane)


def make_nodes(plane: ControlPlane, prefix: str, count: int, **node_args: Any) -> tuple[str, list[str]]:
    """`count` Ready kwok nodes labelled with a fresh suite value; returns (suite, names)."""
    suite = f"{prefix}-{uuid.uuid4().hex[:6]}"
    names = [f"{suite}-{i}" for i in range(count)]
    plane.apply([fake_node(n, labels={SUITE: suite, **node_args.pop("labels", {})}, **node_args) for n in names])
    plane.kubectl("wait", "--for=condition=Ready", *(f"node/{n}" for n in names), "--timeout=120s", timeout=130)
    return suite, names


def delete_nodes(plane: ControlPlane, names: list[str]) -> None:
    plane.kubectl("delete", "node", *names, "--wait=false", check=False)
    plane.kubectl("delete", "nodemetrics.slo.koordinator.sh", *names, "--ignore-not-found", check=False)


def loadline_only_load_aware() -> Obj:
    """Loadline's scheduler scoring by LoadAwareScheduling alone, with koord-scheduler's args."""
    return scheduler_config({
        "plugins": {"score": {"disabled": [{"name": "*"}], "enabled": [{"name": "LoadAwareScheduling", "weight": 1}]}},
        "pluginConfig": [{"name": "LoadAwareScheduling", "args": {
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "LoadAwareSchedulingArgs", **DEFAULT_LOAD_AWARE_ARGS,
        }}],
    })  # fmt: skip


def scheduled_message(api: Api, namespace: str, name: str) -> str:
    events = events_for(api, namespace, name, "FailedScheduling")
    return str(events[-1].get("note") or "") if events else ""


def run_agent_simulation(plane: ControlPlane, suite: str, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable, "-m", "common", "agent", "--simulate", f"--kubeconfig={plane.kubeconfig}",
        f"--simulate-node-selector={SUITE}={suite}", "--simulate-seed=17", "--simulate-burstiness=0",
        "--simulate-system-cpu=0.2", "--simulate-node-noise=0", "--collect-interval=0.2", "--report-interval=1",
        "--aggregate-duration=2", "--windows=2s", "--aggregation-interval=1",
        *(extra or ("--metrics-enabled=false",)),
    ]  # fmt: skip
    with log.open("w") as out:
        return subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO_ROOT, start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )  # fmt: skip


def stop_process(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    return proc.wait(30)


def node_cpu_usage(plane: ControlPlane, node: str) -> float:
    out = plane.kubectl("get", "nodemetric", node, "-o", "json", check=False)
    if out.returncode != 0:
        return -1.0
    usage = (json.loads(out.stdout).get("status") or {}).get("nodeMetric", {}).get("nodeUsage", {})
    cpu = (usage.get("resources") or {}).get("cpu")
    return Quantity.parse(cpu).as_float() if cpu else -1.0


# --- Loadline writes, Koordinator reads --------------------------------------------------------------------------
def test_a_node_loadlines_agent_reports_hot_is_filtered_by_koord_scheduler_with_its_own_message(
    plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    suite, nodes = make_nodes(plane, "hot", 3, cpu="8", memory="32Gi")
    hot, cool = nodes[0], nodes[1:]
    api = Api(plane)
    # 7 cores of simulated load on an 8-core node: 7.2/8 = 90 % with the system's 0.2, over koord's 65 %
    burner = pod("burner", namespace, cpu="100m", annotations={"loadline.io/simulated-cpu": "7"})
    burner["spec"]["nodeName"] = hot
    api.create(f"/api/v1/namespaces/{namespace}/pods", burner)
    agent = run_agent_simulation(plane, suite, tmp_path / "agent.log")
    try:
        wait_for(
            "the agent's NodeMetrics: the hot node hot, the others cool",
            lambda: node_cpu_usage(plane, hot) > 6.5 and all(0 <= node_cpu_usage(plane, n) < 1 for n in cool),
            90,
        )
        koordinator.start_koord_scheduler(plane)
        with running_scheduler(plane):
            here = {SUITE: suite}
            pinned = {"kubernetes.io/hostname": hot}
            api_pods = [
                pod("koord-pinned", namespace, node_selector=pinned, scheduler="koord-scheduler"),
                pod("koord-free", namespace, node_selector=here, scheduler="koord-scheduler"),
                pod("loadline-pinned", namespace, node_selector=pinned, scheduler=SCHEDULER_NAME),
                pod("loadline-free", namespace, node_selector=here, scheduler=SCHEDULER_NAME),
            ]
            for obj in api_pods:
                api.create(f"/api/v1/namespaces/{namespace}/pods", obj)
            wait_for("the free pods bound", lambda: placements(api, namespace)["koord-free"] != ""
                     and placements(api, namespace)["loadline-free"] != "", 60)  # fmt: skip
            wait_for("both pinned pods reported unschedulable", lambda: scheduled_message(api, namespace, "koord-pinned")
                     != "" and scheduled_message(api, namespace, "loadline-pinned") != "", 60)  # fmt: skip
            koord_says = scheduled_message(api, namespace, "koord-pinned")
            loadline_says = scheduled_message(api, namespace, "loadline-pinned")
            print(f"\nkoord-scheduler: {koord_says}\nloadline:        {loadline_says}")
            assert f"1 {LOAD_AWARE_REASON}" in koord_says
            assert f"1 {LOAD_AWARE_REASON}" in loadline_says
            # the same text, but for the DRA plugin's PostFilter note (Loadline has no DynamicResources plugin)
            assert loadline_says == koord_says.replace("no new claims to deallocate, ", "")
            where = placements(api, namespace)
            assert where["koord-free"] in cool and where["loadline-free"] in cool, where
            assert where["koord-pinned"] == "" and where["loadline-pinned"] == ""
    finally:
        assert stop_process(agent) == 0, (tmp_path / "agent.log").read_text()[-3000:]
        delete_nodes(plane, nodes)


def expected_scores(cpu_milli: list[int], memory: list[int], allocatable: tuple[int, int]) -> list[int]:
    """Loadline's pure LoadAware score of each node for the probe pod (200m / 256Mi, LS), as Loadline's plugin
    computes it: usage + the pod's estimate, least-used per resource, weights cpu 1 memory 1."""
    factors = DEFAULT_LOAD_AWARE_ARGS["estimatedScalingFactors"]
    estimate = estimate_pod({"cpu": 200, "memory": 256 * 1024**2}, {}, factors, "koord-prod")
    used = np.array([[c + estimate["cpu"] for c in cpu_milli], [m + estimate["memory"] for m in memory]], np.int64)
    alloc = np.array([[allocatable[0]] * len(cpu_milli), [allocatable[1]] * len(memory)], np.int64)
    per_resource = least_used_score(used, alloc)
    return [int(s) for s in combine_scores(per_resource, np.array([1, 1], np.int64), 0)]


def generated_cases(count: int, nodes: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """NodeMetric cpu (milli) and memory (bytes) per node, all under the thresholds, with one best node."""
    rng = random.Random(seed)
    cases: list[tuple[list[int], list[int]]] = []
    while len(cases) < count:
        cpu = [rng.randrange(100, 5000, 50) for _ in range(nodes)]
        memory = [rng.randrange(1, 28) * GI for _ in range(nodes)]
        scores = sorted(expected_scores(cpu, memory, (8000, 32 * GI)), reverse=True)
        if scores[0] > scores[1]:
            cases.append((cpu, memory))
    return cases


def place_one(api: Api, namespace: str, name: str, scheduler: str, suite: str) -> str:
    """Where `scheduler` puts a lone probe pod; the pod is deleted again so the next probe sees the same load."""
    api.create(
        f"/api/v1/namespaces/{namespace}/pods",
        pod(name, namespace, cpu="200m", memory="256Mi", node_selector={SUITE: suite}, scheduler=scheduler),
    )
    wait_for(f"{name} bound by {scheduler}", lambda: placements(api, namespace).get(name, "") != "", 60)
    node = placements(api, namespace)[name]
    api.delete_now(f"/api/v1/namespaces/{namespace}/pods/{name}")
    wait_for(f"{name} gone", lambda: name not in placements(api, namespace), 30)
    return node


def test_koord_scheduler_and_loadline_pick_the_same_node_on_generated_cases(
    plane: ControlPlane, namespace: str
) -> None:
    suite, nodes = make_nodes(plane, "order", 4, cpu="8", memory="32Gi")
    api = Api(plane)
    cases = generated_cases(12, len(nodes), seed=1717)
    results: list[tuple[int, list[int], str, str, str]] = []
    try:
        koordinator.start_koord_scheduler(plane, only_load_aware_score=True)
        with running_scheduler(plane, loadline_only_load_aware()):
            for i, (cpu, memory) in enumerate(cases):
                for node, c, m in zip(nodes, cpu, memory, strict=True):
                    write_node_metric(api, node, cpu=f"{c}m", memory=str(m))
                time.sleep(1.0)  # both schedulers' informers have the new NodeMetrics (loopback watch: ms)
                scores = expected_scores(cpu, memory, (8000, 32 * GI))
                best = nodes[scores.index(max(scores))]
                koord = place_one(api, namespace, f"koord-{i}", "koord-scheduler", suite)
                loadline = place_one(api, namespace, f"loadline-{i}", SCHEDULER_NAME, suite)
                results.append((i, scores, best, koord, loadline))
        table = "\n".join(f"case {i}: scores {s} best {b[-1]} koord {k[-1]} loadline {p[-1]}"
                          for i, s, b, k, p in results)  # fmt: skip
        print("\n" + table)
        assert all(k == b for _, _, b, k, _ in results), "koord-scheduler disagrees with the pure score:\n" + table
        assert all(ll == b for _, _, b, _, ll in results), "Loadline's scheduler disagrees:\n" + table
    finally:
        delete_nodes(plane, nodes)
        for node in nodes:
            api.delete(f"{NM_PATH}/{node}")


# --- Loadline's manager -> koord-scheduler ---------------------------------------------------------------------
KOORD_BATCH = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "koord-batch"},
               "value": 5000, "description": "Koordinator's batch band"}  # fmt: skip


def start_loadline_manager(plane: ControlPlane, namespace: str, name: str = "loadline-manager") -> Component:
    """`loadline manager` reading slo-controller-config from `namespace` (Koordinator's: koordinator-system)."""
    port = free_port()
    component = Component(
        name,
        [
            sys.executable, "-m", "manager", f"--kubeconfig={plane.kubeconfig}", f"--namespace={namespace}",
            "--config-map=slo-controller-config", "--bind-address=127.0.0.1", f"--port={port}",
        ],
        plane.root / "logs" / f"{name}.log",
        env={**os.environ, "POD_NAME": name, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    component.start()
    plane.extra.append(component)
    wait_until(f"{name} /healthz", lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 60, alive=[component])
    return component


def set_slo_config(plane: ControlPlane, data: dict[str, Any]) -> None:
    body = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "slo-controller-config", "namespace": koordinator.KOORD_NAMESPACE},
        "data": {key: json.dumps(value) for key, value in data.items()},
    }  # fmt: skip
    plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(body))


def get_obj(plane: ControlPlane, kind: str, name: str, namespace: str | None = None) -> Obj | None:
    argv = [
        "get",
        kind,
        name,
        "-o",
        "json",
        "--ignore-not-found",
        "--show-managed-fields",
        *(["-n", namespace] if namespace else []),
    ]
    out = plane.kubectl(*argv).stdout.strip()
    return json.loads(out) if out else None


def batch_cpu_of(plane: ControlPlane, node: str) -> int:
    allocatable = ((get_obj(plane, "node", node) or {}).get("status") or {}).get("allocatable") or {}
    return Quantity.parse(allocatable[BATCH_CPU]).value() if BATCH_CPU in allocatable else 0


def batch_pod(name: str, namespace: str, suite: str, batch_cpu: str, batch_memory: str) -> Obj:
    requests = {BATCH_CPU: batch_cpu, BATCH_MEMORY: batch_memory}
    obj = pod(name, namespace, node_selector={SUITE: suite}, scheduler=koordinator.KOORD_SCHEDULER_NAME,
              labels={"koordinator.sh/qosClass": "BE"})  # fmt: skip
    obj["spec"]["priorityClassName"] = "koord-batch"
    obj["spec"]["containers"][0]["resources"] = {"requests": requests, "limits": requests}
    return obj


def unschedulable_message(plane: ControlPlane, namespace: str, name: str) -> str:
    obj = get_obj(plane, "pod", name, namespace) or {}
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
            return str(cond.get("message"))
    return ""


def test_batch_resources_loadlines_manager_writes_let_koord_scheduler_place_a_koord_batch_pod(
    plane: ControlPlane, namespace: str
) -> None:
    suite, nodes = make_nodes(plane, "batch", 2, cpu="16", memory="64Gi")
    with_batch, without = nodes
    plane.apply(KOORD_BATCH)
    set_slo_config(plane, {"colocation-config": {"enable": True}})
    try:
        start_loadline_manager(plane, koordinator.KOORD_NAMESPACE)
        wait_for("the manager's NodeMetric", lambda: get_obj(plane, "nodemetric", with_batch) is not None, 60)
        # What the agent writes: 16 cores, 1 core system, 3 cores of prod pods; the other node has no status yet
        status = MakeNodeMetric(with_batch).updated(time.time()).node_usage("4", "20Gi").system("1", "4Gi").status()
        plane.kubectl("patch", "nodemetric", with_batch, "--subresource=status", "--type=merge",
                      "-p", json.dumps({"status": status}))  # fmt: skip
        wait_for("batch resources written by Loadline's manager", lambda: batch_cpu_of(plane, with_batch) > 0, 60)
        available = batch_cpu_of(plane, with_batch)
        assert batch_cpu_of(plane, without) == 0

        koordinator.start_koord_scheduler(plane)
        plane.apply([
            batch_pod("fits", namespace, suite, str(available // 2), "4Gi"),
            batch_pod("too-big", namespace, suite, str(available + 1000), "1Gi"),
        ])  # fmt: skip
        wait_for("fits bound by koord-scheduler", lambda: placements(Api(plane), namespace).get("fits", "") != "", 60)
        assert placements(Api(plane), namespace)["fits"] == with_batch
        wait_for("too-big unschedulable", lambda: unschedulable_message(plane, namespace, "too-big") != "", 60)
        message = unschedulable_message(plane, namespace, "too-big")
        print(f"\nbatch-cpu {available} on {with_batch}; too-big: {message}")
        assert f"2 Insufficient {BATCH_CPU}" in message
    finally:
        delete_nodes(plane, nodes)


# --- Koordinator writes, Loadline reads --------------------------------------------------------------------------
def malformed_total(url: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "loadline_malformed_objects_total"
    )


def test_koord_managers_nodemetrics_and_nodeslos_are_read_by_loadline_without_a_malformed_object(
    plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    suite, nodes = make_nodes(plane, "kmgr", 2, cpu="8", memory="32Gi")
    set_slo_config(plane, {
        "colocation-config": {"enable": True},
        "resource-threshold-config": {"clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 60}},
    })  # fmt: skip
    agent: subprocess.Popen[bytes] | None = None
    try:
        koord = koordinator.start_koord_manager(plane, controllers=("nodemetric", "nodeslo"))
        for kind in ("nodemetric", "nodeslo"):
            wait_for(f"koord-manager's {kind}s", lambda kind=kind: all(get_obj(plane, kind, n) for n in nodes), 60)
        for node in nodes:
            # the API server admitted them against Loadline's CRDs; Loadline's models read them
            metric, slo = get_obj(plane, "nodemetric", node), get_obj(plane, "nodeslo", node)
            assert metric is not None and slo is not None
            assert "koordinator-manager" in json.dumps(metric["metadata"].get("managedFields", []))
            NodeMetric.from_wire(metric)
            # what the agent's QoS enforcer reads from its node's NodeSLO (agent/qos/enforcer.py)
            thresholds = NodeSLO.from_wire(slo).thresholds()
            assert (thresholds.enable, thresholds.cpu_suppress_threshold_percent) == (True, 60)

        agent_port = free_port()
        agent = run_agent_simulation(plane, suite, tmp_path / "agent.log",
                                     f"--port={agent_port}", "--bind-address=127.0.0.1")  # fmt: skip
        wait_for("the agent's status in koord-manager's NodeMetrics",
                 lambda: all(node_cpu_usage(plane, n) >= 0 for n in nodes), 90)  # fmt: skip
        with running_scheduler(plane) as scheduler:
            api = Api(plane)
            api.create(f"/api/v1/namespaces/{namespace}/pods", pod("probe", namespace, node_selector={SUITE: suite}))
            wait_for("probe bound by Loadline", lambda: placements(api, namespace).get("probe", "") != "", 60)
            _, port = start_loadline_descheduler(plane, suite, tmp_path, dry_run=True)
            wait_for(
                "two descheduling rounds",
                lambda: descheduler_metric(port, "loadline_descheduler_rounds_total") >= 2,
                60,
            )
            counts = {
                "scheduler": malformed_total(f"{scheduler.url}/metrics"),
                "descheduler": malformed_total(f"http://127.0.0.1:{port}/metrics"),
                "agent": malformed_total(f"http://127.0.0.1:{agent_port}/metrics"),
            }
        print(f"\nloadline_malformed_objects_total: {counts}")
        assert counts == {"scheduler": 0, "descheduler": 0, "agent": 0}
        assert koord.alive()
    finally:
        if agent is not None:
            assert stop_process(agent) == 0, (tmp_path / "agent.log").read_text()[-3000:]
        delete_nodes(plane, nodes)
        plane.kubectl("delete", "nodeslo", *nodes, "--ignore-not-found", check=False)


def test_one_slo_controller_config_gives_the_same_nodeslo_thresholds_from_both_managers(plane: ControlPlane) -> None:
    _, nodes = make_nodes(plane, "slo", 1, cpu="8", memory="16Gi", labels={"pool": "gpu"})
    _, general = make_nodes(plane, "slo", 1, cpu="8", memory="16Gi", labels={"pool": "general"})
    nodes += general
    set_slo_config(plane, {
        "colocation-config": {"enable": True},
        "resource-threshold-config": {
            "clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 55, "cpuSuppressPolicy": "cfsQuota",
                                "memoryEvictThresholdPercent": 75},
            "nodeStrategies": [{"name": "gpu", "nodeSelector": {"matchLabels": {"pool": "gpu"}},
                                "cpuSuppressThresholdPercent": 45}],
        },
    })  # fmt: skip
    try:
        with koordinator.start_koord_manager(plane, controllers=("nodeslo",)):
            wait_for("koord-manager's NodeSLOs", lambda: all(get_obj(plane, "nodeslo", n) for n in nodes), 60)
            koord = {n: (get_obj(plane, "nodeslo", n) or {})["spec"] for n in nodes}
        plane.kubectl("delete", "nodeslo", *nodes)
        manager = start_loadline_manager(plane, koordinator.KOORD_NAMESPACE, name="loadline-manager-slo")
        wait_for("Loadline's NodeSLOs", lambda: all(get_obj(plane, "nodeslo", n) for n in nodes), 60)
        ours = {n: (get_obj(plane, "nodeslo", n) or {})["spec"] for n in nodes}
        manager.stop()
        for node in nodes:
            print(f"\n{node}\n  koord:    {json.dumps(koord[node], sort_keys=True)}\n"
                  f"  loadline: {json.dumps(ours[node], sort_keys=True)}")  # fmt: skip
        assert koord[nodes[0]]["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 45
        assert koord[nodes[1]]["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 55
        for node in nodes:
            # Every strategy a node agent acts on, field for field. Koordinator writes `resourceQOSStrategy: {}`
            # and `extensions: {"Object": {}}` where the ConfigMap has no resource-qos-config, and Loadline its
            # explicit all-disabled defaults and nothing: koordlet merges either onto the same defaults.
            for key in ("resourceUsedThresholdWithBE", "cpuBurstStrategy", "systemStrategy", "hostApplications"):
                assert ours[node].get(key) == koord[node].get(key), (node, key)
            assert koord[node]["resourceQOSStrategy"] == {}
    finally:
        delete_nodes(plane, nodes)
        plane.kubectl("delete", "nodeslo", *nodes, "--ignore-not-found", check=False)


# --- the two LowNodeLoad implementations -------------------------------------------------------------------------
def start_loadline_descheduler(
    plane: ControlPlane, suite: str, tmp_path: Path, *, dry_run: bool, low: Obj | None = None,
    high: Obj | None = None, name: str = "loadline-descheduler",
) -> tuple[Component, int]:  # fmt: skip
    """`loadline descheduler` (LowNodeLoad) on this suite's nodes; returns it and its metrics port."""
    args = {
        "apiVersion": "descheduler/v1alpha2", "kind": "LowNodeLoadArgs", "deschedulingInterval": "1s",
        "dryRun": dry_run, "nodeSelector": {"matchLabels": {SUITE: suite}},
        "lowThresholds": low or {"cpu": 45, "memory": 55}, "highThresholds": high or {"cpu": 75, "memory": 80},
        "anomalyCondition": {"consecutiveAbnormalities": 1},
    }  # fmt: skip
    config = tmp_path / f"{name}.yaml"
    config.write_text(yaml.safe_dump(args))
    port = free_port()
    component = Component(
        name,
        [
            sys.executable, "-m", "common", "descheduler", "--config", str(config), "--kubeconfig",
            str(plane.kubeconfig), "--bind-address", "127.0.0.1", "--port", str(port), "--no-leader-elect",
        ],
        plane.root / "logs" / f"{name}.log",
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    component.start()
    plane.extra.append(component)
    wait_until(f"{name} /readyz", lambda: http_ok(f"http://127.0.0.1:{port}/readyz"), 90, alive=[component])
    return component, port


def descheduler_metric(port: int, name: str, **labels: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    wanted = set(labels.items())
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and wanted <= set(s.labels.items())
    )


# Ten-core nodes, LowNodeLoad's chart thresholds (low cpu 45 / memory 55, high cpu 75 / memory 80). Usage is
# systemUsage (500m, 2Gi) + the pods' podsMetric, as koord-descheduler computes it; every pod its own workload
# of ten expected replicas (koord's default limiter allows one migration per workload per 5 minutes).
#   hot-a  500 + 3000 + 2500 + 2000 + 1000 = 9000m  90 %  high
#   hot-b  500 + 4000 + 2000 + 1800        = 8300m  83 %  high
#   mid    500 + 5000                      = 5500m  55 %  neither
#   cold-a 500 + 1000                      = 1500m  15 %  low
#   cold-b 500                             =  500m   5 %  low
VERDICT_LOAD = {"hot-a": [3000, 2500, 2000, 1000], "hot-b": [4000, 2000, 1800], "mid": [5000], "cold-a": [1000],
                "cold-b": []}  # fmt: skip
KOORD_NODE_VERDICT = re.compile(r'"Node\'s utilization" node="([^"]+)" result information="([^"]+)"')
KOORD_DRY_RUN = re.compile(r'"Evict pod in dry run mode" pod="([^"]+)" node="([^"]+)"')


def verdict_scenario(plane: ControlPlane, namespace: str) -> tuple[str, dict[str, str]]:
    """The nodes, their pods (bound, each owned by its own ReplicaSet) and NodeMetrics; returns (suite, role->node)."""
    suite, names = make_nodes(plane, "verdict", len(VERDICT_LOAD), cpu="10", memory="40Gi")
    nodes = dict(zip(VERDICT_LOAD, names, strict=True))
    pods: list[Obj] = []
    for role, usages in VERDICT_LOAD.items():
        for i, cpu in enumerate(usages):
            name = f"{role}-{i}"
            # koord-descheduler never evicts the pod of a workload expecting one replica (MigrationController's
            # expectedReplicas check); Loadline has no such check, see docs/koordinator.md (disagreements, 4)
            rs = (name, replicaset(plane, namespace, name, replicas=10))
            pods.append(owned_pod(namespace, name, rs, node=nodes[role], cpu=f"{cpu}m", memory="1Gi",
                                  node_selector={SUITE: suite}))  # fmt: skip
    plane.apply(pods)
    wait_pods_ready(plane, namespace, [p["metadata"]["name"] for p in pods])
    for role, usages in VERDICT_LOAD.items():
        pod_usage = [(namespace, f"{role}-{i}", cpu, GI) for i, cpu in enumerate(usages)]
        write_nodemetric(plane, nodes[role], nm_status(pod_usage))
    return suite, nodes


def test_loadline_and_koord_descheduler_reach_the_same_verdicts_on_the_same_nodemetrics(
    plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    suite, nodes = verdict_scenario(plane, namespace)
    role_of = {node: role for role, node in nodes.items()}
    try:
        koord = koordinator.start_koord_descheduler(
            plane, interval_seconds=2, verbosity=4,
            low_node_load_args={"dryRun": True, "nodeSelector": {"matchLabels": {SUITE: suite}}},
        )  # fmt: skip
        wait_for("two dry-run rounds of koord-descheduler", lambda: koord.log_path.read_text().count(
            "Evict pod in dry run mode") >= 2 and len(KOORD_NODE_VERDICT.findall(koord.log_path.read_text()))
            >= 2 * len(nodes), 90)  # fmt: skip
        koord.stop()
        text = koord.log_path.read_text()
        koord_class = {role_of[n]: why for n, why in KOORD_NODE_VERDICT.findall(text) if n in role_of}
        rounds = [
            {(pod.split("/")[-1], role_of[node]) for pod, node in KOORD_DRY_RUN.findall(chunk) if node in role_of}
            for chunk in text.split('"try to process nodePool"')[1:]
            if "Successfully processed nodePool" in chunk
        ]
        print(
            "\nkoord rounds:",
            rounds,
            "\n"
            + "\n".join(
                line[:300]
                for line in text.splitlines()
                if "dry run" in line or "Evicting pods from node" in line or "fails the following" in line
            ),
        )
        assert rounds, text[-3000:]
        koord_evicts = rounds[0]

        _, port = start_loadline_descheduler(plane, suite, tmp_path, dry_run=True)
        wait_for("two Loadline rounds", lambda: descheduler_metric(port, "loadline_descheduler_rounds_total") >= 2, 60)
        ours = {role: descheduler_metric(port, "loadline_descheduler_nodes", **{"class": role})
                for role in ("low", "both_low", "high", "normal")}  # fmt: skip
        log = (plane.root / "logs" / "loadline-descheduler.log").read_text()
        our_evicts = {
            (m.group(1).split("/")[-1], role_of[m.group(2)])
            for m in re.finditer(r"dry run: would evict pod.*?pod=(\S+).*?node=(\S+)", log)
            if m.group(2) in role_of
        }
        print(f"\nkoord classes: {koord_class}\nkoord evicts:  {sorted(koord_evicts)}\n"
              f"loadline classes: {ours}\nloadline evicts:  {sorted(our_evicts)}")  # fmt: skip
        high = {r for r, why in koord_class.items() if why.startswith("higher")}
        low = {r for r, why in koord_class.items() if why.startswith(("lower", "both lower"))}
        assert (high, low) == ({"hot-a", "hot-b"}, {"cold-a", "cold-b"}), koord_class
        assert ours["high"] == len(high) and ours["low"] + ours["both_low"] == len(low), ours
        # the same source nodes, the same number of evictions from each (the pods removed must bring each node
        # under its high threshold); which pod goes first is not compared: koord-descheduler's MigrationController
        # filter holds back pods that Loadline may pick (see docs/koordinator.md, disagreements)
        assert Counter(node for _, node in our_evicts) == Counter(node for _, node in koord_evicts) == {
            "hot-a": 1, "hot-b": 1}  # fmt: skip
    finally:
        delete_nodes(plane, list(nodes.values()))
