"""Placement quality: the real kube-scheduler alone vs kube-scheduler + Loadline's extender (LoadAware).

    .venv/bin/python bench/placement_bench.py [--nodes 100] [--pods 1000] [--arrival-seconds 40]
                                              [--steady-seconds 20] [--interval 2] [--weight 5] [--seed 7]

Starts its own control plane (etcd, kube-apiserver, kwok — tests/harness) with `--nodes` kwok nodes
of 32 cpu / 128Gi, then runs the same workload twice, one scheduler after the other, on the same nodes:

  default   the real kube-scheduler (the harness's build), default plugins (placement by requests)
  loadline  the same kube-scheduler calling `python -m scheduler_plugin.extender` (LoadAwareScheduling,
            Koordinator's defaults: cpu threshold 65 %) for filter and prioritize, nodeCacheCapable,
            weight `--weight`

Workload (identical in both runs, fixed by `--seed`): `--pods` pods arriving at a steady rate over
`--arrival-seconds`. Requests: 0.5/1/2/4 cpu (30/30/25/15 %) and 1–4Gi. Real cpu use is drawn
independently of the request from a skewed distribution (lognormal, mean ≈ 1.4 cpu, median ≈ 0.9,
capped at 8) and recorded in the pod's annotation `loadline.bench/real-cpu`; real memory is 40–80 %
of the request. Every node also carries a fixed "system" load of 2–12 % of its cpu.

A small loop here plays koordlet: every `--interval` seconds it recomputes each node's real usage
from the pods bound to it (system load + Σ real cpu, times 1 ± 4 % noise) and writes the node's
NodeMetric status: `nodeUsage`, `aggregatedNodeUsages` (5m0s window: avg and p95 of this run's
samples so far) and `podsMetric`, with `updateTime` = now and `reportIntervalSeconds` = the interval.
After the last pod arrives it keeps reporting for `--steady-seconds`.

Reported per scheduler (cpu utilisation = usage / allocatable):
  hot nodes     nodes whose p95 utilisation over the run is above 65 %
  stddev, max−min of the nodes' mean utilisation over the steady phase (percentage points)
and the ratios loadline/default. Target (issue 4): at least 50 % fewer hot nodes than kube-scheduler.
Exit status 0 when the target is met, 1 when it is not.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import shutil
import statistics
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from common.kube.http import KubeError, KubeHTTP, resource_path
from common.kube.reflector import Reflector
from tests.harness.controlplane import ControlPlane, fake_node
from tests.harness.processes import Component, free_port, http_ok, wait_until

NODE_CPU_MILLI = 32_000
NODE_MEMORY = 128 * 2**30
HOT_PERCENT = 65.0
TARGET_REDUCTION = 0.5
LABEL = "loadline-bench"
REAL_CPU = "loadline.bench/real-cpu"
REAL_MEMORY = "loadline.bench/real-memory"
NM_PATH = resource_path("slo.koordinator.sh", "v1alpha1", "nodemetrics")
GI = 2**30


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- workload
@dataclass(frozen=True)
class PodSpec:
    name: str
    cpu_request: int  # milli
    memory_request: int
    real_cpu: int  # milli
    real_memory: int
    arrival: float  # seconds after the start


def workload(pods: int, arrival_seconds: float, seed: int) -> list[PodSpec]:
    rng = random.Random(seed)
    sigma = 0.9
    mean = 1400.0
    mu = math.log(mean) - sigma**2 / 2  # lognormal with that mean
    out = []
    for i in range(pods):
        cpu = rng.choices([500, 1000, 2000, 4000], weights=[30, 30, 25, 15])[0]
        memory = rng.choice([1, 2, 4]) * GI
        real_cpu = min(int(rng.lognormvariate(mu, sigma)), 8000)
        real_memory = int(memory * rng.uniform(0.4, 0.8))
        out.append(PodSpec(f"p-{i:04d}", cpu, memory, real_cpu, real_memory, arrival_seconds * i / pods))
    return out


def system_load(nodes: list[str], seed: int) -> dict[str, int]:
    rng = random.Random(seed + 1)
    return {n: int(NODE_CPU_MILLI * rng.uniform(0.02, 0.12)) for n in nodes}


def pod_object(spec: PodSpec, namespace: str, scheduler: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": spec.name, "namespace": namespace,
                     "annotations": {REAL_CPU: f"{spec.real_cpu}m", REAL_MEMORY: str(spec.real_memory)}},
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": {LABEL: "placement"},
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "app", "image": "fake",
                            "resources": {"requests": {"cpu": f"{spec.cpu_request}m",
                                                       "memory": str(spec.memory_request)}}}],
        },
    }  # fmt: skip


# --------------------------------------------------------------------------- the fake koordlet
@dataclass
class Agent:
    http: KubeHTTP
    pods: Reflector
    nodes: list[str]
    system: dict[str, int]
    interval: float
    rng: random.Random
    samples: dict[str, list[float]] = field(default_factory=dict)  # node -> cpu % per tick
    steady_from: int | None = None  # index of the first steady-phase tick

    def usage(self) -> tuple[dict[str, int], dict[str, int], dict[str, list[dict[str, Any]]]]:
        cpu = dict(self.system)
        memory = dict.fromkeys(self.nodes, 4 * GI)
        pods: dict[str, list[dict[str, Any]]] = {n: [] for n in self.nodes}
        for obj in list(self.pods.store.values()):
            node = (obj.get("spec") or {}).get("nodeName")
            if node not in cpu:
                continue
            notes = obj["metadata"].get("annotations") or {}
            real_cpu = int(notes[REAL_CPU].rstrip("m"))
            real_memory = int(notes[REAL_MEMORY])
            cpu[node] += real_cpu
            memory[node] += real_memory
            pods[node].append({"namespace": obj["metadata"]["namespace"], "name": obj["metadata"]["name"],
                               "podUsage": {"resources": {"cpu": f"{real_cpu}m", "memory": str(real_memory)}}})
        for node in self.nodes:
            noisy = self.system[node] + (cpu[node] - self.system[node]) * self.rng.gauss(1.0, 0.04)
            cpu[node] = int(min(max(noisy, 0), NODE_CPU_MILLI))
        return cpu, memory, pods

    async def tick(self) -> None:
        cpu, memory, pods = self.usage()
        now = rfc3339(time.time())
        sem = asyncio.Semaphore(32)

        async def write(node: str) -> None:
            series = self.samples.setdefault(node, [])
            series.append(100.0 * cpu[node] / NODE_CPU_MILLI)
            p95 = float(np.percentile(series, 95)) * NODE_CPU_MILLI / 100
            avg = statistics.fmean(series) * NODE_CPU_MILLI / 100
            status = {
                "updateTime": now,
                "nodeMetric": {
                    "nodeUsage": {"resources": {"cpu": f"{cpu[node]}m", "memory": str(memory[node])}},
                    "aggregatedNodeUsages": [{"duration": "5m0s", "usage": {
                        "avg": {"resources": {"cpu": f"{int(avg)}m", "memory": str(memory[node])}},
                        "p95": {"resources": {"cpu": f"{int(p95)}m", "memory": str(memory[node])}},
                    }}],
                },
                "podsMetric": pods[node],
            }  # fmt: skip
            async with sem:
                # A merge patch needs no resourceVersion; its lists (podsMetric, windows) replace the old ones.
                await self.http.merge_patch(f"{NM_PATH}/{node}/status", {"status": status})

        await asyncio.gather(*(write(n) for n in self.nodes))

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                await self.tick()
            except KubeError as exc:
                print(f"  agent: NodeMetric write failed: {exc}", file=sys.stderr)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, self.interval - (time.monotonic() - started)))


async def reset_node_metrics(http: KubeHTTP, nodes: list[str], system: dict[str, int], interval: float) -> None:
    """Every node's NodeMetric at its system load only (the state before each run)."""
    now = rfc3339(time.time())
    for node in nodes:
        body: dict[str, Any] = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                                "metadata": {"name": node},
                                "spec": {"metricCollectPolicy": {"reportIntervalSeconds": int(interval)}}}
        with contextlib.suppress(KubeError):
            await http.create(NM_PATH, body)
        status = {"updateTime": now, "podsMetric": [], "nodeMetric": {
            "aggregatedNodeUsages": [],
            "nodeUsage": {"resources": {"cpu": f"{system[node]}m", "memory": str(4 * GI)}}}}
        await http.merge_patch(f"{NM_PATH}/{node}/status", {"status": status})


