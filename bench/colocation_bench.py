"""Benchmark: what colocation with Loadline buys, measured on this machine as a real Kubernetes node (issue 33).

    .venv/bin/python bench/colocation_bench.py [--warmup 45] [--measure 120] [--window 30] [--rate 60] [--work 100000]
        [--ls-cpu-request 1] [--batch-pods 2] [--burner-mib 256] [--reclaim-percent 65] [--suppress-percent 65]
        [--configs 1,2,3,4] [--out bench/results/colocation]

One run builds what it needs (image, Kubernetes components: cached), starts a control plane with this machine as a
real node (tests/harness/realnode: containerd, runc, kubelet), `helm install`s Loadline from its chart, and measures
four configurations one after the other, each `--warmup` + `--measure` seconds with the same service pod running
throughout:

  1  LS alone: a latency-sensitive service pod (Loadline's image, bench/colocation_load.py SERVICE: fixed CPU work per
     request), requesting `--ls-cpu-request` cores (services ask for their peak, use far less), driven from the host
     at `--rate` requests/s by an open-loop generator that sends only to the pod's address on the harness's bridge.
  2  LS + batch on requests, no Loadline: `--batch-pods` burners requesting ordinary cpu/memory, sized to the node's
     free requests, placed by kube-scheduler; no CPU limit (requests only, as batch jobs are usually run), memory
     limit = request. They burst into idle CPU with CFS weights proportional to their requests.
  3  LS + batch on Loadline's batch resources, enforcement off (`agent.qosEnforcement=false`): burners asking for
     plain cpu/memory (requests = limits) filling 90 % of the batch resources the manager computed at that moment;
     the ClusterColocationProfile BATCH_PROFILE (selecting them by label, as a user's profile selects a batch
     namespace or operator label) turns them into koord-batch pods on `kubernetes.io/batch-cpu`/`batch-memory`
     (checked on the created pods), placed by loadline-scheduler. They are BestEffort to the kubelet: cpu.shares 2,
     nothing else holds them.
  4  The same with Loadline enforcing: batch isolation (each pod's cgroups from its batch resources), BE CPU
     suppression (`--suppress-percent`, cfsQuota policy: the only one that acts on a 2-CPU node, whose cpuset policy
     keeps at least 2 CPUs; under it the batch pods' own quotas are lifted, as koordlet does) and BE memory eviction.

Every burner is one process spinning flat out (it would take a whole core) that holds `--burner-mib` MiB and counts
units of fixed work (batch work done). Sampled every second from the host: the CPU and memory of all pods (the
kubepods cgroup: the service, the burners and Loadline's own pods), of the service and of the burners, and the host's
(/proc/stat, /proc/meminfo: the control plane, the load generator and whatever else this shared machine runs). The
generator runs in a cgroup of its own with the pods' CPU weight, so it is never starved by what it measures.

Writes `<out>.txt` (the table, with this command), `<out>.json` (every sample and latency) and `<out>.svg`
(utilisation and the service's p99 over time per configuration). `--replot <out>.json` redraws from a saved run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.colocation_load import BURNER, SERVICE
from common.api.pod import pod_requests
from common.api.quantity import Quantity
from tests.cgroup_util import rmdir_cgroup
from tests.harness.image import ensure_image
from tests.harness.realnode import REAL_NODE_LABEL
from tests.integration.realnode_cluster import (
    NAMESPACE,
    RealCluster,
    chart_values,
    start_real_cluster,
    stop_real_cluster,
    wait_for,
)

RESULTS = Path(__file__).resolve().parent / "results"
CGROUP = Path("/sys/fs/cgroup")
MiB = 1024**2
BENCH_NS = "colocation-bench"
BATCH_LABEL = {"loadline.io/bench-role": "batch"}
# The burners of (3) and (4) are written as any batch job is (cpu and memory, no colocation field); this profile makes
# them batch pods (docs/colocation-profile.md), as the demo's profile does for its namespace.
BATCH_PROFILE: dict[str, Any] = {
    "apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
    "metadata": {"name": "colocation-bench-batch"},
    "spec": {"selector": {"matchLabels": BATCH_LABEL}, "qosClass": "BE", "priorityClassName": "koord-batch",
             "schedulerName": "loadline-scheduler"},
}  # fmt: skip
CONFIGS = {
    1: "LS alone",
    2: "LS + batch on requests (no Loadline)",
    3: "LS + batch resources, enforcement off",
    4: "LS + batch resources, Loadline enforcing",
}
P99_BUCKET = 10.0  # seconds per point of the p99 series


def log(message: str) -> None:
    print(f"[colocation {time.strftime('%H:%M:%S')}] {message}", flush=True)


# ----------------------------------------------------------------------------------------------- host sampling
def _cpu_seconds(path: Path) -> float:
    try:
        return int((path / "cpuacct.usage").read_text()) / 1e9
    except (OSError, ValueError):
        return math.nan


def _working_set(path: Path) -> float:
    try:
        usage = int((path / "memory.usage_in_bytes").read_text())
        stat = dict(line.split() for line in (path / "memory.stat").read_text().splitlines())
        return float(usage - int(stat.get("total_inactive_file", 0)))
    except (OSError, ValueError):
        return math.nan


def _host() -> tuple[float, float, float]:
    """(busy CPU seconds, idle CPU seconds, used memory bytes) of the whole host."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    meminfo = {
        line.split(":")[0]: int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
    }
    used = meminfo["MemTotal"] - meminfo["MemAvailable"]
    return (user + nice + system + irq + softirq + steal) / 100.0, (idle + iowait) / 100.0, float(used)


