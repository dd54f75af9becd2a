"""One cluster with this machine as a real node and Loadline installed from its Helm chart (issue 10).

etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok (two fake nodes beside the real one)
+ containerd/runc/CNI bridge/kubelet (tests/harness/realnode), the Loadline image imported into containerd,
and `helm install` of deploy/helm/loadline with short intervals. Built once per session by the
`real_cluster` fixture (tests/integration/conftest.py); torn down, host state included, at the end.
`burner_pod` is the workload pod the real-node tests load this machine with.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from common.api.quantity import Quantity
from tests.harness.controlplane import REPO_ROOT, ControlPlane, fake_node
from tests.harness.processes import Component, free_port
from tests.harness.realnode import REAL_NODE_LABEL, RealNode

CHART = REPO_ROOT / "deploy" / "helm" / "loadline"
NAMESPACE = "loadline-system"
RELEASE = "loadline"
COMPONENTS = ("agent", "manager", "scheduler", "descheduler")
REPORT_INTERVAL = 3.0  # agent NodeMetric writes, seconds
AGGREGATE_SECONDS = 15.0  # nodeUsage/podsMetric window
LEASE = {"duration": 6, "renew": 4, "retry": 1}
# Thresholds the descheduler never reaches unless a test lowers them (it would evict other tests' pods).
IDLE_HIGH_THRESHOLDS = {"cpu": 100, "memory": 100}
LOW_THRESHOLDS = {"cpu": 20, "memory": 30}


def chart_values(image: str, agent_port: int, prediction_dir: Path | None = None) -> dict[str, Any]:
    repository, tag = image.rsplit(":", 1)
    lease = [f"--lease-duration={LEASE['duration']}", f"--renew-deadline={LEASE['renew']}",
             f"--retry-period={LEASE['retry']}"]  # fmt: skip
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "sloControllerConfig": {
            "data": {
                # The whole node may be reclaimed for batch: other work on this shared machine counts as system
                # usage and would otherwise leave no batch-cpu at all.
                "colocation-config": json.dumps(
                    {
                        "enable": True,
                        "cpuReclaimThresholdPercent": 100,
                        "memoryReclaimThresholdPercent": 100,
                        "metricAggregateDurationSeconds": int(AGGREGATE_SECONDS),
                    }
                ),
                "resource-threshold-config": json.dumps({"clusterStrategy": {"enable": False}}),
            }
        },
        "agent": {
            "port": agent_port,
            "args": [
                "--collect-interval-seconds=1",
                f"--report-interval-seconds={REPORT_INTERVAL:g}",
                f"--aggregate-duration-seconds={AGGREGATE_SECONDS:g}",
                "--aggregation-interval-seconds=2",
                "--publish-qps=5",
                "--publish-burst=5",
                # Keep these intervals: the manager writes Koordinator's 60 s report interval into the NodeMetric
                # spec, which the agent would otherwise follow (clamped to >= 30 s).
                "--follow-nodemetric-spec=false",
            ],
            # the peak models' checkpoint under the node's own root (removed with it), not the host's /var/lib
            "prediction": {"checkpointHostPath": str(prediction_dir or "")},
        },
        "manager": {"args": lease},
        "scheduler": {
            "args": lease,
            # Other work saturates this shared machine at times; the default 65 % CPU filter would then reject its
            # only real node and nothing could be placed.
            "pluginConfig": [
                {
                    "name": "LoadAwareScheduling",
                    "args": {
                        "filterExpiredNodeMetrics": False,
                        "usageThresholds": {"cpu": 0, "memory": 0},  # 0: no usage filter
                        "resourceWeights": {"cpu": 1, "memory": 1},
                    },
                }
            ],
        },
        "descheduler": {
            "args": lease,
            "lowNodeLoad": {
                "deschedulingInterval": "2s",
                "lowThresholds": LOW_THRESHOLDS,
                "highThresholds": IDLE_HIGH_THRESHOLDS,
                "evictableNamespaces": {"exclude": ["kube-system", NAMESPACE]},
                "anomalyCondition": {"consecutiveAbnormalities": 1},
                "nodeMetricExpirationSeconds": 600,  # the kwok node's NodeMetric is written once by a test
            },
        },
    }


# Burns CORES of CPU (self-paced on its own CPU time, so the average holds under contention it can win) while
# holding MIB MiB of touched anonymous memory.
BURNER = r"""
import os, time
cores, mib = float(os.environ["CORES"]), int(os.environ["MIB"])
held = bytearray(mib * 1024 * 1024)
for i in range(0, len(held), 4096):
    held[i] = 1
print("holding", mib, "MiB, burning", cores, "cores", flush=True)
cpu0, t0 = time.process_time(), time.monotonic()
while True:
    if time.process_time() - cpu0 < cores * (time.monotonic() - t0):
        for _ in range(20000):
            pass
    else:
        time.sleep(0.002)
