"""A backlog drained by each scheduler, like kube-scheduler's scheduler_perf "SchedulingBasic".

    .venv/bin/python bench/scheduler_backlog_bench.py [--nodes 1000 5000] [--pods 5000] [--concurrency 32]
                                                      [--schedulers kube-scheduler koord-scheduler loadline] [--seed 7]
                                                      [--timeout 600] [--logs DIR] [--profile-loadline FILE]
                                                      [--py-spy FILE]

One control plane (etcd, kube-apiserver, kwok — tests/harness) per node count, with kwok nodes of
32 cpu / 256Gi and a fresh NodeMetric for each (scheduler_e2e_bench's, rewritten every 30 s), so
Loadline's LoadAwareScheduling really filters and scores. Then, for each scheduler in turn, on the
same nodes with the same pods (fixed by `--seed`):

  1. with no scheduler running, create the whole backlog of `--pods` pending pods and wait until
     a watch has seen all of them;
  2. start the scheduler process (clock starts) and wait until a watch sees every pod bound;
  3. stop it, delete the pods and wait until they are gone.

Reported per scheduler, from this process's watch (client clock, sub-second):
  pods/s          pods / (first pod bound -> last pod bound): the drain rate, start-up excluded
  start s         scheduler process started -> first pod bound (start-up, informer sync)
  p50/p99 s       first pod bound -> each pod bound: how long a pod of the backlog waits in the queue
                  once scheduling is under way (every pod is in the queue from the initial list)
  events          pods whose `Scheduled` event (events.k8s.io/v1) the bench's watch saw; the drain's line also
                  says when the last one was seen and when the API server stored it (its creationTimestamp)
  sched cpu-s/1k  CPU seconds of the scheduler process per 1,000 pods, from start until every pod is bound
                  and has its Scheduled event (or no new event came for EVENTS_GRACE_SECONDS): start-up,
                  the initial list and the event writes are all part of the cost; "(at bound)" stops
                  at the last binding, so a scheduler cannot look cheaper by writing its events late
  apisrv cpu-s/1k the API server's CPU over the same span, per 1,000 pods, and its share of the wall
                  time: near the number of cores, the API server (not the scheduler) is the bound
Ratios loadline/kube-scheduler (and loadline/koord-scheduler) follow the table: pods/s (target >= 1.0)
and CPU per pod (target <= 1.0).

Schedulers are a small table (`SCHEDULERS`): a name, the `schedulerName` its pods carry, and a start
function (a started process): kube-scheduler (default profile), koord-scheduler (Koordinator v1.8.0,
LoadAwareScheduling on, its default args; `--schedulers kube-scheduler koord-scheduler loadline`) and
Loadline (default profile, LoadAwareScheduling on). The exit status is 0 whether
or not the targets are met; the verdict is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scheduler_e2e_bench import (
    NAMESPACE,
    NODE_CPU_MILLI,
    NODE_MEMORY_GI,
    PODS_PATH,
    PodSpec,
    create_pods,
    percentile,
    pod_object,
    process_cpu_seconds,
    usage_of,
    workload,
    write_node_metrics,
)
from common.api.wire import parse_rfc3339
from common.kube.http import JSON, KubeError, KubeHTTP, resource_path
from common.kube.reflector import EventType, Reflector
from tests.harness.controlplane import REPO_ROOT, ControlPlane, fake_node
from tests.harness.koordinator import KOORD_SCHEDULER_NAME, install_koord_crds, start_koord_scheduler
from tests.harness.processes import Component, free_port

KUBE = "kube-scheduler"
KOORD = "koord-scheduler"
LOADLINE = "loadline"
EVENTS_PATH = resource_path("events.k8s.io", "v1", "events", namespace=NAMESPACE)
EVENTS_GRACE_SECONDS = 20.0  # after the last binding: a scheduler still writing events gets a new one in this


# --------------------------------------------------------------------------- the schedulers
@dataclass(frozen=True)
class SchedulerUnderTest:
    """One scheduler: what its pods name in spec.schedulerName, how to start it (a started Component) and what
    to set up on the control plane beforehand (before the clock starts)."""

    name: str
    scheduler_name: str
    start: Callable[[ControlPlane, argparse.Namespace], Component]
    prepare: Callable[[ControlPlane], object] | None = None


def start_kube_scheduler(plane: ControlPlane, args: argparse.Namespace) -> Component:
    """The real kube-scheduler, default profile, client qps/burst 5000 (scheduler_perf's), no leader election."""
    config = plane.root / "backlog-kube-scheduler.yaml"
    config.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        f"clientConnection: {{kubeconfig: {plane.kubeconfig}, qps: 5000, burst: 5000}}\n"
        "leaderElection: {leaderElect: false}\n"
        "profiles: [{schedulerName: default-scheduler}]\n"
    )
    component = Component(
        "backlog-kube-scheduler",
        [str(plane.binary("kube-scheduler")), f"--config={config}", "--bind-address=127.0.0.1",
         f"--secure-port={free_port()}", "--v=1"],
        plane.root / "logs" / "backlog-kube-scheduler.log",
    )  # fmt: skip
    component.start()
    return component


