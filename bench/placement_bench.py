"""Placement quality: kube-scheduler, kube-scheduler + Loadline's extender, Loadline's scheduler and
Koordinator's koord-scheduler on the same pods and nodes; with `--closed-loop`, each with its descheduler.

    .venv/bin/python bench/placement_bench.py [--nodes 100] [--pods 1000] [--arrival-seconds 40]
        [--steady-seconds 20] [--interval 2] [--weight 5] [--loadline-weight 1] [--seed 7]
        [--modes kube,extender,loadline,koord]
    .venv/bin/python bench/placement_bench.py --closed-loop [--steady-seconds 150] [--deschedule-interval 10]

Starts its own control plane (etcd, kube-apiserver, kube-controller-manager, kwok — tests/harness) with
`--nodes` kwok nodes of 32 cpu / 128Gi, then runs the same workload once per mode, one after the other,
on the same nodes (bench/placement_components.py starts each):

  kube      the real kube-scheduler (the harness's build), default plugins (placement by requests)
  extender  the same kube-scheduler calling `python -m scheduler_plugin.extender` (LoadAwareScheduling,
            Koordinator's defaults: cpu threshold 65 %) for filter and prioritize, nodeCacheCapable,
            weight `--weight`
  loadline  `loadline scheduler`, its default profile (kube's default plugins + LoadAwareScheduling,
            weight 1; `--loadline-weight` to change it)
  koord     Koordinator v1.8.0's koord-scheduler, kube's default plugins + LoadAwareScheduling, its defaults

Workload (identical in every run, fixed by `--seed`): `--pods` pods in ReplicaSets of 2–8 replicas,
created at a steady pod rate over `--arrival-seconds`; kube-controller-manager creates the pods. Requests
per ReplicaSet: 0.5/1/2/4 cpu (30/30/25/15 %) and 1–4Gi. Real cpu use is drawn per ReplicaSet
independently of the request from a skewed distribution (lognormal, mean ≈ 1.4 cpu, median ≈ 0.9,
capped at 8) and recorded in the pod template's annotation `loadline.bench/real-cpu`, so an evicted pod's
replacement carries the same load; real memory is 40–80 % of the request. Every node also carries a
fixed "system" load of 2–12 % of its cpu.

A small loop here plays koordlet: every `--interval` seconds it recomputes each node's real usage
from the pods running on it (not terminating): NodeMetric `nodeUsage` (system load + Σ real cpu, times
1 ± 4 % noise), `systemUsage` (the system load), `aggregatedNodeUsages` (5m0s window: avg and p95 of this
run's samples so far) and `podsMetric` (each pod's real use), with `updateTime` = now. After every pod is
bound it keeps reporting for `--steady-seconds`.

Open loop (the default), reported per scheduler (cpu utilisation = usage / allocatable):
  hot nodes     nodes whose p95 utilisation over the run is above 65 %
  stddev, max−min of the nodes' mean utilisation over the steady phase (percentage points)
Target (issue 4): at least 50 % fewer hot nodes than kube-scheduler, for the extender and the scheduler.

Closed loop (`--closed-loop`, modes kube,loadline,koord by default): at the start of the steady phase
each scheduler gets its descheduler — `loadline descheduler` for Loadline's, koord-descheduler for
koord-scheduler, none for kube-scheduler — both on one Koordinator DeschedulerConfiguration (LowNodeLoad
on cpu, low 45 % / high 65 %, anomaly after 2 rounds, a round every `--deschedule-interval`,
MigrationController evicting directly, Koordinator's default limits). Reported: hot nodes (true
utilisation, without noise, > 65 %) after the arrivals and at the end, evictions, the evicted real cpu,
the replacements bound and how many of them went back to a node their ReplicaSet was evicted from.
Target (issue 17): Loadline's loop ends with 0 hot nodes, and never more than Koordinator's.

Exit status 0 when the target is met, 1 when it is not.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import shutil
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from bench import placement_components as components
from bench.placement_components import HOT_PERCENT
from common.api.wire import format_time, parse_rfc3339
from common.kube.http import KubeError, KubeHTTP, resource_path
from common.kube.reflector import Reflector
from tests.harness.controlplane import ControlPlane, fake_node
from tests.harness.processes import Component
from tests.objects import MakeNodeMetric

NODE_CPU_MILLI = 32_000
NODE_MEMORY = 128 * 2**30
TARGET_REDUCTION = 0.5
LABEL = "loadline-bench"
REAL_CPU = "loadline.bench/real-cpu"
REAL_MEMORY = "loadline.bench/real-memory"
NM_PATH = resource_path("slo.koordinator.sh", "v1alpha1", "nodemetrics")
GI = 2**30
SYSTEM_MEMORY = 4 * GI


# --------------------------------------------------------------------------- workload
@dataclass(frozen=True)
class WorkloadSpec:
    """One ReplicaSet: its replicas share requests and real use, so an evicted pod's replacement
    (created by kube-controller-manager) carries the same load wherever it lands."""

    name: str
    replicas: int
    cpu_request: int  # milli
    memory_request: int
    real_cpu: int  # milli
    real_memory: int
    arrival: float  # seconds after the start


def workload(pods: int, arrival_seconds: float, seed: int) -> list[WorkloadSpec]:
    """ReplicaSets of 2-8 replicas adding up to `pods`, created at a steady pod rate."""
    rng = random.Random(seed)
    sigma = 0.9
    mean = 1400.0
    mu = math.log(mean) - sigma**2 / 2  # lognormal with that mean
    out: list[WorkloadSpec] = []
    placed = 0
    while placed < pods:
        replicas = min(rng.randint(2, 8), pods - placed)
        if pods - placed - replicas == 1:  # a ReplicaSet of one is never descheduled: keep every one >= 2
            replicas += 1
        cpu = rng.choices([500, 1000, 2000, 4000], weights=[30, 30, 25, 15])[0]
        memory = rng.choice([1, 2, 4]) * GI
        real_cpu = min(int(rng.lognormvariate(mu, sigma)), 8000)
        real_memory = int(memory * rng.uniform(0.4, 0.8))
        out.append(WorkloadSpec(f"rs-{len(out):04d}", replicas, cpu, memory, real_cpu, real_memory,
                                arrival_seconds * placed / pods))  # fmt: skip
        placed += replicas
    return out


def system_load(nodes: list[str], seed: int) -> dict[str, int]:
    rng = random.Random(seed + 1)
    return {n: int(NODE_CPU_MILLI * rng.uniform(0.02, 0.12)) for n in nodes}


def replicaset_object(spec: WorkloadSpec, namespace: str, scheduler: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": spec.name, "namespace": namespace},
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": {"app": spec.name}},
            "template": {
                "metadata": {"labels": {"app": spec.name},
                             "annotations": {REAL_CPU: f"{spec.real_cpu}m", REAL_MEMORY: str(spec.real_memory)}},
                "spec": {
                    "schedulerName": scheduler,
                    "nodeSelector": {LABEL: "placement"},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "app", "image": "fake",
                                    "resources": {"requests": {"cpu": f"{spec.cpu_request}m",
                                                               "memory": str(spec.memory_request)}}}],
                },
            },
        },
    }  # fmt: skip


def running_on(obj: dict[str, Any], nodes: Mapping[str, Any]) -> str | None:
    """The node a pod runs on, None while it is unbound or leaving (its load is gone with the eviction)."""
    node = (obj.get("spec") or {}).get("nodeName")
    if node not in nodes or obj["metadata"].get("deletionTimestamp"):
        return None
    return str(node)


def true_utilisation(pods: Iterable[dict[str, Any]], system: Mapping[str, int]) -> dict[str, float]:
    """Each node's cpu utilisation (%) without measurement noise: system load + Σ real cpu of its pods."""
    cpu = dict(system)
    for obj in pods:
        node = running_on(obj, system)
        if node is not None:
            cpu[node] += int(obj["metadata"]["annotations"][REAL_CPU].rstrip("m"))
    return {n: 100.0 * c / NODE_CPU_MILLI for n, c in cpu.items()}


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
        memory = dict.fromkeys(self.nodes, SYSTEM_MEMORY)
        pods: dict[str, list[dict[str, Any]]] = {n: [] for n in self.nodes}
        for obj in list(self.pods.store.values()):
            node = running_on(obj, cpu)
            if node is None:
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
        now = format_time(time.time())
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
                    # what LowNodeLoad adds the podsMetric to (both descheduler implementations)
                    "systemUsage": {"resources": {"cpu": f"{self.system[node]}m", "memory": str(SYSTEM_MEMORY)}},
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
    now = format_time(time.time())
    for node in nodes:
        with contextlib.suppress(KubeError):
            await http.create(NM_PATH, MakeNodeMetric(node).report_interval(int(interval)).obj())
        cpu, memory = f"{system[node]}m", str(SYSTEM_MEMORY)
        status = MakeNodeMetric(node).updated(now).pods([]).aggregated([]).node_usage(cpu, memory).system(cpu, memory)
        await http.merge_patch(f"{NM_PATH}/{node}/status", {"status": status.status()})