# --------------------------------------------------------------------------- one run
@dataclass
class RunResult:
    mode: str
    waited: dict[str, int]  # FailedScheduling reason -> pods that got it at least once
    placements: dict[str, dict[str, Any]]
    samples: dict[str, list[float]]
    bound: int
    pending: int
    place_seconds: float
    p95: dict[str, float]
    steady_mean: dict[str, float]

    @property
    def hot(self) -> int:
        return sum(1 for v in self.p95.values() if v > HOT_PERCENT)

    @property
    def stddev(self) -> float:
        return statistics.pstdev(self.steady_mean.values())

    @property
    def spread(self) -> float:
        return max(self.steady_mean.values()) - min(self.steady_mean.values())

    @property
    def mean(self) -> float:
        return statistics.fmean(self.steady_mean.values())


async def run_mode(plane: ControlPlane, mode: str, specs: list[PodSpec], *, nodes: list[str],
                   system: dict[str, int], args: argparse.Namespace) -> RunResult:
    namespace, scheduler = f"bench-{mode}", f"bench-{mode}"
    http = await KubeHTTP.connect(plane.kubeconfig, user_agent="placement-bench")
    pods_path = resource_path("", "v1", "pods", namespace=namespace)
    reflector = Reflector(http, pods_path, name=f"bench-{mode}")
    watch = asyncio.create_task(reflector.run())
    agent = Agent(http, reflector, nodes, system, args.interval, random.Random(args.seed + 2))
    stop = asyncio.Event()
    agent_task: asyncio.Task[None] | None = None
    try:
        await asyncio.wait_for(reflector.synced.wait(), 30)
        agent_task = asyncio.create_task(agent.run(stop))
        started, started_wall = time.monotonic(), time.time()
        sem = asyncio.Semaphore(16)

        async def create(spec: PodSpec) -> None:
            await asyncio.sleep(max(0.0, started + spec.arrival - time.monotonic()))
            async with sem:
                await http.create(pods_path, pod_object(spec, namespace, scheduler))

        await asyncio.gather(*(create(s) for s in specs))
        deadline = time.monotonic() + args.arrival_seconds + 120
        bound = 0
        while time.monotonic() < deadline:
            bound = sum(1 for p in reflector.store.values() if (p.get("spec") or {}).get("nodeName"))
            if bound == len(specs):
                break
            await asyncio.sleep(0.5)
        place_seconds = time.monotonic() - started
        agent.steady_from = len(next(iter(agent.samples.values()), []))
        await asyncio.sleep(args.steady_seconds)
        waited = await failed_scheduling(http, namespace)
        placements = {name: placement(obj, started_wall) for name, obj in reflector.store.items()}
    finally:
        stop.set()
        if agent_task is not None:
            await agent_task
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        await http.close()
    steady_from = agent.steady_from or 0
    return RunResult(
        mode=mode,
        waited=waited,
        placements=placements,
        samples=agent.samples,
        bound=bound,
        pending=len(specs) - bound,
        place_seconds=place_seconds,
        p95={n: float(np.percentile(s, 95)) for n, s in agent.samples.items()},
        steady_mean={n: statistics.fmean(s[steady_from:] or s) for n, s in agent.samples.items()},
    )