def start_loadline(plane: ControlPlane, args: argparse.Namespace) -> Component:
    """`loadline scheduler`, its default profile (LoadAwareScheduling on), client qps/burst 5000 as well."""
    config = plane.root / "backlog-loadline.yaml"
    config.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "clientConnection: {qps: 5000, burst: 5000}\n"
        "profiles: [{schedulerName: loadline-scheduler}]\n"
    )
    python = [sys.executable]
    if args.profile_loadline:  # cProfile writes the file when the process exits on SIGTERM
        python += ["-m", "cProfile", "-o", str(Path(args.profile_loadline).resolve())]
    component = Component(
        "backlog-loadline-scheduler",
        [*python, "-m", "common.cli", "scheduler", f"--kubeconfig={plane.kubeconfig}", f"--config={config}",
         "--bind-address=127.0.0.1", f"--port={free_port()}", "--no-leader-elect"],
        plane.root / "logs" / "backlog-loadline-scheduler.log",
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    component.start()
    return component


def start_koord(plane: ControlPlane, args: argparse.Namespace) -> Component:
    """Koordinator v1.8.0's koord-scheduler (tests/harness/koordinator.py): the kube default plugins plus
    LoadAwareScheduling in filter, score and reserve with Koordinator's default args, client qps/burst 5000,
    no leader election, --v=1 as kube-scheduler. Returns once it serves /healthz."""
    return start_koord_scheduler(plane, name=KOORD_SCHEDULER_NAME, verbosity=1)


SCHEDULERS = {
    KUBE: SchedulerUnderTest(KUBE, "default-scheduler", start_kube_scheduler),
    KOORD: SchedulerUnderTest(KOORD, KOORD_SCHEDULER_NAME, start_koord, prepare=install_koord_crds),
    LOADLINE: SchedulerUnderTest(LOADLINE, "loadline-scheduler", start_loadline),
}


# --------------------------------------------------------------------------- one drain
def start_py_spy(pid: int, output: str) -> subprocess.Popen[bytes]:
    """Collapsed stacks of a running process, sampled without stopping it (py-spy: a dev tool, pip install)."""
    binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    argv = [binary, "record", "--nonblocking", "--format", "raw", "--rate", "200",
            "--output", str(Path(output).resolve()), "--pid", str(pid)]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@dataclass
class DrainResult:
    scheduler: str
    nodes: int
    pods: int
    bound: int = 0
    start_seconds: float = float("nan")  # process start -> first bound
    drain_seconds: float = float("nan")  # first bound -> last bound
    waits: list[float] = field(default_factory=list)  # first bound -> each bound
    reported: int = 0  # pods whose Scheduled event was seen
    events_lag: float = float("nan")  # last bound -> last Scheduled event seen by the bench's watch
    events_written_lag: float = float("nan")  # last bound -> the API server's creationTimestamp of the last one
    scheduler_cpu_bound: float = 0.0  # start -> last bound
    scheduler_cpu: float = 0.0  # start -> last bound and every Scheduled event written (the figure compared)
    apiserver_cpu: float = 0.0  # start -> last bound
    wall: float = 0.0  # process start -> last bound

    @property
    def rate(self) -> float:
        return (self.bound - 1) / self.drain_seconds if self.drain_seconds > 0 else float("nan")

    def per_k(self, cpu: float) -> float:
        return cpu * 1000 / max(self.bound, 1)


class PodWatch:
    """The bench's own watch of the namespace: when each pod was first seen, first seen bound, and when
    its `Scheduled` event (events.k8s.io/v1, as both schedulers write it) was first seen."""

    def __init__(self, http: KubeHTTP) -> None:
        self.reflector = Reflector(http, PODS_PATH, name="backlog-bench-pods", watch_timeout_seconds=900)
        self.reflector.add_handler(self._on_event)
        self.events = Reflector(http, EVENTS_PATH, name="backlog-bench-events", watch_timeout_seconds=900)
        self.events.add_handler(self._on_scheduled_event)
        self.wanted: set[str] = set()
        self.seen: set[str] = set()
        self.bound: dict[str, float] = {}
        self.reported: dict[str, float] = {}  # pod -> first Scheduled event seen
        self.all_seen = asyncio.Event()
        self.all_bound = asyncio.Event()
        self.all_reported = asyncio.Event()

    def expect(self, names: set[str]) -> None:
        self.wanted, self.seen, self.bound, self.reported = names, set(), {}, {}
        self.all_seen.clear()
        self.all_bound.clear()
        self.all_reported.clear()

    def _on_scheduled_event(self, kind: EventType, obj: JSON, old: JSON | None) -> None:
        name = (obj.get("regarding") or {}).get("name", "")
        if kind == "DELETED" or obj.get("reason") != "Scheduled" or name not in self.wanted or name in self.reported:
            return
        self.reported[name] = time.time()
        if len(self.reported) == len(self.wanted):
            self.all_reported.set()

    def _on_event(self, kind: EventType, obj: JSON, old: JSON | None) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        if kind == "DELETED" or name not in self.wanted:
            return
        self.seen.add(name)
        if len(self.seen) == len(self.wanted):
            self.all_seen.set()
        if name not in self.bound and (obj.get("spec") or {}).get("nodeName"):
            self.bound[name] = time.time()
            if len(self.bound) == len(self.wanted):
                self.all_bound.set()


async def drain(
    plane: ControlPlane, http: KubeHTTP, watch: PodWatch, which: SchedulerUnderTest, specs: list[PodSpec],
    *, args: argparse.Namespace, nodes: int, last: bool,
) -> DrainResult:  # fmt: skip
    objects = [pod_object(s, f"bl-{which.name[:2]}", which.scheduler_name) for s in specs]
    watch.expect({o["metadata"]["name"] for o in objects})
    created = time.time()
    await create_pods(http, objects, args.concurrency, {})
    await asyncio.wait_for(watch.all_seen.wait(), 120)
    print(f"  {which.name}: backlog of {len(objects)} pods created in {time.time() - created:.1f}s", flush=True)
    await write_node_metrics(http, usage_of([f"e2e-{i:04d}" for i in range(nodes)], args.seed), create=False)

    result = DrainResult(which.name, nodes, len(objects))
    if which.prepare is not None:
        await asyncio.to_thread(which.prepare, plane)
    api_pid = plane.apiserver.proc.pid if plane.apiserver.proc else None
    api0 = process_cpu_seconds(api_pid)
    started = time.time()
    component = await asyncio.to_thread(which.start, plane, args)  # (in a thread: the watch keeps timestamping)
    if not any(c is component for c in plane.extra):
        plane.extra.append(component)
    pid = component.proc.pid if component.proc else None
    sampler = None
    if args.py_spy and which.name == LOADLINE and pid is not None:
        sampler = await asyncio.to_thread(start_py_spy, pid, args.py_spy)
    last_cpu = 0.0
    try:
        deadline = started + args.timeout
        while not watch.all_bound.is_set() and time.time() < deadline:
            if not component.alive():
                raise RuntimeError(f"{which.name} exited early; see {component.log_path}")
            last_cpu = process_cpu_seconds(pid) or last_cpu  # the last reading before it is stopped
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watch.all_bound.wait(), 0.5)
        result.scheduler_cpu_bound = process_cpu_seconds(pid) or last_cpu
        result.apiserver_cpu = process_cpu_seconds(api_pid) - api0
        # Writing the Scheduled events is part of the cost: wait for them while they keep coming.
        while not watch.all_reported.is_set() and time.time() < deadline and component.alive():
            latest = max(watch.reported.values(), default=started)
            if time.time() - max(latest, max(watch.bound.values(), default=started)) > EVENTS_GRACE_SECONDS:
                break
            last_cpu = process_cpu_seconds(pid) or last_cpu
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watch.all_reported.wait(), 0.5)
        result.scheduler_cpu = process_cpu_seconds(pid) or last_cpu
        written: list[float] = []
        with contextlib.suppress(KubeError):  # (a diagnostic: the figures above do not depend on it)
            written = await scheduled_events_written(http, watch.wanted)
    finally:
        await asyncio.to_thread(plane.stop_component, component)
        if sampler is not None:
            await asyncio.to_thread(sampler.wait, 30)  # py-spy writes its file when the process is gone
    times = sorted(watch.bound.values())
    result.bound = len(times)
    result.reported = len(watch.reported)
    if times:
        result.start_seconds = times[0] - started
        result.drain_seconds = times[-1] - times[0]
        result.waits = [t - times[0] for t in times]
        result.wall = times[-1] - started
        result.events_lag = max(watch.reported.values(), default=times[-1]) - times[-1]
        result.events_written_lag = max(written, default=times[-1]) - times[-1]
    print(
        f"  {which.name}: {result.bound}/{result.pods} bound, {result.reported} Scheduled events; start "
        f"{result.start_seconds:.1f}s, drain {result.drain_seconds:.1f}s ({result.rate:.0f} pods/s), last event "
        f"{result.events_lag:+.1f}s (stored {result.events_written_lag:+.0f}s by the API server's clock); cpu: "
        f"scheduler {result.scheduler_cpu_bound:.1f}s at the last binding, "
        f"{result.scheduler_cpu:.1f}s with the events, apiserver {result.apiserver_cpu:.1f}s",
        flush=True,
    )
    if not last:  # (the last drain's pods go with the control plane)
        await delete_all_pods(http, watch.wanted, args.concurrency)
    return result


