"""`loadline agent --simulate`: NodeMetrics for many fake nodes (kwok) from one process.

Each selected node gets what a real agent has — a `Sampler` with its ring buffer, the same aggregation,
status building (`agent.report`) and publishing (`agent.publisher`: create, status subresource, conflict
retry, token bucket, backoff, spec watch) — but its one collector draws samples instead of reading /proc
and cgroups. This is what gives the scheduler and descheduler real-looking load on kwok nodes.

Nodes: those matching `--simulate-node-selector` (a label selector, default all) that carry the annotation
`--simulate-node-annotation` (default `kwok.x-k8s.io/node`, i.e. kwok's fake nodes; `key=value` to match a
value, `''` for every node). Nodes come and go with the watch. Capacity comes from the Node's allocatable.

Pods: every pod bound to a selected node and not finished, with a usage profile from its annotations:

| annotation | meaning | default |
| --- | --- | --- |
| `loadline.io/simulated-cpu` | mean CPU in cores, a quantity (`250m`, `1.5`) | usage fraction x CPU request |
| `loadline.io/simulated-memory` | mean memory, a quantity (`512Mi`, `2G`) | usage fraction x memory request |
| `loadline.io/simulated-burstiness` | coefficient of variation of CPU (0 steady, 1 spiky) | `--simulate-burstiness` |

The usage fraction is `--simulate-usage-fraction` (0.4). A pod without requests uses its limits, and
without those a fraction of 100m / 128Mi. Each collect cycle draws a pod's CPU from a gamma distribution
with that mean and coefficient of variation (capped at its CPU limit), its memory around the mean with a
small jitter (memory moves slowly); pods together never use more than the node's CPU. The node adds its own
system usage (`--simulate-system-cpu`, `--simulate-system-memory`) with noise (`--simulate-node-noise`, a
coefficient of variation), so `systemUsage` and node percentiles look like a real node's. An invalid
annotation is logged once and the default used.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.collectors.base import SeriesErrors
from agent.config import AgentSettings
from agent.exporter import AgentTimings, Exporter, ExportInput, NodeSelfState, render_self, render_timed
from agent.loops import SamplingLoop, every, log_crash, spawn, until_signalled
from agent.main import USER_AGENT, base_policy
from agent.podwatch import PODS_PATH, PodIndex
from agent.publisher import NodeMetricCache, NodeMetricPublisher, spec_listener
from agent.report import NodeReporter, ReportPolicy, build_status
from agent.sampler import Sampler
from agent.series import (
    CPU_USAGE_SECONDS,
    MEMORY_ANON_USAGE_BYTES,
    MEMORY_WORKING_SET_BYTES,
    NODE_CPU_CAPACITY_CORES,
    NODE_CPU_USAGE_SECONDS,
    NODE_MEMORY_TOTAL_BYTES,
    NODE_MEMORY_USAGE_BYTES,
    NODE_MEMORY_USAGE_WITH_PAGE_CACHE_BYTES,
    Kind,
    Sample,
    SeriesKey,
)
from common.api.pod import pod_limits, pod_requests
from common.api.quantity import Quantity
from common.kube.http import JSON, KubeHTTP
from common.kube.reflector import Reflector
from common.ratelimit import TokenBucket

log = logging.getLogger("loadline.agent.simulate")

ANNOTATION_CPU = "loadline.io/simulated-cpu"
ANNOTATION_MEMORY = "loadline.io/simulated-memory"
ANNOTATION_BURSTINESS = "loadline.io/simulated-burstiness"
NODES_PATH = "/api/v1/nodes"
FALLBACK_CPU = 0.1  # cores, for pods with neither requests nor limits (times the usage fraction)
FALLBACK_MEMORY = 128 * 1024 * 1024
MEMORY_JITTER = 0.02  # relative standard deviation of memory per sample, before burstiness
PAGE_CACHE_SHARE = 0.15  # of the node's free memory, shown as page cache


@dataclass(frozen=True)
class SimulationParams:
    usage_fraction: float = 0.4
    burstiness: float = 0.3
    node_noise: float = 0.2
    system_cpu: float = 0.3
    system_memory: float = float(1 << 30)

    @classmethod
    def from_settings(cls, s: AgentSettings) -> SimulationParams:
        return cls(
            usage_fraction=s.simulate_usage_fraction,
            burstiness=s.simulate_burstiness,
            node_noise=s.simulate_node_noise,
            system_cpu=s.simulate_system_cpu,
            system_memory=float(s.simulate_system_memory),
        )


@dataclass(frozen=True)
class UsageProfile:
    cpu: float  # mean cores
    memory: float  # mean bytes
    burstiness: float  # coefficient of variation of CPU
    cpu_limit: float | None = None
    memory_limit: float | None = None


class ProfileError(ValueError):
    pass


def _quantity(value: str, what: str) -> float:
    try:
        q = Quantity.parse(value.strip(), field=what)
    except ValueError as exc:
        raise ProfileError(str(exc)) from None
    if q.sign() < 0:
        raise ProfileError(f"{what}: must not be negative, got {value!r}")
    return q.as_float()


def usage_profile(pod: Mapping[str, Any], params: SimulationParams) -> UsageProfile:
    """The profile a pod declares, or its defaults. Raises `ProfileError` for an invalid annotation."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        requests = pod_requests(pod)
        limits = pod_limits(pod)
    except ValueError:
        requests, limits = {}, {}
    cpu_limit = limits["cpu"].as_float() if "cpu" in limits else None
    memory_limit = limits["memory"].as_float() if "memory" in limits else None

    def declared(resource: str, annotation: str, fallback: float) -> float:
        if annotation in annotations:
            return _quantity(str(annotations[annotation]), annotation)
        for source in (requests, limits):
            if resource in source and not source[resource].is_zero():
                return source[resource].as_float() * params.usage_fraction
        return fallback * params.usage_fraction

    burstiness = params.burstiness
    if ANNOTATION_BURSTINESS in annotations:
        text = str(annotations[ANNOTATION_BURSTINESS]).strip()
        try:
            burstiness = float(text)
        except ValueError:
            raise ProfileError(f"{ANNOTATION_BURSTINESS}: not a number: {text!r}") from None
        if not 0 <= burstiness <= 10:
            raise ProfileError(f"{ANNOTATION_BURSTINESS}: must be within 0..10, got {text!r}")
    return UsageProfile(
        cpu=declared("cpu", ANNOTATION_CPU, FALLBACK_CPU),
        memory=declared("memory", ANNOTATION_MEMORY, FALLBACK_MEMORY),
        burstiness=burstiness,
        cpu_limit=cpu_limit,
        memory_limit=memory_limit,
    )