def placement(obj: dict[str, Any], started: float) -> dict[str, Any]:
    """Where a pod went, what it asked for and used, and when it was bound (seconds into the run)."""
    spec, meta = obj.get("spec") or {}, obj["metadata"]
    scheduled = next((c.get("lastTransitionTime") for c in (obj.get("status") or {}).get("conditions") or []
                      if c.get("type") == "PodScheduled" and c.get("status") == "True"), None)
    when = datetime.fromisoformat(scheduled.replace("Z", "+00:00")).timestamp() - started if scheduled else None
    created = datetime.fromisoformat(meta["creationTimestamp"].replace("Z", "+00:00")).timestamp() - started
    return {"node": spec.get("nodeName"), "request": spec["containers"][0]["resources"]["requests"]["cpu"],
            "real": meta["annotations"][REAL_CPU], "created_at": created, "bound_at": when}


async def failed_scheduling(http: KubeHTTP, namespace: str) -> dict[str, int]:
    """Pods that were rejected at least once, by kube-scheduler's message (minus the node count)."""
    events = await http.get(resource_path("events.k8s.io", "v1", "events", namespace=namespace))
    pods: dict[str, set[str]] = {}
    for event in events.get("items") or []:
        if event.get("reason") == "FailedScheduling":
            note = str(event.get("note") or "").split(":", 1)[-1].strip()
            pods.setdefault(note, set()).add(str((event.get("regarding") or {}).get("name")))
    return {note: len(names) for note, names in pods.items()}