async def scheduled_events_written(http: KubeHTTP, names: set[str]) -> list[float]:
    """When the API server stored each `Scheduled` event of these pods (creationTimestamp, whole seconds): tells
    a scheduler that writes its events late from a watch that delivers them late."""
    found = await http.get(EVENTS_PATH)
    return [
        parse_rfc3339(e["metadata"]["creationTimestamp"]).timestamp()
        for e in found.get("items") or []
        if e.get("reason") == "Scheduled" and (e.get("regarding") or {}).get("name") in names
    ]


async def delete_all_pods(http: KubeHTTP, names: set[str], concurrency: int) -> None:
    """Delete the backlog pod by pod (grace period 0), `concurrency` requests in flight, and wait until it is
    gone. Not one DELETE of the collection: the API server deletes a collection with one worker
    (--delete-collection-workers=1), and on the loaded host 5,000 pods took more than 15 minutes that way."""
    sem = asyncio.Semaphore(concurrency)
    options = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}

    async def one(name: str) -> None:
        async with sem:
            with contextlib.suppress(KubeError):  # gone already, or a slow answer: the list below tells
                await http.request("DELETE", f"{PODS_PATH}/{name}", body=options, timeout_seconds=120)

    await asyncio.gather(*(one(n) for n in sorted(names)))
    deadline = time.time() + 900
    while time.time() < deadline:
        with contextlib.suppress(KubeError):
            if not (await http.get(PODS_PATH, limit=1)).get("items"):
                return
        await asyncio.sleep(2)
    raise RuntimeError("the backlog was not deleted within 15 minutes")


