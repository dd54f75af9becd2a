"""A backlog drained by each scheduler, like kube-scheduler's scheduler_perf "SchedulingBasic" and, with --shapes,
its pod affinity, anti-affinity, preferred affinity, node affinity, topology spreading and mixed workloads.

    .venv/bin/python bench/scheduler_backlog_bench.py [--nodes 1000 5000] [--pods 5000] [--concurrency 32]
                                                      [--schedulers kube-scheduler koord-scheduler loadline] [--seed 7]
                                                      [--shapes basic pod-anti-affinity ...] [--scale 1]
                                                      [--repeat 1] [--timeout 600] [--logs DIR]
                                                      [--profile-loadline FILE] [--py-spy FILE]

Shapes (bench/scheduler_shapes.py): each labels the nodes as its scheduler_perf workload does, creates the pods
that workload schedules first already bound (spec.nodeName at creation), then drains its backlog as below; the
shapes run one after the other on the same nodes, and every figure below is reported per shape.

One control plane (etcd, kube-apiserver, kwok — tests/harness) per node count, with kwok nodes of
32 cpu / 256Gi (created by this process, 32 requests in flight) and a NodeMetric for each
(scheduler_e2e_bench's), so Loadline's LoadAwareScheduling really filters and scores. kwok renews
the node Leases every KWOK_LEASE_SECONDS / 4 (not every 10 s: 5,000 renewals every 10 s load the
API server on a small host for as long as the nodes exist), and once every node is Ready it is
paused (SIGSTOP) until the end: as in scheduler_perf, which runs no kubelet at all, no Lease, node
or pod status is written while the schedulers run (bound pods stay Pending with their nodeName;
nothing here needs them Running, and without kube-controller-manager nothing marks a node whose
Lease is stale NotReady). FLUSH_PODS pods bound and deleted before the first drain make the API
server drop the paused kwok's watches then, not during it. Then, `--repeat` times, for each
scheduler in turn (kube, loadline, kube, loadline, ...), on the same nodes with the same pods
(fixed by `--seed`):

  1. with no scheduler running, create the whole backlog of `--pods` pending pods and wait until
     a watch has seen all of them; rewrite every NodeMetric (fresh updateTime);
  2. start the scheduler process (clock starts) and wait until a watch sees every pod bound;
  3. stop it, delete the pods and wait until they are gone.

What the API server does during a drain, for every scheduler alike: it serves the scheduler (its
lists, watches, bindings and Scheduled events), the bench's own two watches (pods, events), and,
in a drain longer than REFRESH_SECONDS, the NodeMetric rewrite koordlet would do (one PATCH per
node, at the same offset from the scheduler's start in every drain; only Loadline and
koord-scheduler watch NodeMetrics, so only they pay for decoding it). Nothing else writes.

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
Then, per node count and scheduler, the median over the `--repeat` drains of pods/s, p50, p99 and
sched cpu-s/1k, and the ratios of the medians loadline/kube-scheduler (and loadline/koord-scheduler):
pods/s (target >= 1.0) and CPU per pod (target <= 1.0), with each round's CPU ratio to show the
spread (the host is shared: one drain's ratio has moved 0.90-1.12 run to run for the same code).

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
import gc
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scheduler_e2e_bench import (
    NAMESPACE,
    NODE_CPU_MILLI,
    NODE_MEMORY_GI,
    NODES_PATH,
    PODS_PATH,
    create_pods,
    percentile,
    pod_object,
    process_cpu_seconds,
    usage_of,
    workload,
    write_node_metrics,
)
from bench.scheduler_shapes import FLOORS, INIT_NAMESPACE, SHAPES, ZONE, Shape
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
KWOK_LEASE_SECONDS = 3600  # kwok renews every quarter of it: 5,000 nodes, ~6 renewals/s instead of 500
NODES_READY_SECONDS = 900.0  # 5,000 nodes took 140-180 s to be created and Ready at load average 3-7


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
    round: int = 1  # 1..--repeat
    shape: str = "basic"  # bench/scheduler_shapes.py
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
    plane: ControlPlane, http: KubeHTTP, watch: PodWatch, which: SchedulerUnderTest,
    backlog: Callable[[str, str], list[JSON]], *, metrics: NodeMetricFeed, args: argparse.Namespace, nodes: int,
    round: int, last: bool, shape: str = "basic", prefix: str = "bl",
) -> DrainResult:  # fmt: skip
    # A name prefix per shape and round: a late watch event of an earlier drain's pod cannot count as this one's.
    objects = backlog(f"{prefix}-{which.name[:2]}{round}", which.scheduler_name)
    watch.expect({o["metadata"]["name"] for o in objects})
    # No cyclic collection while this process watches the backlog: a full collection over the watches' stores
    # (tens of thousands of decoded pods and events) stalls its event loop for longer than the API server waits
    # for a watcher to take its next event, and the API server then closes the watch ("unresponsive"), which
    # delays every binding seen here. Refcounting frees the garbage; the cycles wait until the drain is over.
    gc.disable()
    created = time.time()
    await create_pods(http, objects, args.concurrency, {})
    await asyncio.wait_for(watch.all_seen.wait(), 300)
    print(f"  {which.name}: backlog of {len(objects)} pods created in {time.time() - created:.1f}s", flush=True)
    await metrics.write()  # fresh, and the next rewrite REFRESH_SECONDS after it: the same offset in every drain

    result = DrainResult(which.name, nodes, len(objects), round, shape)
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
        gc.enable()
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
        f"  {shape} {which.name}: {result.bound}/{result.pods} bound, {result.reported} Scheduled events; start "
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


async def delete_all_pods(http: KubeHTTP, names: set[str], concurrency: int, *, path: str = PODS_PATH) -> None:
    """Delete the backlog pod by pod (grace period 0), `concurrency` requests in flight, and wait until it is
    gone. Not one DELETE of the collection: the API server deletes a collection with one worker
    (--delete-collection-workers=1), and on the loaded host 5,000 pods took more than 15 minutes that way."""
    sem = asyncio.Semaphore(concurrency)
    options = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}

    async def one(name: str) -> None:
        async with sem:
            with contextlib.suppress(KubeError):  # gone already, or a slow answer: the list below tells
                await http.request("DELETE", f"{path}/{name}", body=options, timeout_seconds=120)

    await asyncio.gather(*(one(n) for n in sorted(names)))
    deadline = time.time() + 900
    while time.time() < deadline:
        with contextlib.suppress(KubeError):
            if not (await http.get(path, limit=1)).get("items"):
                return
        await asyncio.sleep(2)
    raise RuntimeError("the backlog was not deleted within 15 minutes")


# --------------------------------------------------------------------------- a cluster per node count
# koordlet reports every 60 s; LoadAware expires a NodeMetric after 180 s. Every 120 s here, so that a drain that
# ends within 2 minutes of its start sees no rewrite (the cost of decoding NodeMetrics grows with the drain's
# duration, not with its pods), and a rewrite of 5,000 NodeMetrics (~30 s) still ends before the oldest expires.
REFRESH_SECONDS = 120.0


class NodeMetricFeed:
    """Plays koordlet: rewrites every node's NodeMetric (fresh updateTime) REFRESH_SECONDS after the last
    rewrite. Each drain rewrites them just before its scheduler starts, so a rewrite falls at the same offset
    into every drain."""

    def __init__(self, http: KubeHTTP, usage: dict[str, tuple[int, int]]) -> None:
        self.http, self.usage = http, usage
        self.lock = asyncio.Lock()
        self.written = 0.0  # when the last rewrite started

    async def write(self, *, create: bool = False) -> None:
        async with self.lock:
            self.written = time.time()
            await write_node_metrics(self.http, self.usage, create=create)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(max(1.0, self.written + REFRESH_SECONDS - time.time()))
            if time.time() >= self.written + REFRESH_SECONDS:
                with contextlib.suppress(Exception):  # a failed rewrite shows up as expired nodes, not as a crash
                    await self.write()


async def create_nodes(http: KubeHTTP, names: list[str], concurrency: int) -> None:
    """POST the kwok nodes, `concurrency` in flight (not `kubectl apply` in batches: 250 s for 5,000 nodes)."""
    nodes = [fake_node(n, cpu=str(NODE_CPU_MILLI // 1000), memory=f"{NODE_MEMORY_GI}Gi") for n in names]
    await create_pods(http, nodes, concurrency, {}, path=NODES_PATH)


def ready_nodes(nodes: list[JSON]) -> int:
    return sum(
        any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (n.get("status") or {}).get("conditions", [])
        )
        for n in nodes
    )


async def wait_nodes_ready(http: KubeHTTP, count: int) -> None:
    """Lists the kwok nodes every 5 s until `count` are Ready (resourceVersion=0: from the API server's watch cache,
    not etcd; not `kubectl wait`, which watches each node on its own)."""
    deadline = time.time() + NODES_READY_SECONDS
    ready = 0
    while time.time() < deadline:
        with contextlib.suppress(KubeError):
            listed = await http.get(NODES_PATH, labelSelector="type=kwok", resourceVersion="0")
            ready = ready_nodes(listed.get("items") or [])
            if ready >= count:
                return
        await asyncio.sleep(5)
    raise RuntimeError(f"only {ready} of {count} kwok nodes Ready after {NODES_READY_SECONDS:.0f} s")


# The paused kwok's watch streams take what its HTTP/2 window (4 MiB per stream for client-go) and the socket
# buffers hold before the API server sees them full: 100 pods of 100 kB, created and deleted, are ~20 MB each.
FLUSH_PODS = 100
FLUSH_ANNOTATION_BYTES = 100_000


async def flush_paused_watches(http: KubeHTTP, node: str, concurrency: int) -> None:
    """Create and delete FLUSH_PODS pods bound to `node`, so that the API server closes the watches of the paused
    kwok now ("unresponsive" once their buffer is full), not during the first drain: until it does, it waits for
    them on every event it dispatches, and the first scheduler's own watch then lags and is closed as well."""
    objects = [pod_object(spec, "bl-flush", "none") for spec in workload(FLUSH_PODS, 0)]
    for pod in objects:
        pod["spec"]["nodeName"] = node  # bound at creation: no scheduler involved
        pod["metadata"]["annotations"] = {"bench.loadline.io/flush": "x" * FLUSH_ANNOTATION_BYTES}
    await create_pods(http, objects, concurrency, {})
    await delete_all_pods(http, {o["metadata"]["name"] for o in objects}, concurrency)


