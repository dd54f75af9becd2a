"""Cluster scale: the whole system on one real API server with 1,000 (or 5,000) kwok nodes, and the API server's bill.

    .venv/bin/python bench/cluster_scale_bench.py                       # 1,000 nodes, 2 pods a node: 535 s at load 1-7
    .venv/bin/python bench/cluster_scale_bench.py --nodes 5000 --pods-per-node 10
    .venv/bin/python bench/cluster_scale_bench.py --mode extender       # kube-scheduler + Loadline's extender
    .venv/bin/python bench/cluster_scale_bench.py --smoke               # 20 nodes (tests/integration)

One control plane (etcd + kube-apiserver with an audit log of every request, tests/harness) and `--nodes` kwok nodes
of 32 cores, 256 GiB and 110 pods (kwok paused once they are Ready, as in scheduler_perf: nothing writes node or pod
status behind the bench's back, and no Lease renewals). `loadline agent --simulate` (one process playing every
node's agent) publishes a NodeMetric per node at the chart's report interval (60 s; nodeUsage over 300 s) from the
pods bound there. Then, one stack after the other (bench/cluster_scale_stacks.py: Loadline as the chart runs it,
Koordinator v1.8.0, the stock kube-scheduler alone), on the same nodes:

  1. each component of the stack is started (manager, descheduler, scheduler), `--settle` seconds later a window
     of `--window` seconds measures what it adds: its own CPU, requests/s by verb and resource (the audit log's
     count of its client), bytes to and from the API server, and the API server's and etcd's CPU rate over that of
     the window before: the standing bill of each component, one at a time (the first window after a start
     includes none of its start-up). The API server's own `apiserver_request_total` (every client) is diffed over
     the same windows;
  2. the hot nodes (load-aware stacks only): when the descheduler starts, `--hot-nodes` nodes at 73 % CPU turn to
     100 % (a pod bound there starts to use the rest); when the scheduler starts, as many nodes at 62 % do. From
     then on a probe pod pinned to each of the latter is created every PROBE_SECONDS. Measured: when the NodeMetric
     first shows each node over the LoadAware threshold (65 %) or the descheduler's high threshold (75 %), when the
     scheduler stops binding probes there (the first of the probes it never bound), and when the descheduler evicts
     a pod from the 100 % nodes;
  3. `--pods-per-node` x nodes pods in `--waves` waves (a wave is created as fast as the bench can, the next one when
     it is bound): of every ten draws, six a service (koord-prod, cpu/memory), three a batch pod (koord-batch,
     kubernetes.io/batch-cpu and batch-memory, which the stack's manager puts on the nodes; a stack without a
     manager gets plain cpu/memory), one a gang of 4 batch pods (Koordinator's gang annotations): about 46 % of the
     pods services, 23 % batch, 31 % gang members. Measured: drain (pods/s from the first pod created
     to the last bound, per wave and in all), the stack's CPU and the API server's over the waves.
  4. the stack is stopped and its pods deleted.

Reported (bench/cluster_scale_report.py; `--json` writes every row): every window's table (per component CPU
cores, RSS, requests/s by verb and resource, bytes/s written and read; the API server's and etcd's CPU and RSS),
the NodeMetric traffic (writes/s, bytes per node per minute, beside koordlet's at the same interval and pods: the
same status in Koordinator v1.8.0's fields), the hot-node times, and the targets (met / not met, with the ratio).
Every figure names the load average when it was taken: the machine is
2 shared cores, so a figure is only good beside the peer measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.apiserver_cost_bench import request_counts
from bench.cluster_scale_meter import Meter, Window, window
from bench.cluster_scale_report import HotNode, Run, StackResult, avoided_since, report
from bench.cluster_scale_stacks import (
    Stack,
    apply_chart_objects,
    koordinator_stack,
    kube_stack,
    loadline_stack,
    render_chart,
    set_report_interval,
)
from bench.scheduler_backlog_bench import (
    KWOK_LEASE_SECONDS,
    create_nodes,
    flush_paused_watches,
    wait_nodes_ready,
)
from bench.scheduler_e2e_bench import NAMESPACE as E2E_NAMESPACE
from bench.scheduler_e2e_bench import create_pods
from common.api.constants import (
    ANNOTATION_DESCHEDULER_EVICT,
    ANNOTATION_GANG_MIN_AVAILABLE,
    ANNOTATION_GANG_NAME,
    BATCH_CPU,
    BATCH_MEMORY,
    LABEL_QOS_CLASS,
    NODEMETRIC_PLURAL,
    SLO_GROUP,
    SLO_VERSION,
)
from common.kube.http import JSON, KubeError, KubeHTTP, resource_path
from common.kube.reflector import EventType, Reflector
from tests.harness.controlplane import REPO_ROOT, ControlPlane, audit_log_path
from tests.harness.processes import Component

NAMESPACE = "cluster-scale"
PODS_PATH = resource_path("", "v1", "pods", namespace=NAMESPACE)
NODES_PATH = resource_path("", "v1", "nodes")
NODEMETRICS_PATH = resource_path(SLO_GROUP, SLO_VERSION, NODEMETRIC_PLURAL)
NODE_CORES = 32
SETTLE_SECONDS = 5.0  # after a component's start, before its first window
PROBE_SECONDS = 1.0  # one probe pod per avoid-node this often
PROBE_WAIT_SECONDS = 30.0  # a probe neither bound nor marked Unschedulable this long after its creation is dropped
LOAD_AWARE_PERCENT = 65.0  # LoadAwareScheduling's usageThresholds.cpu (Koordinator's and the chart's)
HIGH_PERCENT = 75.0  # the chart's descheduler highThresholds.cpu
AVOID_BASE_PERCENT = 62.0
EVICT_BASE_PERCENT = 73.0
HOT_TAINT = "cluster-scale.loadline.io/hot"
SIMULATED_CPU = "loadline.io/simulated-cpu"
SIMULATED_BURSTINESS = "loadline.io/simulated-burstiness"
CONCURRENCY = 16
BENCH_USER_AGENT = "cluster-scale-bench"


# --------------------------------------------------------------------------- workload (pure)
@dataclass(frozen=True)
class PodSpec:
    name: str
    kind: str  # service | batch | gang
    cpu_milli: int
    memory_mi: int
    gang: str = ""


def workload(pods: int, waves: int, seed: int, prefix: str) -> list[list[PodSpec]]:
    """`pods` pods in `waves` waves, drawn 60 % a service, 30 % a batch pod, 10 % a gang of 4 (never split across
    waves): about 46 % of the pods services, 23 % batch, 31 % gang members."""
    rng = random.Random(seed)
    specs: list[PodSpec] = []
    i = 0
    while len(specs) < pods:
        roll = rng.random()
        if roll < 0.1 and pods - len(specs) >= 4:
            gang = f"{prefix}-gang-{i:05d}"
            cpu, memory = rng.choice((1000, 2000)), rng.choice((1024, 2048))
            specs += [PodSpec(f"{gang}-{k}", "gang", cpu, memory, gang) for k in range(4)]
        elif roll < 0.4:
            specs.append(PodSpec(f"{prefix}-batch-{i:05d}", "batch", rng.choice((500, 1000, 2000)),
                                 rng.choice((512, 1024, 4096))))  # fmt: skip
        else:
            specs.append(PodSpec(f"{prefix}-svc-{i:05d}", "service", rng.choice((250, 500, 1000, 2000)),
                                 rng.choice((256, 512, 1024, 2048))))  # fmt: skip
        i += 1
    size = -(-len(specs) // waves)
    out: list[list[PodSpec]] = []
    current: list[PodSpec] = []
    for spec in specs:
        if len(current) >= size and not (spec.gang and current and current[-1].gang == spec.gang):
            out.append(current)
            current = []
        current.append(spec)
    if current:
        out.append(current)
    return out


def pod_object(spec: PodSpec, scheduler_name: str, *, batch_resources: bool) -> JSON:
    batch = spec.kind != "service"
    memory = spec.memory_mi * 2**20
    if batch and batch_resources:
        resources = {BATCH_CPU: str(spec.cpu_milli), BATCH_MEMORY: str(memory)}
        limits = dict(resources)  # extended resources: limits = requests
    else:
        resources, limits = {"cpu": f"{spec.cpu_milli}m", "memory": f"{spec.memory_mi}Mi"}, {}
    # The simulated agent's usage: services at 40 % of their request, batch at 60 %.
    annotations = {SIMULATED_CPU: f"{int(spec.cpu_milli * (0.6 if batch else 0.4))}m"}
    if spec.gang:
        annotations |= {ANNOTATION_GANG_NAME: spec.gang, ANNOTATION_GANG_MIN_AVAILABLE: "4"}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": spec.name, "namespace": NAMESPACE, "annotations": annotations,
                     "labels": {"app": spec.gang or spec.name.rsplit("-", 1)[0], "kind": spec.kind,
                                LABEL_QOS_CLASS: "BE" if batch else "LS"}},
        "spec": {
            "schedulerName": scheduler_name,
            "priorityClassName": "koord-batch" if batch else "koord-prod",
            "containers": [{"name": "c", "image": "fake",
                            "resources": {"requests": resources, **({"limits": limits} if limits else {})}}],
            "terminationGracePeriodSeconds": 0,
        },
    }  # fmt: skip


def pinned_pod(name: str, node: str, *, cpu_milli: int, usage_milli: int, scheduler_name: str = "",
               evictable: bool = False) -> JSON:  # fmt: skip
    """A pod on a hot node: bound at creation (`scheduler_name` ''), or a probe the scheduler must place there
    (required node affinity to that node only)."""
    tolerations = [{"key": HOT_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    spec: JSON = {
        "containers": [{"name": "c", "image": "fake",
                        "resources": {"requests": {"cpu": f"{cpu_milli}m", "memory": "16Mi"}}}],
        "tolerations": tolerations, "terminationGracePeriodSeconds": 0, "priorityClassName": "koord-prod",
    }  # fmt: skip
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
        term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [term]}}}  # fmt: skip
    else:
        spec["nodeName"] = node
    annotations = {SIMULATED_CPU: f"{usage_milli}m", SIMULATED_BURSTINESS: "0"}
    if evictable:
        annotations[ANNOTATION_DESCHEDULER_EVICT] = "true"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "annotations": annotations,
                         "labels": {"app": name.rsplit("-", 1)[0], "kind": name.split("-", 1)[0]}},  # base|hot|probe
            "spec": spec}  # fmt: skip


def koordlet_status(status: JSON) -> JSON:
    """The NodeMetric status koordlet v1.8.0 writes for the same node and pods: the same fields (its
    NodeMetricStatus: updateTime, nodeMetric, podsMetric, hostApplicationMetric, prodReclaimableMetric) less the
    ones v1.8.0 does not have (prodPeakMetric, Loadline's extension after v1.8.0)."""
    keep = ("updateTime", "nodeMetric", "podsMetric", "hostApplicationMetric", "prodReclaimableMetric")
    return {k: v for k, v in status.items() if k in keep}


# --------------------------------------------------------------------------- the bench's watches
class Watches:
    """The bench's watches of NodeMetrics (writes, sizes, which nodes report hot) and of its namespace's pods."""

    def __init__(self, http: KubeHTTP) -> None:
        self.nodemetrics = Reflector(http, NODEMETRICS_PATH, name="bench-nodemetrics", watch_timeout_seconds=900)
        self.nodemetrics.add_handler(self._on_nodemetric)
        self.pods = Reflector(http, PODS_PATH, name="bench-pods", watch_timeout_seconds=900)
        self.pods.add_handler(self._on_pod)
        self.writes: list[tuple[float, str, int, int]] = []  # (seen, node, bytes, koordlet's bytes)
        self.last_write: dict[str, float] = {}
        self.gaps: list[float] = []  # seconds between two writes of the same node
        self.reported: set[str] = set()  # nodes with a status
        self.hot: dict[str, HotNode] = {}
        self.bound: dict[str, float] = {}  # pod -> first seen bound
        self.unschedulable: set[str] = set()  # pods a scheduler marked PodScheduled=False, reason Unschedulable
        self.created: dict[str, float] = {}  # pod -> creation sent
        self.deleting: dict[str, tuple[float, str]] = {}  # pod -> (first seen terminating or gone, its node)
        self.deleted_by_bench: set[str] = set()
        self.waiting: dict[str, asyncio.Future[None]] = {}

    def _on_nodemetric(self, kind: EventType, obj: JSON, old: JSON | None) -> None:
        name = str(obj.get("metadata", {}).get("name"))
        status = obj.get("status") or {}
        if kind == "DELETED" or not status.get("updateTime"):
            return
        if old is not None and (old.get("status") or {}).get("updateTime") == status.get("updateTime"):
            return  # a spec or metadata change, not a report
        now = time.time()
        self.reported.add(name)
        size = len(orjson.dumps(obj))
        koordlet = len(orjson.dumps({**obj, "status": koordlet_status(status)}))
        self.writes.append((now, name, size, koordlet))
        if name in self.last_write:
            self.gaps.append(now - self.last_write[name])
        self.last_write[name] = now
        hot = self.hot.get(name)
        if hot is not None and hot.stepped and not hot.reported_hot:
            usage = ((status.get("nodeMetric") or {}).get("nodeUsage") or {}).get("resources") or {}
            cpu = _cores(usage.get("cpu"))
            if cpu >= hot.threshold_percent / 100 * NODE_CORES:
                hot.reported_hot = now

    def _on_pod(self, kind: EventType, obj: JSON, old: JSON | None) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        node = str((obj.get("spec") or {}).get("nodeName") or "")
        now = time.time()
        conditions = (obj.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions):
            self.unschedulable.add(name)
        if node and name not in self.bound:
            self.bound[name] = now
        if (kind == "DELETED" or meta.get("deletionTimestamp")) and name not in self.deleting:
            self.deleting[name] = (now, node)
            hot = self.hot.get(node)
            if hot is not None and hot.role == "evict" and name not in self.deleted_by_bench and not hot.evicted:
                hot.evicted = now

    def writes_between(self, start: float, end: float) -> list[tuple[float, str, int, int]]:
        return [w for w in self.writes if start <= w[0] < end]


def _cores(value: Any) -> float:
    text = str(value or "0")
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


@dataclass
class Setup:
    nodes: list[str]
    avoid: dict[str, list[str]]  # stack -> nodes stepped when its scheduler starts
    evict: dict[str, list[str]]  # stack -> nodes stepped when its descheduler starts


# --------------------------------------------------------------------------- the run
class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.plane: ControlPlane | None = None
        self.meter: Meter | None = None
        self.http: KubeHTTP | None = None
        self.watches: Watches | None = None
        self.results: list[StackResult] = []
        self.baseline: list[tuple[str, Window, float]] = []
        self.started = time.monotonic()
        self.probe_count = 0

    def log(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:6.0f}s load {os.getloadavg()[0]:4.1f}] {text}", flush=True)

    # -- set-up ------------------------------------------------------------------------------------------------
    def start_plane(self) -> ControlPlane:
        import tempfile

        root = Path(tempfile.mkdtemp(prefix="loadline-scale-"))
        policy = root / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump({"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
                                          "omitStages": ["RequestReceived"],
                                          "rules": [{"level": "Metadata"}]}))  # fmt: skip
        audit_log_path(root).parent.mkdir(parents=True, exist_ok=True)
        return ControlPlane.start(root, apiserver_args=[
            f"--audit-policy-file={policy}", f"--audit-log-path={audit_log_path(root)}", "--audit-log-format=json",
            "--audit-log-mode=batch", "--audit-log-maxsize=0"])  # fmt: skip

    async def setup(self, plane: ControlPlane, stacks: Sequence[str]) -> Setup:
        args = self.args
        http = self.http = await KubeHTTP.connect(plane.kubeconfig, user_agent=BENCH_USER_AGENT)
        # (flush_paused_watches works in scheduler_e2e_bench's namespace)
        await asyncio.to_thread(plane.kubectl, "create", "namespace", NAMESPACE)
        await asyncio.to_thread(plane.kubectl, "create", "namespace", E2E_NAMESPACE)
        kwok = plane.start_kwok(node_lease_duration_seconds=KWOK_LEASE_SECONDS)
        names = [f"node-{i:05d}" for i in range(args.nodes)]
        await create_nodes(http, names, CONCURRENCY * 2)
        await wait_nodes_ready(http, args.nodes)
        if kwok.proc is not None:
            kwok.proc.send_signal(signal.SIGSTOP)  # resumed before the plane stops
        self.kwok = kwok
        await flush_paused_watches(http, names[-1], CONCURRENCY)
        self.log(f"{args.nodes} kwok nodes Ready, kwok paused")
        # Hot nodes: a few per load-aware stack, tainted so that only their own pods and probes go there.
        rng = random.Random(args.seed)
        pool = rng.sample(names, min(len(names) // 2, 2 * args.hot_nodes * len(stacks)))
        setup = Setup(names, {}, {})
        for stack in stacks:
            setup.avoid[stack], pool = pool[: args.hot_nodes], pool[args.hot_nodes :]
            setup.evict[stack], pool = pool[: args.hot_nodes], pool[args.hot_nodes :]
        hot_nodes = [n for s in stacks for n in setup.avoid[s] + setup.evict[s]]
        for node in hot_nodes:
            taint = {"key": HOT_TAINT, "value": "true", "effect": "NoSchedule"}
            await http.merge_patch(f"{NODES_PATH}/{node}", {"spec": {"taints": [taint]}})
        bases = []
        for stack in stacks:
            for role, nodes, percent in (("avoid", setup.avoid[stack], AVOID_BASE_PERCENT),
                                         ("evict", setup.evict[stack], EVICT_BASE_PERCENT)):  # fmt: skip
                for node in nodes:
                    usage = int(percent / 100 * NODE_CORES * 1000 - args.system_cpu_milli)
                    bases.append(pinned_pod(f"base-{node}", node, cpu_milli=100, usage_milli=usage,
                                            evictable=role == "evict"))  # fmt: skip
        await create_pods(http, bases, CONCURRENCY, {}, path=PODS_PATH)
        for pod in bases:  # Running and Ready, as a kubelet would have it (kwok is paused)
            await set_running(http, pod["metadata"]["name"])
        # The agents: one simulator process for every node.
        self.watches = Watches(http)
        self._watching = asyncio.gather(self.watches.nodemetrics.run(), self.watches.pods.run())
        self.simulator = start_simulator(plane, args)
        assert self.meter is not None and self.simulator.proc is not None
        self.meter.watch("agents", self.simulator.proc.pid)
        deadline = time.time() + 3 * args.report_interval + 120
        while len(self.watches.reported) < args.nodes:
            if time.time() > deadline or not self.simulator.alive():
                raise RuntimeError(f"only {len(self.watches.reported)} of {args.nodes} NodeMetrics reported\n"
                                   f"{self.simulator.log_tail()}")  # fmt: skip
            await asyncio.sleep(1)
        self.log(f"every node's NodeMetric written once ({len(self.watches.writes)} writes)")
        return setup

    # -- windows -----------------------------------------------------------------------------------------------
    async def measure(self, label: str, seconds: float) -> tuple[str, Window, float]:
        assert self.meter is not None
        before = await asyncio.to_thread(self.meter.snapshot)
        await asyncio.sleep(seconds)
        after = await asyncio.to_thread(self.meter.snapshot)
        self.log(f"window {label}: {after.at - before.at:.0f}s")
        return label, window(before, after), os.getloadavg()[0]

    # -- one stack ---------------------------------------------------------------------------------------------
    async def run_stack(self, stack: Stack, setup: Setup, index: int) -> StackResult:
        assert self.plane is not None and self.meter is not None and self.http is not None and self.watches
        args, meter, watches = self.args, self.meter, self.watches
        result = StackResult(stack.name, load=(os.getloadavg()[0], 0.0))
        self.log(f"stack {stack.name}")
        hot_tasks: list[asyncio.Task[None]] = []
        started_components: list[Component] = []
        try:
            for role, start in stack.starts:
                t0 = await asyncio.to_thread(meter.snapshot)
                components = await asyncio.to_thread(start)
                started_components += components
                for component in components:
                    assert component.proc is not None
                    meter.watch(component.name, component.proc.pid)
                    result.processes.append(component.name)
                await asyncio.sleep(args.settle)
                t1 = await asyncio.to_thread(meter.snapshot)
                result.windows.append((f"start {role}", window(t0, t1), os.getloadavg()[0]))
                if stack.load_aware and role == "descheduler":
                    hot_tasks.append(asyncio.create_task(self.step(stack, setup.evict[stack.name], "evict", result)))
                if stack.load_aware and role == "scheduler":
                    hot_tasks.append(asyncio.create_task(self.step(stack, setup.avoid[stack.name], "avoid", result)))
                result.windows.append(await self.measure(f"+ {role}", args.window))
            before = await asyncio.to_thread(meter.snapshot)
            await self.waves(stack, result, index, started_components)
            after = await asyncio.to_thread(meter.snapshot)
            result.windows.append(("waves", window(before, after), os.getloadavg()[0]))
            if hot_tasks:
                self.log("waiting for the hot nodes to be avoided and evicted from")
                await asyncio.wait_for(asyncio.gather(*hot_tasks), args.hot_timeout)
                self.log("hot nodes avoided and evicted from")
        except TimeoutError:
            self.log("the hot nodes' phase timed out")
        except ComponentDied as died:
            result.failed = str(died)
            self.log(f"stack {stack.name} FAILED: {died}")
        finally:
            for task in hot_tasks:
                task.cancel()
            for component in reversed(started_components):
                meter.forget(component.name)
                self.plane.stop_component(component)
            result.load = (result.load[0], os.getloadavg()[0])
            await self.delete(set(watches.created))
            watches.created.clear()
        self.log(f"stack {stack.name} done, its pods deleted")
        return result

    async def delete(self, names: set[str]) -> None:
        """Delete a stack's pods (`names`: every pod but the hot nodes' base pods, which the next stack's hot nodes
        need) in one deletecollection, grace period 0, and wait until the watch saw them go. (One DELETE per pod,
        32 in flight, took 54 s for 2,000 pods at load 14.)"""
        assert self.http is not None and self.watches is not None
        http, watches = self.http, self.watches
        watches.deleted_by_bench |= names
        options = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
        await http.request("DELETE", PODS_PATH, params={"labelSelector": "kind!=base"}, body=options,
                           timeout_seconds=600)  # fmt: skip
        deadline = time.time() + 600
        keys = {f"{NAMESPACE}/{n}" for n in names}
        while time.time() < deadline and keys & watches.pods.store.keys():  # noqa: ASYNC110
            await asyncio.sleep(1)

    async def step(self, stack: Stack, nodes: list[str], role: str, result: StackResult) -> None:
        """Turn `nodes` to 100 % CPU; then, for the avoid role, probe each until the scheduler avoids it; for the
        evict role, wait until the descheduler evicted a pod from each."""
        assert self.http is not None and self.watches is not None
        http, watches = self.http, self.watches
        threshold = LOAD_AWARE_PERCENT if role == "avoid" else HIGH_PERCENT
        base = AVOID_BASE_PERCENT if role == "avoid" else EVICT_BASE_PERCENT
        hots = [HotNode(n, role, threshold) for n in nodes]
        result.hot += hots
        for hot in hots:
            watches.hot[hot.node] = hot
            usage = int((100 - base) / 100 * NODE_CORES * 1000)
            pod = pinned_pod(f"hot-{hot.node}", hot.node, cpu_milli=100, usage_milli=usage,
                             evictable=role == "evict")  # fmt: skip
            await create_pods(http, [pod], 1, watches.created, path=PODS_PATH)
            await set_running(http, pod["metadata"]["name"])
            hot.stepped = time.time()
        if role == "evict":
            while not all(h.evicted for h in hots):  # noqa: ASYNC110 (set by the watch handler)
                await asyncio.sleep(1)
            return
        pending: list[asyncio.Task[None]] = []
        while not all(avoided_since(h.probes) for h in hots):
            for hot in hots:
                if not avoided_since(hot.probes):
                    pending.append(asyncio.create_task(self.probe(stack, hot)))
            await asyncio.sleep(PROBE_SECONDS)
        await asyncio.gather(*pending, return_exceptions=True)

    async def probe(self, stack: Stack, hot: HotNode) -> None:
        assert self.http is not None and self.watches is not None
        self.probe_count += 1
        name = f"probe-{hot.node}-{self.probe_count}"
        created = time.time()
        pod = pinned_pod(name, hot.node, cpu_milli=1, usage_milli=1, scheduler_name=stack.scheduler_name)
        try:
            await self.http.create(PODS_PATH, pod)
        except KubeError:
            return
        self.watches.created[name] = created
        # Refused means the scheduler said so (PodScheduled=False, Unschedulable), not that the probe waited in a
        # queue busy with a wave; a probe with neither answer within PROBE_WAIT_SECONDS counts for nothing.
        deadline = created + PROBE_WAIT_SECONDS
        watches = self.watches
        while time.time() < deadline and name not in watches.bound and name not in watches.unschedulable:  # noqa: ASYNC110
            await asyncio.sleep(0.2)
        bound = name in watches.bound
        if bound or name in watches.unschedulable:
            index = next((i for i, (c, _) in enumerate(hot.probes) if c > created), len(hot.probes))
            hot.probes.insert(index, (created, bound))
        if not bound:  # out of the scheduler's queue again
            self.watches.deleted_by_bench.add(name)
            with contextlib.suppress(KubeError):
                options = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
                await self.http.request("DELETE", f"{PODS_PATH}/{name}", body=options)

    async def waves(self, stack: Stack, result: StackResult, index: int, components: Sequence[Component]) -> None:
        assert self.http is not None and self.watches is not None
        args, watches = self.args, self.watches
        pods = args.pods_per_node * args.nodes
        for k, wave in enumerate(workload(pods, args.waves, args.seed + index, f"w{index}")):
            objects = [pod_object(s, stack.scheduler_name, batch_resources=stack.manager) for s in wave]
            names = {o["metadata"]["name"] for o in objects}
            first = time.time()
            await create_pods(self.http, objects, CONCURRENCY, watches.created, path=PODS_PATH)
            created = time.time()
            deadline = created + args.wave_timeout
            while time.time() < deadline and not names <= watches.bound.keys():
                await asyncio.sleep(0.25)
                check_alive(components)
            unbound = len(names - watches.bound.keys())
            last = max((watches.bound[n] for n in names if n in watches.bound), default=first)
            result.waves.append((len(names) - unbound, first, last))
            result.unbound += unbound
            missing = f", {unbound} NOT bound" if unbound else ""
            self.log(f"wave {k + 1}: {len(names)} pods created in {created - first:.1f}s, "
                     f"{len(names) - unbound} bound in {last - first:.1f}s{missing}")  # fmt: skip

    # -- main ----------------------------------------------------------------------------------------------------
    async def run(self, plane: ControlPlane) -> None:
        args = self.args
        self.plane = plane
        meter = self.meter = Meter(audit_log_path(plane.root), plane.port, lambda: request_counts(plane))
        assert plane.apiserver.proc is not None and plane.etcd.proc is not None
        meter.watch("kube-apiserver", plane.apiserver.proc.pid)
        meter.watch("etcd", plane.etcd.proc.pid)
        meter.start()
        render = await asyncio.to_thread(render_chart, plane, abnormalities=args.abnormalities, extender=True,
                                         descheduling_interval=args.descheduling_interval)  # fmt: skip
        if (args.report_interval, args.aggregate_duration) != (60.0, 300.0):
            set_report_interval(render, report_seconds=args.report_interval, aggregate_seconds=args.aggregate_duration)
        await asyncio.to_thread(apply_chart_objects, plane, render)
        elect = args.leader_elect
        builders: dict[str, Callable[[], Stack]] = {
            "loadline": lambda: loadline_stack(plane, render, extender=args.mode == "extender", leader_elect=elect),
            "koordinator": lambda: koordinator_stack(plane, render, abnormalities=args.abnormalities,
                                                     leader_elect=elect),
            "kube-scheduler": lambda: kube_stack(plane, leader_elect=elect),
        }
        stacks = [await asyncio.to_thread(builders[name]) for name in args.stacks]
        try:
            setup = await self.setup(plane, [s.name for s in stacks])
            self.baseline.append(await self.measure("agents only", args.window))
            for i, stack in enumerate(stacks):
                self.results.append(await self.run_stack(stack, setup, i))
        finally:
            meter.stop()
            if getattr(self, "_watching", None) is not None:
                self._watching.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._watching
            if self.http is not None:
                await self.http.close()


class ComponentDied(RuntimeError):
    pass


def check_alive(components: Sequence[Component]) -> None:
    """A stack's process that exited mid-run ends the stack's measurements (rather than waiting out the waves)."""
    for component in components:
        if not component.alive():
            tail = " | ".join(component.log_tail().splitlines()[-3:])
            raise ComponentDied(f"{component.name} exited: {tail[-600:]}")


async def set_running(http: KubeHTTP, name: str) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    conditions = [{"type": t, "status": "True", "lastTransitionTime": now}
                  for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")]  # fmt: skip
    await http.merge_patch(f"{PODS_PATH}/{name}/status",
                           {"status": {"phase": "Running", "conditions": conditions, "startTime": now}})  # fmt: skip


def start_simulator(plane: ControlPlane, args: argparse.Namespace) -> Component:
    """`loadline agent --simulate` with the chart's defaults but for how often it samples (--collect-interval)."""
    argv = [sys.executable, "-m", "common.cli", "agent", "--simulate", f"--kubeconfig={plane.kubeconfig}",
            f"--report-interval={args.report_interval:g}s", f"--aggregate-duration={args.aggregate_duration:g}s",
            f"--collect-interval={args.collect_interval:g}s", "--metrics-enabled=false",
            f"--simulate-seed={args.seed}", f"--simulate-system-cpu={args.system_cpu_milli / 1000:g}",
            "--simulate-node-noise=0.05", "--log-level=warning", *args.agent_arg]  # fmt: skip
    component = Component("agents", argv, plane.root / "logs" / "agents.log",
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})  # fmt: skip
    component.start()
    plane.extra.append(component)
    return component


# --------------------------------------------------------------------------- main
STACKS = ("loadline", "koordinator", "kube-scheduler")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--nodes", type=int, default=1000, help="kwok nodes (default 1000; 5000 for the full shape)")
    p.add_argument("--pods-per-node", type=int, default=2, help="pods per stack per node (default 2; the issue's "
                   "5,000-node shape is 10)")  # fmt: skip
    p.add_argument("--waves", type=int, default=4, help="waves the pods arrive in (default 4)")
    p.add_argument("--stacks", nargs="+", choices=STACKS, default=list(STACKS), help="stacks, in this order")
    p.add_argument("--mode", choices=("scheduler", "extender"), default="scheduler",
                   help="Loadline's scheduler, or kube-scheduler calling Loadline's extender")  # fmt: skip
    p.add_argument("--window", type=float, default=20.0,
                   help="seconds of each measuring window (default 20; the agents' writes come in a burst each "
                   "report interval, so standing figures want a multiple of it, e.g. 60: over 10 minutes)")
    p.add_argument("--settle", type=float, default=SETTLE_SECONDS, help="seconds from a start to its first window")
    p.add_argument("--hot-nodes", type=int, default=2, help="nodes turned hot per role and stack (default 2)")
    p.add_argument("--hot-timeout", type=float, default=240.0, help="seconds the hot phase may take after the waves")
    p.add_argument("--wave-timeout", type=float, default=600.0, help="seconds a wave may take to be bound")
    p.add_argument("--report-interval", type=float, default=60.0, help="the agents' report interval (the chart's 60)")
    p.add_argument("--aggregate-duration", type=float, default=300.0, help="nodeUsage window (the chart's 300)")
    p.add_argument("--collect-interval", type=float, default=5.0,
                   help="seconds between the simulator's samples (the agent's 1 s; 5 keeps the simulator of 1,000 "
                   "nodes off the 2 cores the control plane needs; the NodeMetrics are the same)")  # fmt: skip
    p.add_argument("--descheduling-interval", default="", help="descheduler round (default: the chart's 60s)")
    p.add_argument("--abnormalities", type=int, default=1,
                   help="descheduler rounds a node must be hot before it acts (the chart's is 5; 1 measures the "
                   "round that acts; add (5-1) x interval for the chart's)")  # fmt: skip
    p.add_argument("--system-cpu-milli", type=int, default=300, help="each simulated node's own CPU use")
    p.add_argument("--agent-arg", action="append", default=[], help="one more flag for `loadline agent --simulate`")
    p.add_argument("--leader-elect", action="store_true",
                   help="run every component leader-elected, as the charts do (off: see bench/cluster_scale_stacks.py)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--keep", action="store_true", help="keep the control plane's directory (logs, audit log)")
    p.add_argument("--json", type=Path, help="also write every table row (table, row, column -> number) here")
    p.add_argument("--smoke", action="store_true",
                   help="the smallest shape end to end (tests/integration/test_cluster_scale_bench.py): 20 nodes, "
                   "200 pods per stack in 2 waves, 2 s windows, reports every 2 s (the manager's colocation "
                   "strategy and the agents' spec clamps set to match), a descheduler round every 2 s")  # fmt: skip
    args = p.parse_args(argv)
    if args.smoke:
        args.nodes, args.pods_per_node, args.waves, args.window, args.hot_nodes, args.settle = 20, 10, 2, 2.0, 1, 1.0
        # koordlet's 0.1 writes/s per node and its 30 s / 60 s floors on the spec would space the reports 10-30 s
        args.agent_arg = [*args.agent_arg, "--publish-qps=10", "--spec-min-report-interval-seconds=0",
                          "--spec-min-aggregate-duration-seconds=0"]  # fmt: skip
        args.report_interval, args.aggregate_duration, args.collect_interval = 2.0, 10.0, 0.5
        args.descheduling_interval, args.hot_timeout, args.wave_timeout = "2s", 30.0, 60.0
    return args


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(f"cluster_scale_bench: signal {signum}, stopping the control plane")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminated)  # a SIGTERM (a test's timeout) still stops every process started
    bench = Bench(args)
    bench.log(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    plane = bench.start_plane()
    plane.keep_root = args.keep
    try:
        asyncio.run(bench.run(plane))
    except BaseException:
        print(plane.log_report(30), file=sys.stderr)
        raise
    finally:
        kwok = getattr(bench, "kwok", None)
        if kwok is not None and kwok.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                kwok.proc.send_signal(signal.SIGCONT)
        plane.stop()
        if args.keep:
            print(f"kept {plane.root}")
    assert bench.watches is not None and bench.baseline
    run = Run(args, bench.baseline[0], bench.results, bench.watches.writes, bench.watches.gaps,
              time.monotonic() - bench.started)  # fmt: skip
    tables = report(run)
    print("\n".join(tables.lines), flush=True)
    if args.json:
        args.json.write_text(orjson.dumps(tables.rows, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
