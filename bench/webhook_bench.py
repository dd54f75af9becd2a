"""Pods created through the real API server with the Colocation Profile's webhooks and without them, one run.

    .venv/bin/python bench/webhook_bench.py [--pods 1500] [--concurrency 24] [--rounds 2] [--rate 200] [--seconds 10]

A control plane of its own (etcd + kube-apiserver, no nodes, no scheduler: pods stay Pending, so the figure is
admission and storage only) and `loadline manager --webhook-only` as a host process on loopback, called by the API
server over TLS (`url:` configurations, its own certificates). Every pod is created in a namespace a
ClusterColocationProfile selects, so each creation goes through the mutating webhook (the profile applies: labels,
priority class, scheduler, batch resources) and the validating one.

1. Throughput: `--pods` pods created as fast as `--concurrency` concurrent creators get them through, without the
   webhook configurations and with them, alternating `--rounds` times (the same pod bodies): pods/s each way, their
   ratio, and the CPU each process spent per pod (on 2 cores the machine's CPU is then the bound: the ratio is the
   share of the per-pod CPU the two webhook calls add, the API server's part of them included).
2. At a rate: `--rate` creations per second for `--seconds` (open loop), without and with the webhooks: the pods/s
   achieved each way and their ratio (target >= 0.9), the webhook's own p50/p99 from its histogram
   (`loadline_webhook_admission_duration_seconds`, body read to answer; target p99 <= 5 ms at 200 creations/s), the
   API server's view (`apiserver_admission_webhook_admission_duration_seconds`: the share of calls under 5 ms and
   25 ms, its finest buckets), and the creators' p50/p99.

Exit status 1 when a target is missed. The creators, the API server, etcd and the webhook share the machine: the
webhook process' CPU per admission is printed beside the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil

from common.kube.http import KubeHTTP
from tests.harness.controlplane import ControlPlane
from tests.harness.webhook import configurations, metric_value, webhook_manager

LABELS = {"koordinator.sh/enable-colocation": "true"}
PROFILE = {
    "apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
    "metadata": {"name": "bench-batch"},
    "spec": {"namespaceSelector": {"matchLabels": LABELS}, "qosClass": "BE", "priorityClassName": "koord-batch",
             "schedulerName": "loadline-scheduler", "labels": {"bench": "mutated"}},
}  # fmt: skip
CONFIG = "loadline-bench"


def pod_body(name: str) -> dict[str, Any]:
    """A pod as a Deployment's template makes it: two containers, requests and limits, env, a volume."""
    container = {"name": "app", "image": "registry.example.com/app:1.2.3",
                 "env": [{"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(8)],
                 "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                               "limits": {"cpu": "1", "memory": "512Mi"}},
                 "volumeMounts": [{"name": "data", "mountPath": "/data"}]}  # fmt: skip
    sidecar = {"name": "log", "image": "registry.example.com/log:4.5",
               "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}}}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "bench", "tier": "batch"},
                         "annotations": {"team": "analytics"}},
            "spec": {"containers": [container, sidecar], "volumes": [{"name": "data", "emptyDir": {}}]}}  # fmt: skip


async def create_all(http: KubeHTTP, namespace: str, names: list[str], concurrency: int) -> tuple[float, list[float]]:
    """Create every pod with `concurrency` creators; (seconds, each creation's latency)."""
    queue = iter(names)
    latencies: list[float] = []

    async def creator() -> None:
        for name in queue:
            started = time.perf_counter()
            await http.create(f"/api/v1/namespaces/{namespace}/pods", pod_body(name))
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(creator() for _ in range(concurrency)))
    return time.perf_counter() - started, latencies


async def create_at_rate(http: KubeHTTP, namespace: str, prefix: str, rate: float, seconds: float) -> list[float]:
    """Open loop: a creation every 1/rate s for `seconds`, whatever the answers; each creation's latency."""
    latencies: list[float] = []

    async def one(name: str) -> None:
        started = time.perf_counter()
        await http.create(f"/api/v1/namespaces/{namespace}/pods", pod_body(name))
        latencies.append(time.perf_counter() - started)

    tasks = []
    started = time.perf_counter()
    for i in range(int(rate * seconds)):
        await asyncio.sleep(max(0.0, started + i / rate - time.perf_counter()))
        tasks.append(asyncio.create_task(one(f"{prefix}-{i}")))
    await asyncio.gather(*tasks)
    return latencies


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def histogram_quantile(text_before: str, text_after: str, name: str, q: float, **labels: str) -> float:
    """Prometheus' histogram_quantile over the increase between two scrapes (linear within a bucket)."""
    buckets: list[tuple[float, float]] = []
    for line in text_after.splitlines():
        if not line.startswith(name + "_bucket{") or not all(f'{k}="{v}"' in line for k, v in labels.items()):
            continue
        bound = line.split('le="', 1)[1].split('"', 1)[0]
        le = float("inf") if bound == "+Inf" else float(bound)
        increase = metric_value(text_after, name + "_bucket", le=bound, **labels) - metric_value(
            text_before, name + "_bucket", le=bound, **labels)  # fmt: skip
        buckets.append((le, increase))
    buckets = sorted(set(buckets))
    total = buckets[-1][1] if buckets else 0
    if total <= 0:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return lower
            return lower + (le - lower) * (rank - below) / max(count - below, 1e-9)
        lower, below = le, count
    return lower