async def label_nodes(http: KubeHTTP, names: list[str], zones: Sequence[str], concurrency: int) -> None:
    """Give the nodes a zone label round robin over `zones` (scheduler_perf's labelNodePrepareStrategy), one merge
    PATCH per node, `concurrency` in flight."""
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int, name: str) -> None:
        async with sem:
            await http.merge_patch(f"{NODES_PATH}/{name}", {"metadata": {"labels": {ZONE: zones[i % len(zones)]}}})

    await asyncio.gather(*(one(i, n) for i, n in enumerate(names)))


INIT_PODS_PATH = resource_path("", "v1", "pods", namespace=INIT_NAMESPACE)


async def prepare_shape(http: KubeHTTP, shape: Shape, names: list[str], zones: tuple[str, ...],
                        args: argparse.Namespace) -> tuple[tuple[str, ...], set[str]]:  # fmt: skip
    """Label the nodes for the shape (when its zones differ from the current ones) and create its bound pods;
    returns the zones now on the nodes and the names of the bound pods."""
    started = time.time()
    if shape.zones and shape.zones != zones:
        await label_nodes(http, names, shape.zones, args.concurrency)
        zones = shape.zones
    init = shape.init_pods(names, args.scale)
    await create_pods(http, init, args.concurrency, {}, path=INIT_PODS_PATH)
    print(f"{shape.name} ({shape.scheduler_perf}): nodes labelled {ZONE} in {list(zones) or 'none'}, {len(init)} pods "
          f"bound beforehand, in {time.time() - started:.0f}s", flush=True)
    return zones, {o["metadata"]["name"] for o in init}


