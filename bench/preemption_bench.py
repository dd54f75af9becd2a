"""One preemption decision, in process: 1,000 full nodes × 30 pods, a prod pod that fits nowhere.

    .venv/bin/python bench/preemption_bench.py [--nodes 1000] [--pods-per-node 30] [--repeat 20]

Every node (32 cpu, 128Gi) is full with `--pods-per-node` koord-batch and koord-free pods of
mixed sizes and start times, and has a fresh NodeMetric; a koord-prod pod asking for 8 cpu
arrives. Timed: the whole scheduling cycle that fails Filter everywhere and runs the
DefaultPreemption PostFilter (kube-scheduler's DefaultPreemption args: 10 % / at least 100
candidate nodes, so the dry run simulates about 100 nodes), reported as the PostFilter time
and the whole cycle, p50/p99 over `--repeat` decisions (each from a fresh random offset), wall
clock and CPU seconds of this single-threaded process (on a loaded shared host the CPU figure is
what an idle core would give).
Target (issue 15): ≤ 100 ms.

With `--kube-nodes N` (e.g. 1000), the same cluster shape (N kwok nodes × `--pods-per-node`
bound pods) is also built on a real control plane (the harness: kube-apiserver, etcd, kwok)
and the real kube-scheduler preempts for `--kube-repeat` prod pods; its own
`scheduler_framework_extension_point_duration_seconds{extension_point="PostFilter"}` (mean
over the decisions, read from its /metrics) is printed beside Loadline's figure.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import ssl
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler_plugin.framework.clock import FakeClock
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.schedule_one import scheduling_cycle
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.framework.status import Code
from scheduler_plugin.plugins.defaultpreemption import DECISION, PreemptionDecision
from scheduler_plugin.plugins.loadaware.nodeload import NodeLoads
from scheduler_plugin.plugins.registry import frameworks_from_config
from tests import objects

START = 1_700_000_000.0
PRIORITIES = (5000, 5000, 5000, 3000)  # koord-batch, koord-free
CONFIG = {"profiles": [{"schedulerName": "loadline-scheduler",
                        "plugins": {"multiPoint": {"enabled": [{"name": "DefaultPreemption"}]}}}]}


def make_node(i: int) -> dict[str, Any]:
    return objects.node(f"node-{i:05d}", cpu="32", memory="128Gi")


def make_pod(name: str, node_name: str, cpu_milli: int, priority: int, started: float) -> dict[str, Any]:
    return objects.pod(name, f"{cpu_milli}m", "2Gi", namespace="bench", uid=name, node_name=node_name,
                       priority=priority, created=None, started=started, scheduled_at=started)  # fmt: skip


def make_metric(node_name: str, rng: random.Random) -> dict[str, Any]:
    return objects.node_metric(node_name, f"{rng.randint(4, 12)}", "40Gi", updated=START)


def build(nodes: int, per_node: int, rng: random.Random) -> Snapshot:
    node_objs = [make_node(i) for i in range(nodes)]
    pods = []
    for i in range(nodes):
        # Sizes summing to exactly 32 cpu: the node is full for any further request.
        sizes = [1000] * per_node
        left = 32000 - sum(sizes)
        for k in range(left // 500):
            sizes[k % per_node] += 500
        for j, size in enumerate(sizes):
            started = START - rng.randint(100, 10_000)
            pods.append(make_pod(f"p-{i:05d}-{j:02d}", f"node-{i:05d}", size, rng.choice(PRIORITIES), started))
    metrics = [make_metric(f"node-{i:05d}", rng) for i in range(nodes)]
    return Snapshot.from_objects(nodes=node_objs, pods=pods, stores={NodeLoads: metrics})


def parse_postfilter(text: str) -> tuple[float, float]:
    """(sum, count) of kube-scheduler's PostFilter extension-point histogram over all statuses."""
    total = count = 0.0
    for line in text.splitlines():
        if not line.startswith("scheduler_framework_extension_point_duration_seconds_") or \
                'extension_point="PostFilter"' not in line:
            continue
        name, value = line.split("{", 1)[0], float(line.rsplit(" ", 1)[1])
        if name.endswith("_sum"):
            total += value
        elif name.endswith("_count"):
            count += value
    return total, count


def _scrape_postfilter(port: int) -> tuple[float, float]:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=context, timeout=10) as response:
        return parse_postfilter(response.read().decode())