def bucket_share(text_before: str, text_after: str, metric: str, le: str, *, webhook: str) -> float:
    def count(text: str, bound: str) -> float:
        return metric_value(text, metric + "_bucket", le=bound, name=webhook)

    total = count(text_after, "+Inf") - count(text_before, "+Inf")
    return (count(text_after, le) - count(text_before, le)) / total if total else float("nan")


class CPU:
    """CPU seconds of the processes that share the machine in this run: kube-apiserver, etcd, the webhook, us."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.processes = {name: psutil.Process(pid) for name, pid in pids.items()}

    def sample(self) -> dict[str, float]:
        return {name: sum(p.cpu_times()[:2]) for name, p in self.processes.items()}

    @staticmethod
    def per_pod(before: dict[str, float], after: dict[str, float], pods: int) -> str:
        return ", ".join(f"{name} {1000 * (after[name] - before[name]) / pods:.2f}" for name in before)


def apiserver_metrics(plane: ControlPlane) -> str:
    return plane.kubectl("get", "--raw", "/metrics", timeout=60).stdout


async def bench(args: argparse.Namespace) -> int:
    plane = ControlPlane.start()
    manager = None
    http: KubeHTTP | None = None
    try:
        home = "loadline-system"
        plane.kubectl("create", "namespace", home)
        plane.apply([{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                      "metadata": {"name": "koord-batch"}, "value": 5000}, PROFILE])  # fmt: skip
        manager = webhook_manager(plane, home, CONFIG, name="loadline-webhook-bench", extra=("--log-level=warning",))
        configs = configurations(plane, CONFIG, manager.base_url, {"matchLabels": LABELS}, timeout=10)
        plane.apply(configs)  # so that the manager has them to write its CA bundle into
        manager.start()
        assert manager.process.proc is not None and plane.apiserver.proc is not None and plane.etcd.proc is not None
        cpu = CPU({"kube-apiserver": plane.apiserver.proc.pid, "etcd": plane.etcd.proc.pid,
                   "webhook": manager.process.proc.pid, "creators": psutil.Process().pid})  # fmt: skip
        http = await KubeHTTP.connect(plane.kubeconfig)
        modes = ("without", "no profile", "with")
        http_rounds: dict[str, list[float]] = {mode: [] for mode in modes}
        print(f"throughput: {args.pods} pods per round, {args.concurrency} concurrent creators, {args.rounds} rounds "
              "each way, alternating", flush=True)  # fmt: skip
        for round_ in range(args.rounds):
            for mode in modes:
                kinds = "mutatingwebhookconfiguration,validatingwebhookconfiguration"
                if mode == "without":
                    plane.kubectl("delete", kinds, CONFIG)
                else:
                    plane.apply(configs)
                    if mode == "no profile":  # one call per pod (mutate-pod, nothing to do), none to validate-pod
                        plane.kubectl("delete", "clustercolocationprofile", PROFILE["metadata"]["name"])
                    else:
                        plane.apply(PROFILE)
                    await asyncio.sleep(3)  # the manager writes its CA bundle back; the API server's watch sees it
                await asyncio.sleep(1)
                namespace = f"bench-{mode.replace(' ', '')}-{round_}-{uuid.uuid4().hex[:4]}"
                plane.apply({"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": namespace, "labels": LABELS}})  # fmt: skip
                names = [f"p-{i}" for i in range(args.pods)]
                cpu_before = cpu.sample()
                seconds, latencies = await create_all(http, namespace, names, args.concurrency)
                cpu_after = cpu.sample()
                mutated = await http.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector="bench=mutated", limit=1)
                assert bool(mutated.get("items")) is (mode == "with"), f"{mode}: a mutated pod {mutated.get('items')}"
                http_rounds[mode].append(args.pods / seconds)
                print(f"  round {round_ + 1} {mode:>10}: {args.pods / seconds:7.1f} pods/s "
                      f"(p50 {1000 * quantile(latencies, 0.5):.1f} ms, p99 {1000 * quantile(latencies, 0.99):.1f} ms); "
                      f"CPU ms per pod: {CPU.per_pod(cpu_before, cpu_after, args.pods)}", flush=True)  # fmt: skip
        without, with_ = statistics.median(http_rounds["without"]), statistics.median(http_rounds["with"])
        ratio = with_ / without
        bare = statistics.median(http_rounds["no profile"]) / without
        print(f"pods/s median: without {without:.1f}, with {with_:.1f}: ratio {ratio:.3f}; one call that changes "
              f"nothing (no profile): ratio {bare:.3f}")

        print(f"\nlatency: {args.rate:g} creations/s for {args.seconds:g} s, open loop", flush=True)
        open_loop: dict[str, list[float]] = {}
        achieved: dict[str, float] = {}
        for mode in ("without", "with"):
            kinds = "mutatingwebhookconfiguration,validatingwebhookconfiguration"
            if mode == "without":
                plane.kubectl("delete", kinds, CONFIG, check=False)
            else:
                plane.apply([*configs, PROFILE])
                await asyncio.sleep(3)
            namespace = f"rate-{mode}-{uuid.uuid4().hex[:4]}"
            plane.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": LABELS}})
            before, api_before, cpu_before = manager.metrics(), apiserver_metrics(plane), cpu.sample()
            started = time.perf_counter()
            open_loop[mode] = await create_at_rate(http, namespace, "r", args.rate, args.seconds)
            took = time.perf_counter() - started
            after, api_after, cpu_after = manager.metrics(), apiserver_metrics(plane), cpu.sample()
            pods = len(open_loop[mode])
            achieved[mode] = pods / took
            print(f"  {mode:>7} webhooks: {pods / took:6.1f} pods/s done, creators p50 "
                  f"{1000 * quantile(open_loop[mode], 0.5):.1f} ms, p99 {1000 * quantile(open_loop[mode], 0.99):.1f} "
                  f"ms; CPU ms per pod: {CPU.per_pod(cpu_before, cpu_after, pods)}", flush=True)  # fmt: skip
        name = "loadline_webhook_admission_duration_seconds"
        p50 = {w: histogram_quantile(before, after, name, 0.5, webhook=w) for w in ("mutate-pod", "validate-pod")}
        p99 = {w: histogram_quantile(before, after, name, 0.99, webhook=w) for w in ("mutate-pod", "validate-pod")}
        calls = metric_value(after, name + "_count") - metric_value(before, name + "_count")
        webhook_cpu = cpu_after["webhook"] - cpu_before["webhook"]
        for w, median in p50.items():
            print(f"  webhook {w}: p50 {1000 * median:.2f} ms, p99 {1000 * p99[w]:.2f} ms (its own histogram)")
        api = "apiserver_admission_webhook_admission_duration_seconds"
        for hook in ("mpod.loadline.dev", "vpod.loadline.dev"):
            under5 = bucket_share(api_before, api_after, api, "0.005", webhook=hook)
            under25 = bucket_share(api_before, api_after, api, "0.025", webhook=hook)
            print(f"  API server, {hook}: {100 * under5:.1f} % of calls under 5 ms, "
                  f"{100 * under25:.1f} % under 25 ms")
        print(f"  webhook process CPU: {1000 * webhook_cpu / max(calls, 1):.2f} ms per admission "
              f"({calls:.0f} admissions)")
        worst = max(p99.values())
        at_rate = achieved["with"] / achieved["without"]
        ok = at_rate >= 0.9 and worst <= 0.005
        print(f"\nresult at {args.rate:g} creations/s: pods/s with / without {at_rate:.3f} (>= 0.9: "
              f"{'yes' if at_rate >= 0.9 else 'NO'}), webhook p99 {1000 * worst:.2f} ms (<= 5 ms: "
              f"{'yes' if worst <= 0.005 else 'NO'}); as fast as the creators get through: ratio {ratio:.3f}")
        return 0 if ok else 1
    finally:
        if http is not None:
            await http.close()
        if manager is not None:
            manager.stop()
        plane.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--pods", type=int, default=1500, help="pods per throughput round (default %(default)s)")
    parser.add_argument("--concurrency", type=int, default=24, help="concurrent creators (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="throughput rounds each way (default %(default)s)")
    parser.add_argument("--rate", type=float, default=200, help="open-loop creations per second (default %(default)s)")
    parser.add_argument("--seconds", type=float, default=10, help="open-loop duration (default %(default)s)")
    return asyncio.run(bench(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
