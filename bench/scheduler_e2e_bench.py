"""End to end on a real API server: the real kube-scheduler vs `loadline scheduler`, side by side.

    .venv/bin/python bench/scheduler_e2e_bench.py [--nodes 100] [--pods 1000] [--concurrency 32]
                                                  [--repeat 1] [--seed 7] [--timeout 240] [--logs DIR]

One control plane (etcd, kube-apiserver, kwok — tests/harness) with `--nodes` kwok nodes of
32 cpu / 256Gi. Every node gets a NodeMetric with a fresh status (nodeUsage 10-45 % cpu, 20-50 %
memory, and a 5m0s aggregated window with avg/p50/p90/p95/p99), re-written every 30 s so that
updateTime never gets near LoadAware's 180 s expiration: LoadAware really filters and scores.

Then, one after the other in the same run, on the same nodes, with the same pods (fixed by
`--seed`: requests 100m/250m/500m/1 cpu and 128Mi-1Gi):

  kube-scheduler  the harness's kube-scheduler binary, profile `default-scheduler` (its default
                  plugins); clientConnection qps/burst 5000 (the harness sets them), no leader election
  loadline        `python -m common.cli scheduler --no-leader-elect`, its default profile
                  `loadline-scheduler` (which includes LoadAwareScheduling); clientConnection
                  qps/burst 5000 as well (its default, like kube-scheduler's, is 50/100).

Each phase: start the scheduler and wait until it is healthy (Loadline: /readyz and every
NodeMetric in its cache), then create `--pods` pods as fast as a bounded-concurrency async creator
(`--concurrency` requests in flight, KubeHTTP; the same creator for both) can, and wait until all
are bound. Stop the scheduler, delete the pods (grace period 0) and wait until they are gone.

Measured, per phase:
  pods/s      pods / (first create request sent -> last pod seen bound), client clock
  p50/p99     client side, sub-second: create request sent -> the pod first seen with
              spec.nodeName through a watch (a Reflector started before the phase)
  srv p50/p99 server side, whole seconds: metadata.creationTimestamp -> the PodScheduled
              condition's lastTransitionTime (set by the binding); both have 1 s granularity
  create/s    the creator's own rate (pods / time to send them all): an upper bound on pods/s
  sched cpu   CPU seconds the scheduler process used during the phase (from /proc), per 1,000 pods

The creator and the watch run in this process, on the same 2-core host as everything else.
Target (issue 4): Loadline's pods/s >= kube-scheduler's (ratio >= 1.0), LoadAware on.
The exit status is 0 whether or not the target is met; the verdict is printed.
After each Loadline phase, a breakdown of its own /metrics (mean cycle, extension point,
plugin and binding durations) is printed so one can see where its time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import shutil
import statistics
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common.api.wire import parse_rfc3339
from common.kube.http import JSON, KubeError, KubeHTTP, resource_path
from common.kube.reflector import EventType, Reflector
from tests.harness.controlplane import REPO_ROOT, ControlPlane, fake_node
from tests.harness.processes import Component, free_port, http_ok, wait_until
from tests.objects import MakeNodeMetric, resources

NAMESPACE = "e2e-bench"
NM_PATH = resource_path("slo.koordinator.sh", "v1alpha1", "nodemetrics")
PODS_PATH = resource_path("", "v1", "pods", namespace=NAMESPACE)
NODES_PATH = resource_path("", "v1", "nodes")
NODE_CPU_MILLI = 32_000
NODE_MEMORY_GI = 256
GI = 1024**3
REFRESH_SECONDS = 30.0
KUBE = "kube-scheduler"
LOADLINE = "loadline"
SCHEDULER_NAMES = {KUBE: "default-scheduler", LOADLINE: "loadline-scheduler"}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def process_cpu_seconds(pid: int | None) -> float:
    """utime + stime (+ waited-for children) of one process, from /proc; 0 when unknown."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(v) for v in fields[11:15]) / CLK_TCK


# --------------------------------------------------------------------------- workload
@dataclass(frozen=True)
class PodSpec:
    index: int
    cpu: str
    memory: str


def workload(pods: int, seed: int) -> list[PodSpec]:
    rng = random.Random(seed)
    return [
        PodSpec(i, rng.choice(("100m", "250m", "500m", "1")), rng.choice(("128Mi", "256Mi", "512Mi", "1Gi")))
        for i in range(pods)
    ]


