"""`loadline agent --simulate` against a real kube-apiserver with 50 kwok nodes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from common.api.nodemetric import NodeMetric
from common.api.quantity import Quantity
from tests.harness.controlplane import ControlPlane
from tests.objects import for_api_server, pod

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
AGGREGATIONS = ("avg", "p50", "p90", "p95", "p99")


def warm(obj: dict[str, Any]) -> bool:
    windows = ((obj.get("status") or {}).get("nodeMetric") or {}).get("aggregatedNodeUsages") or []
    return [w.get("duration") for w in windows] == ["2s", "4s"] and all(
        set((w["usage"].get(a) or {}).get("resources") or {}) == {"cpu", "memory"}
        for w in windows
        for a in AGGREGATIONS
    )


def test_simulate_publishes_a_valid_nodemetric_for_each_of_50_kwok_nodes(
    cluster: ControlPlane, kwok_nodes: Callable[..., list[str]], namespace: str, tmp_path: Path
) -> None:
    suite = uuid.uuid4().hex[:6]
    nodes = kwok_nodes(50, prefix=f"sim{suite}", cpu="16", memory="64Gi", labels={"loadline-test": suite})
    simulated = {
        "loadline.io/simulated-cpu": "1500m",
        "loadline.io/simulated-memory": "512Mi",
        "loadline.io/simulated-burstiness": "0.1",
    }
    bound: dict[str, Any] = {"namespace": namespace, "image": "fake", "scheduler_name": None}
    cluster.apply([
        for_api_server(pod("web", "1", "256Mi", node_name=nodes[0], annotations=simulated, **bound)),  # LS / prod
        for_api_server(pod("batch", "2", "1Gi", node_name=nodes[0], labels={"koordinator.sh/qosClass": "BE"}, **bound)),
        for_api_server(pod("elsewhere", "1", "1Gi", node_name=nodes[1], **bound)),
    ])  # fmt: skip
    log_path = tmp_path / "simulate.log"
    argv = [
        sys.executable,
        "-m",
        "common",
        "agent",
        "--simulate",
        f"--kubeconfig={cluster.kubeconfig}",
        f"--simulate-node-selector=loadline-test={suite}",
        "--simulate-seed=7",
        "--simulate-usage-fraction=0.5",
        "--simulate-burstiness=0",
        "--collect-interval=0.2",
        "--report-interval=1",
        "--aggregate-duration=2",
        "--windows=2s,4s",
        "--aggregation-interval=1",
        "--publish-qps=10",
        "--publish-burst=3",
        "--metrics-enabled=false",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        objects: dict[str, dict[str, Any]] = {}
        while time.monotonic() < deadline:
            assert proc.poll() is None, log_path.read_text()
            listed = json.loads(cluster.kubectl("get", "nodemetrics", "-o", "json").stdout)["items"]
            objects = {o["metadata"]["name"]: o for o in listed if o["metadata"]["name"] in nodes}
            if len(objects) == 50 and all(warm(o) for o in objects.values()):
                break
            time.sleep(1)
        else:
            warm_count = sum(warm(o) for o in objects.values())
            pytest.fail(f"{len(objects)} NodeMetrics, {warm_count} warm after 90 s\n{log_path.read_text()[-3000:]}")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(30)
    assert code == 0, log_path.read_text()[-3000:]

    for name, obj in objects.items():
        model = NodeMetric.from_wire(obj)  # the API server validated them against the CRD; they read back
        assert model.status is not None and model.status.node_metric is not None, name
        usage = model.status.node_metric.node_usage
        assert usage is not None and usage.resources is not None
        assert 0 < usage.resources["cpu"].as_float() <= 16.0, name
    busy = NodeMetric.from_wire(objects[nodes[0]])
    assert busy.status is not None and busy.status.pods_metric is not None
    pods = {p.name: p for p in busy.status.pods_metric}
    assert set(pods) == {"batch", "web"}  # sorted by namespace then name, only this node's pods
    web, batch = pods["web"], pods["batch"]
    assert web.pod_usage is not None and web.pod_usage.resources is not None
    assert web.pod_usage.resources["cpu"].as_float() == pytest.approx(1.5, rel=0.2)  # the declared profile
    assert web.pod_usage.resources["memory"].as_float() == pytest.approx(512 * 2**20, rel=0.1)
    assert (web.priority, web.qos) == ("koord-prod", "LS")  # Koordinator's defaults for a Burstable pod
    assert batch.pod_usage is not None and batch.pod_usage.resources is not None
    assert batch.pod_usage.resources["cpu"] == Quantity.parse("1")  # half the request, steady
    assert (batch.priority, batch.qos) == ("koord-batch", "BE")
    node_cpu = busy.status.node_metric.node_usage.resources["cpu"].as_float()  # type: ignore[union-attr,index]
    assert node_cpu >= 2.5  # the pods plus the node's own system usage
    other = NodeMetric.from_wire(objects[nodes[1]])
    assert [p.name for p in other.status.pods_metric or []] == ["elsewhere"]  # type: ignore[union-attr]
    log_text = log_path.read_text()
    assert "simulating 50 nodes" in log_text
    assert "Traceback" not in log_text