async def delete_pods(plane: ControlPlane, namespace: str) -> None:
    """Remove a run's pods at once (grace period 0) and wait until the API server has none left."""
    http = await KubeHTTP.connect(plane.kubeconfig, user_agent="placement-bench")
    path = resource_path("", "v1", "pods", namespace=namespace)
    try:
        with contextlib.suppress(KubeError):  # a slow answer is fine: we wait for the list to empty below
            await http.request("DELETE", path, params={"gracePeriodSeconds": 0}, timeout_seconds=120,
                               body={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})
        for _ in range(360):
            with contextlib.suppress(KubeError):
                if not (await http.get(path, limit=1)).get("items"):
                    return
            await asyncio.sleep(0.5)
        raise RuntimeError(f"pods of {namespace} were not deleted within 3 minutes")
    finally:
        await http.close()


def start_extender(plane: ControlPlane, extra_args: list[str]) -> str:
    port = free_port()
    extender = Component(
        "loadline-extender",
        [sys.executable, "-m", "scheduler_plugin.extender", f"--kubeconfig={plane.kubeconfig}",
         "--bind-address=127.0.0.1", f"--port={port}", "--log-level=warning", *extra_args],
        plane.root / "logs" / "loadline-extender.log",
    )
    extender.start()
    plane.extra.append(extender)
    base = f"http://127.0.0.1:{port}"
    wait_until("extender /readyz", lambda: http_ok(f"{base}/readyz"), 60, alive=[extender])
    return base