def pod_object(spec: PodSpec, prefix: str, scheduler_name: str) -> JSON:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{prefix}-{spec.index:05d}", "namespace": NAMESPACE, "labels": {"app": "e2e-bench"}},
        "spec": {
            "schedulerName": scheduler_name,
            "containers": [{"name": "c", "image": "fake",
                            "resources": {"requests": {"cpu": spec.cpu, "memory": spec.memory}}}],
            "terminationGracePeriodSeconds": 0,
        },
    }  # fmt: skip


# --------------------------------------------------------------------------- NodeMetrics
def usage_of(nodes: list[str], seed: int) -> dict[str, tuple[int, int]]:
    rng = random.Random(seed + 1)
    return {
        n: (int(NODE_CPU_MILLI * rng.uniform(0.10, 0.45)), int(NODE_MEMORY_GI * GI * rng.uniform(0.2, 0.5)))
        for n in nodes
    }


def metric_status(cpu_milli: int, memory: int) -> JSON:
    usage, peak = resources(f"{cpu_milli}m", str(memory)), resources(f"{int(cpu_milli * 1.1)}m", str(memory))
    window = {"duration": "5m0s", "usage": {"avg": usage, "p50": usage, "p90": peak, "p95": peak, "p99": peak}}
    built = MakeNodeMetric("_").updated(time.time()).node_usage(f"{cpu_milli}m", str(memory)).aggregated([window])
    return built.pods([]).status()


async def write_node_metrics(http: KubeHTTP, usage: dict[str, tuple[int, int]], *, create: bool) -> None:
    sem = asyncio.Semaphore(16)

    async def one(node: str) -> None:
        async with sem:
            if create:
                body = MakeNodeMetric(node).report_interval(int(REFRESH_SECONDS), aggregate_seconds=300).obj()
                with contextlib.suppress(KubeError):
                    await http.create(NM_PATH, body)
            await http.merge_patch(f"{NM_PATH}/{node}/status", {"status": metric_status(*usage[node])})

    await asyncio.gather(*(one(n) for n in usage))


async def refresh_node_metrics(http: KubeHTTP, usage: dict[str, tuple[int, int]]) -> None:
    """Play koordlet: a fresh updateTime every REFRESH_SECONDS (LoadAware expires metrics after 180 s)."""
    while True:
        await asyncio.sleep(REFRESH_SECONDS)
        try:
            await write_node_metrics(http, usage, create=False)
        except KubeError as exc:
            print(f"  NodeMetric refresh failed: {exc}", file=sys.stderr)


# --------------------------------------------------------------------------- schedulers
def start_loadline(plane: ControlPlane) -> tuple[Component, str]:
    port = free_port()
    config = plane.root / "loadline-scheduler.yaml"
    config.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "clientConnection: {qps: 5000, burst: 5000}  # the same client limits as the kube-scheduler run\n"
        "profiles: [{schedulerName: loadline-scheduler}]\n"
    )
    component = Component(
        "loadline-scheduler",
        [sys.executable, "-m", "common.cli", "scheduler", f"--kubeconfig={plane.kubeconfig}", f"--config={config}",
         "--bind-address=127.0.0.1", f"--port={port}", "--no-leader-elect"],
        plane.root / "logs" / "loadline-scheduler.log",
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    component.start()
    plane.extra.append(component)
    url = f"http://127.0.0.1:{port}"
    wait_until("loadline scheduler /readyz", lambda: http_ok(f"{url}/readyz"), 90, alive=[component])
    return component, url


def scrape(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text: str = response.read().decode()
        return text


_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)$")


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    samples = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match["labels"] or ""))
        with contextlib.suppress(ValueError):
            samples.append((match["name"], labels, float(match["value"])))
    return samples