# --------------------------------------------------------------------------- one run
def owner_of(obj: dict[str, Any]) -> str:
    return str(((obj["metadata"].get("ownerReferences") or [{}])[0]).get("name", ""))


@dataclass
class Moves:
    """What the steady phase changed, from the bench's own watch: pods that left (evicted: nothing else deletes
    pods then) and the replacements kube-controller-manager created, once bound."""

    armed: bool = False
    known: set[str] = field(default_factory=set)  # uids present when the steady phase began
    evicted: dict[str, tuple[str, str, int]] = field(default_factory=dict)  # uid -> owner, node, real cpu
    replaced: dict[str, tuple[str, str]] = field(default_factory=dict)  # uid -> owner, node

    def arm(self, store: Mapping[str, dict[str, Any]]) -> None:
        self.known = {obj["metadata"]["uid"] for obj in store.values()}
        self.armed = True

    def on_event(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if not self.armed:
            return
        meta = obj["metadata"]
        uid, node = meta["uid"], (obj.get("spec") or {}).get("nodeName") or ""
        if kind == "DELETED" or meta.get("deletionTimestamp"):
            if uid not in self.evicted:
                self.evicted[uid] = (owner_of(obj), node, int(meta["annotations"][REAL_CPU].rstrip("m")))
        elif node and uid not in self.known and uid not in self.replaced:
            self.replaced[uid] = (owner_of(obj), node)

    @property
    def back_on_same_node(self) -> int:
        """Replacements bound to a node a pod of the same ReplicaSet was evicted from (the ping-pong)."""
        left = {(owner, node) for owner, node, _ in self.evicted.values()}
        return sum(1 for owner_node in self.replaced.values() if owner_node in left)


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
    after_arrivals: dict[str, float]  # true utilisation once every pod was placed
    at_end: dict[str, float]  # true utilisation at the end of the steady phase
    pending_at_end: int
    evictions: int = 0
    evicted_cpu: int = 0  # milli
    replacements: int = 0
    back_on_same_node: int = 0

    @property
    def hot(self) -> int:
        return sum(1 for v in self.p95.values() if v > HOT_PERCENT)

    @property
    def hot_after_arrivals(self) -> int:
        return sum(1 for v in self.after_arrivals.values() if v > HOT_PERCENT)

    @property
    def hot_at_end(self) -> int:
        return sum(1 for v in self.at_end.values() if v > HOT_PERCENT)

    @property
    def stddev(self) -> float:
        return statistics.pstdev(self.steady_mean.values())

    @property
    def spread(self) -> float:
        return max(self.steady_mean.values()) - min(self.steady_mean.values())

    @property
    def mean(self) -> float:
        return statistics.fmean(self.steady_mean.values())


async def run_mode(plane: ControlPlane, mode: str, specs: list[WorkloadSpec], *, nodes: list[str],
                   system: dict[str, int], args: argparse.Namespace,
                   on_steady: Callable[[], object] | None) -> RunResult:  # fmt: skip
    """Create the ReplicaSets at their arrival times, wait for every pod to be bound, then hold a steady
    phase (`on_steady` starts the descheduler at its beginning) while the fake koordlet keeps reporting."""
    namespace, scheduler = f"bench-{mode}", f"bench-{mode}"
    http = await KubeHTTP.connect(plane.kubeconfig, user_agent="placement-bench")
    pods_path = resource_path("", "v1", "pods", namespace=namespace)
    rs_path = resource_path("apps", "v1", "replicasets", namespace=namespace)
    reflector = Reflector(http, pods_path, name=f"bench-{mode}")
    moves = Moves()
    reflector.add_handler(moves.on_event)
    watch = asyncio.create_task(reflector.run())
    agent = Agent(http, reflector, nodes, system, args.interval, random.Random(args.seed + 2))
    stop = asyncio.Event()
    agent_task: asyncio.Task[None] | None = None
    total = sum(s.replicas for s in specs)
    try:
        await asyncio.wait_for(reflector.synced.wait(), 30)
        agent_task = asyncio.create_task(agent.run(stop))
        started, started_wall = time.monotonic(), time.time()
        sem = asyncio.Semaphore(16)

        async def create(spec: WorkloadSpec) -> None:
            await asyncio.sleep(max(0.0, started + spec.arrival - time.monotonic()))
            async with sem:
                await http.create(rs_path, replicaset_object(spec, namespace, scheduler))

        await asyncio.gather(*(create(s) for s in specs))
        deadline = time.monotonic() + args.arrival_seconds + 600  # a loaded host creates pods slowly
        bound = 0
        while time.monotonic() < deadline:
            bound = sum(1 for p in reflector.store.values() if running_on(p, system))
            if bound == total:
                break
            await asyncio.sleep(0.5)
        place_seconds = time.monotonic() - started
        after_arrivals = true_utilisation(reflector.store.values(), system)
        moves.arm(reflector.store)
        if on_steady is not None:
            await asyncio.to_thread(on_steady)
        agent.steady_from = len(next(iter(agent.samples.values()), []))
        await asyncio.sleep(args.steady_seconds)
        at_end = true_utilisation(reflector.store.values(), system)
        pending_at_end = sum(1 for p in reflector.store.values()
                             if not p["metadata"].get("deletionTimestamp") and not running_on(p, system))  # fmt: skip
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
        pending=total - bound,
        place_seconds=place_seconds,
        p95={n: float(np.percentile(s, 95)) for n, s in agent.samples.items()},
        steady_mean={n: statistics.fmean(s[steady_from:] or s) for n, s in agent.samples.items()},
        after_arrivals=after_arrivals,
        at_end=at_end,
        pending_at_end=pending_at_end,
        evictions=len(moves.evicted),
        evicted_cpu=sum(cpu for _, _, cpu in moves.evicted.values()),
        replacements=len(moves.replaced),
        back_on_same_node=moves.back_on_same_node,
    )


