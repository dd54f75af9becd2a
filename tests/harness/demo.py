"""`make demo`: a local cluster with the whole of Loadline running on it.

etcd + kube-apiserver + kwok (fake nodes) from the harness, then Loadline's own processes
against it: the manager (NodeMetrics, batch resources, NodeSLOs), the agent in --simulate
mode (NodeMetrics for every kwok node from the pods' declared usage), the scheduler and
the LowNodeLoad descheduler. A small workload is scheduled by Loadline so there is
something to look at. Everything keeps running until `make cluster-down`.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from tests.harness.controlplane import REPO_ROOT, ControlPlane
from tests.harness.processes import Component, free_port

NAMESPACE = "loadline-system"
SLO_CONFIG = {
    "colocation-config": json.dumps(
        {"enable": True, "metricReportIntervalSeconds": 10, "metricAggregateDurationSeconds": 60}
    ),
    "resource-threshold-config": json.dumps({"clusterStrategy": {"enable": True}}),
}
DESCHEDULER_ARGS = {
    "deschedulingInterval": "30s",
    "lowThresholds": {"cpu": 30, "memory": 40},
    "highThresholds": {"cpu": 70, "memory": 80},
    "evictableNamespaces": {"exclude": ["kube-system", NAMESPACE]},
    "anomalyCondition": {"consecutiveAbnormalities": 3},
    "nodeMetricExpirationSeconds": 120,
}


def _loadline(plane: ControlPlane, name: str, *args: str) -> Component:
    component = Component(
        f"loadline-{name}",
        [sys.executable, "-m", "common.cli", name, f"--kubeconfig={plane.kubeconfig}", *args],
        plane.root / "logs" / f"loadline-{name}.log",
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
    )
    component.start()
    plane.extra.append(component)
    return component


def _workload(count: int) -> list[dict[str, Any]]:
    pods = []
    for i in range(count):
        cpu = ["500m", "1", "2"][i % 3]
        pods.append({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"web-{i}",
                "namespace": "default",
                "labels": {"app": "web"},
                # the simulated agent draws this pod's usage around these means
                "annotations": {"loadline.io/simulated-cpu": str(0.2 + (i % 5) * 0.4), "loadline.io/simulated-memory": "1Gi"},
            },
            "spec": {
                "schedulerName": "loadline-scheduler",
                "containers": [{"name": "web", "image": "demo", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
            },
        })  # fmt: skip
    return pods


def start_loadline(plane: ControlPlane, config_dir: Path) -> dict[str, int]:
    """Start Loadline's processes against the plane; returns their HTTP ports by name."""
    config_dir.mkdir(parents=True, exist_ok=True)
    plane.kubectl("create", "namespace", NAMESPACE, check=False)
    plane.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "slo-controller-config", "namespace": NAMESPACE},
                 "data": SLO_CONFIG})  # fmt: skip
    descheduler_config = config_dir / "lownodeload.yaml"
    descheduler_config.write_text(yaml.safe_dump(DESCHEDULER_ARGS))
    ports = {name: free_port() for name in ("manager", "agent", "scheduler", "descheduler")}
    _loadline(plane, "manager", f"--namespace={NAMESPACE}", f"--port={ports['manager']}")
    _loadline(plane, "agent", "--simulate", f"--metrics-port={ports['agent']}", "--collect-interval-seconds=1",
              "--report-interval-seconds=10", "--aggregate-duration-seconds=60", "--aggregate-windows=1m,5m,10m")  # fmt: skip
    _loadline(plane, "scheduler", f"--port={ports['scheduler']}", f"--lease-namespace={NAMESPACE}")
    _loadline(plane, "descheduler", f"--config={descheduler_config}", f"--port={ports['descheduler']}",
              f"--lease-namespace={NAMESPACE}")  # fmt: skip
    return ports


def seed_workload(plane: ControlPlane, count: int = 12) -> None:
    plane.apply(_workload(count))


def wait_for_nodemetrics(plane: ControlPlane, nodes: int, timeout: float = 90) -> int:
    deadline = time.monotonic() + timeout
    reported = 0
    while time.monotonic() < deadline:
        items = json.loads(plane.kubectl("get", "nodemetrics", "-o", "json").stdout)["items"]
        reported = sum(1 for item in items if (item.get("status") or {}).get("updateTime"))
        if reported >= nodes:
            break
        time.sleep(2)
    return reported


def wait_for_scheduled(plane: ControlPlane, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = json.loads(plane.kubectl("get", "pods", "-n", "default", "-o", "json").stdout)["items"]
        if pods and all((p.get("spec") or {}).get("nodeName") for p in pods):
            return
        time.sleep(1)