async def run_nodes(plane: ControlPlane, kwok: Component, nodes: int, args: argparse.Namespace) -> list[DrainResult]:
    names = [f"e2e-{i:04d}" for i in range(nodes)]
    for namespace in (NAMESPACE, INIT_NAMESPACE):
        await asyncio.to_thread(plane.kubectl, "create", "namespace", namespace)
    http = await KubeHTTP.connect(plane.kubeconfig, user_agent="scheduler-backlog-bench")
    started = time.time()
    await create_nodes(http, names, args.concurrency)
    created = time.time()
    await wait_nodes_ready(http, nodes)
    print(
        f"{nodes} kwok nodes created in {created - started:.0f} s, all Ready {time.time() - started:.0f} s after the "
        f"first; kwok paused (load average {os.getloadavg()[0]:.1f})",
        flush=True,
    )
    if kwok.proc is not None:
        kwok.proc.send_signal(signal.SIGSTOP)  # resumed by main() before the plane stops
    await flush_paused_watches(http, names[0], args.concurrency)
    metrics = NodeMetricFeed(http, usage_of(names, args.seed))
    await metrics.write(create=True)
    refresher = asyncio.create_task(metrics.run())
    watch = PodWatch(http)
    watching = asyncio.gather(watch.reflector.run(), watch.events.run())
    results = []
    zones: tuple[str, ...] = ()
    try:
        await asyncio.wait_for(asyncio.gather(watch.reflector.synced.wait(), watch.events.synced.wait()), 60)
        for k, shape_name in enumerate(args.shapes):
            shape = SHAPES[shape_name]
            zones, bound = await prepare_shape(http, shape, names, zones, args)
            backlog = shape.backlog(nodes, args.scale, args.pods, args.seed)
            drains = [(r, name) for r in range(1, args.repeat + 1) for name in args.schedulers]
            for i, (r, name) in enumerate(drains):
                print(f"{nodes} nodes, {shape.name}, round {r}/{args.repeat}: {name} (load average "
                      f"{os.getloadavg()[0]:.1f})", flush=True)  # fmt: skip
                last = i == len(drains) - 1 and k == len(args.shapes) - 1
                results.append(
                    await drain(plane, http, watch, SCHEDULERS[name], backlog, metrics=metrics, args=args, nodes=nodes,
                                round=r, last=last, shape=shape.name, prefix=f"bl{k}")
                )  # fmt: skip
            if k < len(args.shapes) - 1:
                await delete_all_pods(http, bound, args.concurrency, path=INIT_PODS_PATH)
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
        f"{'shape':<27} {'nodes':>5} {'round':>5} {'scheduler':<15} {'bound':>11} {'events':>6} {'pods/s':>7}"
        f" {'start s':>7} {'p50 s':>6} {'p99 s':>6} {'sched cpu-s/1k':>14} {'(at bound)':>10} {'apisrv cpu-s/1k':>15}"
        f" {'apisrv cores':>12}"
    )
    for r in results:
        cores = r.apiserver_cpu / r.wall if r.wall > 0 else float("nan")
        print(
            f"{r.shape:<27} {r.nodes:>5} {r.round:>5} {r.scheduler:<15} {r.bound:>5}/{r.pods:<5} {r.reported:>6}"
            f" {r.rate:>7.0f} {r.start_seconds:>7.1f} {percentile(r.waits, 0.5):>6.1f}"
            f" {percentile(r.waits, 0.99):>6.1f} {r.per_k(r.scheduler_cpu):>14.2f}"
            f" {r.per_k(r.scheduler_cpu_bound):>10.2f}"
            f" {r.per_k(r.apiserver_cpu):>15.2f} {cores:>12.2f}"
        )
    print()
    print(
        f"{'shape':<27} {'nodes':>5} {'scheduler':<15} {'drains':>6}   medians: {'pods/s':>7} {'p50 s':>6} {'p99 s':>6}"
        f" {'sched cpu-s/1k':>14}"
    )
    summaries = {(s.shape, s.nodes, s.scheduler): s for s in summarize(results)}
    for s in summaries.values():
        print(
            f"{s.shape:<27} {s.nodes:>5} {s.scheduler:<15} {s.drains:>6} {s.rate:>17.0f} {s.p50:>6.1f} {s.p99:>6.1f}"
            f" {s.cpu_per_k:>14.2f}"
        )
    print()
    for shape, nodes in sorted({(r.shape, r.nodes) for r in results}, key=lambda k: (list(SHAPES).index(k[0]), k[1])):
        for peer in (KUBE, KOORD):
            if (shape, nodes, peer) not in summaries or (shape, nodes, LOADLINE) not in summaries:
                continue
            theirs, ours = summaries[shape, nodes, peer], summaries[shape, nodes, LOADLINE]
            rate = ours.rate / theirs.rate
            cpu = ours.cpu_per_k / theirs.cpu_per_k
            complete = ours.complete and theirs.complete
            per_round = " ".join(f"{x:.2f}" for x in round_cpu_ratios(results, shape, nodes, peer))
            floor = f"; scheduler_perf floor at 5,000 nodes {FLOORS[shape]} pods/s" if shape in FLOORS else ""
            print(
                f"{shape}, {nodes} nodes, loadline/{peer}, ratios of the medians: pods/s {rate:.2f} (target >= 1.0: "
                f"{'MET' if rate >= 1 and complete else 'NOT MET'}), CPU per pod {cpu:.2f} (target <= 1.0: "
                f"{'MET' if cpu <= 1 and complete else 'NOT MET'}){'' if complete else ' (some pods never bound)'}"
                f"; CPU per pod by round: {per_round}{floor}"
            )
    print(f"({os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at the end)")