def draw_cpu(rng: np.random.Generator, mean: float, cv: float) -> float:
    """A gamma draw with this mean and coefficient of variation (non-negative, right-skewed like real CPU)."""
    if mean <= 0:
        return 0.0
    if cv <= 0:
        return mean
    shape = 1.0 / (cv * cv)
    return float(rng.gamma(shape, mean / shape))


def node_capacity(node: Mapping[str, Any]) -> tuple[float, float]:
    """(cores, bytes) of a Node: allocatable, else capacity; 0 where absent or invalid."""
    status = node.get("status") or {}
    out = []
    for resource in ("cpu", "memory"):
        value = (status.get("allocatable") or {}).get(resource) or (status.get("capacity") or {}).get(resource)
        try:
            out.append(Quantity.parse(value).as_float() if value is not None else 0.0)
        except ValueError:
            out.append(0.0)
    return out[0], out[1]


class SimulatedNodeCollector:
    """Draws one node's samples (node and pod level) in the agent's internal vocabulary."""

    def __init__(
        self,
        node_name: str,
        pods: Callable[[], Sequence[JSON]],
        params: SimulationParams,
        *,
        cpu: float,
        memory: float,
        seed: int | None = None,
    ) -> None:
        self.node_name = node_name
        self._pods = pods
        self.params = params
        self.cpu_capacity = cpu
        self.memory_capacity = memory
        self._errors = SeriesErrors()
        self._rng = np.random.default_rng(seed)
        self._profiles: dict[str, tuple[str, UsageProfile]] = {}  # uid -> (resourceVersion, profile)
        self._invalid: set[str] = set()  # uids whose bad annotation was logged
        self._cpu_seconds: dict[str, float] = {}
        self._node_cpu_seconds = 0.0
        self._last: float | None = None

    @property
    def name(self) -> str:
        return "simulated"

    @property
    def errors(self) -> SeriesErrors:
        return self._errors

    def profile(self, pod: JSON) -> UsageProfile:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid"))
        version = str(meta.get("resourceVersion", ""))
        cached = self._profiles.get(uid)
        if cached is not None and cached[0] == version:
            return cached[1]
        try:
            profile = usage_profile(pod, self.params)
        except ProfileError as exc:
            if uid not in self._invalid:
                self._invalid.add(uid)
                log.warning("pod %s/%s: %s; using the default profile", meta.get("namespace"), meta.get("name"), exc)
            stripped = {
                **pod,
                "metadata": {
                    **meta,
                    "annotations": {
                        k: v
                        for k, v in (meta.get("annotations") or {}).items()
                        if k not in (ANNOTATION_CPU, ANNOTATION_MEMORY, ANNOTATION_BURSTINESS)
                    },
                },
            }
            profile = usage_profile(stripped, self.params)
            self._errors.record(SeriesErrors.GARBAGE)
        self._profiles[uid] = (version, profile)
        return profile

    def collect(self, now: float) -> list[Sample]:
        dt = self._elapsed(now)
        rng = self._rng
        pods = [p for p in self._pods() if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        uids: list[str] = []
        cpus: list[float] = []
        mems: list[float] = []
        for pod in pods:
            uid = str((pod.get("metadata") or {}).get("uid") or "")
            if not uid:
                continue
            prof = self.profile(pod)
            cpu = draw_cpu(rng, prof.cpu, prof.burstiness)
            if prof.cpu_limit is not None:
                cpu = min(cpu, prof.cpu_limit)
            mem = prof.memory * (1.0 + rng.normal(0.0, MEMORY_JITTER * (1.0 + prof.burstiness)))
            mem = max(mem, 0.0)
            if prof.memory_limit is not None:
                mem = min(mem, prof.memory_limit)
            uids.append(uid)
            cpus.append(cpu)
            mems.append(mem)
        capacity = self.cpu_capacity or float("inf")
        total_cpu = sum(cpus)
        if total_cpu > capacity:  # the node cannot give out more CPU than it has
            scale = capacity / total_cpu
            cpus = [c * scale for c in cpus]
            total_cpu = capacity
        system_cpu = draw_cpu(rng, self.params.system_cpu, self.params.node_noise)
        node_cpu = min(total_cpu + system_cpu, capacity)
        system_mem = self.params.system_memory * max(1.0 + rng.normal(0.0, self.params.node_noise / 4), 0.0)
        total_mem = sum(mems)
        mem_capacity = self.memory_capacity or float("inf")
        node_mem = min(total_mem + system_mem, mem_capacity)

        out: list[Sample] = []
        seen = set(uids)
        for uid, cpu, mem in zip(uids, cpus, mems, strict=True):
            seconds = self._cpu_seconds.get(uid, 0.0) + cpu * dt
            self._cpu_seconds[uid] = seconds
            out.append(Sample(SeriesKey(CPU_USAGE_SECONDS, uid), seconds, Kind.COUNTER, uid))
            out.append(Sample(SeriesKey(MEMORY_ANON_USAGE_BYTES, uid), mem))
            out.append(Sample(SeriesKey(MEMORY_WORKING_SET_BYTES, uid), mem * 1.05))
        for gone in self._cpu_seconds.keys() - seen:
            del self._cpu_seconds[gone]
            self._profiles.pop(gone, None)
        self._node_cpu_seconds += node_cpu * dt
        out.append(Sample(SeriesKey(NODE_CPU_USAGE_SECONDS), self._node_cpu_seconds, Kind.COUNTER))
        if self.cpu_capacity:
            out.append(Sample(SeriesKey(NODE_CPU_CAPACITY_CORES), self.cpu_capacity))
        if self.memory_capacity:
            out.append(Sample(SeriesKey(NODE_MEMORY_TOTAL_BYTES), self.memory_capacity))
            cache = PAGE_CACHE_SHARE * max(self.memory_capacity - node_mem, 0.0)
            out.append(Sample(SeriesKey(NODE_MEMORY_USAGE_WITH_PAGE_CACHE_BYTES), node_mem + cache))
        out.append(Sample(SeriesKey(NODE_MEMORY_USAGE_BYTES), node_mem))
        return out

    def _elapsed(self, now: float) -> float:
        """Seconds since the previous cycle (the counters advance by usage x elapsed time)."""
        last, self._last = self._last, now
        return max(now - last, 0.0) if last is not None else 0.0


def node_selected(node: Mapping[str, Any], annotation: str) -> bool:
    if not annotation:
        return True
    key, sep, value = annotation.partition("=")
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    if key not in annotations:
        return False
    return not sep or annotations[key] == value


@dataclass
class SimulatedNode:
    name: str
    collector: SimulatedNodeCollector
    sampler: Sampler
    reporter: NodeReporter
    publisher: NodeMetricPublisher | None = None
    task: asyncio.Task[None] | None = None


class Simulation:
    """Every selected node of the cluster, simulated in this process."""

    def __init__(self, settings: AgentSettings, *, http: KubeHTTP | None = None) -> None:
        self.settings = settings
        self.http = http
        self._own_http = http is None
        self.params = SimulationParams.from_settings(settings)
        self.policy: ReportPolicy = base_policy(settings)
        self.nodes: dict[str, SimulatedNode] = {}
        self.pods = PodIndex()
        self.timings = AgentTimings()
        self.tasks: list[asyncio.Task[None]] = []
        self.exporter: Exporter | None = None
        self.cache: NodeMetricCache | None = None
        seed = settings.simulate_seed
        self._random = random.Random(seed)
        self._seed = seed
        self.loop = SamplingLoop(lambda: [n.sampler for n in self.nodes.values()], settings.collect_interval_seconds)
        self._summary: asyncio.TimerHandle | None = None

    # -- nodes ---------------------------------------------------------------------------------------------
    def _on_node(self, kind: str, obj: JSON, old: JSON | None) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        if kind == "DELETED" or not node_selected(obj, self.settings.simulate_node_annotation):
            self._remove(name)
        else:
            self._ensure(name, obj)

    def _ensure(self, name: str, node: JSON) -> None:
        cpu, memory = node_capacity(node)
        existing = self.nodes.get(name)
        if existing is not None:
            existing.collector.cpu_capacity, existing.collector.memory_capacity = cpu, memory
            return
        s = self.settings
        seed = None if self._seed is None else (self._seed ^ zlib.crc32(name.encode()))
        collector = SimulatedNodeCollector(
            name, lambda: self.pods.objects(name), self.params, cpu=cpu, memory=memory, seed=seed
        )
        sampler = Sampler([collector], interval=s.collect_interval_seconds, windows=(self.policy.retention_seconds,))
        reporter = NodeReporter(
            name,
            ring=lambda: sampler.ring,
            base_policy=self.policy,
            pods=lambda: self.pods.infos(name),
            on_policy_change=lambda p: self._policy_changed(name, p),
            min_aggregate_seconds=s.spec_min_aggregate_duration_seconds,
            min_report_seconds=s.spec_min_report_interval_seconds,
        )
        state = self.nodes[name] = SimulatedNode(name, collector, sampler, reporter)
        if s.publish and self.http is not None and self.cache is not None:
            state.publisher = NodeMetricPublisher(
                self.http,
                name,
                lambda: self._status(state),
                interval=lambda: reporter.policy.report_interval_seconds,
                limiter=TokenBucket(s.publish_qps, s.publish_burst),
                cache=self.cache,
                create=s.create_nodemetric,
                retry_initial_seconds=s.retry_initial_seconds,
                retry_max_seconds=s.retry_max_seconds,
                request_timeout_seconds=s.request_timeout_seconds,
                # spread the first writes over one interval instead of all nodes at once
                initial_delay_seconds=reporter.policy.report_interval_seconds * (0.5 + 0.5 * self._random.random()),
                rng=random.Random(self._random.random()),
            )
            if s.follow_nodemetric_spec:
                self.cache.listen(name, spec_listener(reporter.apply_spec))
                existing_obj = self.cache.get(name)
                if existing_obj is not None:
                    reporter.apply_spec(existing_obj.get("spec"))
            self.cache.listen(name, state.publisher.on_object)
            state.task = asyncio.ensure_future(state.publisher.run())
            state.task.set_name(f"publisher {name}")
            state.task.add_done_callback(log_crash)
        log.debug("simulating node %s (%g cores, %d bytes)", name, cpu, int(memory))
        self._changed()

    def _remove(self, name: str) -> None:
        state = self.nodes.pop(name, None)
        if state is None:
            return
        if state.task is not None:
            state.task.cancel()
        if self.cache is not None:
            self.cache.forget(name)
        log.debug("no longer simulating node %s", name)
        self._changed()

    def _changed(self) -> None:
        """One summary line shortly after the node set settles, not one per node."""
        if self._summary is not None:
            self._summary.cancel()
        with contextlib.suppress(RuntimeError):
            self._summary = asyncio.get_running_loop().call_later(1.0, self._log_summary)

    def _log_summary(self) -> None:
        pods = sum(len(self.pods.refs(n)) for n in self.nodes)
        log.info("simulating %d nodes with %d pods", len(self.nodes), pods)

    def _policy_changed(self, name: str, policy: ReportPolicy) -> None:
        state = self.nodes.get(name)
        if state is None:
            return
        state.sampler.ensure_retention(policy.retention_seconds)
        if state.publisher is not None:
            state.publisher.wake()

    def _status(self, state: SimulatedNode) -> dict[str, Any]:
        agg = state.reporter.aggregate(time.monotonic())
        return build_status(agg, self.pods.infos(state.name)).to_wire()

    # -- export --------------------------------------------------------------------------------------------
    async def refresh_export(self) -> None:
        started = time.perf_counter()
        inputs = []
        now = time.monotonic()
        for state in list(self.nodes.values()):
            agg = state.reporter.aggregate(now)
            inputs.append(ExportInput(raw=list(state.sampler.last_samples), aggregates=agg, pods={}, node=state.name))
        self.timings.aggregation_seconds = time.perf_counter() - started
        if self.exporter is not None:
            self.exporter.update(await asyncio.to_thread(render_timed, inputs, self.timings))

    def _self_metrics(self) -> str:
        states = [NodeSelfState(n.name, n.sampler, n.publisher) for n in self.nodes.values()]
        return render_self(states, self.timings, "simulate", per_node=True)

    def _healthy(self) -> tuple[bool, str]:
        for task in self.tasks:
            if task.done() and not task.cancelled():
                return False, f"task {task.get_name()} stopped"
        return self.loop.healthy()

    def _ready(self) -> tuple[bool, str]:
        return (True, "ok") if self.timings.renders else (False, "no aggregation yet")

    # -- lifecycle -----------------------------------------------------------------------------------------
    async def start(self) -> None:
        s = self.settings
        if self.http is None:
            self.http = await KubeHTTP.connect(s.kubeconfig, user_agent=USER_AGENT + " (simulate)")
        http = self.http
        if s.publish:
            self.cache = NodeMetricCache(http, max_backoff_seconds=s.retry_max_seconds)
        self.node_reflector = Reflector(
            http,
            NODES_PATH,
            name="nodes",
            label_selector=s.simulate_node_selector or None,
            max_backoff_seconds=s.retry_max_seconds,
        )
        self.node_reflector.add_handler(self._on_node)
        self.pod_reflector = Reflector(
            http, PODS_PATH, name="pods", field_selector="spec.nodeName!=", max_backoff_seconds=s.retry_max_seconds
        )
        self.pod_reflector.add_handler(self.pods.handle)
        if s.metrics_enabled:
            self.exporter = Exporter(
                s.metrics_address, s.metrics_port, live=self._self_metrics, health=self._healthy, ready=self._ready
            )
            await self.exporter.start()
        log.info(
            "simulating nodes matching selector %r with annotation %r: collect every %gs, %s",
            s.simulate_node_selector,
            s.simulate_node_annotation,
            s.collect_interval_seconds,
            self.policy.describe(),
        )
        if self.cache is not None:
            self._spawn(self.cache.run(), "nodemetric watch")
            # Spec policies of existing NodeMetrics should be known before the first publish.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.cache.reflector.synced.wait(), 10)
        self._spawn(self.pod_reflector.run(), "pod watch")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.pod_reflector.synced.wait(), 10)
        self._spawn(self.node_reflector.run(), "node watch")
        self._spawn(self.loop.run(), "sampling")
        first = min(2 * s.collect_interval_seconds + 0.05, s.aggregation_interval_seconds)
        self._spawn(every(lambda: s.aggregation_interval_seconds, self.refresh_export, first), "aggregation")

    def _spawn(self, coro: Any, name: str) -> None:
        spawn(self.tasks, coro, name)

    async def stop(self) -> None:
        if self._summary is not None:
            self._summary.cancel()
        tasks = [*self.tasks, *(n.task for n in self.nodes.values() if n.task is not None)]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.tasks.clear()
        if self.exporter is not None:
            await self.exporter.stop()
        if self._own_http and self.http is not None:
            await self.http.close()


async def run_simulation(settings: AgentSettings) -> int:
    simulation = Simulation(settings)
    try:
        await simulation.start()
        await until_signalled()
        log.info("stopping")
    finally:
        await simulation.stop()
    return 0
