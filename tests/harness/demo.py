"""`make demo`: Loadline installed with its Helm chart on a local cluster whose node is this machine.

A detached keeper process (`python -m tests.harness.demo serve`) owns the cluster: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, kwok with fake nodes, and this machine as a real node
(tests/harness/realnode: containerd, runc, CNI bridge, kubelet) with Loadline's image imported. It stays up
until `make cluster-down` sends it SIGTERM, then drains the node and puts the host back as it found it.
The simulated agent that writes NodeMetrics for the kwok nodes is a host process of the keeper.

The foreground process builds the image, starts the keeper, `helm install`s deploy/helm/loadline (every
Loadline pod runs on the real node from the image) and plays a short story, printing what happens. Then it counts,
from the API server's audit log, each Loadline component's requests and those refused (403): the chart's RBAC
must be sufficient as well as minimal. Its Prometheus (tests/harness/demo_monitoring.py) runs in the keeper, on
loopback. tests/integration/test_demo_story.py plays the same story on the test session's real cluster and asserts
that count, runs every command the demo prints and every Prometheus query it prints.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from common.api.quantity import Quantity
from tests.harness import build
from tests.harness.controlplane import REPO_ROOT, ControlPlane, fake_node, read_audit_log
from tests.harness.demo_monitoring import QUERIES, DemoPrometheus, graph_url, loopback_port
from tests.harness.processes import Component, free_port

STATE_DIR = build.cache_root() / "cluster"
STATE_FILE = STATE_DIR / "state.json"
KEEPER_LOG = STATE_DIR / "keeper.log"
CHART = REPO_ROOT / "deploy" / "helm" / "loadline"
NAMESPACE = "loadline-system"
RELEASE = "loadline"
COMPONENTS = ("agent", "manager", "scheduler", "descheduler")
KWOK_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
REAL_NODE_LABEL = "loadline.dev/real-node"
KWOK_CPU = 16
# LowNodeLoad balances the kwok nodes only, whose load the story sets. This machine's load is whatever the host
# runs (a build, a test suite): with it in the pool, a busy host made the real node "hot" and the story's batch pods,
# the first victims there, were evicted before they ran.
DESCHEDULER = {
    "nodeSelector": {"matchLabels": {"type": "kwok"}},
    "deschedulingInterval": "5s",
    "lowThresholds": {"cpu": 30, "memory": 40},
    "highThresholds": {"cpu": 70, "memory": 80},
    "evictableNamespaces": {"exclude": ["kube-system", NAMESPACE]},
    "anomalyCondition": {"consecutiveAbnormalities": 2},
    "nodeMetricExpirationSeconds": 120,
}


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --- Loadline's calls in the API server's audit log -----------------------------------------------
ACCOUNT_PREFIX = f"system:serviceaccount:{NAMESPACE}:"


def received(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))


def loadline_requests(events: Sequence[dict[str, Any]], since: datetime | None = None) -> list[dict[str, Any]]:
    """The audited requests of Loadline's ServiceAccounts (every account of its namespace: one per component),
    received at or after `since`."""
    return [e for e in events if e["user"]["username"].startswith(ACCOUNT_PREFIX)
            and (since is None or received(e) >= since)]  # fmt: skip


@dataclass
class Calls:
    """Loadline's requests per component (its ServiceAccount's name without `loadline-`), and the refused ones."""

    requests: dict[str, int] = field(default_factory=dict)
    refused: dict[str, dict[str, int]] = field(default_factory=dict)  # component -> "VERB /path" -> times

    @classmethod
    def tally(cls, requests: Sequence[dict[str, Any]]) -> Calls:
        calls = cls({c: 0 for c in COMPONENTS})
        for e in requests:
            component = e["user"]["username"].removeprefix(ACCOUNT_PREFIX).removeprefix("loadline-")
            calls.requests[component] = calls.requests.get(component, 0) + 1
            if e.get("responseStatus", {}).get("code") == 403:
                call = f"{e['verb']} {e['requestURI'].split('?')[0]}"
                refused = calls.refused.setdefault(component, {})
                refused[call] = refused.get(call, 0) + 1
        return calls

    def refused_calls(self) -> list[str]:
        return [f"{component}: {call} ({n}x)" for component, calls in sorted(self.refused.items())
                for call, n in sorted(calls.items())]  # fmt: skip

    def silent(self) -> list[str]:
        """Components that made no request at all (an audit without them proves nothing about their RBAC)."""
        return [c for c, n in self.requests.items() if n == 0]

    def ok(self) -> bool:
        return not self.refused and not self.silent()

    def lines(self) -> list[str]:
        marks = {True: "✓", False: "✗"}
        lines = []
        for component, n in self.requests.items():
            refused = sum(self.refused.get(component, {}).values())
            lines.append(f"      {marks[n > 0 and not refused]} {component:<12} {n:>6} requests, "
                         f"{refused} refused (403)")  # fmt: skip
        lines += [f"        refused: {call}" for call in self.refused_calls()]
        return lines


# --- the keeper (detached) ------------------------------------------------------------------------
def serve(image_archive: Path, nodes: int) -> int:
    """Start the cluster, write STATE_FILE, and keep everything running until SIGTERM."""

    def _exit(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)
    signal.signal(signal.SIGINT, _exit)
    from tests.harness.realnode import RealNode

    root = STATE_DIR / "root"
    shutil.rmtree(root, ignore_errors=True)
    plane = ControlPlane.start(root, keep_root=True, real_nodes=True, audit=True)
    node: RealNode | None = None
    prometheus: DemoPrometheus | None = None
    try:
        plane.start_controller_manager()
        plane.start_kube_scheduler()
        plane.start_kwok()
        kwok = [f"kwok-node-{i}" for i in range(nodes)]
        plane.apply([fake_node(n, cpu=str(KWOK_CPU), memory="64Gi", taints=[KWOK_TAINT]) for n in kwok])
        _say(f"[keeper] control plane and {nodes} kwok nodes up; starting the real node")
        node = RealNode.start(plane, images=[image_archive])
        _say(f"[keeper] real node {node.name} Ready in {node.startup_seconds:.1f}s")
        simulated_port = free_port()
        plane.extra.append(start_simulated_agent(plane, simulated_port))
        # Prometheus scrapes every Loadline pod once helm installs them (tests/harness/demo_monitoring.py).
        prometheus = DemoPrometheus(plane, NAMESPACE, static_agents=[simulated_port], port=loopback_port())
        prometheus.__enter__()
        _say(f"[keeper] Prometheus on {prometheus.url}")
        state = cluster_state(plane, STATE_DIR / "bin", node.name, kwok)
        state["keeper"] = os.getpid()
        state["prometheus"] = prometheus.url
        STATE_FILE.write_text(json.dumps(state))
        while True:
            time.sleep(3600)
    finally:
        _say("[keeper] stopping: Prometheus, draining the real node, then the control plane")
        if prometheus is not None:
            prometheus.__exit__(None, None, None)
        try:
            if node is not None:
                node.stop()
                kinds = sorted({item.split()[0] for item in node.restored})
                _say(f"[keeper] host swept: {len(node.restored)} items ({', '.join(kinds) or 'nothing'})")
                if node.leftovers:
                    _say(f"[keeper] LEFT BEHIND: {'; '.join(node.leftovers)}")
        finally:
            plane.stop()
            STATE_FILE.unlink(missing_ok=True)
            _say("[keeper] stopped")


def start_simulated_agent(plane: ControlPlane, port: int = 0) -> Component:
    """`loadline agent --simulate`, a host process writing the kwok nodes' NodeMetrics from the simulated usage
    the story's pods declare (the real node's comes from the agent pod), its /metrics on loopback at `port` (0: a
    free one). The caller stops it.
    Its own intervals, not the NodeMetric spec's: the manager writes Koordinator's 60 s report interval and
    window there, after which a hot node shows in its NodeMetric only a minute or two late."""
    simulated = Component(
        "loadline-agent-simulate",
        [sys.executable, "-m", "common.cli", "agent", "--simulate", f"--kubeconfig={plane.kubeconfig}",
         "--bind-address=127.0.0.1", f"--port={port or free_port()}", "--collect-interval-seconds=1",
         "--report-interval-seconds=5",
         "--aggregate-duration-seconds=30", "--follow-nodemetric-spec=false", "--simulate-burstiness=0.05"],
        plane.root / "logs" / "loadline-agent-simulate.log",
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    simulated.start()
    return simulated


def cluster_state(plane: ControlPlane, bindir: Path, node: str, kwok: list[str]) -> dict[str, Any]:
    """What `Demo` needs of a cluster: kubeconfig, a directory with kubectl, helm and loadline, the node names,
    the audit log; written to STATE_FILE by the keeper, built from the session's real cluster by the test."""
    bindir.mkdir(exist_ok=True)
    for name, target in (("kubectl", plane.binary("kubectl")), ("helm", plane.binary("helm")),
                         ("loadline", Path(sys.executable).parent / "loadline")):  # fmt: skip
        link = bindir / name
        link.unlink(missing_ok=True)
        link.symlink_to(target)
    return {"kubeconfig": str(plane.kubeconfig), "bin": str(bindir), "node": node, "kwok": kwok,
            "logs": str(plane.root / "logs"), "audit_log": str(plane.audit_log or "")}  # fmt: skip


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def running_state() -> dict[str, Any] | None:
    if not STATE_FILE.exists():
        return None
    state: dict[str, Any] = json.loads(STATE_FILE.read_text())
    return state if "keeper" in state and pid_alive(int(state["keeper"])) else None