@dataclass(frozen=True)
class Summary:
    """One scheduler at one node count in one shape: the medians over its drains."""

    shape: str
    nodes: int
    scheduler: str
    drains: int
    rate: float
    p50: float
    p99: float
    cpu_per_k: float
    complete: bool  # every drain bound every pod


def summarize(results: list[DrainResult]) -> list[Summary]:
    keys = sorted({(r.shape, r.nodes, r.scheduler) for r in results},
                  key=lambda k: (list(SHAPES).index(k[0]), k[1], list(SCHEDULERS).index(k[2])))  # fmt: skip
    summaries = []
    for shape, nodes, scheduler in keys:
        runs = [r for r in results if r.shape == shape and r.nodes == nodes and r.scheduler == scheduler]
        summaries.append(
            Summary(
                shape, nodes, scheduler, len(runs),
                rate=statistics.median(r.rate for r in runs),
                p50=statistics.median(percentile(r.waits, 0.5) for r in runs),
                p99=statistics.median(percentile(r.waits, 0.99) for r in runs),
                cpu_per_k=statistics.median(r.per_k(r.scheduler_cpu) for r in runs),
                complete=all(r.bound == r.pods for r in runs),
            )
        )  # fmt: skip
    return summaries


def round_cpu_ratios(results: list[DrainResult], shape: str, nodes: int, peer: str) -> list[float]:
    """Loadline's CPU per pod over the peer's, round by round (the two drains of a round ran minutes apart)."""
    by = {(r.round, r.scheduler): r for r in results if r.nodes == nodes and r.shape == shape}
    rounds = sorted({r for r, s in by if s == LOADLINE and (r, peer) in by})
    return [by[r, LOADLINE].per_k(by[r, LOADLINE].scheduler_cpu) / by[r, peer].per_k(by[r, peer].scheduler_cpu)
            for r in rounds]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000],
                        help="kwok node counts, one control plane each (default: 1000 5000)")  # fmt: skip
    parser.add_argument("--pods", type=int, default=5000,
                        help="pods in each backlog of the basic shape (default: 5000)")  # fmt: skip
    parser.add_argument("--shapes", nargs="+", default=["basic"], choices=list(SHAPES), metavar="SHAPE",
                        help="scheduler_perf's workloads to drain, in this order, on the same nodes: "
                        f"{', '.join(SHAPES)} (default: basic; see bench/scheduler_shapes.py)")  # fmt: skip
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiplies the bound and pending pods of the shapes other than basic (default: 1, "
                        "scheduler_perf's counts at 5,000 nodes scaled to the node count)")  # fmt: skip
    parser.add_argument("--concurrency", type=int, default=32,
                        help="create and delete requests in flight, for nodes and pods (default: 32)")  # fmt: skip
    parser.add_argument("--schedulers", nargs="+", default=[KUBE, KOORD, LOADLINE], choices=sorted(SCHEDULERS),
                        help="schedulers to drain the backlog, in this order (default: all three)")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="rounds: all the schedulers in turn, N times on the same nodes (kube, loadline, kube, "
                        "loadline, ...); each drain and the medians are reported (default: 1)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=7, help="fixes the pods' requests and the nodes' usage")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one scheduler may take to drain")
    parser.add_argument("--logs", metavar="DIR", help="copy the components' logs here before each cluster goes")
    parser.add_argument("--profile-loadline", metavar="FILE", help="run Loadline under cProfile, stats to FILE")
    parser.add_argument("--py-spy", metavar="FILE", help="sample Loadline with py-spy, collapsed stacks to FILE")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    started = time.monotonic()
    results: list[DrainResult] = []
    for nodes in args.nodes:
        plane = ControlPlane.start()
        kwok = None
        try:
            kwok = plane.start_kwok(node_lease_duration_seconds=KWOK_LEASE_SECONDS)
            results += asyncio.run(run_nodes(plane, kwok, nodes, args))
        finally:
            if kwok is not None and kwok.proc is not None and kwok.alive():
                kwok.proc.send_signal(signal.SIGCONT)  # paused by run_nodes(); stopped with the plane
            if args.logs:
                shutil.copytree(plane.root / "logs", Path(args.logs) / f"{nodes}-nodes", dirs_exist_ok=True)
            plane.stop()
    report(results)
    print(
        f"(whole run {time.monotonic() - started:.0f}s; shapes {' '.join(args.shapes)}, scale {args.scale:g}, "
        f"{args.pods} basic pods, {args.repeat} round(s); one control plane per node count)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
