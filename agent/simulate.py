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
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.collectors.simulated import SimulatedNodeCollector, SimulationParams, node_capacity
from agent.config import AgentSettings
from agent.loops import log_crash, until_signalled
from agent.pipeline import USER_AGENT, NodePipeline, base_policy
from agent.podwatch import PODS_PATH, PodIndex
from agent.process import AgentProcess
from agent.publisher import NodeMetricCache
from common.api.poddigest import KIND as POD
from common.kube.http import JSON, KubeHTTP
from common.kube.malformed import MalformedObjects
from common.kube.reflector import Reflector

log = logging.getLogger("loadline.agent.simulate")

NODES_PATH = "/api/v1/nodes"


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
    pipeline: NodePipeline
    task: asyncio.Task[None] | None = None


class Simulation(AgentProcess):
    """Every selected node of the cluster, simulated in this process."""

    scope = "simulate"

    def __init__(self, settings: AgentSettings, *, http: KubeHTTP | None = None) -> None:
        super().__init__(settings, http)
        self.params = SimulationParams.from_settings(settings)
        self.nodes: dict[str, SimulatedNode] = {}
        self.pods = PodIndex(MalformedObjects((POD,)))
        self.cache: NodeMetricCache | None = None
        seed = settings.simulate_seed
        self._random = random.Random(seed)
        self._seed = seed
        self._summary: asyncio.TimerHandle | None = None

    def exported(self) -> list[tuple[NodePipeline, str]]:
        return [(state.pipeline, state.name) for state in list(self.nodes.values())]

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
        pipeline = NodePipeline.from_settings(name, [collector], s, lambda: self.pods.infos(name))
        state = self.nodes[name] = SimulatedNode(name, collector, pipeline)
        if s.publish and self.http is not None and self.cache is not None:
            report_interval = pipeline.reporter.policy.report_interval_seconds
            publisher = pipeline.attach_publisher(
                self.http,
                self.cache,
                s,
                # spread the first writes over one interval instead of all nodes at once
                initial_delay_seconds=report_interval * (0.5 + 0.5 * self._random.random()),
                rng=random.Random(self._random.random()),
            )
            state.task = asyncio.ensure_future(publisher.run())
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
        await self.start_exporter("0.0.0.0", raw=self.render_raw)
        log.info(
            "simulating nodes matching selector %r with annotation %r: collect every %gs, %s",
            s.simulate_node_selector,
            s.simulate_node_annotation,
            s.collect_interval_seconds,
            base_policy(s).describe(),
        )
        if self.cache is not None:
            self.spawn(self.cache.run(), "nodemetric watch")
            # Spec policies of existing NodeMetrics should be known before the first publish.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.cache.reflector.synced.wait(), 10)
        self.spawn(self.pod_reflector.run(), "pod watch")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.pod_reflector.synced.wait(), 10)
        self.spawn(self.node_reflector.run(), "node watch")
        self.spawn_loops()

    def other_tasks(self) -> list[asyncio.Task[None]]:
        return [n.task for n in self.nodes.values() if n.task is not None]  # the nodes' publishers

    async def stop(self) -> None:
        if self._summary is not None:
            self._summary.cancel()
        await super().stop()


async def run_simulation(settings: AgentSettings) -> int:
    simulation = Simulation(settings)
    try:
        await simulation.start()
        await until_signalled()
        log.info("stopping")
    finally:
        await simulation.stop()
    return 0