def env_lines(state: dict[str, Any]) -> str:
    return f"export KUBECONFIG={state['kubeconfig']} PATH={state['bin']}:$PATH"


def stop_keeper(state: dict[str, Any], timeout: float = 180) -> None:
    pid = int(state["keeper"])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    if pid_alive(pid):
        _say(f"the keeper (pid {pid}) did not stop in {timeout:.0f}s; see {KEEPER_LOG}")
        return
    tail = [line for line in KEEPER_LOG.read_text(errors="replace").splitlines() if "[keeper]" in line]
    for line in tail[-3:]:
        _say(line)


# --- the foreground: image, keeper, helm, story ---------------------------------------------------
# The README's first colocation example: pods created in a namespace labelled koordinator.sh/enable-colocation=true
# become batch pods on the overcommitted kubernetes.io/batch-cpu (docs/colocation-profile.md).
BATCH_PROFILE: dict[str, Any] = {
    "apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
    "metadata": {"name": "batch-jobs"},
    "spec": {"namespaceSelector": {"matchLabels": {"koordinator.sh/enable-colocation": "true"}},
             "qosClass": "BE", "priorityClassName": "koord-batch", "schedulerName": "loadline-scheduler"},
}  # fmt: skip


@dataclass(frozen=True)
class TourCommand:
    argv: tuple[str, ...]
    comment: str