def placement(obj: dict[str, Any], started: float) -> dict[str, Any]:
    """Where a pod went, what it asked for and used, and when it was bound (seconds into the run)."""
    spec, meta = obj.get("spec") or {}, obj["metadata"]
    scheduled = next((c.get("lastTransitionTime") for c in (obj.get("status") or {}).get("conditions") or []
                      if c.get("type") == "PodScheduled" and c.get("status") == "True"), None)
    when = parse_rfc3339(scheduled).timestamp() - started if scheduled else None
    created = parse_rfc3339(meta["creationTimestamp"]).timestamp() - started
    return {"node": spec.get("nodeName"), "owner": owner_of(obj),
            "request": spec["containers"][0]["resources"]["requests"]["cpu"],
            "real": meta["annotations"][REAL_CPU], "created_at": created, "bound_at": when}  # fmt: skip


async def failed_scheduling(http: KubeHTTP, namespace: str) -> dict[str, int]:
    """Pods that were rejected at least once, by the scheduler's message (minus the node count)."""
    events = await http.get(resource_path("events.k8s.io", "v1", "events", namespace=namespace))
    pods: dict[str, set[str]] = {}
    for event in events.get("items") or []:
        if event.get("reason") == "FailedScheduling":
            note = str(event.get("note") or "").split(":", 1)[-1].strip()
            pods.setdefault(note, set()).add(str((event.get("regarding") or {}).get("name")))
    return {note: len(names) for note, names in pods.items()}


