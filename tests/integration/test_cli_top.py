"""`loadline top` against a real kube-apiserver: kwok nodes, NodeMetrics with a status, batch pods; the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.harness.controlplane import ControlPlane
from tests.objects import rfc3339

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def status(cpu: str, memory: str, p95_cpu: str) -> dict[str, Any]:
    usage = {"resources": {"cpu": cpu, "memory": memory}}
    return {
        "updateTime": rfc3339(),
        "nodeMetric": {
            "nodeUsage": usage,
            "systemUsage": usage,
            "aggregatedNodeUsages": [
                {"duration": "5m0s", "usage": {"p95": {"resources": {"cpu": p95_cpu, "memory": memory}}}}
            ],
        },
    }


def test_top_lists_nodes_by_real_load(
    cluster: ControlPlane, namespace: str, kwok_nodes: Callable[..., list[str]]
) -> None:
    cold, hot = kwok_nodes(
        2,
        cpu="8",
        memory="32Gi",
        extra_allocatable={"kubernetes.io/batch-cpu": "4000", "kubernetes.io/batch-memory": "8Gi"},
    )
    for name, st in ((cold, status("1", "4Gi", "1500m")), (hot, status("7", "8Gi", "7500m"))):
        cluster.apply(
            {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name}, "spec": {}}
        )
        cluster.kubectl(
            "patch", "nodemetric", name, "--subresource=status", "--type=merge", "-p", json.dumps({"status": st})
        )
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "batch", "namespace": namespace},
            "spec": {
                "nodeName": cold,
                "containers": [
                    {
                        "name": "c",
                        "image": "fake",
                        "resources": {
                            "requests": {"kubernetes.io/batch-cpu": "1500", "kubernetes.io/batch-memory": "1Gi"},
                            "limits": {"kubernetes.io/batch-cpu": "1500", "kubernetes.io/batch-memory": "1Gi"},
                        },
                    }
                ],
            },
        }
    )
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["PYTHONPATH"] = str(REPO)

    def top(*args: str) -> subprocess.CompletedProcess[str]:
        """The real CLI, as a user runs it."""
        command = [sys.executable, "-m", "common", "top", "--kubeconfig", str(cluster.kubeconfig), *args]
        done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        return done

    result = top("-o", "json", "--sort-by", "cpu")
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows[hot]["load_class"] == "hot" and rows[cold]["load_class"] == "low"
    assert rows[hot]["cpu_cores"] == 7.0 and rows[hot]["p95_cpu_cores"] == 7.5
    assert rows[cold]["batch_cpu_allocatable_cores"] == 4.0 and rows[cold]["batch_cpu_used_cores"] == 1.5
    assert rows[cold]["batch_memory_used_bytes"] == 1024**3
    order = [r["name"] for r in json.loads(result.stdout) if r["name"] in (cold, hot)]
    assert order == [hot, cold]  # --sort-by cpu: largest first
    table = top()
    line = next(line for line in table.stdout.splitlines() if line.startswith(hot + " "))
    assert line.split()[1:6] == ["7.00", "88%", "8.0GiB", "25%", "7.50"] and line.split()[-1] == "hot"
