"""Pods created through the real API server without admission webhooks, with Loadline's Colocation Profile webhooks,
and with Koordinator's own (koord-manager v1.8.0) serving the same ClusterColocationProfile, one run.

    .venv/bin/python bench/webhook_bench.py [--pods 1000] [--concurrency 24] [--rounds 2] [--rate 200] [--seconds 10]

A control plane of its own (etcd + kube-apiserver, no nodes, no scheduler: pods stay Pending, so the figure is
admission and storage only). Two webhook servers run beside it as host processes on loopback, each called by the API
server over TLS through its own configurations (`url:`, its own certificates): `loadline manager --webhook-only`
(the chart's configurations: Pod CREATE to mutate-pod, Pod CREATE/UPDATE to validate-pod with its matchConditions)
and koord-manager with only its webhooks on (Koordinator's config/webhook: mpod-create, vpod). Exactly one side's
configurations are in place at a time. Every pod is created in a namespace the ClusterColocationProfile selects,
so each creation goes through a mutation (labels, priority class, scheduler, batch resources) and a validation.

1. Throughput: `--pods` pods created as fast as `--concurrency` concurrent creators get them through, in each mode
   (without, loadline, koord-manager), interleaved `--rounds` times (the order rotated each round, the same pod
   bodies): the median pods/s of each mode, the ratios to `without` and Loadline's to koord-manager's, and the CPU
   each process spent per pod. Also with pods the webhooks see but the profile does not select (another `tier`):
   both mutate-pods change nothing; koord-manager's configuration sends them to its validate-pod as well, Loadline's
   matchConditions let the API server skip that call.
2. At a rate: `--rate` creations per second for `--seconds` (open loop), each mode, interleaved `--rounds` times:
   the median pods/s achieved, their ratios (target >= 0.9 for Loadline's), and the creators' p50/p99.
3. The components themselves: each webhook's own latency histogram over the rate runs (Loadline's
   `loadline_webhook_admission_duration_seconds`, request body read to answer; koord-manager's
   `controller_runtime_webhook_latency_seconds`, handler entry to answer, decade buckets: 1 ms, 10 ms, ...), the
   share of its answers within 1 ms and 10 ms (bucket bounds both histograms have), Loadline's p50/p99 (target p99
   <= 5 ms at 200 creations/s), the API server's view (`apiserver_admission_webhook_admission_duration_seconds`:
   the share of calls under 5 ms and 25 ms, its finest buckets), and each webhook process' CPU per admission.

`--profile-apiserver SECONDS` instead: a CPU profile of kube-apiserver (its /debug/pprof) over SECONDS of
`--concurrency` creators in each mode, and where its CPU per pod goes (`go tool pprof`): the mutating and the
validating call, the matchConditions, the JSON Patch applied, TLS writes, garbage collection.

The creators, the API server, etcd and both webhooks share the machine: with 2 cores the API server's CPU is the
bound (it says so when the machine was saturated), and then the absolute ratio is the share of the per-pod CPU the
two webhook calls add to the API server, not the webhook's speed. Load averages are printed beside every round.
Exit status 1 when Loadline's targets are missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil

from common.api.constants import ANNOTATION_COLOCATION_PROFILE
from common.kube.http import KubeError, KubeHTTP
from tests.harness.build import go_binary
from tests.harness.controlplane import ControlPlane
from tests.harness.koordinator import start_koord_manager_webhook
from tests.harness.webhook import configurations, metric_value, webhook_manager

LABELS = {"koordinator.sh/enable-colocation": "true"}
PROFILE = {
    "apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
    "metadata": {"name": "bench-batch"},
    "spec": {"namespaceSelector": {"matchLabels": LABELS}, "qosClass": "BE", "priorityClassName": "koord-batch",
             "selector": {"matchLabels": {"tier": "batch"}}, "schedulerName": "loadline-scheduler",
             "labels": {"bench": "mutated"}},
}  # fmt: skip
LOADLINE, KOORD = "loadline", "koord-manager"
MODES = ("without", LOADLINE, KOORD)
CONFIG = {LOADLINE: "loadline-bench", KOORD: "koord-bench"}
HOOKS = {LOADLINE: ("mpod.loadline.dev", "vpod.loadline.dev"), KOORD: ("mpod-create.koordinator.sh",
                                                                        "vpod.koordinator.sh")}  # fmt: skip
KINDS = ("mutatingwebhookconfiguration", "validatingwebhookconfiguration")


def pod_body(name: str, tier: str = "batch") -> dict[str, Any]:
    """A pod as a Deployment's template makes it: two containers, requests and limits, env, a volume. The profile
    selects tier "batch"; a pod of another tier is one the webhooks see but that no profile selects."""
    container = {"name": "app", "image": "registry.example.com/app:1.2.3",
                 "env": [{"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(8)],
                 "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                               "limits": {"cpu": "1", "memory": "512Mi"}},
                 "volumeMounts": [{"name": "data", "mountPath": "/data"}]}  # fmt: skip
    sidecar = {"name": "log", "image": "registry.example.com/log:4.5",
               "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}}}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "bench", "tier": tier},
                         "annotations": {"team": "analytics"}},
            "spec": {"containers": [container, sidecar], "volumes": [{"name": "data", "emptyDir": {}}]}}  # fmt: skip


async def create_all(http: KubeHTTP, namespace: str, names: list[str], concurrency: int,
                     tier: str = "batch") -> tuple[float, list[float]]:  # fmt: skip
    """Create every pod with `concurrency` creators; (seconds, each creation's latency)."""
    queue = iter(names)
    latencies: list[float] = []

    async def creator() -> None:
        for name in queue:
            started = time.perf_counter()
            await http.create(f"/api/v1/namespaces/{namespace}/pods", pod_body(name, tier))
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


def histogram_buckets(before: str, after: str, metric: str, /, **labels: str) -> list[tuple[float, float]]:
    """(upper bound, increase of its cumulative count) of a histogram's buckets between two scrapes."""
    bounds = set()
    for line in after.splitlines():
        if line.startswith(metric + "_bucket{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            bounds.add(line.split('le="', 1)[1].split('"', 1)[0])
    buckets = [(float("inf") if b == "+Inf" else float(b),
                metric_value(after, metric + "_bucket", le=b, **labels)
                - metric_value(before, metric + "_bucket", le=b, **labels)) for b in bounds]  # fmt: skip
    return sorted(buckets)


def histogram_quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """Prometheus' histogram_quantile (linear within a bucket)."""
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


def share_within(buckets: list[tuple[float, float]], bound: float) -> float:
    total = buckets[-1][1] if buckets else 0
    within = next((count for le, count in buckets if abs(le - bound) < 1e-12), float("nan"))
    return within / total if total else float("nan")


class CPU:
    """CPU seconds of the processes that share the machine in this run, and of the machine."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.processes = {name: psutil.Process(pid) for name, pid in pids.items()}

    def sample(self) -> dict[str, float]:
        times = psutil.cpu_times()
        machine = times.user + times.system + times.nice + getattr(times, "irq", 0) + getattr(times, "softirq", 0)
        return {"machine": machine, **{name: sum(p.cpu_times()[:2]) for name, p in self.processes.items()}}

    @staticmethod
    def per_pod(before: dict[str, float], after: dict[str, float], pods: int) -> dict[str, float]:
        return {name: 1000 * (after[name] - before[name]) / pods for name in before if name != "machine"}

    @staticmethod
    def busy(before: dict[str, float], after: dict[str, float], seconds: float) -> float:
        """The machine's busy share of all its cores over `seconds`."""
        return (after["machine"] - before["machine"]) / (seconds * (psutil.cpu_count() or 1))


def per_pod_text(per_pod: dict[str, float]) -> str:
    return ", ".join(f"{name} {ms:.2f}" for name, ms in per_pod.items())


def load() -> str:
    return "load {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def apiserver_metrics(plane: ControlPlane) -> str:
    return plane.kubectl("get", "--raw", "/metrics", timeout=60).stdout


def snapshot(plane: ControlPlane, name: str) -> list[dict[str, Any]]:
    """The webhook configurations `name` as their manager wrote them (CA bundle, URL): re-applied verbatim to switch
    that side on, so no admission ever meets a configuration its manager has not filled in yet."""
    docs = json.loads(plane.kubectl("get", ",".join(KINDS), name, "-o", "json").stdout)["items"]
    for doc in docs:
        meta = doc["metadata"]
        doc["metadata"] = {k: meta[k] for k in ("name", "labels", "annotations") if k in meta}
    return list(docs)


async def mutated_by(http: KubeHTTP, namespace: str) -> str:
    """Which side mutates a pod now (a dry-run creation): without, loadline (its annotation naming the profile) or
    koord-manager."""
    pod = await http.request("POST", f"/api/v1/namespaces/{namespace}/pods", params={"dryRun": "All"},
                             body=pod_body(f"probe-{uuid.uuid4().hex[:6]}"))  # fmt: skip
    meta = pod.get("metadata") or {}
    if (meta.get("labels") or {}).get("bench") != "mutated":
        return "without"
    return LOADLINE if ANNOTATION_COLOCATION_PROFILE in (meta.get("annotations") or {}) else KOORD


async def switch_to(plane: ControlPlane, http: KubeHTTP, mode: str, snapshots: dict[str, list[dict[str, Any]]],
                    probe_namespace: str) -> None:  # fmt: skip
    """Exactly `mode`'s configurations in place, and the API server's admission using them (dry-run creations)."""
    for side, name in CONFIG.items():
        if side != mode:
            plane.kubectl("delete", ",".join(KINDS), name, "--ignore-not-found")
    if mode != "without":
        plane.apply(snapshots[mode])
    deadline = time.monotonic() + 30
    while await mutated_by(http, probe_namespace) != mode:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the API server did not switch to {mode} in 30 s")
        await asyncio.sleep(0.2)
    await asyncio.sleep(1)  # the other side's connections and informers settle


async def fresh_namespace(plane: ControlPlane, prefix: str) -> str:
    namespace = f"{prefix}-{uuid.uuid4().hex[:4]}"
    plane.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": LABELS}})
    return namespace


def rotated(round_: int, items: tuple[str, ...] = MODES) -> list[str]:
    return [items[(i + round_) % len(items)] for i in range(len(items))]


def ratios_text(medians: dict[str, float]) -> str:
    base = medians["without"]
    return (f"without {base:.1f}, {LOADLINE} {medians[LOADLINE]:.1f}, {KOORD} {medians[KOORD]:.1f} pods/s: "
            f"{LOADLINE}/without {medians[LOADLINE] / base:.3f}, {KOORD}/without {medians[KOORD] / base:.3f}, "
            f"{LOADLINE}/{KOORD} {medians[LOADLINE] / medians[KOORD]:.3f}")  # fmt: skip


# Where kube-apiserver's CPU per pod goes: a label and the function whose cumulative time it is (pprof's names).
APISERVER_PARTS = {
    "mutating call": "mutating.(*mutatingDispatcher).Dispatch",
    "validating call": "validating.(*validatingDispatcher).Dispatch.func1",
    "matchConditions": "matchconditions.(*matcher).Match",
    "JSON Patch applied": "json-patch%2ev4.Patch.Apply",
    "TLS writes": "crypto/tls.(*Conn).Write",
    "garbage collection": "runtime.gcBgMarkWorker",
}


def pprof_seconds(text: str) -> dict[str, float]:
    """`go tool pprof -top -cum` output: "total" and each APISERVER_PARTS' cumulative CPU seconds."""

    def seconds(value: str) -> float:
        return float(value[:-2]) / 1000 if value.endswith("ms") else float(value.rstrip("s"))

    found = {"total": seconds(text.split("Total samples = ", 1)[1].split(maxsplit=1)[0])}
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6:
            name = fields[5].removesuffix(" (inline)")
            for part, function in APISERVER_PARTS.items():
                if name.endswith(function) and part not in found:
                    found[part] = seconds(fields[3])
    return found


async def create_for(http: KubeHTTP, namespace: str, seconds: float, concurrency: int) -> int:
    """`concurrency` creators for `seconds`; the pods created."""
    end, created = time.perf_counter() + seconds, 0

    async def creator(k: int) -> None:
        nonlocal created
        i = 0
        while time.perf_counter() < end:
            await http.create(f"/api/v1/namespaces/{namespace}/pods", pod_body(f"c{k}-{i}"))
            i, created = i + 1, created + 1

    await asyncio.gather(*(creator(k) for k in range(concurrency)))
    return created


async def profile_apiserver(plane: ControlPlane, http: KubeHTTP, snapshots: dict[str, list[dict[str, Any]]],
                            probe: str, args: argparse.Namespace) -> None:  # fmt: skip
    print(f"kube-apiserver CPU profile: {args.profile_apiserver:g} s of {args.concurrency} creators per mode; "
          "ms of its CPU per pod", flush=True)  # fmt: skip
    for mode in MODES:
        await switch_to(plane, http, mode, snapshots, probe)
        namespace = await fresh_namespace(plane, f"profile-{mode}")
        out = plane.root / f"apiserver-{mode}.pprof"
        profiler = await asyncio.create_subprocess_exec(
            str(plane.binary("kubectl")), f"--kubeconfig={plane.kubeconfig}", "get", "--raw",
            f"/debug/pprof/profile?seconds={args.profile_apiserver + 2:g}", stdout=asyncio.subprocess.PIPE)  # fmt: skip
        await asyncio.sleep(1)
        created = await create_for(http, namespace, args.profile_apiserver, args.concurrency)
        profile, _ = await asyncio.wait_for(profiler.communicate(), args.profile_apiserver + 60)
        out.write_bytes(profile)
        pprof = await asyncio.create_subprocess_exec(go_binary(), "tool", "pprof", "-top", "-cum", "-nodecount=3000",
                                                     str(out), stdout=asyncio.subprocess.PIPE,
                                                     stderr=asyncio.subprocess.DEVNULL)  # fmt: skip
        top, _ = await pprof.communicate()
        parts = pprof_seconds(top.decode())
        print(f"  {mode:>13}: {created} pods, {created / args.profile_apiserver:.1f} pods/s; {load()}; "
              + ", ".join(f"{part} {1000 * cpu / max(created, 1):.2f}" for part, cpu in parts.items()),
              flush=True)  # fmt: skip


async def bench(args: argparse.Namespace) -> int:
    plane = ControlPlane.start(profiling=args.profile_apiserver > 0)
    manager = None
    http: KubeHTTP | None = None
    try:
        print(f"{load()} at the start", flush=True)
        home = "loadline-system"
        plane.kubectl("create", "namespace", home)
        plane.apply([{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                      "metadata": {"name": "koord-batch"}, "value": 5000}, PROFILE])  # fmt: skip
        http = await KubeHTTP.connect(plane.kubeconfig)
        probe = await fresh_namespace(plane, "probe")

        manager = webhook_manager(plane, home, CONFIG[LOADLINE], name="loadline-webhook-bench",
                                  extra=("--log-level=warning",))  # fmt: skip
        plane.apply(configurations(plane, CONFIG[LOADLINE], manager.base_url, {"matchLabels": LABELS}, timeout=10))
        manager.start()
        deadline = time.monotonic() + 30
        while await mutated_by(http, probe) != LOADLINE:  # its CA bundle written and seen
            if time.monotonic() > deadline:
                raise RuntimeError("Loadline's webhook did not mutate a dry-run pod in 30 s")
            await asyncio.sleep(0.2)
        snapshots = {LOADLINE: snapshot(plane, CONFIG[LOADLINE])}
        plane.kubectl("delete", ",".join(KINDS), CONFIG[LOADLINE])
        koord = start_koord_manager_webhook(plane, {"matchLabels": LABELS}, name=CONFIG[KOORD], timeout_seconds=10)
        snapshots[KOORD] = snapshot(plane, CONFIG[KOORD])
        assert manager.process.proc is not None and plane.apiserver.proc is not None and plane.etcd.proc is not None
        if args.profile_apiserver > 0:
            await profile_apiserver(plane, http, snapshots, probe, args)
            return 0
        cpu = CPU({"kube-apiserver": plane.apiserver.proc.pid, "etcd": plane.etcd.proc.pid,
                   LOADLINE: manager.process.proc.pid, KOORD: koord.pid, "creators": psutil.Process().pid})  # fmt: skip

        # Throughput cases: the three modes with pods the profile selects, and both webhooks with pods it does not
        # (tier "web": mutate-pod is called and changes nothing; validate-pod is called by koord-manager's
        # configuration, while Loadline's matchConditions let the API server skip it).
        cases = {mode: (mode, "batch") for mode in MODES}
        cases.update({f"{side} unselected": (side, "web") for side in (LOADLINE, KOORD)})
        print(f"throughput: {args.pods} pods per round, {args.concurrency} concurrent creators, {args.rounds} rounds "
              f"of {', '.join(cases)} (order rotated each round); CPU in ms per pod", flush=True)  # fmt: skip
        rates: dict[str, list[float]] = {case: [] for case in cases}
        api_cpu: dict[str, list[float]] = {case: [] for case in cases}
        busy: list[float] = []
        for round_ in range(args.rounds):
            for case in rotated(round_, tuple(cases)):
                mode, tier = cases[case]
                await switch_to(plane, http, mode, snapshots, probe)
                namespace = await fresh_namespace(plane, f"bench-{mode}-{tier}-{round_}")
                names = [f"p-{i}" for i in range(args.pods)]
                cpu_before = cpu.sample()
                seconds, latencies = await create_all(http, namespace, names, args.concurrency, tier)
                cpu_after = cpu.sample()
                mutated = await http.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector="bench=mutated", limit=1)
                expected = mode != "without" and tier == "batch"
                assert bool(mutated.get("items")) is expected, f"{case}: mutated {mutated.get('items')}"
                per_pod = CPU.per_pod(cpu_before, cpu_after, args.pods)
                rates[case].append(args.pods / seconds)
                api_cpu[case].append(per_pod["kube-apiserver"])
                busy.append(CPU.busy(cpu_before, cpu_after, seconds))
                print(f"  round {round_ + 1} {case:>24}: {args.pods / seconds:6.1f} pods/s (p50 "
                      f"{1000 * quantile(latencies, 0.5):.1f} ms, p99 {1000 * quantile(latencies, 0.99):.1f} ms); "
                      f"machine {100 * busy[-1]:.0f} % busy; {load()}; CPU {per_pod_text(per_pod)}",
                      flush=True)  # fmt: skip
        medians = {case: statistics.median(rates[case]) for case in cases}
        print(f"throughput medians: {ratios_text(medians)}")
        print(f"  pods no profile selects: {LOADLINE} {medians[LOADLINE + ' unselected']:.1f}, {KOORD} "
              f"{medians[KOORD + ' unselected']:.1f} pods/s: {LOADLINE}/without "
              f"{medians[LOADLINE + ' unselected'] / medians['without']:.3f}, {KOORD}/without "
              f"{medians[KOORD + ' unselected'] / medians['without']:.3f}")  # fmt: skip
        print("kube-apiserver CPU ms per pod (median): " + ", ".join(
            f"{case} {statistics.median(api_cpu[case]):.2f}" for case in cases))  # fmt: skip

        print(f"\nat a rate: {args.rate:g} creations/s for {args.seconds:g} s, open loop, {args.rounds} rounds",
              flush=True)  # fmt: skip
        achieved: dict[str, list[float]] = {mode: [] for mode in MODES}
        scrapes: dict[str, list[tuple[str, str, str, str]]] = {LOADLINE: [], KOORD: []}
        cpu_per_admission: dict[str, list[tuple[float, float]]] = {LOADLINE: [], KOORD: []}
        koord_metrics = f"http://127.0.0.1:{koord.extra_ports['metrics']}/metrics"
        own_metrics: dict[str, Callable[[], str]] = {LOADLINE: manager.metrics, KOORD: lambda: fetch(koord_metrics)}
        for round_ in range(args.rounds):
            for mode in rotated(round_):
                await switch_to(plane, http, mode, snapshots, probe)
                namespace = await fresh_namespace(plane, f"rate-{mode}-{round_}")
                own = own_metrics[mode]() if mode != "without" else ""
                api_before, cpu_before = apiserver_metrics(plane), cpu.sample()
                started = time.perf_counter()
                latencies = await create_at_rate(http, namespace, "r", args.rate, args.seconds)
                took = time.perf_counter() - started
                cpu_after, api_after = cpu.sample(), apiserver_metrics(plane)
                pods = len(latencies)
                achieved[mode].append(pods / took)
                if mode != "without":
                    own_after = own_metrics[mode]()
                    scrapes[mode].append((own, own_after, api_before, api_after))
                    calls = admissions(mode, own, own_after)
                    cpu_per_admission[mode].append((cpu_after[mode] - cpu_before[mode], calls))
                print(f"  round {round_ + 1} {mode:>13}: {pods / took:6.1f} pods/s done, creators p50 "
                      f"{1000 * quantile(latencies, 0.5):.1f} ms, p99 {1000 * quantile(latencies, 0.99):.1f} ms; "
                      f"machine {100 * CPU.busy(cpu_before, cpu_after, took):.0f} % busy; {load()}; "
                      f"CPU {per_pod_text(CPU.per_pod(cpu_before, cpu_after, pods))}", flush=True)  # fmt: skip
        at_rate = {mode: statistics.median(achieved[mode]) for mode in MODES}
        print(f"at {args.rate:g}/s medians: {ratios_text(at_rate)}")

        print("\nthe webhooks themselves (over the rate runs):")
        p99_loadline = report_component(LOADLINE, scrapes[LOADLINE], cpu_per_admission[LOADLINE])
        report_component(KOORD, scrapes[KOORD], cpu_per_admission[KOORD])

        saturated = statistics.median(busy) >= 0.9
        if saturated or medians["without"] < args.rate:
            print(f"\nbound: the machine's CPU (median {100 * statistics.median(busy):.0f} % of "
                  f"{psutil.cpu_count()} cores busy during the throughput rounds; without webhooks the API server "
                  f"made {medians['without']:.0f} pods/s, {'below' if medians['without'] < args.rate else 'above'} "
                  f"the offered {args.rate:g}/s). The API server is the shared resource: each webhook call costs it "
                  "CPU (TLS, the review's encoding, the patch), so the absolute ratio measures that cost here; "
                  f"{LOADLINE}/{KOORD} compares the two webhooks on the same bound.")  # fmt: skip
        ratio = at_rate[LOADLINE] / at_rate["without"]
        ok = ratio >= 0.9 and p99_loadline <= 0.005
        print(f"\nresult at {args.rate:g} creations/s: pods/s {LOADLINE}/without {ratio:.3f} (>= 0.9: "
              f"{'yes' if ratio >= 0.9 else 'NO'}), {LOADLINE}/{KOORD} {at_rate[LOADLINE] / at_rate[KOORD]:.3f}; "
              f"{LOADLINE} webhook p99 {1000 * p99_loadline:.2f} ms (<= 5 ms: "
              f"{'yes' if p99_loadline <= 0.005 else 'NO'}); throughput {LOADLINE}/without "
              f"{medians[LOADLINE] / medians['without']:.3f}, {LOADLINE}/{KOORD} "
              f"{medians[LOADLINE] / medians[KOORD]:.3f}; {load()} at the end")  # fmt: skip
        return 0 if ok else 1
    finally:
        if http is not None:
            await http.close()
        if manager is not None:
            manager.stop()
        plane.stop()  # koord-manager is in plane.extra


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


# Each webhook's own latency histogram: (metric, label of the webhook, its pod webhooks).
OWN_HISTOGRAM = {
    LOADLINE: ("loadline_webhook_admission_duration_seconds", "webhook", ("mutate-pod", "validate-pod")),
    KOORD: ("controller_runtime_webhook_latency_seconds", "webhook", ("/mutate-pod", "/validate-pod")),
}


def admissions(side: str, before: str, after: str) -> float:
    name, label, hooks = OWN_HISTOGRAM[side]
    return sum(metric_value(after, name + "_count", **{label: hook}) - metric_value(before, name + "_count",
               **{label: hook}) for hook in hooks)  # fmt: skip


def report_component(side: str, scrapes: list[tuple[str, str, str, str]], cpu: list[tuple[float, float]]) -> float:
    """Print one webhook's own latency, the API server's view of it, its CPU per admission; its worst p99."""
    name, label, hooks = OWN_HISTOGRAM[side]
    worst = 0.0
    for hook in hooks:
        merged: dict[float, float] = {}
        for own_before, own_after, _, _ in scrapes:
            for le, count in histogram_buckets(own_before, own_after, name, **{label: hook}):
                merged[le] = merged.get(le, 0) + count
        buckets = sorted(merged.items())
        p50, p99 = histogram_quantile(buckets, 0.5), histogram_quantile(buckets, 0.99)
        worst = max(worst, p99)
        coarse = " (decade buckets: interpolated)" if side == KOORD else ""
        print(f"  {side} {hook}: {buckets[-1][1] if buckets else 0:.0f} answers, "
              f"{100 * share_within(buckets, 0.001):.1f} % within 1 ms, {100 * share_within(buckets, 0.01):.1f} % "
              f"within 10 ms; p50 {1000 * p50:.2f} ms, p99 {1000 * p99:.2f} ms{coarse}")  # fmt: skip
    api = "apiserver_admission_webhook_admission_duration_seconds"
    for hook in HOOKS[side]:
        merged = {}
        for _, _, api_before, api_after in scrapes:
            for le, count in histogram_buckets(api_before, api_after, api, name=hook):
                merged[le] = merged.get(le, 0) + count
        buckets = sorted(merged.items())
        print(f"  API server, {hook}: {100 * share_within(buckets, 0.005):.1f} % of calls under 5 ms, "
              f"{100 * share_within(buckets, 0.025):.1f} % under 25 ms")  # fmt: skip
    seconds, calls = sum(s for s, _ in cpu), sum(c for _, c in cpu)
    print(f"  {side} process CPU: {1000 * seconds / max(calls, 1):.2f} ms per admission ({calls:.0f} admissions)")
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--pods", type=int, default=1000, help="pods per throughput round (default %(default)s)")
    parser.add_argument("--concurrency", type=int, default=24, help="concurrent creators (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each mode (default %(default)s)")
    parser.add_argument("--rate", type=float, default=200, help="open-loop creations per second (default %(default)s)")
    parser.add_argument("--seconds", type=float, default=10, help="open-loop duration (default %(default)s)")
    parser.add_argument("--profile-apiserver", type=float, default=0, metavar="SECONDS",
                        help="instead: profile kube-apiserver's CPU for SECONDS per mode (needs go)")  # fmt: skip
    return asyncio.run(bench(parser.parse_args()))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KubeError as exc:
        sys.exit(f"webhook_bench: the API server refused: {exc}")