"""


# A job that wants more than it was given: PROCS processes spinning flat out at once, and, once /tmp/grow exists
# (`kubectl exec <pod> -- touch /tmp/grow`), MIB MiB of touched memory taken 16 MiB at a time (~320 MiB/s).
HOG = r"""
import os, time
procs, mib = int(os.environ["PROCS"]), int(os.environ["MIB"])
for _ in range(procs):
    if os.fork() == 0:
        while True:
            pass
print("spinning", procs, "processes", flush=True)
while not os.path.exists("/tmp/grow"):
    time.sleep(0.1)
held = []
for step in range(mib // 16):
    block = bytearray(16 * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    held.append(block)
    print("holding", (step + 1) * 16, "MiB", flush=True)
    time.sleep(0.05)
time.sleep(3600)
"""


def burner_pod(name: str, namespace: str, *, cores: float, mib: int, node: str | None = None,
               labels: dict[str, str] | None = None, priority_class: str | None = None,
               resources: dict[str, Any] | None = None, scheduler: str | None = None,
               image: str) -> dict[str, Any]:  # fmt: skip
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "burn",
                "image": image,
                "imagePullPolicy": "Never",
                "command": ["python3", "-c", BURNER],
                "env": [{"name": "CORES", "value": str(cores)}, {"name": "MIB", "value": str(mib)}],
                "resources": resources or {},
            }
        ],
        "nodeSelector": {REAL_NODE_LABEL: "true"},
    }
    if node:
        spec["nodeName"] = node
    if priority_class:
        spec["priorityClassName"] = priority_class
    if scheduler:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": spec,
    }


@dataclass
class RealCluster:
    plane: ControlPlane
    node: RealNode
    kwok_nodes: list[str]
    image: str
    values_file: Path
    agent_port: int
    timings: dict[str, float] = field(default_factory=dict)
    installed: bool = False

    # --- helm ------------------------------------------------------------------------------------
    def helm(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.plane.binary("helm")), f"--kubeconfig={self.plane.kubeconfig}", *args],
            capture_output=True, text=True, check=False, timeout=timeout,
            env={"HOME": str(self.plane.root / "helm-home"), "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
        return proc

    def install(self) -> float:
        """`helm install` with the test values; returns the seconds until every Loadline pod was Ready."""
        started = time.monotonic()
        self.helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace", "--skip-crds",
                  "-f", str(self.values_file))  # fmt: skip
        self.installed = True
        self.wait_all_ready()
        return time.monotonic() - started

    def upgrade(self, *sets: str, values: dict[str, Any] | None = None, reset: bool = False) -> None:
        """`helm upgrade --reuse-values` with `--set`s and/or a values file (lists replace the old ones whole).

        `reset`: start from the session's values instead of the release's last ones, the only way to take a key
        out again (under --reuse-values a null is overwritten by the old value)."""
        args = ["--reset-values", "-f", str(self.values_file)] if reset else ["--reuse-values"]
        args += [a for s in sets for a in ("--set", s)]
        if values is not None:
            extra = self.plane.root / f"upgrade-values-{time.monotonic_ns()}.yaml"
            extra.write_text(yaml.safe_dump(values))
            args += ["-f", str(extra)]
        self.helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--skip-crds", *args)

    def test_values(self) -> dict[str, Any]:
        """The values the session installed with (chart_values)."""
        values: dict[str, Any] = yaml.safe_load(self.values_file.read_text())
        return values

    def uninstall(self) -> None:
        self.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=120s")
        self.installed = False

    # --- pods ------------------------------------------------------------------------------------
    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.plane.kubectl(*args, "-o", "json").stdout)

    def pods(self, component: str) -> list[dict[str, Any]]:
        selector = f"app.kubernetes.io/part-of=loadline,app.kubernetes.io/component={component}"
        items: list[dict[str, Any]] = self.kubectl_json("get", "pods", "-n", NAMESPACE, "-l", selector)["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def wait_all_ready(self, timeout: float = 240) -> None:
        for component in COMPONENTS:
            kind = "daemonset" if component == "agent" else "deployment"
            self.plane.kubectl("rollout", "status", f"{kind}/loadline-{component}", "-n", NAMESPACE,
                               f"--timeout={int(timeout)}s", timeout=timeout + 10)  # fmt: skip

    def lease_holder(self, name: str) -> str:
        lease = self.kubectl_json("get", "lease", name, "-n", NAMESPACE)
        return str(lease["spec"].get("holderIdentity") or "")

    def nodemetric(self, node: str | None = None) -> dict[str, Any]:
        result: dict[str, Any] = self.kubectl_json("get", "nodemetric", node or self.node.name)
        return result

    def logs(self, component: str, tail: int = 60) -> str:
        """The last lines of every pod of a component (`kubectl logs`), to put into a failure message."""
        proc = self.plane.kubectl("logs", "-n", NAMESPACE, "-l", f"app.kubernetes.io/component={component}",
                                  f"--tail={tail}", "--prefix", "--max-log-requests=10", check=False)  # fmt: skip
        return f"----- {component} pods (kubectl logs --tail={tail}) -----\n{proc.stdout}{proc.stderr}"

    def log_report(self) -> str:
        pods = self.plane.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout
        logs = []
        for component in COMPONENTS:
            logs.append(self.logs(component, tail=30))
        return "\n".join([self.plane.log_report(), self.node.log_report(), pods, *logs])


def start_real_cluster(image_archive: Path, image: str, *, pods_cpu_weight: int = 102400) -> RealCluster:
    """Everything up to a Ready real node with the image imported; `install()` is the caller's."""
    timings: dict[str, float] = {}
    started = time.monotonic()
    plane = ControlPlane.start(real_nodes=True)
    components: list[Component] = []
    node: RealNode | None = None
    try:
        components.append(plane.start_controller_manager())
        components.append(plane.start_kube_scheduler())
        components.append(plane.start_kwok())
        kwok_names = ["kwok-beside-real-0", "kwok-beside-real-1"]
        plane.apply([fake_node(name, cpu="32", memory="128Gi") for name in kwok_names])
        timings["control plane"] = time.monotonic() - started
        # This machine is shared (other test runs, builds): kubepods gets a large CPU weight so the test pods
        # burn what they are told to (as tests/integration/test_qos_enforcement.py does for its tree).
        node = RealNode.start(plane, images=[image_archive], pods_cpu_weight=pods_cpu_weight)
        timings["real node"] = node.startup_seconds
        agent_port = free_port()
        values_file = plane.root / "loadline-test-values.yaml"
        values_file.write_text(yaml.safe_dump(chart_values(image, agent_port, node.root / "agent-prediction")))
        plane.kubectl("wait", "--for=condition=Ready", "node", *kwok_names, "--timeout=60s")
        return RealCluster(plane, node, kwok_names, image, values_file, agent_port, timings)
    except BaseException:
        if node is not None:
            node.stop()
        plane.stop()
        raise


def stop_real_cluster(cluster: RealCluster) -> None:
    """Uninstall (if a test has not), stop kube-controller-manager first so nothing recreates pods while the
    node drains, then the node (and its host state), then the control plane."""
    try:
        if cluster.installed:
            cluster.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=60s", check=False)
        for component in cluster.plane.extra:
            if component.name == "kube-controller-manager":
                component.stop()
    finally:
        try:
            cluster.node.stop()
        finally:
            cluster.plane.stop()


# --- helpers shared by the real-node test files ---
def wait_for(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.5,
             context: Callable[[], str] | None = None) -> Any:  # fmt: skip
    """`check()` once truthy; else an AssertionError naming `what`, the last result and `context()` (logs)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(interval)
    details = f"\n{context()}" if context else ""
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r}){details}")


def update_time(nodemetric: dict[str, Any]) -> float:
    stamp = (nodemetric.get("status") or {}).get("updateTime")
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else 0.0


def cpu_cores(resources: dict[str, Any]) -> float:
    return Quantity.parse(resources["cpu"]).milli_value() / 1000


def idle_nodemetric(cluster: RealCluster, node: str) -> None:
    """A fresh NodeMetric saying a kwok node is idle: somewhere low for the descheduler to move pods to."""
    cluster.plane.apply({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": node}})
    now = datetime.now().astimezone().isoformat(timespec="seconds")
    idle = {"resources": {"cpu": "100m", "memory": "1Gi"}}
    cluster.plane.kubectl("patch", "nodemetric", node, "--subresource=status", "--type=merge", "-p", json.dumps({
        "status": {"updateTime": now, "nodeMetric": {"nodeUsage": idle, "systemUsage": idle}, "podsMetric": []}}))  # fmt: skip


def set_descheduler_thresholds(cluster: RealCluster, low: dict[str, int], high: dict[str, int],
                               node_selector: dict[str, Any] | None = None) -> None:  # fmt: skip
    """helm upgrade from the session's values with LowNodeLoad's thresholds and node selector (None: every node);
    the config checksum rolls the Deployments."""
    selector = {"nodeSelector": node_selector} if node_selector is not None else {}
    cluster.upgrade(values={"descheduler": {"lowNodeLoad": {"lowThresholds": low, "highThresholds": high, **selector}}},
                    reset=True)  # fmt: skip
    cluster.wait_all_ready()