# --------------------------------------------------------------------------- a cluster per node count
REFRESH_SECONDS = 60.0  # koordlet's default report interval; LoadAware expires a NodeMetric after 180 s


async def refresh_node_metrics(http: KubeHTTP, usage: dict[str, tuple[int, int]]) -> None:
    while True:
        await asyncio.sleep(REFRESH_SECONDS)
        with contextlib.suppress(Exception):  # a failed refresh shows up as expired nodes, not as a crash
            await write_node_metrics(http, usage, create=False)


async def run_nodes(plane: ControlPlane, nodes: int, args: argparse.Namespace) -> list[DrainResult]:
    names = [f"e2e-{i:04d}" for i in range(nodes)]
    await asyncio.to_thread(plane.kubectl, "create", "namespace", NAMESPACE)
    objects = [fake_node(n, cpu=str(NODE_CPU_MILLI // 1000), memory=f"{NODE_MEMORY_GI}Gi") for n in names]
    for start in range(0, nodes, 500):
        await asyncio.to_thread(plane.apply, objects[start : start + 500])
    await asyncio.to_thread(
        plane.kubectl, "wait", "--for=condition=Ready", "node", "--all", "--timeout=600s", timeout=620
    )
    http = await KubeHTTP.connect(plane.kubeconfig, user_agent="scheduler-backlog-bench")
    usage = usage_of(names, args.seed)
    await write_node_metrics(http, usage, create=True)
    refresher = asyncio.create_task(refresh_node_metrics(http, usage))
    watch = PodWatch(http)
    watching = asyncio.gather(watch.reflector.run(), watch.events.run())
    specs = workload(args.pods, args.seed)
    results = []
    try:
        await asyncio.wait_for(asyncio.gather(watch.reflector.synced.wait(), watch.events.synced.wait()), 60)
        for i, name in enumerate(args.schedulers):
            print(f"{nodes} nodes: {name}", flush=True)
            last = i == len(args.schedulers) - 1
            results.append(await drain(plane, http, watch, SCHEDULERS[name], specs, args=args, nodes=nodes, last=last))
    finally:
        for task in (refresher, watching):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await http.close()
    return results


def report(results: list[DrainResult]) -> None:
    print()
    print(
        f"{'nodes':>5} {'scheduler':<15} {'bound':>11} {'events':>6} {'pods/s':>7} {'start s':>7} {'p50 s':>6}"
        f" {'p99 s':>6} {'sched cpu-s/1k':>14} {'(at bound)':>10} {'apisrv cpu-s/1k':>15} {'apisrv cores':>12}"
    )
    for r in results:
        cores = r.apiserver_cpu / r.wall if r.wall > 0 else float("nan")
        print(
            f"{r.nodes:>5} {r.scheduler:<15} {r.bound:>5}/{r.pods:<5} {r.reported:>6} {r.rate:>7.0f}"
            f" {r.start_seconds:>7.1f} {percentile(r.waits, 0.5):>6.1f} {percentile(r.waits, 0.99):>6.1f}"
            f" {r.per_k(r.scheduler_cpu):>14.2f} {r.per_k(r.scheduler_cpu_bound):>10.2f}"
            f" {r.per_k(r.apiserver_cpu):>15.2f} {cores:>12.2f}"
        )
    print()
    for nodes in sorted({r.nodes for r in results}):
        by = {r.scheduler: r for r in results if r.nodes == nodes}
        for peer in (KUBE, KOORD):
            if peer not in by or LOADLINE not in by:
                continue
            theirs, ours = by[peer], by[LOADLINE]
            rate = ours.rate / theirs.rate
            cpu = ours.per_k(ours.scheduler_cpu) / theirs.per_k(theirs.scheduler_cpu)
            complete = ours.bound == ours.pods and theirs.bound == theirs.pods
            print(
                f"{nodes} nodes, loadline/{peer}: pods/s {rate:.2f} (target >= 1.0: "
                f"{'MET' if rate >= 1 and complete else 'NOT MET'}), CPU per pod {cpu:.2f} (target <= 1.0: "
                f"{'MET' if cpu <= 1 and complete else 'NOT MET'}){'' if complete else ' (some pods never bound)'}"
            )
    print(f"({os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at the end)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=32, help="create requests in flight")
    parser.add_argument("--schedulers", nargs="+", default=[KUBE, KOORD, LOADLINE], choices=sorted(SCHEDULERS))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one scheduler may take to drain")
    parser.add_argument("--logs", metavar="DIR", help="copy the components' logs here before each cluster goes")
    parser.add_argument("--profile-loadline", metavar="FILE", help="run Loadline under cProfile, stats to FILE")
    parser.add_argument("--py-spy", metavar="FILE", help="sample Loadline with py-spy, collapsed stacks to FILE")
    args = parser.parse_args()

    started = time.monotonic()
    results: list[DrainResult] = []
    for nodes in args.nodes:
        plane = ControlPlane.start()
        try:
            plane.start_kwok()
            results += asyncio.run(run_nodes(plane, nodes, args))
        finally:
            if args.logs:
                shutil.copytree(plane.root / "logs", Path(args.logs) / f"{nodes}-nodes", dirs_exist_ok=True)
            plane.stop()
    report(results)
    print(f"(whole run {time.monotonic() - started:.0f}s; {args.pods} pods; one control plane per node count)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