async def delete_workload(plane: ControlPlane, namespace: str) -> None:
    """Remove a run's ReplicaSets (gone at once, so nothing recreates pods) and pods (grace period 0), and wait
    until the API server has no pod left."""
    http = await KubeHTTP.connect(plane.kubeconfig, user_agent="placement-bench")
    path = resource_path("", "v1", "pods", namespace=namespace)
    try:
        # Background: the ReplicaSets go at once (Orphan would keep them, and their pods coming back, until the
        # garbage collector had rewritten every pod); the pods are deleted right after, not left to the collector.
        # On a loaded host a collection DELETE can time out part-way: repeat both until no pod is left.
        rs_path = resource_path("apps", "v1", "replicasets", namespace=namespace)
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0, "propagationPolicy": "Background"}
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            for collection in (rs_path, path):
                with contextlib.suppress(KubeError):  # a slow answer is fine: we look at the list below
                    await http.request("DELETE", collection, timeout_seconds=120, body=body)
            for _ in range(30):
                with contextlib.suppress(KubeError):
                    if not (await http.get(path, limit=1)).get("items"):
                        return
                await asyncio.sleep(0.5)
        raise RuntimeError(f"pods of {namespace} were not deleted within 10 minutes")
    finally:
        await http.close()


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


def start_scheduler(plane: ControlPlane, mode: str, args: argparse.Namespace) -> tuple[list[Component], str]:
    """The mode's scheduler (and extender), serving `bench-<mode>`; the extender's URL when there is one."""
    name = f"bench-{mode}"
    if mode == "kube":
        return [components.start_kube_scheduler(plane, name)], ""
    if mode == "extender":
        extender, base = components.start_extender(plane, args.extender_arg)
        config = {"urlPrefix": base, "filterVerb": "filter", "prioritizeVerb": "prioritize", "weight": args.weight,
                  "nodeCacheCapable": True, "httpTimeout": "5s", "managedResources": []}  # fmt: skip
        return [extender, components.start_kube_scheduler(plane, name, config)], base
    if mode == "loadline":
        return [components.start_loadline_scheduler(plane, name, args.loadline_weight)[0]], ""
    if mode == "koord":
        return [components.start_koord_scheduler(plane, name)], ""
    raise ValueError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")


