"""The API server CPU each scheduler causes per 1,000 pods, and the requests it makes per pod.

    .venv/bin/python bench/apiserver_cost_bench.py

`bench/scheduler_backlog_bench.py`'s `apisrv cpu-s/1k` is the API server's CPU from a scheduler's start to its
last binding. It includes whatever else the API server does in that time: kwok's node heartbeats and lease
renewals, and kwok catching up on the drain before (marking those pods Running, deleting them again). The
API server then works at about the same rate for either scheduler, so that figure follows wall time: a scheduler
that takes longer, or drains after another, is charged more for the same requests. Here each scheduler is charged
for its own only:

  * 200 kwok nodes; kwok is stopped once they are Ready (without kube-controller-manager nothing marks them
    NotReady), so the API server has nothing else to do in the background;
  * kube-scheduler and Loadline alternately, K L L K, so that neither always drains after the other, each on the
    same backlog of 1,000 pods (the backlog bench's pods, nodes, NodeMetrics and scheduler configurations);
  * per drain: the backlog is created with no scheduler running and the API server's idle CPU rate measured for
    IDLE_SECONDS; then the scheduler is started and stopped once every pod is bound and has its Scheduled event.
    Its cost is the API server's CPU over that span less the idle rate times the span, and its requests are the
    difference of the API server's `apiserver_request_total` (by verb, resource, subresource) over the span.

Measured on 2 shared cores (`bench/results/apiserver_cost.txt`): both schedulers cost the API server the same per
pod (ratio 0.99-1.03 over four runs), and each makes one binding and one event per pod and nothing else per pod.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scheduler_backlog_bench import KUBE, LOADLINE, SCHEDULERS, PodWatch, delete_all_pods
from bench.scheduler_e2e_bench import (
    NAMESPACE,
    NODE_CPU_MILLI,
    NODE_MEMORY_GI,
    create_pods,
    parse_metrics,
    pod_object,
    process_cpu_seconds,
    usage_of,
    workload,
    write_node_metrics,
)
from common.kube.http import KubeHTTP
from tests.harness.controlplane import ControlPlane, fake_node

NODES = 200
PODS = 1000
ORDER = (KUBE, LOADLINE, LOADLINE, KUBE)
SEED = 7
IDLE_SECONDS = 10.0
TIMEOUT_SECONDS = 300.0
CONCURRENCY = 16  # pod creations and deletions in flight


@dataclass
class Drain:
    scheduler: str
    bound: int = 0
    seconds: float = 0.0  # scheduler started -> every pod bound and reported
    apiserver_cpu: float = 0.0  # over `seconds`
    idle_rate: float = 0.0  # the API server's CPU seconds per second before the scheduler started
    requests: Counter[str] = field(default_factory=Counter)  # "VERB resource/subresource" -> requests

    @property
    def net_per_k(self) -> float:
        """The API server's CPU per 1,000 pods, less what it spends when no scheduler runs."""
        return (self.apiserver_cpu - self.idle_rate * self.seconds) * 1000 / max(self.bound, 1)


def request_counts(plane: ControlPlane) -> Counter[str]:
    text = plane.kubectl("get", "--raw", "/metrics", timeout=60).stdout
    counts: Counter[str] = Counter()
    for name, labels, value in parse_metrics(text):
        if name == "apiserver_request_total" and labels.get("resource"):
            key = f"{labels.get('verb')} {labels['resource']}/{labels.get('subresource', '')}"
            counts[key.rstrip("/")] += int(value)
    return counts