def tour_lines(commands: Sequence[TourCommand]) -> list[str]:
    """As printed: the shell command, then its comment in one column."""
    shown = [shlex.join(c.argv) for c in commands]
    width = max(len(line) for line in shown)
    return [f"{line:<{width}}  # {c.comment}" for line, c in zip(shown, commands, strict=True)]


class Demo:
    def __init__(self, state: dict[str, Any], namespace: str = "default", batch_namespace: str = "") -> None:
        """`namespace`: where the story's workloads go (the test plays it in a namespace of its own);
        `batch_namespace`: where its batch job goes, a namespace the story labels for BATCH_PROFILE
        (default: analytics, or <namespace>-analytics)."""
        self.state = state
        self.env = dict(os.environ, KUBECONFIG=state["kubeconfig"], PATH=f"{state['bin']}:{os.environ['PATH']}")
        self.node = str(state["node"])
        self.kwok: list[str] = list(state["kwok"])
        self.namespace = namespace
        self.batch_namespace = batch_namespace or ("analytics" if namespace == "default" else f"{namespace}-analytics")

    def run(self, *argv: str, check: bool = True, timeout: float = 120) -> str:
        proc = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed:\n{proc.stdout}{proc.stderr}")
        return proc.stdout

    def kubectl(self, *args: str, check: bool = True, timeout: float = 120) -> str:
        return self.run("kubectl", *args, check=check, timeout=timeout)

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def apply(self, objects: list[dict[str, Any]]) -> None:
        proc = subprocess.run(["kubectl", "apply", "-f", "-"], env=self.env, input=yaml.safe_dump_all(objects),
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"kubectl apply failed:\n{proc.stdout}{proc.stderr}")

    def wait(self, what: str, check: Callable[[], bool], timeout: float, interval: float = 1.0) -> bool:
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired, KeyError, ValueError):
                if check():
                    _say(f"      ✓ {what} ({time.monotonic() - started:.0f}s)")
                    return True
            time.sleep(interval)
        _say(f"      ✗ {what}: not within {timeout:.0f}s")
        return False

    def pods(self, selector: str, namespace: str = "") -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get("pods", "-n", namespace or self.namespace, "-l", selector)["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    # --- install ---------------------------------------------------------------------------------
    def install(self, image: str) -> float:
        repository, tag = image.rsplit(":", 1)
        values = {
            "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
            "sloControllerConfig": {"data": {
                "colocation-config": json.dumps({"enable": True, "cpuReclaimThresholdPercent": 100,
                                                 "memoryReclaimThresholdPercent": 100,
                                                 "metricAggregateDurationSeconds": 30}),
                "resource-threshold-config": json.dumps({"clusterStrategy": {"enable": True}}),
            }},
            "agent": {"port": free_port(), "args": ["--report-interval-seconds=5",
                                                         "--aggregate-duration-seconds=30"]},
            "descheduler": {"lowNodeLoad": DESCHEDULER},
        }  # fmt: skip
        values_file = STATE_DIR / "values.yaml"
        values_file.write_text(yaml.safe_dump(values))
        started = time.monotonic()
        self.run("helm", "upgrade", "--install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace",
                 "-f", str(values_file))  # fmt: skip
        for component in COMPONENTS:
            kind = "daemonset" if component == "agent" else "deployment"
            self.kubectl("rollout", "status", f"{kind}/loadline-{component}", "-n", NAMESPACE, "--timeout=300s",
                         timeout=320)  # fmt: skip
        return time.monotonic() - started

    # --- the story -------------------------------------------------------------------------------
    def _pod(self, name: str, *, cpu: str, sim_cpu: float, node: str, labels: dict[str, str] | None = None,
             priority: str = "koord-prod") -> dict[str, Any]:  # fmt: skip
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace, "labels": labels or {"app": name},
                         "annotations": {"loadline.io/simulated-cpu": str(sim_cpu),
                                         "loadline.io/simulated-memory": "1Gi"}},
            "spec": {"schedulerName": "loadline-scheduler", "priorityClassName": priority,
                     "nodeSelector": {"type": "kwok", **({"kubernetes.io/hostname": node} if node else {})},
                     "tolerations": [KWOK_TOLERATION],
                     "containers": [{"name": "c", "image": "simulated",
                                     "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
        }  # fmt: skip

    def _deployment(self, name: str, replicas: int, *, cpu: str, sim_cpu: float, node: str = "") -> dict[str, Any]:
        template = self._pod(name, cpu=cpu, sim_cpu=sim_cpu, node=node)
        return {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {k: v for k, v in template["metadata"].items() if k != "name"},
                                  "spec": template["spec"]}},
        }  # fmt: skip

    def cpus(self, node: str) -> int:
        """A node's allocatable CPUs (the demo's kwok nodes have KWOK_CPU, the test session's more)."""
        return int(Quantity.parse(self.get("node", node)["status"]["allocatable"]["cpu"]).value())

    def batch_cpu(self, node: str) -> int:
        obj = self.get("node", node)
        # a quantity: the API server reads 2000 (milli-cores) back as "2k"
        return int(Quantity.parse(obj["status"].get("allocatable", {}).get("kubernetes.io/batch-cpu", "0")).value())

    def story(self, image: str) -> dict[str, bool]:
        seen: dict[str, bool] = {}
        _say("\n[1/4] A service arrives: deployment web, 3 replicas of koord-prod on the kwok nodes, "
             "placed by loadline-scheduler")  # fmt: skip
        self.apply([self._deployment("web", 3, cpu="2", sim_cpu=1.0)])
        seen["service"] = self.wait("web: 3 pods Running", lambda: sum(
            p["status"].get("phase") == "Running" for p in self.pods("app=web")) == 3, 90)  # fmt: skip

        _say(f"\n[2/4] A batch job arrives: a plain Job (cpu and memory, nothing of colocation in it) in namespace "
             f"{self.batch_namespace}, which ClusterColocationProfile batch-jobs selects: its pods become koord-batch "
             "pods on kubernetes.io/batch-cpu, the overcommitted CPU the manager computed from each node's measured "
             "idle CPU (the real node preferred)")  # fmt: skip
        # Awaited on a kwok node, whose usage is simulated: the real node's batch-cpu depends on how busy this
        # machine is (0 on a saturated one).
        seen["batch-cpu"] = self.wait("the manager put kubernetes.io/batch-cpu on the nodes",
                                      lambda: self.batch_cpu(self.kwok[0]) > 0, 120)  # fmt: skip
        for node in [self.node, *self.kwok]:
            _say(f"      {node}: batch-cpu {self.batch_cpu(node)} (milli-cores) allocatable")
        prefer_real = {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {
            "matchExpressions": [{"key": REAL_NODE_LABEL, "operator": "In", "values": ["true"]}]}}]}  # fmt: skip
        namespace = {"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": self.batch_namespace, "labels": {"koordinator.sh/enable-colocation": "true"}}}
        self.apply([namespace, BATCH_PROFILE])
        self.wait(f"namespace {self.batch_namespace} has its default ServiceAccount", lambda: bool(self.get(
            "serviceaccount", "default", "-n", self.batch_namespace)), 30, interval=0.5)  # fmt: skip
        # What a user writes for any cluster: no scheduler, no priority class, no QoS label, no batch resources.
        job = {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "batch-report", "namespace": self.batch_namespace},
            "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 0, "template": {
                "metadata": {"labels": {"app": "batch-report"}, "annotations": {"loadline.io/simulated-cpu": "0.5"}},
                "spec": {"restartPolicy": "Never", "tolerations": [KWOK_TOLERATION],
                         "affinity": {"nodeAffinity": prefer_real},
                         "containers": [{"name": "work", "image": image, "imagePullPolicy": "Never",
                                         "command": ["python3", "-c", "import time\nend = time.time() + 20\n"
                                                     "while time.time() < end: pass\nprint('report done')"],
                                         "resources": {"requests": {"cpu": "500m", "memory": "256Mi"},
                                                       "limits": {"cpu": "500m", "memory": "256Mi"}}}]}}},
        }  # fmt: skip
        self.apply([job])
        seen["batch"] = self.wait("batch-report: 2 pods Running on batch-cpu", lambda: sum(
            p["status"].get("phase") in ("Running", "Succeeded") and "kubernetes.io/batch-cpu" in
            p["spec"]["containers"][0]["resources"].get("requests", {})
            for p in self.pods("app=batch-report", self.batch_namespace)) == 2, 120)  # fmt: skip
        if not seen["batch"]:  # why, from the events: a pod evicted, refused by the kubelet, never created
            _say(self.kubectl("get", "events", "-n", self.batch_namespace, "--sort-by=.lastTimestamp", check=False))
        for p in self.pods("app=batch-report", self.batch_namespace):
            where = "this machine, for real" if p["spec"].get("nodeName") == self.node else "a kwok node (simulated)"
            requests = p["spec"]["containers"][0]["resources"].get("requests", {})
            _say(f"      {p['metadata']['name']} on {p['spec'].get('nodeName')}: {where}; by profile "
                 f"{(p['metadata'].get('annotations') or {}).get('loadline.io/colocation-profile', 'none')}: "
                 f"{p['spec'].get('priorityClassName')}, {p['spec'].get('schedulerName')}, requests {requests}")
        # The real node takes batch pods only when this machine has idle CPU: on a busy machine its batch-cpu
        # is near 0 and LoadAware keeps pods off it (usage over 65 %).

        _say("\n[3/4] A gang job (3 pods × 8 CPU, all or nothing) arrives while warm-up pods fill the kwok nodes")
        # Each warm-up pod leaves 6 CPUs beside the web pods (3 × 2 CPUs at most): no room for an 8-CPU gang pod.
        self.apply(
            [
                self._pod(f"warmup-{i}", cpu=str(self.cpus(n) - 6), sim_cpu=2.0, node=n, labels={"role": "warmup"})
                for i, n in enumerate(self.kwok)
            ]
        )
        self.wait("warm-up pods Running", lambda: sum(
            p["status"].get("phase") == "Running" for p in self.pods("role=warmup")) == len(self.kwok), 60)  # fmt: skip
        gang_labels = {"app": "train", "pod-group.scheduling.sigs.k8s.io/name": "train",
                       "pod-group.scheduling.sigs.k8s.io/min-available": "3"}  # fmt: skip
        self.apply([self._pod(f"train-{i}", cpu="8", sim_cpu=1.0, node="", labels=gang_labels) for i in range(3)])
        time.sleep(10)
        bound = [p for p in self.pods("app=train") if p["spec"].get("nodeName")]
        seen["gang-waits"] = not bound
        _say(f"      {'✓' if not bound else '✗'} after 10s: {len(bound)} of 3 gang pods bound (no room for all 3)")
        _say("      the warm-up finishes: deleting the warm-up pods")
        self.kubectl("delete", "pods", "-n", self.namespace, "-l", "role=warmup", "--wait=false")
        seen["gang"] = self.wait("train: all 3 gang pods bound", lambda: sum(
            bool(p["spec"].get("nodeName")) for p in self.pods("app=train")) == 3, 90)  # fmt: skip
        times = sorted(c["lastTransitionTime"] for p in self.pods("app=train")
                       for c in p["status"].get("conditions", []) if c["type"] == "PodScheduled")  # fmt: skip
        if times:
            _say(f"      bound at {times[0]} … {times[-1]}")

        hot = self.kwok[-1]
        cpus = self.cpus(hot)
        _say(f"\n[4/4] {hot} runs hot: a cruncher deployment there uses ~{cpus * 0.85:.0f} of {cpus} CPUs; "
             f"LowNodeLoad drains it")  # fmt: skip
        # Two cruncher pods start pinned to the hot node; a ReplicaSet without the pin then adopts them, so a
        # pod the descheduler evicts comes back wherever loadline-scheduler finds room.
        crunch = cpus * 0.85 / 2
        self.apply(
            [
                self._pod(f"cruncher-{i}", cpu="1", sim_cpu=crunch, node=hot, labels={"app": "cruncher"})
                for i in range(2)
            ]
        )
        self.wait(f"cruncher: 2 pods Running on {hot}", lambda: sum(
            p["status"].get("phase") == "Running" for p in self.pods("app=cruncher")) == 2, 90)  # fmt: skip
        rs = self._deployment("cruncher", 2, cpu="1", sim_cpu=crunch)
        rs["kind"] = "ReplicaSet"
        self.apply([rs])
        seen["hot"] = self.wait(f"NodeMetric of {hot} above the 70% high threshold", lambda: self.node_cpu(hot) > 0.7,
                                90)  # fmt: skip
        seen["drained"] = self.wait(f"the descheduler evicted a pod from {hot}", lambda: self.evicted_from(hot), 180)
        return seen

    def tour(self) -> list[TourCommand]:
        """The commands `make demo` prints to look around after its story (the README's tour shows the same);
        tests/integration/test_demo_story.py runs each after the story and wants output from it."""
        ns, batch = self.namespace, self.batch_namespace
        return [
            TourCommand(("kubectl", "get", "nm"), "NodeMetrics: the real node's from the agent pod, kwok nodes' simulated"),
            TourCommand(("loadline", "top"), "nodes by measured load: usage, p95, batch-cpu, low/normal/hot"),
            TourCommand(("kubectl", "get", "node", self.node, "-o", "jsonpath={.status.allocatable}"),
                        "the batch-cpu and batch-memory the manager wrote"),
            TourCommand(("kubectl", "get", "pods", "-n", NAMESPACE, "-o", "wide"),
                        "Loadline, from its chart, on the real node"),
            TourCommand(("kubectl", "get", "ccp"), "ClusterColocationProfiles: which pods become batch pods"),
            TourCommand(("kubectl", "get", "pods", "-n", batch, "-o", "yaml"),
                        "the plain Job's pods as the profile made them"),
            TourCommand(("kubectl", "get", "events", "-n", ns, "--field-selector", "reason=Descheduled"),
                        "what LowNodeLoad evicted, and why"),
            TourCommand(("loadline", "explain", f"{ns}/train-0"), "why the gang pod went where it went"),
            TourCommand(("helm", "list", "-n", NAMESPACE), "the release"),
        ]  # fmt: skip

    def audit(self, since: datetime | None = None) -> Calls:
        """Print each Loadline component's requests in the API server's audit log (from `since` on) and which
        were refused (403): what the chart's RBAC lacks shows up here; what it grants beyond need, in
        tests/integration/test_security_rbac.py's tables."""
        log = Path(self.state["audit_log"])
        calls = Calls.tally(loadline_requests(read_audit_log(log), since))
        _say(f"\n[audit] Loadline's requests to the API server, by ServiceAccount (audit log {log})")
        for line in calls.lines():
            _say(line)
        return calls

    def scheduler_url(self) -> str:
        """The leading scheduler pod's explain endpoint (pod IPs on the CNI bridge are reachable from the host)."""
        with contextlib.suppress(RuntimeError, KeyError):
            leader = str(self.get("lease", "loadline-scheduler", "-n", NAMESPACE)["spec"]["holderIdentity"])
            for pod in self.pods("app.kubernetes.io/component=scheduler", NAMESPACE):
                if leader.startswith(pod["metadata"]["name"]) and pod["status"].get("podIP"):
                    return f"http://{pod['status']['podIP']}:10251"
        return ""

    def node_cpu(self, node: str) -> float:
        usage = str(self.get("nodemetric", node)["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"])
        cores = float(usage[:-1]) / 1000 if usage.endswith("m") else float(usage)
        return cores / self.cpus(node)

    def evicted_from(self, node: str) -> bool:
        """A Descheduled event (Koordinator's, on the evicted pod) naming the node."""
        events = self.get("events", "-n", self.namespace, "--field-selector", "reason=Descheduled")["items"]
        hits = [e for e in events if f'node "{node}"' in (e.get("message") or "")]
        for e in hits:
            _say(f"      {e['involvedObject']['name']}: {e['message']}")
        return bool(hits)