def run_one(plane: ControlPlane, mode: str, specs: list[WorkloadSpec], *, nodes: list[str], system: dict[str, int],
            args: argparse.Namespace, clean_up: bool = True) -> RunResult:
    """One mode on the shared nodes; `clean_up`: delete its pods afterwards (not after the last: the plane goes)."""
    namespace = f"bench-{mode}"
    plane.kubectl("create", "namespace", namespace)
    asyncio.run(_reset(plane, nodes, system, args.interval))
    started: list[Component] = []
    try:
        scheduler, base = start_scheduler(plane, mode, args)
        started += scheduler
        deschedule = DESCHEDULERS.get(mode) if args.closed_loop else None

        def on_steady() -> None:
            if deschedule is not None:
                started.append(deschedule(plane, namespace, args.deschedule_interval))
                print(f"[{mode}] steady phase: {args.steady_seconds:.0f}s with {DESCHEDULER_LABELS[mode]}", flush=True)

        pods = sum(s.replicas for s in specs)
        print(f"[{mode}] placing {pods} pods of {len(specs)} ReplicaSets over {args.arrival_seconds:.0f}s ...",
              flush=True)  # fmt: skip
        result = asyncio.run(run_mode(plane, mode, specs, nodes=nodes, system=system, args=args, on_steady=on_steady))
        if base:
            print(f"[{mode}] extender {extender_stats(base)}", flush=True)
        for note, count in sorted(result.waited.items(), key=lambda kv: -kv[1])[:5]:
            print(f"[{mode}] {count} pods waited: {note[:160]}", flush=True)
        print(f"[{mode}] hot nodes: p95 {result.hot}, after arrivals {result.hot_after_arrivals}, at the end "
              f"{result.hot_at_end}; {result.evictions} evictions, {result.replacements} replacements bound "
              f"({time.strftime('%H:%M:%S')}, load average {os.getloadavg()[0]:.1f})", flush=True)  # fmt: skip
        return result
    finally:
        for component in reversed(started):
            plane.stop_component(component)
        if clean_up:
            asyncio.run(delete_workload(plane, namespace))


async def _reset(plane: ControlPlane, nodes: list[str], system: dict[str, int], interval: float) -> None:
    http = await KubeHTTP.connect(plane.kubeconfig, user_agent="placement-bench")
    try:
        await reset_node_metrics(http, nodes, system, interval)
    finally:
        await http.close()


# --------------------------------------------------------------------------- report
def ratio(a: float, b: float) -> str:
    return f"{b / a:.2f}" if a else ("1.00" if not b else "inf")