def pod_cgroup(pod: dict[str, Any], controller: str) -> Path:
    qos = pod["status"]["qosClass"].lower()
    uid = pod["metadata"]["uid"]
    base = CGROUP / controller / "kubepods"
    return base / f"pod{uid}" if qos == "guaranteed" else base / qos / f"pod{uid}"


@dataclass
class Sample:
    t: float  # seconds since the configuration started
    pods_cpu: float  # cumulative CPU seconds
    ls_cpu: float
    batch_cpu: float
    host_busy: float
    host_idle: float
    pods_memory: float  # bytes now
    host_memory: float
    batch_units: float  # cumulative work units of every burner (the last count of a burner that is gone stays)


class Sampler:
    """Once a second: CPU seconds and memory of all pods, the service, the burners, and the host."""

    def __init__(self, ls: dict[str, Any], counts: Path) -> None:
        self.ls = ls
        self.counts = counts
        self.batch: dict[str, tuple[Path, float]] = {}  # uid -> (cpuacct dir, last seen CPU seconds)

    def track(self, pods: Sequence[dict[str, Any]]) -> None:
        for p in pods:
            self.batch.setdefault(p["metadata"]["uid"], (pod_cgroup(p, "cpuacct"), 0.0))

    def _batch_cpu(self) -> float:
        total = 0.0
        for uid, (path, last) in list(self.batch.items()):
            now = _cpu_seconds(path)
            if not math.isnan(now):
                self.batch[uid] = (path, now)
            total += now if not math.isnan(now) else last  # a burner that is gone keeps what it used
        return total

    def _units(self) -> float:
        total = 0.0
        for f in self.counts.glob("*.count"):
            try:
                total += float(f.read_text().split()[1])
            except (OSError, ValueError, IndexError):
                continue
        return total

    def sample(self, t: float) -> Sample:
        busy, idle, host_memory = _host()
        return Sample(
            t,
            _cpu_seconds(CGROUP / "cpuacct" / "kubepods"),
            _cpu_seconds(pod_cgroup(self.ls, "cpuacct")),
            self._batch_cpu(),
            busy,
            idle,
            _working_set(CGROUP / "memory" / "kubepods"),
            host_memory,
            self._units(),
        )


# ----------------------------------------------------------------------------------------------- pods
def service_pod(image: str, cpu_request: str, work: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "ls-service", "namespace": BENCH_NS,
                     "labels": {"app": "ls-service", "koordinator.sh/qosClass": "LS"}},
        "spec": {
            "priorityClassName": "koord-prod",
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {REAL_NODE_LABEL: "true"},
            "containers": [{
                "name": "service", "image": image, "imagePullPolicy": "Never",
                "command": ["python3", "-c", SERVICE], "env": [{"name": "WORK", "value": str(work)}],
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 2},
                "resources": {"requests": {"cpu": cpu_request, "memory": "256Mi"}},
            }],
        },
    }  # fmt: skip


def burner_pods(config: int, count: int, image: str, counts: Path, *, mib: int, resources: dict[str, Any],
                batch: bool) -> list[dict[str, Any]]:  # fmt: skip
    pods = []
    for i in range(count):
        name = f"burner-{config}-{i}"
        labels = {"app": "burner"} | (BATCH_LABEL if batch else {})
        spec: dict[str, Any] = {
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {REAL_NODE_LABEL: "true"},
            "containers": [{
                "name": "burn", "image": image, "imagePullPolicy": "Never",
                "command": ["python3", "-c", BURNER],
                "env": [{"name": "MIB", "value": str(mib)}, {"name": "COUNT_FILE", "value": f"/counts/{name}.count"}],
                "resources": resources,
                "volumeMounts": [{"name": "counts", "mountPath": "/counts"}],
            }],
            "volumes": [{"name": "counts", "hostPath": {"path": str(counts), "type": "Directory"}}],
        }  # fmt: skip
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": BENCH_NS,
                                                                      "labels": labels}, "spec": spec})  # fmt: skip
    return pods