def metric_value(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    return sum(v for n, lab, v in samples if n == name and all(lab.get(k) == x for k, x in labels.items()))


def breakdown(before: str, after: str, pods: int) -> str:
    """Mean durations from the scheduler's own histograms, over this phase only (after − before)."""
    b, a = parse_metrics(before), parse_metrics(after)

    def delta(name: str, **labels: str) -> float:
        return metric_value(a, name, **labels) - metric_value(b, name, **labels)

    lines = []

    def row(label: str, base: str, *, sampled: bool = False, **labels: str) -> None:
        count, total = delta(f"{base}_count", **labels), delta(f"{base}_sum", **labels)
        if count and sampled:  # plugin durations are sampled (a fraction of cycles): only the mean means much
            lines.append(f"    {label:<44} n={count:>6.0f}  mean {total / count * 1e3:8.3f} ms  (sampled)")
        elif count:
            lines.append(
                f"    {label:<44} n={count:>6.0f}  mean {total / count * 1e3:8.3f} ms"
                f"  total {total:7.2f} s  ({total / max(pods, 1) * 1e3:6.2f} ms/pod)"
            )

    prefix = "loadline_scheduler_"
    row("scheduling attempt (cycle), scheduled", f"{prefix}scheduling_attempt_duration_seconds", result="scheduled")
    row("scheduling attempt, unschedulable", f"{prefix}scheduling_attempt_duration_seconds", result="unschedulable")
    row("queue -> bound (pod_scheduling_duration)", f"{prefix}pod_scheduling_duration_seconds")
    row("binding API call", f"{prefix}binding_duration_seconds")
    points = sorted(
        {lab["extension_point"] for n, lab, _ in a if n == f"{prefix}framework_extension_point_duration_seconds_count"}
    )
    for point in points:
        row(f"extension point {point}", f"{prefix}framework_extension_point_duration_seconds", extension_point=point)
    plugins = sorted(
        {
            (lab["plugin"], lab["extension_point"])
            for n, lab, _ in a
            if n == f"{prefix}plugin_execution_duration_seconds_count"
        }
    )
    for plugin, point in plugins:
        row(
            f"plugin {plugin}/{point}",
            f"{prefix}plugin_execution_duration_seconds",
            sampled=True,
            plugin=plugin,
            extension_point=point,
        )
    attempts = {lab.get("result", ""): v for n, lab, v in a if n == f"{prefix}schedule_attempts_total"}
    lines.append(f"    attempts by result (cumulative): {attempts}")
    cache = {lab.get("type", ""): v for n, lab, v in a if n == f"{prefix}cache_size"}
    lines.append(f"    cache sizes at the end: {cache}")
    bind_errors = {lab.get("reason", ""): v for n, lab, v in a if n == f"{prefix}bind_errors_total"}
    if bind_errors:
        lines.append(f"    bind errors: {bind_errors}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- one phase
@dataclass
class PhaseResult:
    scheduler: str
    pods: int
    bound: int
    seconds: float
    create_seconds: float
    client_latencies: list[float] = field(default_factory=list)
    server_latencies: list[float] = field(default_factory=list)
    scheduler_cpu: float = 0.0
    apiserver_cpu: float = 0.0
    bench_cpu: float = 0.0

    @property
    def rate(self) -> float:
        return self.bound / self.seconds if self.seconds > 0 else 0.0


async def create_pods(
    http: KubeHTTP, objects: list[JSON], concurrency: int, sent: dict[str, float], *, path: str = PODS_PATH
) -> None:
    """Bounded concurrency: `concurrency` workers pull from one list, each POSTing one object (a pod, or whatever
    `path` collects) at a time."""
    queue = iter(objects)

    async def worker() -> None:
        for obj in queue:
            name = obj["metadata"]["name"]
            for attempt in range(5):
                sent[name] = time.time()
                try:
                    await http.create(path, obj)
                    break
                except KubeError as exc:
                    if exc.status == 409:  # an earlier attempt did land
                        break
                    if attempt == 4:
                        raise
                    await asyncio.sleep(0.2)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def delete_pods(http: KubeHTTP) -> None:
    with contextlib.suppress(KubeError):  # a slow answer is fine: we wait for the list to empty below
        await http.request(
            "DELETE",
            PODS_PATH,
            params={"gracePeriodSeconds": 0},
            timeout_seconds=120,
            body={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
        )
    for _ in range(360):
        with contextlib.suppress(KubeError):
            if not (await http.get(PODS_PATH, limit=1)).get("items"):
                return
        await asyncio.sleep(0.5)
    raise RuntimeError("the pods were not deleted within 3 minutes")


async def run_phase(
    plane: ControlPlane, http: KubeHTTP, which: str, specs: list[PodSpec], *, args: argparse.Namespace, round_no: int
) -> PhaseResult:
    scheduler_name = SCHEDULER_NAMES[which]
    prefix = f"{'ks' if which == KUBE else 'll'}{round_no}"
    objects = [pod_object(s, prefix, scheduler_name) for s in specs]
    url = ""
    if which == KUBE:
        component = await asyncio.to_thread(plane.start_kube_scheduler, name=f"kube-scheduler-{round_no}")
    else:
        component, url = await asyncio.to_thread(start_loadline, plane)

        # /readyz first, then make sure LoadAware's cache holds every node's metric before the clock starts
        def metrics_cached() -> bool:
            cache = parse_metrics(scrape(url))
            # (loadline_scheduler_cache_size has no node_metrics series; the reflector's object gauge does)
            cached = sum(
                v for n, lab, v in cache if n == "loadline_kube_objects" and "nodemetric" in lab.get("resource", "")
            )
            return bool(cached >= args.nodes)

        await asyncio.to_thread(wait_until, "loadline NodeMetric cache", metrics_cached, 60, 0.5, alive=[component])
    await asyncio.sleep(2)  # let it settle after start-up (informers synced, first GC, ...)
    before = await asyncio.to_thread(scrape, url) if url else ""

    sent: dict[str, float] = {}
    seen: dict[str, float] = {}
    done = asyncio.Event()
    wanted = {o["metadata"]["name"] for o in objects}

    def on_event(kind: EventType, obj: JSON, old: JSON | None) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        if kind != "DELETED" and name in wanted and name not in seen and (obj.get("spec") or {}).get("nodeName"):
            seen[name] = time.time()
            if len(seen) == len(wanted):
                done.set()

    reflector = Reflector(http, PODS_PATH, name="bench-pods", watch_timeout_seconds=600)
    reflector.add_handler(on_event)
    watch = asyncio.create_task(reflector.run())
    try:
        await asyncio.wait_for(reflector.synced.wait(), 30)
        pids = {
            "sched": component.proc.pid if component.proc else None,
            "api": plane.apiserver.proc.pid if plane.apiserver.proc else None,
        }
        cpu0 = {k: process_cpu_seconds(p) for k, p in pids.items()}
        bench0 = time.process_time()
        started = time.time()
        await create_pods(http, objects, args.concurrency, sent)
        create_seconds = time.time() - started
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), args.timeout)
        finished = max(seen.values()) if len(seen) == len(wanted) else time.time()
        cpu1 = {k: process_cpu_seconds(p) for k, p in pids.items()}
        bench_cpu = time.process_time() - bench0
        if url:
            await asyncio.sleep(0.5)  # the last bindings' histograms are observed just after the watch sees them
            after = await asyncio.to_thread(scrape, url)
            print(f"  loadline /metrics over the phase ({len(seen)} pods bound):")
            print(breakdown(before, after, len(seen)))
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
    await asyncio.to_thread(plane.stop_component, component)

    server: list[float] = []
    for item in (await http.get(PODS_PATH)).get("items") or []:
        meta, status = item.get("metadata") or {}, item.get("status") or {}
        cond = next(
            (
                c
                for c in status.get("conditions") or []
                if c.get("type") == "PodScheduled" and c.get("status") == "True"
            ),
            None,
        )
        if cond and meta.get("creationTimestamp") and cond.get("lastTransitionTime"):
            scheduled_at = parse_rfc3339(cond["lastTransitionTime"])
            server.append((scheduled_at - parse_rfc3339(meta["creationTimestamp"])).total_seconds())
    result = PhaseResult(
        scheduler=which,
        pods=len(objects),
        bound=len(seen),
        seconds=finished - started,
        create_seconds=create_seconds,
        client_latencies=[seen[n] - sent[n] for n in seen if n in sent],
        server_latencies=server,
        scheduler_cpu=cpu1["sched"] - cpu0["sched"],
        apiserver_cpu=cpu1["api"] - cpu0["api"],
        bench_cpu=bench_cpu,
    )
    print(
        f"  {which}: {result.bound}/{result.pods} bound in {result.seconds:.2f}s ({result.rate:.0f} pods/s); "
        f"created in {create_seconds:.2f}s; cpu: scheduler {result.scheduler_cpu:.1f}s, "
        f"apiserver {result.apiserver_cpu:.1f}s, bench {bench_cpu:.1f}s"
    )
    await delete_pods(http)
    return result


# --------------------------------------------------------------------------- report
def report(results: list[PhaseResult]) -> None:
    print()
    print(
        f"{'scheduler':<15} {'bound':>9} {'pods/s':>7} {'p50 s':>7} {'p99 s':>7} {'srv p50':>7} {'srv p99':>7}"
        f" {'create/s':>8} {'sched cpu-s/1k':>14} {'apisrv cpu-s/1k':>15}"
    )
    for r in results:
        per_k = 1000 / max(r.bound, 1)
        print(
            f"{r.scheduler:<15} {r.bound:>4}/{r.pods:<4} {r.rate:>7.0f} {percentile(r.client_latencies, 0.5):>7.2f}"
            f" {percentile(r.client_latencies, 0.99):>7.2f} {percentile(r.server_latencies, 0.5):>7.0f}"
            f" {percentile(r.server_latencies, 0.99):>7.0f} {r.pods / r.create_seconds:>8.0f}"
            f" {r.scheduler_cpu * per_k:>14.2f} {r.apiserver_cpu * per_k:>15.2f}"
        )
    kube = [r.rate for r in results if r.scheduler == KUBE]
    loadline = [r.rate for r in results if r.scheduler == LOADLINE]
    if kube and loadline:
        ratio = statistics.median(loadline) / statistics.median(kube)
        complete = all(r.bound == r.pods for r in results)
        met = ratio >= 1.0 and complete
        print(
            f"\nratio loadline/kube-scheduler (median pods/s over {len(kube)} round(s)): {ratio:.2f}"
            f"  target >= 1.0: {'MET' if met else 'NOT MET'}{'' if complete else ' (some pods never bound)'}"
        )
    print(
        "p50/p99: create request sent -> first seen bound through a watch (client clock, sub-second);"
        " srv: creationTimestamp -> PodScheduled lastTransitionTime (1 s granularity)."
    )
    print("Client limits: qps/burst 5000 for both schedulers.")


async def run(plane: ControlPlane, args: argparse.Namespace) -> list[PhaseResult]:
    nodes = [f"e2e-{i:04d}" for i in range(args.nodes)]
    await asyncio.to_thread(plane.kubectl, "create", "namespace", NAMESPACE)
    await asyncio.to_thread(
        plane.apply, [fake_node(n, cpu=str(NODE_CPU_MILLI // 1000), memory=f"{NODE_MEMORY_GI}Gi") for n in nodes]
    )
    await asyncio.to_thread(
        plane.kubectl, "wait", "--for=condition=Ready", "node", "--all", "--timeout=180s", timeout=200
    )
    http = await KubeHTTP.connect(plane.kubeconfig, user_agent="scheduler-e2e-bench")
    usage = usage_of(nodes, args.seed)
    await write_node_metrics(http, usage, create=True)
    refresher = asyncio.create_task(refresh_node_metrics(http, usage))
    specs = workload(args.pods, args.seed)
    results: list[PhaseResult] = []
    try:
        for round_no in range(args.repeat):
            order = (KUBE, LOADLINE) if round_no % 2 == 0 else (LOADLINE, KUBE)
            for which in order:
                print(f"round {round_no + 1}/{args.repeat}: {which}", flush=True)
                await write_node_metrics(http, usage, create=False)  # fresh updateTime at the start of each phase
                results.append(await run_phase(plane, http, which, specs, args=args, round_no=round_no))
    finally:
        refresher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await refresher
        await http.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32, help="create requests in flight")
    parser.add_argument("--repeat", type=int, default=1, help="rounds, alternating which scheduler goes first")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds to wait for the pods of one phase")
    parser.add_argument("--logs", metavar="DIR", help="copy the components' logs here before the cluster goes away")
    args = parser.parse_args()

    started = time.monotonic()
    plane = ControlPlane.start()
    results: list[PhaseResult] = []
    try:
        plane.start_kwok()
        results = asyncio.run(run(plane, args))
    finally:
        if args.logs:
            shutil.copytree(plane.root / "logs", args.logs, dirs_exist_ok=True)
        plane.stop()
    report(results)
    print(
        f"({args.nodes} kwok nodes, {args.pods} pods, creator concurrency {args.concurrency}; whole run "
        f"{time.monotonic() - started:.0f}s; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