def print_table(rows: list[tuple[str, list[str]]], results: dict[str, RunResult]) -> None:
    print(f"{'':<34}" + "".join(f"{MODE_LABELS[m]:>17}" for m in results))
    for name, cells in rows:
        print(f"{name:<34}" + "".join(f"{c:>17}" for c in cells))


def report_open(results: dict[str, RunResult], args: argparse.Namespace) -> bool:
    r = list(results.values())
    rows = [
        ("hot nodes (p95 cpu > 65 %)", [str(x.hot) for x in r]),
        ("utilisation stddev (pp)", [f"{x.stddev:.1f}" for x in r]),
        ("utilisation max - min (pp)", [f"{x.spread:.1f}" for x in r]),
        ("mean utilisation (%)", [f"{x.mean:.1f}" for x in r]),
        ("highest node p95 (%)", [f"{max(x.p95.values()):.1f}" for x in r]),
        ("pods bound / pending", [f"{x.bound} / {x.pending}" for x in r]),
        ("seconds to place all", [f"{x.place_seconds:.1f}" for x in r]),
    ]
    print_table(rows, results)
    kube = results.get("kube")
    if kube is None:
        return False
    met = True
    for mode in ("extender", "loadline", "koord"):
        if mode not in results or mode == "kube":
            continue
        x = results[mode]
        reduction = 1 - x.hot / kube.hot if kube.hot else float("nan")
        ok = (x.hot == 0 if not kube.hot else reduction >= TARGET_REDUCTION) and x.pending == 0
        if mode != "koord":  # the target is Loadline's; Koordinator is the reference beside it
            met = met and ok
        print(f"{MODE_LABELS[mode]}: hot nodes {ratio(kube.hot, x.hot)} of kube-scheduler's"
              + ("" if mode == "koord" else f" (target <= {1 - TARGET_REDUCTION:.2f}): {'met' if ok else 'MISSED'}"))
    if "koord" in results:
        koord = results["koord"]
        for mode in ("extender", "loadline"):
            if mode in results:
                print(f"{MODE_LABELS[mode]} / koord-scheduler: hot nodes {results[mode].hot} vs {koord.hot}, "
                      f"stddev ratio {ratio(koord.stddev, results[mode].stddev)}")
    return met


def report_closed(results: dict[str, RunResult], args: argparse.Namespace) -> bool:
    r = list(results.values())
    rows = [
        ("descheduler", [DESCHEDULER_LABELS.get(x.mode, "none") for x in r]),
        ("hot nodes after arrivals", [str(x.hot_after_arrivals) for x in r]),
        ("hot nodes at the end", [str(x.hot_at_end) for x in r]),
        ("evictions", [str(x.evictions) for x in r]),
        ("evicted real cpu (cores)", [f"{x.evicted_cpu / 1000:.1f}" for x in r]),
        ("replacements bound", [str(x.replacements) for x in r]),
        ("... back on the node left", [str(x.back_on_same_node) for x in r]),
        ("pods pending at the end", [str(x.pending_at_end) for x in r]),
        ("highest node at the end (%)", [f"{max(x.at_end.values()):.1f}" for x in r]),
        ("utilisation stddev at end (pp)", [f"{statistics.pstdev(x.at_end.values()):.1f}" for x in r]),
        ("seconds to place all", [f"{x.place_seconds:.1f}" for x in r]),
    ]
    print_table(rows, results)
    loadline = results.get("loadline")
    if loadline is None:
        return False
    met = loadline.hot_at_end == 0 and loadline.pending_at_end == 0
    verdict = f"Loadline's closed loop ends with {loadline.hot_at_end} hot nodes (target 0)"
    if "kube" in results:
        verdict += f" where kube-scheduler alone leaves {results['kube'].hot_at_end}"
    if "koord" in results:
        koord = results["koord"]
        met = met and loadline.hot_at_end <= koord.hot_at_end
        verdict += f"; Koordinator's ends with {koord.hot_at_end} (target: Loadline's never more)"
    print(f"{verdict}: {'met' if met else 'MISSED'}")
    return met


MODES = ("kube", "extender", "loadline", "koord")
MODE_LABELS = {"kube": "kube-scheduler", "extender": "+ loadline ext.", "loadline": "loadline",
               "koord": "koord-scheduler"}  # fmt: skip