async def kube_postfilter(nodes: int, per_node: int, repeat: int) -> tuple[float, int]:
    """Mean PostFilter seconds of the real kube-scheduler over `repeat` preemptions on kwok nodes."""
    from common.kube.http import KubeHTTP
    from tests.harness.controlplane import ControlPlane, fake_node

    plane = ControlPlane.start(install_crds=False)
    try:
        plane.start_kwok()
        names = [f"node-{i:05d}" for i in range(nodes)]
        plane.apply([fake_node(n, cpu="32", memory="128Gi") for n in names])
        plane.kubectl("wait", "--for=condition=Ready", "node", "--all", "--timeout=600s", timeout=620)
        plane.kubectl("create", "namespace", "bench")
        plane.apply([{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": f"p{v}"},
                      "value": v} for v in (3000, 5000, 9000)])
        http = await KubeHTTP.connect(plane.kubeconfig, user_agent="preemption-bench")
        try:
            snap_rng = random.Random(15)
            objects = []
            for i in range(nodes):
                sizes = [1000] * per_node
                for k in range((32000 - sum(sizes)) // 500):
                    sizes[k % per_node] += 500
                for j, size in enumerate(sizes):
                    obj = make_pod(f"p-{i:05d}-{j:02d}", names[i], size, snap_rng.choice(PRIORITIES), START)
                    del obj["spec"]["priority"], obj["status"], obj["metadata"]["uid"]
                    obj["spec"]["priorityClassName"] = f"p{snap_rng.choice(PRIORITIES)}"
                    obj["spec"]["schedulerName"] = "default-scheduler"
                    obj["spec"]["containers"][0]["image"] = "fake"
                    objects.append(obj)
            queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
            for obj in objects:
                queue.put_nowait(obj)

            async def worker() -> None:
                while not queue.empty():
                    obj = queue.get_nowait()
                    await http.create("/api/v1/namespaces/bench/pods", obj)

            await asyncio.gather(*(worker() for _ in range(32)))
            await asyncio.to_thread(
                plane.start_kube_scheduler, name="kube-scheduler-bench",
                extra_args=["--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics"],
            )
            component = plane.extra[-1]
            port = int(next(a for a in component.argv if a.startswith("--secure-port=")).split("=", 1)[1])
            for k in range(repeat):
                await http.create("/api/v1/namespaces/bench/pods", {
                    "metadata": {"name": f"prod-{k}"},
                    "spec": {"priorityClassName": "p9000", "containers": [
                        {"name": "c", "image": "x", "resources": {"requests": {"cpu": "8", "memory": "8Gi"}}}]}})
                deadline = time.monotonic() + 120
                while True:
                    obj = await http.get(f"/api/v1/namespaces/bench/pods/prod-{k}")
                    if (obj.get("status") or {}).get("nominatedNodeName") or obj["spec"].get("nodeName"):
                        break
                    if time.monotonic() > deadline:
                        raise SystemExit(f"kube-scheduler did not preempt for prod-{k}")
                    await asyncio.sleep(0.2)
            total, count = await asyncio.to_thread(_scrape_postfilter, port)
        finally:
            await http.close()
    finally:
        plane.stop()
    return (total / count if count else float("nan")), int(count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--kube-nodes", type=int, default=0, help="also measure kube-scheduler on this many kwok nodes")
    parser.add_argument("--kube-repeat", type=int, default=5)
    opts = parser.parse_args()

    rng = random.Random(15)
    snap = build(opts.nodes, opts.pods_per_node, rng)
    framework = next(iter(frameworks_from_config(CONFIG, snapshot=snap, clock=FakeClock(START + 30)).values()))
    framework.warm_up()
    timings: dict[str, list[float]] = {}

    class Observer:
        def plugin_done(self, point: str, plugin: str, code: Code, seconds: float) -> None:
            return None

        def point_done(self, point: str, code: Code, seconds: float) -> None:
            timings.setdefault(point, []).append(seconds)

    framework.observer = Observer()
    cycle: list[float] = []
    cycle_cpu: list[float] = []
    victims: list[int] = []
    candidates: list[int] = []
    for k in range(opts.repeat):
        prod = PodInfo.from_dict({
            "metadata": {"name": f"prod-{k}", "namespace": "bench", "uid": f"prod-{k}"},
            "spec": {"schedulerName": "loadline-scheduler", "priority": 9000,
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "8", "memory": "8Gi"}}}]},
            "status": {"phase": "Pending"},
        })
        started, started_cpu = time.perf_counter(), time.process_time()
        result = scheduling_cycle(framework, prod)
        cycle.append(time.perf_counter() - started)
        cycle_cpu.append(time.process_time() - started_cpu)
        assert result.state is not None
        decision = result.state.get(DECISION, PreemptionDecision)
        if decision is None:
            raise SystemExit(f"no preemption decision: {result.status.message}")
        victims.append(len(decision.best.victims))
        candidates.append(len(decision.candidates))

    def ms(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    post = timings.get("PostFilter", [])
    print(f"nodes={opts.nodes} pods/node={opts.pods_per_node} decisions={opts.repeat} "
          f"candidates/decision={statistics.median(candidates):.0f} victims={statistics.median(victims):.0f}")
    print(f"PostFilter (preemption) p50 {ms(post, 0.5):.1f} ms  p99 {ms(post, 0.99):.1f} ms  (target <= 100 ms)")
    print(f"whole cycle            p50 {ms(cycle, 0.5):.1f} ms  p99 {ms(cycle, 0.99):.1f} ms  "
          f"(CPU of this process: p50 {ms(cycle_cpu, 0.5):.1f} ms  p99 {ms(cycle_cpu, 0.99):.1f} ms)")
    if opts.kube_nodes:
        mean, count = asyncio.run(kube_postfilter(opts.kube_nodes, opts.pods_per_node, opts.kube_repeat))
        print(f"kube-scheduler PostFilter on {opts.kube_nodes} kwok nodes x {opts.pods_per_node} pods: "
              f"mean {1000 * mean:.1f} ms over {count} PostFilter run(s) (its own histogram)")


if __name__ == "__main__":
    main()
