"""Scheduler core, in process: pods/s and attempt latency over an in-memory snapshot (no API server).

    .venv/bin/python bench/scheduler_inprocess_bench.py [--nodes 100,1000,5000] [--pods 1000] [--repeat 3]
                                                        [--percentages default,100]

The default profile (SchedulingGates, Coscheduling, NodeUnschedulable, NodeName, TaintToleration,
NodeAffinity, NodeResourcesFit, LoadAwareScheduling, DefaultBinder) schedules `--pods` pods through
the scheduling queue, one scheduling cycle each, bound by an in-memory binder. Nodes carry zone and
instance-type labels, 10 % have a NoSchedule taint, every node has a fresh NodeMetric (10-60 % cpu) and
existing pods (scheduler_perf's "init pods"). Measured pods vary in size; a fifth carry a preferred
node affinity and a tenth a toleration. Pod JSON is parsed before the clock starts (an informer does
that work in the real scheduler).

Two settings of percentageOfNodesToScore: "default" is kube-scheduler's adaptive default (examine
nodes until max(100, N·max(5, 50 − N/125)%) feasible ones are found: 420 of 1,000, 500 of 5,000), the
setting kube-scheduler's own throughput floor is measured with; "100" filters and scores every node.
Plugin caches are warmed before the clock starts (`Framework.warm_up`, as after an informer's initial
list); the warm-up time is reported separately.

Reported: pods/s = pods bound / time of queue + cycles + binding, both per wall-clock second and per
CPU second of this process (on a shared, loaded host the CPU figure is what an idle core would give;
the run is single-threaded), and the p50/p99 latency of one scheduling attempt (wall and CPU).
Targets (issue 4): >= 2,000 pods/s at 1,000 nodes, >= 680 pods/s at 5,000.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler_plugin.framework.binder import InMemoryBinder
from scheduler_plugin.framework.clock import FakeClock
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.simulator import InProcessScheduler
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.loadaware.nodeload import NodeLoads
from scheduler_plugin.plugins.registry import frameworks_from_config
from tests import objects

TARGETS = {1000: 2000.0, 5000: 680.0}
START = 1_700_000_000.0
ZONES = ("zone-a", "zone-b", "zone-c")
TYPES = ("m5.8xlarge", "c5.9xlarge", "r5.8xlarge")


def make_node(i: int, rng: random.Random) -> dict[str, Any]:
    name = f"node-{i:05d}"
    taints = [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}] if i % 10 == 9 else []
    labels = {"topology.kubernetes.io/zone": ZONES[i % 3], "node.kubernetes.io/instance-type": rng.choice(TYPES),
              "kubernetes.io/hostname": name}  # fmt: skip
    return objects.node(name, cpu="32", memory="128Gi", extra={"ephemeral-storage": "200Gi"}, labels=labels,
                        taints=taints)  # fmt: skip


def make_pod(name: str, rng: random.Random, node_name: str | None = None, fancy: bool = True) -> dict[str, Any]:
    cpu = rng.choice(("100m", "250m", "500m", "1"))
    memory = rng.choice(("128Mi", "256Mi", "512Mi", "1Gi"))
    affinity = tolerations = None
    if fancy and rng.random() < 0.2:
        affinity = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 50, "preference": {"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [rng.choice(ZONES)]}]}}]}}
    if fancy and rng.random() < 0.1:
        tolerations = [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}]
    # The API server fills in status.qosClass; requests without limits make a Burstable pod.
    return objects.pod(name, cpu, memory, namespace="bench", uid=name, node_name=node_name, created=START - 3600,
                       qos_class="Burstable", affinity=affinity, tolerations=tolerations)  # fmt: skip


def make_metric(name: str, rng: random.Random, pods: list[str]) -> dict[str, Any]:
    cpu = f"{int(32000 * rng.uniform(0.10, 0.60))}m"
    memory = f"{int(128 * rng.uniform(0.2, 0.6))}Gi"
    usages = [objects.pod_usage("bench", p, "80m", "100Mi", priority="koord-prod") for p in pods]
    return objects.node_metric(name, cpu, memory, updated=START - 5, pods=usages)


def build(nodes: int, init_pods: int, seed: int) -> tuple[Snapshot, list[PodInfo]]:
    rng = random.Random(seed)
    node_objs = [make_node(i, rng) for i in range(nodes)]
    placed: dict[str, list[str]] = {n["metadata"]["name"]: [] for n in node_objs}
    init = []
    for i in range(init_pods):
        name = node_objs[i % nodes]["metadata"]["name"]
        pod_name = f"init-{i}"
        placed[name].append(pod_name)
        init.append(make_pod(pod_name, rng, node_name=name, fancy=False))
    metrics = [make_metric(n, rng, placed[n]) for n in placed]
    snapshot = Snapshot.from_objects(nodes=node_objs, pods=init, stores={NodeLoads: metrics})
    return snapshot, []


def config(percentage: str) -> dict[str, Any] | None:
    if percentage == "default":
        return None
    return {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "percentageOfNodesToScore": int(percentage)}


Run = tuple[float, float, float, float, float, int, float]


def run_once(nodes: int, pods: int, init_pods: int, seed: int, percentage: str) -> Run:
    """(pods/s wall, pods/s cpu, p50 wall, p99 wall, p99 cpu, pods bound, warm-up seconds)."""
    snapshot, _ = build(nodes, init_pods, seed)
    rng = random.Random(seed + 1)
    measured = [PodInfo.from_dict(make_pod(f"pod-{i}", rng)) for i in range(pods)]
    clock = FakeClock(START)
    binder = InMemoryBinder()
    frameworks = frameworks_from_config(config(percentage), snapshot=snapshot, clock=clock, binder=binder,
                                        tie_break_seed=seed)  # the same placements on every run
    framework = frameworks["loadline-scheduler"]
    sim = InProcessScheduler(framework, binder=binder, cycle_seconds=0.0)
    for info in measured:
        snapshot.upsert_pod_info(info)
        sim.queue.add(info)
    warm_started = time.perf_counter()
    framework.warm_up()
    warm_up = time.perf_counter() - warm_started
    gc.collect()
    gc.disable()
    started, started_cpu = time.perf_counter(), time.process_time()
    asyncio.run(sim.run(max_virtual_seconds=3600.0))
    elapsed, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    gc.enable()
    wall = sorted(sim.stats.attempt_seconds)
    cpus = sorted(sim.stats.attempt_cpu_seconds)
    p99_index = min(len(wall) - 1, int(0.99 * len(wall)))
    bound = len(binder.bindings)
    return bound / elapsed, bound / cpu, statistics.median(wall), wall[p99_index], cpus[p99_index], bound, warm_up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="100,1000,5000")
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--init-pods-per-node", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--percentages", default="default,100", help="percentageOfNodesToScore settings to run")
    args = parser.parse_args()
    print(f"{'nodes':>6} {'pct':>7} {'bound':>5} {'pods/s':>7} {'pods/cpu-s':>10} {'p50 ms':>7} {'p99 ms':>7}"
          f" {'p99 cpu ms':>10} {'warm-up s':>9}  target (on CPU time)")
    for percentage in args.percentages.split(","):
        for nodes in (int(n) for n in args.nodes.split(",")):
            init = int(nodes * args.init_pods_per_node)
            runs = [run_once(nodes, args.pods, init, seed=r, percentage=percentage) for r in range(args.repeat)]
            wall_rate = statistics.median(r[0] for r in runs)
            cpu_rate = statistics.median(r[1] for r in runs)
            p50 = statistics.median(r[2] for r in runs)
            p99 = statistics.median(r[3] for r in runs)
            p99_cpu = statistics.median(r[4] for r in runs)
            warm_up = statistics.median(r[6] for r in runs)
            target = TARGETS.get(nodes)
            verdict = "" if target is None else f">= {target:.0f} {'ok' if cpu_rate >= target else 'MISSED'}"
            print(f"{nodes:>6} {percentage:>7} {runs[0][5]:>5} {wall_rate:>7.0f} {cpu_rate:>10.0f} {p50 * 1e3:>7.3f}"
                  f" {p99 * 1e3:>7.3f} {p99_cpu * 1e3:>10.3f} {warm_up:>9.2f}  {verdict}")
    print(f"(medians of {args.repeat} runs; host load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