DESCHEDULERS = {"extender": components.start_loadline_descheduler,
                "loadline": components.start_loadline_descheduler,
                "koord": components.start_koord_descheduler}  # fmt: skip
DESCHEDULER_LABELS = {"extender": "loadline", "loadline": "loadline", "koord": "koord-desch."}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--arrival-seconds", type=float, default=40.0)
    parser.add_argument("--closed-loop", action="store_true",
                        help="run each scheduler with its descheduler during the steady phase")
    parser.add_argument("--steady-seconds", type=float,
                        help="steady phase after the arrivals (default 20, 150 with --closed-loop)")
    parser.add_argument("--deschedule-interval", type=float, default=10.0, help="seconds between descheduling rounds")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between NodeMetric reports")
    parser.add_argument("--weight", type=int, default=5, help="extender weight in kube-scheduler's configuration")
    parser.add_argument("--loadline-weight", type=int, metavar="W",
                        help="LoadAwareScheduling's score weight in Loadline's scheduler (default: its default "
                        "profile's 1, Koordinator's chart value)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--extender-arg", action="append", default=[], metavar="ARG",
                        help="extra flag for the extender, e.g. --extender-arg=--score-scaling=absolute (repeatable)")
    parser.add_argument("--modes", help=f"comma-separated, of {', '.join(MODES)} (default: all; "
                        "kube,loadline,koord with --closed-loop)")
    parser.add_argument("--json", metavar="FILE", help="also write the per-node figures as JSON")
    parser.add_argument("--logs", metavar="DIR", help="copy the components' logs here before the cluster goes away")
    args = parser.parse_args()
    if args.steady_seconds is None:
        args.steady_seconds = 150.0 if args.closed_loop else 20.0
    modes = (args.modes or ("kube,loadline,koord" if args.closed_loop else ",".join(MODES))).split(",")
    if unknown := [m for m in modes if m not in MODES]:
        parser.error(f"--modes: unknown {', '.join(unknown)}; known: {', '.join(MODES)}")

    started = time.monotonic()
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    plane = ControlPlane.start()
    try:
        plane.start_kwok()
        # The ReplicaSets' pods and the replacements of evicted ones; without the node lifecycle controller, whose
        # evictions from a kwok node with a late Lease (a loaded host) would count as the descheduler's.
        plane.start_controller_manager(["replicaset", "garbagecollector"])
        if "koord" in modes:
            components.install_koordinator_crds(plane)
        nodes = [f"pb-{i:03d}" for i in range(args.nodes)]
        plane.apply([fake_node(n, cpu="32", memory="128Gi", pods="110", labels={LABEL: "placement"}) for n in nodes])
        plane.kubectl("wait", "--for=condition=Ready", "node", *nodes, "--timeout=180s", timeout=200)
        specs = workload(args.pods, args.arrival_seconds, args.seed)
        system = system_load(nodes, args.seed)
        results = {mode: run_one(plane, mode, specs, nodes=nodes, system=system, args=args,
                                 clean_up=mode != modes[-1]) for mode in modes}  # fmt: skip
    finally:
        if args.logs:
            shutil.copytree(plane.root / "logs", args.logs, dirs_exist_ok=True)
        plane.stop()
    print()
    print(f"placement quality{' (closed loop)' if args.closed_loop else ''}: {args.nodes} kwok nodes x 32 cpu, "
          f"{args.pods} pods in {len(specs)} ReplicaSets over {args.arrival_seconds:.0f}s "
          f"(real cpu independent of requests), steady phase {args.steady_seconds:.0f}s, "
          f"NodeMetrics every {args.interval:g}s, extender weight {args.weight}"
          + (f", descheduling every {args.deschedule_interval:g}s" if args.closed_loop else "")
          + (f", extender {' '.join(args.extender_arg)}" if args.extender_arg else "")
          + (f", loadline LoadAware weight {args.loadline_weight}" if args.loadline_weight is not None else ""))
    met = report_closed(results, args) if args.closed_loop else report_open(results, args)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {m: {"p95": r.p95, "steady_mean": r.steady_mean, "after_arrivals": r.after_arrivals, "at_end": r.at_end,
                 "bound": r.bound, "samples": r.samples, "placements": r.placements} for m, r in results.items()},
            indent=1))  # fmt: skip
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}; "
          f"whole run {time.monotonic() - started:.0f}s")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
