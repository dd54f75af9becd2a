"""The agent process around its node pipelines: the one shell of the daemon (`agent.main.NodeAgent`, one node)
and of the simulation (`agent.simulate.Simulation`, many): the sampling loop over every pipeline, window
aggregation for /metrics on its cadence, the /metrics server with its health and readiness, the task list and
an orderly stop. What differs (where the pipelines come from, what else runs) is the subclass's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import typing
from collections.abc import Awaitable, Sequence
from typing import Any

from agent import malloc
from agent.config import AgentSettings
from agent.exporter import AgentTimings, Exporter, WindowText, render_self, render_timed
from agent.loops import SamplingLoop, every, spawn
from agent.pipeline import NodePipeline

if typing.TYPE_CHECKING:
    from common.kube.http import KubeHTTP


class AgentProcess:
    """Subclasses name their pipelines (`exported`) and the `scope` label of their self-metrics."""

    scope = "node"  # the `scope` of the self-metrics (render_self)

    def __init__(self, settings: AgentSettings, http: KubeHTTP | None) -> None:
        self.settings = settings
        self.http = http
        self._own_http = http is None
        self.timings = AgentTimings()
        self.window_text = WindowText()  # the window series, rendered again per window as its statistics change
        self.tasks: list[asyncio.Task[None]] = []
        self.exporter: Exporter | None = None
        self.loop = SamplingLoop(
            lambda: [pipeline.sampler for pipeline, _ in self.exported()], settings.collect_interval_seconds
        )

    def exported(self) -> Sequence[tuple[NodePipeline, str]]:
        """Every pipeline with its `node` label on /metrics ("" for the daemon's single node)."""
        raise NotImplementedError

    # -- export --------------------------------------------------------------------------------------------
    async def refresh_export(self) -> None:
        """Aggregate every pipeline's windows (on the loop: sampling writes the rings) and render them for
        /metrics off the loop."""
        started, now = time.perf_counter(), time.monotonic()
        inputs = [
            pipeline.export_input(pipeline.aggregate(now), node_label=label) for pipeline, label in self.exported()
        ]
        self.timings.aggregation_seconds = time.perf_counter() - started
        if self.exporter is None:
            return
        self.exporter.update(await asyncio.to_thread(render_timed, self.window_text, inputs, self.timings))
        malloc.trim()

    def render_raw(self) -> bytes:
        return b"".join(pipeline.render_raw(node_label=label) for pipeline, label in self.exported())

    def self_metrics(self) -> str:
        states = [pipeline.self_state() for pipeline, _ in self.exported()]
        return render_self(states, self.timings, self.scope, per_node=True)

    def healthy(self) -> tuple[bool, str]:
        for task in self.tasks:
            if task.done() and not task.cancelled():
                return False, f"task {task.get_name()} stopped"
        return self.loop.healthy()

    def ready(self) -> tuple[bool, str]:
        return (True, "ok") if self.timings.renders else (False, "no aggregation yet")

    # -- lifecycle -----------------------------------------------------------------------------------------
    async def start_exporter(self, default_address: str, **extra: Any) -> None:
        """/metrics, /healthz and /readyz (when metrics are on) on --bind-address (or `default_address`), --port."""
        s = self.settings
        if not s.metrics_enabled:
            return
        self.exporter = Exporter(
            s.bind_address or default_address,
            s.port,
            live=self.self_metrics,
            health=self.healthy,
            ready=self.ready,
            **extra,
        )
        await self.exporter.start()

    def spawn_loops(self) -> None:
        """Sampling every collect interval; the first aggregation once two cycles are in."""
        s = self.settings
        self.spawn(self.loop.run(), "sampling")
        first = min(2 * s.collect_interval_seconds + 0.05, s.aggregation_interval_seconds)
        self.spawn(every(lambda: s.aggregation_interval_seconds, self.refresh_export, first), "aggregation")

    def spawn(self, coro: Awaitable[None], name: str) -> None:
        spawn(self.tasks, coro, name)

    def other_tasks(self) -> Sequence[asyncio.Task[None]]:
        """Tasks the subclass runs outside `tasks` (stopped with them)."""
        return ()

    def release(self) -> None:
        """What the subclass holds beyond the tasks (collectors' descriptors), after they stopped."""

    async def stop(self) -> None:
        """Cancel and await every task, stop /metrics, `release`, close the API client if it is ours."""
        tasks = [*self.tasks, *self.other_tasks()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.tasks.clear()
        if self.exporter is not None:
            await self.exporter.stop()
        self.release()
        if self._own_http and self.http is not None:
            await self.http.close()