async def drain(
    plane: ControlPlane, http: KubeHTTP, watch: PodWatch, *, name: str, round_: int, usage: dict[str, tuple[int, int]]
) -> Drain:
    which = SCHEDULERS[name]
    objects = [pod_object(s, f"ac{round_}", which.scheduler_name) for s in workload(PODS, SEED)]
    watch.expect({o["metadata"]["name"] for o in objects})
    await create_pods(http, objects, CONCURRENCY, {})
    await asyncio.wait_for(watch.all_seen.wait(), 120)
    await write_node_metrics(http, usage, create=False)  # fresh for LoadAware's filter
    api_pid = plane.apiserver.proc.pid if plane.apiserver.proc else None
    result = Drain(name)
    idle0 = process_cpu_seconds(api_pid)
    await asyncio.sleep(IDLE_SECONDS)
    result.idle_rate = (process_cpu_seconds(api_pid) - idle0) / IDLE_SECONDS
    before = await asyncio.to_thread(request_counts, plane)
    cpu0, started = process_cpu_seconds(api_pid), time.monotonic()
    component = await asyncio.to_thread(which.start, plane, argparse.Namespace(profile_loadline=None))
    plane.extra.append(component)
    try:
        await asyncio.wait_for(asyncio.gather(watch.all_bound.wait(), watch.all_reported.wait()), TIMEOUT_SECONDS)
    finally:
        result.seconds = time.monotonic() - started
        result.apiserver_cpu = process_cpu_seconds(api_pid) - cpu0
        await asyncio.to_thread(plane.stop_component, component)
    result.bound = len(watch.bound)
    result.requests = await asyncio.to_thread(request_counts, plane)
    result.requests.subtract(before)
    print(
        f"  {name}: {result.bound} bound in {result.seconds:.1f}s, API server {result.apiserver_cpu:.2f} CPU-s "
        f"(idle {result.idle_rate:.3f} cores) -> {result.net_per_k:.2f} CPU-s per 1,000 pods",
        flush=True,
    )
    await delete_all_pods(http, watch.wanted, CONCURRENCY)
    return result


async def run(plane: ControlPlane) -> list[Drain]:
    names = [f"e2e-{i:04d}" for i in range(NODES)]
    await asyncio.to_thread(plane.kubectl, "create", "namespace", NAMESPACE)
    kwok = plane.start_kwok()
    await asyncio.to_thread(
        plane.apply, [fake_node(n, cpu=str(NODE_CPU_MILLI // 1000), memory=f"{NODE_MEMORY_GI}Gi") for n in names]
    )
    await asyncio.to_thread(plane.kubectl, "wait", "--for=condition=Ready", "node", "--all", "--timeout=300s")
    plane.stop_component(kwok)  # the nodes stay Ready; nothing else writes to the API server from now on
    http = await KubeHTTP.connect(plane.kubeconfig, user_agent="apiserver-cost-bench")
    usage = usage_of(names, SEED)
    await write_node_metrics(http, usage, create=True)
    watch = PodWatch(http)
    watching = asyncio.gather(watch.reflector.run(), watch.events.run())
    try:
        await asyncio.wait_for(asyncio.gather(watch.reflector.synced.wait(), watch.events.synced.wait()), 60)
        return [await drain(plane, http, watch, name=name, round_=i, usage=usage) for i, name in enumerate(ORDER)]
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
        await http.close()


def report(drains: list[Drain]) -> None:
    print(f"\nAPI server CPU-s per 1,000 pods net of idle ({NODES} nodes, {PODS} pods, order {' '.join(ORDER)}):")
    net = {name: [d.net_per_k for d in drains if d.scheduler == name] for name in dict.fromkeys(ORDER)}
    for name, values in net.items():
        print(f"  {name:<15} {' / '.join(f'{v:.2f}' for v in values)}  (mean {statistics.mean(values):.2f})")
    print(f"  loadline/kube-scheduler: {statistics.mean(net[LOADLINE]) / statistics.mean(net[KUBE]):.2f}")
    print("\nAPI server requests per pod during the drains (mean over each scheduler's drains):")
    keys = sorted({k for d in drains for k, v in d.requests.items() if v > 0})
    print(f"  {'request':<40} " + " ".join(f"{name:>15}" for name in net))
    for key in keys:
        cells = [statistics.mean(d.requests[key] / max(d.bound, 1) for d in drains if d.scheduler == n) for n in net]
        print(f"  {key:<40} " + " ".join(f"{c:>15.3f}" for c in cells))
    print(f"({os.cpu_count()} CPUs; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end)")


def main() -> int:
    plane = ControlPlane.start()
    try:
        drains = asyncio.run(run(plane))
    finally:
        plane.stop()
    report(drains)
    return 0


if __name__ == "__main__":
    sys.exit(main())