def check_profiled(pods: Sequence[dict[str, Any]], asked: dict[str, str]) -> None:
    """The burners as created are what BATCH_PROFILE makes of them; a bench of unmutated pods would measure nothing."""
    for pod in pods:
        spec, name = pod["spec"], pod["metadata"]["name"]
        requests = {k: Quantity.parse(v).value() for k, v in spec["containers"][0]["resources"]["requests"].items()}
        made = (spec.get("priorityClassName"), spec.get("schedulerName"),
                pod["metadata"].get("labels", {}).get("koordinator.sh/qosClass"), requests)  # fmt: skip
        want = ("koord-batch", "loadline-scheduler", "BE", {k: Quantity.parse(v).value() for k, v in asked.items()})
        if made != want:
            profile = BATCH_PROFILE["metadata"]["name"]
            raise RuntimeError(f"pod {name} was not made a batch pod by ClusterColocationProfile {profile} "
                               f"(is the manager's webhook up?): {made}")  # fmt: skip


# ----------------------------------------------------------------------------------------------- the run
@dataclass
class ConfigRun:
    config: int
    name: str
    started: float  # wall clock
    seconds: float = 0.0  # wall time of the whole configuration (setup, warm-up, measurement, clean-up)
    batch_resources: dict[str, str] = field(default_factory=dict)  # what each burner asked for
    note: str = ""
    samples: list[dict[str, float]] = field(default_factory=list)
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (due s since start, latency s; -1 error)
    evicted: int = 0
    restarts: int = 0


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cluster: RealCluster | None = None
        self.counts = Path(tempfile.mkdtemp(prefix="loadline-colocation-"))
        self.counts.chmod(0o777)
        self.gen_cgroup = CGROUP / "cpu" / f"loadline-colocation-{secrets.token_hex(4)}"
        self.loadgen: subprocess.Popen[str] | None = None

    # --- cluster --------------------------------------------------------------------------------------
    def start(self) -> RealCluster:
        image = ensure_image()
        log(f"image {image.name}; starting the control plane and this machine as a real node")
        weight = self.args.pods_cpu_weight
        cluster = self.cluster = start_real_cluster(image.archive, image.name, pods_cpu_weight=weight)
        values = chart_values(image.name, cluster.agent_port)
        window = int(self.args.window)
        values["sloControllerConfig"]["data"]["colocation-config"] = json.dumps({
            "enable": True, "cpuReclaimThresholdPercent": self.args.reclaim_percent,
            "memoryReclaimThresholdPercent": self.args.reclaim_percent, "metricAggregateDurationSeconds": window,
        })  # fmt: skip
        values["agent"]["args"] = [a for a in values["agent"]["args"] if not a.startswith("--aggregate-duration")]
        values["agent"]["args"].append(f"--aggregate-duration-seconds={window}")
        cluster.values_file.write_text(json.dumps(values))
        seconds = cluster.install()
        log(f"Loadline installed by its chart, every pod Ready in {seconds:.0f}s")
        cluster.plane.kubectl("create", "namespace", BENCH_NS)
        cluster.plane.apply([BATCH_PROFILE])
        wait_for("the default ServiceAccount", lambda: cluster.plane.kubectl(
            "get", "serviceaccount", "default", "-n", BENCH_NS, check=False).returncode == 0, 60)  # fmt: skip
        self.gen_cgroup.mkdir()
        (self.gen_cgroup / "cpu.shares").write_text(f"{self.args.pods_cpu_weight}\n")
        return cluster

    def stop(self) -> None:
        if self.loadgen is not None and self.loadgen.poll() is None:
            self.loadgen.send_signal(signal.SIGKILL)
            self.loadgen.wait(timeout=10)
        if self.cluster is not None:
            self.cluster.plane.kubectl("delete", "namespace", BENCH_NS, "--wait=true", "--timeout=60s", check=False,
                                       timeout=90)  # fmt: skip
            stop_real_cluster(self.cluster)
            if self.cluster.node.leftovers:
                log(f"the real node left behind: {self.cluster.node.leftovers}")
        rmdir_cgroup(self.gen_cgroup)
        shutil.rmtree(self.counts, ignore_errors=True)

    # --- helpers --------------------------------------------------------------------------------------
    @property
    def kube(self) -> RealCluster:
        assert self.cluster is not None
        return self.cluster

    def node(self) -> dict[str, Any]:
        result: dict[str, Any] = self.kube.kubectl_json("get", "node", self.kube.node.name)
        return result

    def pods(self, selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.kube.kubectl_json("get", "pods", "-n", BENCH_NS, "-l", selector)["items"]
        return items

    def ready(self, names: Sequence[str], timeout: float = 120) -> list[dict[str, Any]]:
        self.kube.plane.kubectl("wait", "--for=condition=Ready", *(f"pod/{n}" for n in names), "-n", BENCH_NS,
                                f"--timeout={int(timeout)}s", timeout=timeout + 10)  # fmt: skip
        return [self.kube.kubectl_json("get", "pod", n, "-n", BENCH_NS) for n in names]

    def set_enforcement(self, *, agent: bool, suppress: bool) -> None:
        """The agent's --qos-enforcement (helm upgrade rolls the DaemonSet) and the NodeSLO's BE strategy (patched
        after the upgrade, which renders the chart's slo-controller-config again)."""
        args = self.kube.kubectl_json("get", "daemonset", "loadline-agent", "-n", NAMESPACE)["spec"]["template"][
            "spec"]["containers"][0]["args"]  # fmt: skip
        if f"--qos-enforcement={str(agent).lower()}" not in args:
            self.kube.upgrade(f"agent.qosEnforcement={str(agent).lower()}")
            self.kube.wait_all_ready()
        strategy: dict[str, Any] = {"enable": suppress}
        if suppress:
            strategy |= {"cpuSuppressThresholdPercent": self.args.suppress_percent, "cpuSuppressPolicy": "cfsQuota",
                         "memoryEvictThresholdPercent": 70}  # fmt: skip
        self.kube.plane.kubectl("patch", "configmap", "slo-controller-config", "-n", NAMESPACE, "--type=merge", "-p",
                                json.dumps({"data": {"resource-threshold-config": json.dumps(
                                    {"clusterStrategy": strategy})}}))  # fmt: skip

        def slo_says() -> bool:
            slo = self.kube.kubectl_json("get", "nodeslo", self.kube.node.name)
            return bool(((slo.get("spec") or {}).get("resourceUsedThresholdWithBE") or {}).get("enable")) == suppress

        wait_for(f"the NodeSLO with BE enforcement {'on' if suppress else 'off'}", slo_says, 60)

    def free_requests(self) -> tuple[int, int]:
        """(milli-cores, bytes) of the node's allocatable no pod on it requests."""
        alloc = self.node()["status"]["allocatable"]
        cpu, memory = Quantity.parse(alloc["cpu"]).milli_value(), Quantity.parse(alloc["memory"]).value()
        on_node = self.kube.kubectl_json("get", "pods", "-A", f"--field-selector=spec.nodeName={self.kube.node.name}")
        for p in on_node["items"]:
            if p["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            requests = pod_requests(p)
            cpu -= requests["cpu"].milli_value() if "cpu" in requests else 0
            memory -= requests["memory"].value() if "memory" in requests else 0
        return cpu, memory

    def batch_allocatable(self) -> tuple[int, int]:
        alloc = self.node()["status"]["allocatable"]
        return (int(Quantity.parse(alloc.get("kubernetes.io/batch-cpu", "0")).value()),
                int(Quantity.parse(alloc.get("kubernetes.io/batch-memory", "0")).value()))  # fmt: skip

    # --- one configuration ----------------------------------------------------------------------------
    def batch_for(self, config: int) -> tuple[list[dict[str, Any]], dict[str, str], str]:
        a, k = self.args, self.args.batch_pods
        if config == 1:
            return [], {}, ""
        if config == 2:
            cpu, memory = self.free_requests()
            each_cpu = cpu * 9 // 10 // k
            each_memory = min(memory // k, (a.burner_mib + 128) * MiB)
            if each_cpu < 10:
                return [], {}, f"no free cpu requests for batch ({cpu}m)"
            asked = {"cpu": f"{each_cpu}m", "memory": f"{each_memory // MiB}Mi"}
            resources = {"requests": asked, "limits": {"memory": asked["memory"]}}
            note = f"free requests {cpu}m / {memory // MiB} MiB; each burner requests {asked}, no CPU limit"
            made = burner_pods(config, k, self.kube.image, self.counts, mib=a.burner_mib, resources=resources,
                               batch=False)  # fmt: skip
            return made, asked, note
        deadline = time.monotonic() + 60
        while not all(self.batch_allocatable()) and time.monotonic() < deadline:
            time.sleep(2)
        cpu, memory = self.batch_allocatable()
        if cpu * 9 // 10 // k < 1 or memory * 9 // 10 // k < 64 * MiB:
            why = f"batch-cpu {cpu}m, batch-memory {memory // MiB} MiB (the host's other work counts as system usage)"
            return [], {}, f"no room for batch: the manager gives the node {why}; no burners"
        each_cpu = cpu * 9 // 10 // k
        each_memory = min(memory * 9 // 10 // k, (a.burner_mib + 128) * MiB)
        written = {"cpu": f"{each_cpu}m", "memory": f"{each_memory // MiB}Mi"}  # what the profile turns into:
        asked = {"kubernetes.io/batch-cpu": str(each_cpu), "kubernetes.io/batch-memory": f"{each_memory // MiB}Mi"}
        resources = {"requests": written, "limits": written}
        note = f"batch allocatable {cpu}m / {memory // MiB} MiB; each burner writes {written}, the profile: {asked}"
        pods = burner_pods(config, k, self.kube.image, self.counts, mib=a.burner_mib, resources=resources, batch=True)
        return pods, asked, note

    def run_config(self, config: int, ls: dict[str, Any], url: str) -> ConfigRun:
        a = self.args
        run = ConfigRun(config, CONFIGS[config], time.time())
        wall = time.monotonic()
        log(f"({config}) {CONFIGS[config]}")
        self.set_enforcement(agent=config != 3, suppress=config == 4)
        burners, run.batch_resources, run.note = self.batch_for(config)
        if run.note:
            log(f"({config}) {run.note}")
        sampler = Sampler(ls, self.counts)
        if burners:
            self.kube.plane.apply(burners)
            made = self.ready([b["metadata"]["name"] for b in burners], timeout=180)
            if config in (3, 4):
                check_profiled(made, run.batch_resources)
            sampler.track(made)
        duration = a.warmup + a.measure
        out = self.counts / f"latency-{config}.txt"
        self.loadgen = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("colocation_load.py")), "loadgen", "--url", url,
             "--rate", str(a.rate), "--seconds", str(duration), "--out", str(out)],
            text=True,
        )  # fmt: skip
        (self.gen_cgroup / "cgroup.procs").write_text(f"{self.loadgen.pid}\n")
        started = time.monotonic()
        next_log = started + 60
        while self.loadgen.poll() is None or time.monotonic() - started < duration:
            t = time.monotonic() - started
            run.samples.append(asdict(sampler.sample(t)))
            if time.monotonic() >= next_log:
                log(f"({config}) {t:.0f}/{duration:.0f}s")
                next_log += 60
            time.sleep(max(0.0, 1.0 - (time.monotonic() - started - t)))
            if time.monotonic() - started > duration + 30:
                raise RuntimeError("the load generator did not stop by itself")
        if self.loadgen.returncode != 0:
            raise RuntimeError(f"the load generator failed (exit {self.loadgen.returncode})")
        run.latencies = [(float(d), float(v)) for d, v in (line.split() for line in out.read_text().splitlines())]
        if burners:
            events = self.kube.kubectl_json("get", "events.events.k8s.io", "-n", BENCH_NS)["items"]
            names = {b["metadata"]["name"] for b in burners}
            run.evicted = sum(1 for e in events if e.get("reason") == "evictPodSuccess"
                              and (e.get("regarding") or {}).get("name") in names)  # fmt: skip
            run.restarts = sum(cs.get("restartCount", 0) for p in self.pods("app=burner")
                               for cs in p["status"].get("containerStatuses") or [])  # fmt: skip
            self.kube.plane.kubectl("delete", "pods", "-n", BENCH_NS, "-l", "app=burner", "--wait=true",
                                    "--timeout=120s", timeout=150)  # fmt: skip
            for f in self.counts.glob("*.count"):
                f.unlink()
            time.sleep(a.settle)
        run.seconds = time.monotonic() - wall
        log(f"({config}) done in {run.seconds:.0f}s")
        return run

    def run(self, done: Callable[[list[ConfigRun]], object]) -> list[ConfigRun]:
        """Every configuration in turn; `done` gets the runs so far after each (a failure later keeps them)."""
        cluster = self.start()
        cluster.plane.apply(service_pod(cluster.image, self.args.ls_cpu_request, self.args.work))
        [ls] = self.ready(["ls-service"])
        url = f"http://{ls['status']['podIP']}:8080/"
        log(f"service pod at {url} (QoS {ls['status']['qosClass']})")
        runs: list[ConfigRun] = []
        for c in self.args.configs:
            runs.append(self.run_config(c, ls, url))
            done(runs)
        return runs


# ----------------------------------------------------------------------------------------------- the report
@dataclass
class Figures:
    config: int
    name: str
    seconds: float
    measured: float
    pods_cpu: float  # fraction of the node's CPU, mean over the measurement
    host_cpu: float
    batch_cores: float
    pods_memory: float  # fraction of the node's memory
    host_memory: float
    p50: float  # milliseconds
    p99: float
    p999: float
    requests: int
    errors: int
    work: float  # burner work units in the measurement (millions of loop iterations / 10)
    evicted: int
    restarts: int


def figures(run: dict[str, Any], warmup: float, cpus: float, memory: float) -> Figures:
    samples = [s for s in run["samples"] if s["t"] >= warmup]
    first, last = samples[0], samples[-1]
    span = last["t"] - first["t"]

    def rate(key: str) -> float:
        return (last[key] - first[key]) / span if span > 0 else math.nan

    host_total = rate("host_busy") + rate("host_idle")
    ok = np.array([v for d, v in run["latencies"] if d >= warmup and v >= 0]) * 1000
    errors = sum(1 for d, v in run["latencies"] if d >= warmup and v < 0)
    pct = np.percentile(ok, [50, 99, 99.9]) if ok.size else [math.nan] * 3
    return Figures(
        run["config"], run["name"], run["seconds"], span,
        rate("pods_cpu") / cpus, rate("host_busy") / host_total if host_total else math.nan, rate("batch_cpu"),
        float(np.nanmean([s["pods_memory"] for s in samples])) / memory,
        float(np.nanmean([s["host_memory"] for s in samples])) / memory,
        float(pct[0]), float(pct[1]), float(pct[2]), int(ok.size) + errors, errors,
        last["batch_units"] - first["batch_units"], run["evicted"], run["restarts"],
    )  # fmt: skip


def table(rows: list[Figures], command: str, context: list[str]) -> str:
    lines = [f"$ {command}", *context, "",
             "| configuration | ran (measured) | pods CPU | host CPU | burners' CPU | pods memory | host memory "
             "| LS p50 / p99 / p99.9 | LS errors | batch work | burners evicted / restarted |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for f in rows:
        lines.append(
            f"| ({f.config}) {f.name} | {f.seconds:.0f} s ({f.measured:.0f} s) | {f.pods_cpu:.1%} | {f.host_cpu:.1%} | "
            f"{f.batch_cores:.2f} cores | {f.pods_memory:.1%} | {f.host_memory:.1%} | {f.p50:.2f} / {f.p99:.2f} / "
            f"{f.p999:.2f} ms | {f.errors} of {f.requests} | {f.work / 1000:.1f} k units | {f.evicted} / {f.restarts} |"
        )
    alone = [f for f in rows if f.config == 1]  # (1) may run again at the end: the drift of the machine meanwhile
    by = {f.config: f for f in rows}
    if alone and 4 in by:
        lines.append("")
        for i, base in enumerate(alone):
            which = "(1)" if len(alone) == 1 else f"(1) run {i + 1}"
            lines.append(f"(4) vs {which}: pods CPU x{by[4].pods_cpu / base.pods_cpu:.2f} (target >= 2), LS p99 "
                         f"{by[4].p99 / base.p99 - 1:+.1%} (target <= +10 %)")  # fmt: skip
    for other in (2, 3):
        if other in by and 4 in by:
            f = by[other]
            lines.append(f"({other}) vs (4): LS p99 {f.p99:.2f} vs {by[4].p99:.2f} ms ({f.p99 / by[4].p99 - 1:+.1%}), "
                         f"batch work {f.work / 1000:.1f} vs {by[4].work / 1000:.1f} k units")  # fmt: skip
    return "\n".join(lines) + "\n"


def intervals(run: dict[str, Any], warmup: float) -> str:
    """Per P99_BUCKET seconds of one configuration's measurement: the service's latency beside where the node's CPU
    went (the burners, the service, the host's work outside the pods), to tell what a latency rise coincides with."""
    lines = [f"({run['config']}) {run['name']}, per {P99_BUCKET:.0f} s",
             "| from | LS p50 / p99 / max | host CPU | host outside pods | service | burners |",
             "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    samples = run["samples"]
    start = warmup
    while start < samples[-1]["t"]:
        inside = [s for s in samples if start <= s["t"] < start + P99_BUCKET]
        ok = np.array([v for d, v in run["latencies"] if start <= d < start + P99_BUCKET and v >= 0]) * 1000
        if len(inside) > 1 and ok.size:
            a, b = inside[0], inside[-1]
            span = b["t"] - a["t"]
            busy = b["host_busy"] - a["host_busy"]
            total = busy + b["host_idle"] - a["host_idle"]
            pods = (b["pods_cpu"] - a["pods_cpu"]) / span
            p50, p99 = np.percentile(ok, [50, 99])
            lines.append(f"| {start:.0f} s | {p50:.2f} / {p99:.2f} / {ok.max():.2f} ms | {busy / total:.1%} | "
                         f"{busy / span - pods:.2f} cores | {(b['ls_cpu'] - a['ls_cpu']) / span:.3f} cores | "
                         f"{(b['batch_cpu'] - a['batch_cpu']) / span:.3f} cores |")  # fmt: skip
        start += P99_BUCKET
    return "\n".join(lines) + "\n"


def p99_series(run: dict[str, Any]) -> list[tuple[float, float]]:
    by_bucket: dict[int, list[float]] = {}
    for due, latency in run["latencies"]:
        if latency >= 0:
            by_bucket.setdefault(int(due // P99_BUCKET), []).append(latency * 1000)
    return [((b + 0.5) * P99_BUCKET, float(np.percentile(v, 99))) for b, v in sorted(by_bucket.items()) if len(v) > 5]


def svg(runs: list[dict[str, Any]], warmup: float, cpus: float, title: str) -> str:
    width, panel, left, right, top, gap = 760, 170, 60, 70, 40, 46
    height = top + len(runs) * (panel + gap) + 20
    duration = float(max(s["t"] for r in runs for s in r["samples"]))
    p99_max = max([v for r in runs for _, v in p99_series(r)] + [1.0]) * 1.15
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="11">', f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2:.0f}" y="20" text-anchor="middle" font-size="13">{title}</text>']  # fmt: skip

    def x(t: float) -> float:
        return left + t / duration * (width - left - right)

    for i, run in enumerate(runs):
        y0 = top + i * (panel + gap) + 16
        y1 = y0 + panel

        def y_pct(v: float, y0: float = y0, y1: float = y1) -> float:
            return y1 - max(0.0, min(v, 1.0)) * (y1 - y0)

        def y_ms(v: float, y0: float = y0, y1: float = y1) -> float:
            return y1 - min(v / p99_max, 1.0) * (y1 - y0)

        out.append(f'<text x="{left}" y="{y0 - 6}" font-size="12">({run["config"]}) {run["name"]}</text>')
        out.append(f'<rect x="{x(0):.1f}" y="{y0}" width="{x(warmup) - x(0):.1f}" height="{panel}" fill="#f3f3f3"/>')
        for pct in (0, 0.25, 0.5, 0.75, 1.0):
            out.append(f'<line x1="{left}" y1="{y_pct(pct):.1f}" x2="{width - right}" y2="{y_pct(pct):.1f}" '
                       f'stroke="#ddd"/>')  # fmt: skip
            out.append(f'<text x="{left - 4}" y="{y_pct(pct) + 4:.1f}" text-anchor="end">{pct:.0%}</text>')
            out.append(f'<text x="{width - right + 4}" y="{y_pct(pct) + 4:.1f}">{pct * p99_max:.0f} ms</text>')
        samples = run["samples"]
        for key, colour in (("pods_cpu", "#1f77b4"), ("batch_cpu", "#ff7f0e"), ("host_busy", "#999999")):
            points = []
            for a, b in itertools.pairwise(samples):
                dt = b["t"] - a["t"]
                if dt <= 0:
                    continue
                if key == "host_busy":
                    total = (b["host_busy"] - a["host_busy"]) + (b["host_idle"] - a["host_idle"])
                    value = (b["host_busy"] - a["host_busy"]) / total if total > 0 else 0.0
                else:
                    value = (b[key] - a[key]) / dt / cpus
                if not math.isnan(value):
                    points.append(f"{x(b['t']):.1f},{y_pct(value):.1f}")
            out.append(f'<polyline points="{" ".join(points)}" fill="none" stroke="{colour}" stroke-width="1.2"/>')
        p99 = " ".join(f"{x(t):.1f},{y_ms(v):.1f}" for t, v in p99_series(run))
        out.append(f'<polyline points="{p99}" fill="none" stroke="#d62728" stroke-width="2"/>')
        out.append(f'<line x1="{left}" y1="{y1}" x2="{width - right}" y2="{y1}" stroke="black"/>')
        for t in range(0, int(duration) + 1, 60):
            out.append(f'<text x="{x(t):.1f}" y="{y1 + 14}" text-anchor="middle">{t}s</text>')
    legend = [("#1f77b4", "all pods' CPU (% of node)"), ("#ff7f0e", "burners' CPU"), ("#999999", "host CPU"),
              ("#d62728", f"LS p99 per {P99_BUCKET:.0f} s (right axis)"),
              ("#f3f3f3", "warm-up (not measured)")]  # fmt: skip
    lx = left
    for colour, label in legend:
        out.append(f'<rect x="{lx}" y="{height - 16}" width="14" height="8" fill="{colour}"/>')
        out.append(f'<text x="{lx + 18}" y="{height - 8}">{label}</text>')
        lx += 26 + int(5.6 * len(label))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def report(data: dict[str, Any], out: Path) -> str:
    cpus, memory = data["node_cpus"], data["node_memory"]
    rows = [figures(r, data["warmup"], cpus, memory) for r in data["runs"]]
    context = [f"# {line}" for line in data["context"]]
    text = table(rows, data["command"], context)
    out.with_suffix(".txt").write_text(text)
    title = f"Loadline colocation on a real {cpus:g}-CPU node: utilisation and LS p99"
    out.with_suffix(".svg").write_text(svg(data["runs"], data["warmup"], cpus, title))
    return text


# ----------------------------------------------------------------------------------------------- main
def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warmup", type=float, default=45, help="seconds per configuration before measuring")
    parser.add_argument("--measure", type=float, default=120, help="seconds measured per configuration")
    parser.add_argument("--window", type=float, default=30, help="the agent's and manager's aggregation window, s")
    parser.add_argument("--rate", type=float, default=60, help="requests per second to the service")
    parser.add_argument("--work", type=int, default=100_000, help="loop iterations of CPU work per request")
    parser.add_argument("--ls-cpu-request", default="1", help="the service pod's CPU request")
    parser.add_argument("--batch-pods", type=int, default=2, help="burner pods per batch configuration")
    parser.add_argument("--burner-mib", type=int, default=256, help="memory each burner holds, MiB")
    parser.add_argument("--reclaim-percent", type=int, default=65, help="colocation cpu/memoryReclaimThresholdPercent")
    parser.add_argument("--suppress-percent", type=int, default=65, help="(4): cpuSuppressThresholdPercent")
    parser.add_argument("--pods-cpu-weight", type=int, default=8192,
                        help="cpu.shares of kubepods (and of the load generator's cgroup) against this shared "
                        "machine's other work; the kubelet's own would be 1024 per core")  # fmt: skip
    parser.add_argument("--settle", type=float, default=10, help="seconds after a configuration's burners are gone")
    parser.add_argument("--configs", default="1,2,3,4", help="which configurations, in order")
    parser.add_argument("--out", type=Path, default=RESULTS / "colocation", help="results prefix (.txt .json .svg)")
    parser.add_argument("--replot", type=Path, help="redraw the table and plot from a saved .json; no run")
    parser.add_argument("--intervals", type=int, metavar="CONFIG",
                        help="with --replot: also print configuration CONFIG's measurement per 10 s (latency, and the "
                        "CPU of the host outside the pods, of the service and of the burners)")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        args.configs = [int(c) for c in str(args.configs).split(",")]
    except ValueError:
        parser.error("--configs: comma-separated numbers 1-4")
    if not set(args.configs) <= set(CONFIGS) or args.batch_pods < 1 or args.rate <= 0:
        parser.error("--configs must name 1-4, --batch-pods >= 1, --rate > 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.replot:
        data = json.loads(args.replot.read_text())
        print(report(data, args.replot.with_suffix("")), end="")
        for run in data["runs"] if args.intervals else []:
            if run["config"] == args.intervals:
                print("\n" + intervals(run, data["warmup"]), end="")
        return 0
    if not (CGROUP / "cpuacct" / "cpuacct.usage").exists():
        print("the real-node harness needs cgroup v1 controllers under /sys/fs/cgroup", file=sys.stderr)
        return 2
    command = "bench/colocation_bench.py " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    bench = Bench(args)
    started = time.monotonic()
    load = Path("/proc/loadavg").read_text().split()[:3]
    node: dict[str, Any] = {}

    def save(runs: list[ConfigRun]) -> dict[str, Any]:
        if not node:
            node.update(bench.node())
        cap = node["status"]["capacity"]
        data = {
            "command": command.strip(),
            "warmup": args.warmup,
            "node_cpus": Quantity.parse(cap["cpu"]).milli_value() / 1000,
            "node_memory": Quantity.parse(cap["memory"]).value(),
            "context": [
                time.strftime("%Y-%m-%d %H:%M %Z") + f", whole run {time.monotonic() - started:.0f} s; load average at "
                f"the start {' '.join(load)}, at the end {' '.join(Path('/proc/loadavg').read_text().split()[:3])}",
                f"node: {cap['cpu']} CPUs, {Quantity.parse(cap['memory']).value() / 1024**3:.1f} GiB; service "
                f"{args.rate:g} req/s x {args.work} iterations, request cpu {args.ls_cpu_request}; {args.batch_pods} "
                f"burners a batch configuration, {args.burner_mib} MiB each; reclaim {args.reclaim_percent} %, "
                f"suppress {args.suppress_percent} % (cfsQuota); kubepods cpu.shares {args.pods_cpu_weight}",
                *[f"({r.config}) {r.note}" for r in runs if r.note],
            ],
            "runs": [asdict(r) for r in runs],
        }  # fmt: skip
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(data))
        return data

    try:
        runs = bench.run(save)
        data = save(runs)
    finally:
        bench.stop()
    print(report(data, args.out), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