def extender_stats(base: str) -> str:
    """Request count and mean latency of the extender's verbs, from its /metrics."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
        text = response.read().decode()
    parts = []
    outcomes = {}
    for line in text.splitlines():
        if line.startswith("loadline_extender_provisional_placements_total{"):
            outcomes[line.split('"')[1]] = int(float(line.split()[-1]))
    for verb in ("filter", "prioritize"):
        count = total = 0.0
        for line in text.splitlines():
            if line.startswith(f'loadline_extender_request_duration_seconds_count{{verb="{verb}"}}'):
                count = float(line.split()[-1])
            if line.startswith(f'loadline_extender_request_duration_seconds_sum{{verb="{verb}"}}'):
                total = float(line.split()[-1])
        if count:
            parts.append(f"{verb}: {int(count)} calls, mean {1000 * total / count:.1f} ms")
    if outcomes:
        parts.append("provisional placements " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    return "; ".join(parts)


def run_one(plane: ControlPlane, mode: str, specs: list[PodSpec], *, nodes: list[str], system: dict[str, int],
            args: argparse.Namespace) -> RunResult:
    namespace = f"bench-{mode}"
    plane.kubectl("create", "namespace", namespace)
    asyncio.run(_reset(plane, nodes, system, args.interval))
    components: list[Component] = []
    base = ""
    try:
        extenders: list[dict[str, Any]] = []
        if mode == "loadline":
            base = start_extender(plane, args.extender_arg)
            components.append(plane.extra[-1])
            extenders = [{"urlPrefix": base, "filterVerb": "filter", "prioritizeVerb": "prioritize",
                          "weight": args.weight, "nodeCacheCapable": True, "httpTimeout": "5s",
                          "managedResources": []}]  # fmt: skip
        components.append(plane.start_kube_scheduler([{"schedulerName": f"bench-{mode}"}],
                                                     name=f"kube-scheduler-{mode}", extenders=extenders))
        print(f"[{mode}] placing {len(specs)} pods over {args.arrival_seconds:.0f}s ...", flush=True)
        result = asyncio.run(run_mode(plane, mode, specs, nodes=nodes, system=system, args=args))
        if base:
            print(f"[{mode}] extender {extender_stats(base)}", flush=True)
        for note, count in sorted(result.waited.items(), key=lambda kv: -kv[1])[:5]:
            print(f"[{mode}] {count} pods waited: {note[:160]}", flush=True)
        return result
    finally:
        for component in reversed(components):
            plane.stop_component(component)
        asyncio.run(delete_pods(plane, namespace))


async def _reset(plane: ControlPlane, nodes: list[str], system: dict[str, int], interval: float) -> None:
    http = await KubeHTTP.connect(plane.kubeconfig, user_agent="placement-bench")
    try:
        await reset_node_metrics(http, nodes, system, interval)
    finally:
        await http.close()


# --------------------------------------------------------------------------- report
def report(default: RunResult, loadline: RunResult, args: argparse.Namespace) -> bool:
    def ratio(a: float, b: float) -> str:
        return f"{b / a:.2f}" if a else ("1.00" if not b else "inf")

    rows = [
        ("hot nodes (p95 cpu > 65 %)", f"{default.hot}", f"{loadline.hot}", ratio(default.hot, loadline.hot)),
        ("utilisation stddev (pp)", f"{default.stddev:.1f}", f"{loadline.stddev:.1f}",
         ratio(default.stddev, loadline.stddev)),
        ("utilisation max - min (pp)", f"{default.spread:.1f}", f"{loadline.spread:.1f}",
         ratio(default.spread, loadline.spread)),
        ("mean utilisation (%)", f"{default.mean:.1f}", f"{loadline.mean:.1f}", ""),
        ("highest node p95 (%)", f"{max(default.p95.values()):.1f}", f"{max(loadline.p95.values()):.1f}", ""),
        ("pods bound / pending", f"{default.bound} / {default.pending}", f"{loadline.bound} / {loadline.pending}", ""),
        ("seconds to place all", f"{default.place_seconds:.1f}", f"{loadline.place_seconds:.1f}", ""),
    ]
    print()
    print(f"placement quality: {args.nodes} kwok nodes x 32 cpu, {args.pods} pods over {args.arrival_seconds:.0f}s "
          f"(real cpu independent of requests), NodeMetrics every {args.interval:g}s, extender weight {args.weight}"
          + (f", extender {' '.join(args.extender_arg)}" if args.extender_arg else ""))
    print(f"{'':<30} {'kube-scheduler':>16} {'+ loadline ext.':>16} {'ratio':>7}")
    for name, a, b, r in rows:
        print(f"{name:<30} {a:>16} {b:>16} {r:>7}")
    if default.hot == 0:
        print("kube-scheduler produced no hot node in this run; the hot-node target cannot be judged")
        return loadline.hot == 0
    reduction = 1 - loadline.hot / default.hot
    met = reduction >= TARGET_REDUCTION and loadline.pending == 0
    print(f"hot nodes {reduction:.0%} fewer than kube-scheduler (target >= {TARGET_REDUCTION:.0%}): "
          f"{'met' if met else 'MISSED'}")
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--arrival-seconds", type=float, default=40.0)
    parser.add_argument("--steady-seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between NodeMetric reports")
    parser.add_argument("--weight", type=int, default=5, help="extender weight in kube-scheduler's configuration")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--extender-arg", action="append", default=[], metavar="ARG",
                        help="extra flag for the extender, e.g. --extender-arg=--score-scaling=absolute (repeatable)")
    parser.add_argument("--modes", default="default,loadline", help=argparse.SUPPRESS)  # for debugging one side
    parser.add_argument("--json", metavar="FILE", help="also write the per-node figures as JSON")
    parser.add_argument("--logs", metavar="DIR", help="copy the components' logs here before the cluster goes away")
    args = parser.parse_args()

    started = time.monotonic()
    plane = ControlPlane.start()
    try:
        plane.start_kwok()
        nodes = [f"pb-{i:03d}" for i in range(args.nodes)]
        plane.apply([fake_node(n, cpu="32", memory="128Gi", pods="110", labels={LABEL: "placement"}) for n in nodes])
        plane.kubectl("wait", "--for=condition=Ready", "node", *nodes, "--timeout=180s", timeout=200)
        specs = workload(args.pods, args.arrival_seconds, args.seed)
        system = system_load(nodes, args.seed)
        results = {mode: run_one(plane, mode, specs, nodes=nodes, system=system, args=args)
                   for mode in args.modes.split(",")}
    finally:
        if args.logs:
            shutil.copytree(plane.root / "logs", args.logs, dirs_exist_ok=True)
        plane.stop()
    met = report(results["default"], results["loadline"], args) if len(results) == 2 else False
    if args.json:
        Path(args.json).write_text(json.dumps(
            {m: {"p95": r.p95, "steady_mean": r.steady_mean, "bound": r.bound, "samples": r.samples,
                 "placements": r.placements} for m, r in results.items()}, indent=1))
    print(f"(whole run {time.monotonic() - started:.0f}s)")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