def up(nodes: int) -> int:
    from tests.harness.image import ImageError, ensure_image

    if (state := running_state()) is not None:
        _say("a demo cluster is already running (make cluster-down stops it)")
        print(env_lines(state))
        return 0
    started = time.monotonic()
    _say("==> [1/4] Loadline's image (make image)")
    try:
        image = ensure_image()
    except ImageError as exc:
        _say(f"error: {exc}")
        return 1
    _say(f"    {image.name}: {image.size / 2**20:.0f} MiB, {image.archive}")
    _say("==> [2/4] cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, "
         "and this machine as a real node (containerd, runc, CNI bridge, kubelet)")  # fmt: skip
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    STATE_FILE.unlink(missing_ok=True)
    with KEEPER_LOG.open("w") as log:
        keeper = subprocess.Popen(
            [sys.executable, "-m", "tests.harness.demo", "serve", "--image-archive", str(image.archive),
             "--nodes", str(nodes)],
            cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    while running_state() is None:
        if keeper.poll() is not None:
            _say(f"the cluster did not start (log {KEEPER_LOG}):\n" + "\n".join(
                KEEPER_LOG.read_text(errors="replace").splitlines()[-40:]))  # fmt: skip
            return 1
        time.sleep(1)
    state = running_state()
    assert state is not None
    _say(f"    cluster up in {time.monotonic() - started:.0f}s (keeper pid {keeper.pid}, log {KEEPER_LOG})")
    demo = Demo(state)
    try:
        _say("==> [3/4] helm install loadline deploy/helm/loadline (image from the real node's containerd)")
        seconds = demo.install(image.name)
        _say(f"    every Loadline pod Ready {seconds:.0f}s after helm install:")
        _say(demo.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide"))
        _say("==> [4/4] the story")
        seen = demo.story(image.name)
        seen["no 403"] = demo.audit().ok()
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        _say(f"error: {exc}\nthe cluster keeps running for a look; make cluster-down stops it")
        print(env_lines(state))
        return 1
    _say("\n==> what happened")
    _say(demo.kubectl("get", "nodes", "-L", "type"))
    _say(demo.kubectl("get", "nm"))
    _say(demo.kubectl("get", "pods", "-A", "-o", "wide"))
    scheduler = demo.scheduler_url()
    if scheduler:  # `loadline explain` without --server asks the scheduler recorded here
        state["scheduler_url"] = scheduler
        STATE_FILE.write_text(json.dumps(state))
        _say("$ loadline explain default/train-0")
        _say(demo.run("loadline", "explain", "default/train-0", check=False))
    marks = {True: "✓", False: "✗"}
    _say("story: " + ", ".join(f"{step} {marks[ok]}" for step, ok in seen.items()))
    _say(f"first run to here: {time.monotonic() - started:.0f}s\n")
    _say("look around (the line below sets KUBECONFIG and puts kubectl, helm and loadline on PATH; "
         "`make env` prints it again):")  # fmt: skip
    _say('  eval "$(make -s env)"')
    for line in tour_lines(demo.tour()):
        _say(f"  {line}")
    _say(f"\nPrometheus (this machine only), scraping every Loadline component with deploy/prometheus's rules: "
         f"{state['prometheus']}")  # fmt: skip
    _say("  ready queries (paste into its Graph tab):")
    for query in QUERIES:
        _say(f"    {query.expr}\n        # {query.what}")
    _say(f"  all four as one page of graphs: {graph_url(state['prometheus'])}")
    _say("\nmake cluster-down stops everything (Prometheus too) and puts the host back as it was.")
    print(env_lines(state))
    return 0 if all(seen.values()) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.demo")
    sub = parser.add_subparsers(dest="command", required=True)
    serve_cmd = sub.add_parser("serve", help="(internal) the detached process that owns the demo cluster")
    serve_cmd.add_argument("--image-archive", type=Path, required=True)
    serve_cmd.add_argument("--nodes", type=int, default=3)
    up_cmd = sub.add_parser("up", help="start the demo cluster, install Loadline with helm, play the story")
    up_cmd.add_argument("--nodes", type=int, default=3)
    sub.add_parser("down", help="stop the demo cluster")
    sub.add_parser("env", help="print the line that points kubectl and helm at the demo cluster")
    args = parser.parse_args(argv)
    if args.command == "serve":
        return serve(args.image_archive, args.nodes)
    if args.command == "up":
        return up(args.nodes)
    state = running_state()
    if args.command == "env":
        if state is None:
            _say("no demo cluster is running (make demo starts one)")
            return 1
        print(env_lines(state))
        return 0
    if state is None:
        _say("no demo cluster is running")
        return 0
    stop_keeper(state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
