"""`loadline agent`: the node agent.

    loadline agent --node-name NODE [--kubeconfig FILE]   # a daemon for one node (in a pod: NODE_NAME)
    loadline agent --once                                  # no cluster: sample this machine ~10 s, print YAML
    loadline agent --simulate                              # NodeMetrics for many fake (kwok) nodes

The daemon samples every collect interval on its own task, so nothing the API server does can leave a gap in
the history; aggregates for /metrics are prepared on the aggregation cadence; the NodeMetric status is
built and written every report interval (`agent.publisher`). Settings: `agent.config`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import socket
import sys
import time
from collections.abc import Awaitable, Sequence
from typing import IO, Any

import yaml

from agent.collectors.registry import build_collectors
from agent.config import FLAG_ALIASES, AgentSettings, flag_name, load
from agent.exporter import AgentTimings, Exporter, render_self, render_timed
from agent.loops import SamplingLoop, every, spawn, until_signalled
from agent.pipeline import USER_AGENT, NodePipeline, collector_context
from agent.podwatch import CgroupPodDiscovery, PodWatch
from agent.publisher import NodeMetricCache, NodeMetricPublisher
from agent.qos.enforcer import QoSEnforcer
from agent.qos.usage import usage_from_sampler
from agent.report import NodeReporter
from agent.sampler import Sampler
from common.api.constants import SLO_API_VERSION
from common.api.nodemetric import NodeMetric
from common.api.wire import GoDuration, ObjectMeta
from common.config import ConfigError
from common.kube.http import KubeConfigError, KubeHTTP
from common.logging import setup_logging

log = logging.getLogger("loadline.agent")


class NodeAgent:
    """The daemon for one node (one `NodePipeline`); usable in-process (tests) through `start()` / `stop()`."""

    def __init__(self, settings: AgentSettings, *, http: KubeHTTP | None = None) -> None:
        if settings.node_name is None:
            raise ValueError("the agent needs a node name")
        self.settings = settings
        self.node_name: str = settings.node_name
        self.http = http
        self._own_http = http is None
        self.timings = AgentTimings()
        self.tasks: list[asyncio.Task[None]] = []
        self.exporter: Exporter | None = None
        self.cache: NodeMetricCache | None = None
        self.qos: QoSEnforcer | None = None
        self.pipeline: NodePipeline | None = None

    @property
    def sampler(self) -> Sampler:
        assert self.pipeline is not None, "not started"
        return self.pipeline.sampler

    @property
    def reporter(self) -> NodeReporter:
        assert self.pipeline is not None, "not started"
        return self.pipeline.reporter

    @property
    def publisher(self) -> NodeMetricPublisher | None:
        return self.pipeline.publisher if self.pipeline is not None else None

    async def start(self) -> None:
        s = self.settings
        if self.http is None:
            self.http = await KubeHTTP.connect(s.kubeconfig, user_agent=USER_AGENT)
        http = self.http
        self.podwatch = PodWatch(http, self.node_name, max_backoff_seconds=s.retry_max_seconds)
        collectors = build_collectors(collector_context(s, self.podwatch.pods), s.collectors)
        pipeline = self.pipeline = NodePipeline.from_settings(self.node_name, collectors, s, self.podwatch.infos)
        self.loop = SamplingLoop(lambda: [pipeline.sampler], s.collect_interval_seconds)
        if s.publish:
            self.cache = NodeMetricCache(http, name=self.node_name, max_backoff_seconds=s.retry_max_seconds)
            pipeline.attach_publisher(http, self.cache, s)
        if s.qos_enforcement:
            # Off on the node until its NodeSLO sets resourceUsedThresholdWithBE.enable.
            self.qos = QoSEnforcer(
                self.node_name,
                http,
                s.cgroup_root,
                lambda: usage_from_sampler(pipeline.sampler),
                cgroup_parent=s.cgroup_parent,
                sys_root=s.sys_root,
                interval_seconds=s.collect_interval_seconds,
                pods=lambda: self.podwatch.index.objects(self.node_name),
            )
        if s.metrics_enabled:
            self.exporter = Exporter(
                s.metrics_address,
                s.metrics_port,
                live=self._self_metrics,
                health=self._healthy,
                ready=self._ready,
                raw=pipeline.render_raw,
                status=self._status_view,
            )
            await self.exporter.start()
        log.info(
            "agent for node %s: collect every %gs, %s, collectors %s",
            self.node_name,
            s.collect_interval_seconds,
            pipeline.reporter.policy.describe(),
            ",".join(c.name for c in collectors),
        )
        self._spawn(self.loop.run(), "sampling")
        self._spawn(self.podwatch.run(), "pod watch")
        first = min(2 * s.collect_interval_seconds + 0.05, s.aggregation_interval_seconds)
        self._spawn(every(lambda: s.aggregation_interval_seconds, self.refresh_export, first), "aggregation")
        if self.cache is not None and pipeline.publisher is not None:
            self._spawn(self.cache.run(), "nodemetric watch")
            self._spawn(pipeline.publisher.run(), "publisher")
        if self.qos is not None:
            self._spawn(self.qos.run(), "qos enforcement")

    def _spawn(self, coro: Awaitable[None], name: str) -> None:
        spawn(self.tasks, coro, name)

    async def _status_view(self) -> dict[str, Any]:
        assert self.pipeline is not None
        status = self.pipeline.status()  # on the loop: aggregation reads the ring sampling writes
        return {
            "apiVersion": SLO_API_VERSION,
            "kind": "NodeMetric",
            "metadata": {"name": self.node_name},
            "status": status,
        }

    async def refresh_export(self) -> None:
        assert self.pipeline is not None
        agg = self.pipeline.aggregate()
        self.timings.aggregation_seconds = agg.duration_seconds
        if self.exporter is None:
            return
        inp = self.pipeline.export_input(agg)
        self.exporter.update(await asyncio.to_thread(render_timed, [inp], self.timings))

    def _self_metrics(self) -> str:
        assert self.pipeline is not None
        return render_self([self.pipeline.self_state()], self.timings, "node", per_node=True)

    def _healthy(self) -> tuple[bool, str]:
        for task in self.tasks:
            if task.done() and not task.cancelled():
                return False, f"task {task.get_name()} stopped"
        return self.loop.healthy()

    def _ready(self) -> tuple[bool, str]:
        if self.timings.renders == 0:
            return False, "no aggregation yet"
        return True, "ok"

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.tasks.clear()
        if self.exporter is not None:
            await self.exporter.stop()
        if self.pipeline is not None:
            self.pipeline.close()
        if self._own_http and self.http is not None:
            await self.http.close()


async def run_daemon(settings: AgentSettings) -> int:
    agent = NodeAgent(settings)
    try:
        await agent.start()
    except BaseException:
        await agent.stop()
        raise
    try:
        await until_signalled()
        log.info("stopping")
    finally:
        await agent.stop()
    return 0


# ------------------------------------------------------------------------------------------------ --once
def local_node_name() -> str:
    import re

    name = re.sub(r"[^a-z0-9.-]+", "-", socket.gethostname().lower()).strip("-.")
    return name[:253] or "localhost"


class _Progress:
    def __init__(self, stream: IO[str], total: float) -> None:
        self.stream = stream
        self.total = total
        self.tty = stream.isatty()
        self._last_line = -1.0

    def show(self, elapsed: float, pods: int, series: int) -> None:
        elapsed = min(elapsed, self.total)
        if self.tty:
            width = 30
            done = int(width * elapsed / self.total) if self.total else width
            bar = "#" * done + "." * (width - done)
            self.stream.write(f"\rsampling [{bar}] {elapsed:4.1f}/{self.total:g}s  pods {pods}  series {series} ")
            self.stream.flush()
        elif elapsed - self._last_line >= 1.0 or elapsed >= self.total:
            self._last_line = elapsed
            self.stream.write(f"sampling {elapsed:.1f}/{self.total:g}s: pods {pods}, series {series}\n")
            self.stream.flush()

    def end(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


async def run_once(settings: AgentSettings, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    """Sample this machine for `once_seconds` (no cluster), print the NodeMetric it would publish."""
    out = out or sys.stdout
    err = err or sys.stderr
    node = settings.node_name or local_node_name()
    discovery = CgroupPodDiscovery(settings.cgroup_root, settings.cgroup_parent)
    collectors = build_collectors(collector_context(settings, discovery.pods), settings.collectors)
    pipeline = NodePipeline.from_settings(node, collectors, settings, discovery.infos)
    sampler = pipeline.sampler
    policy = pipeline.reporter.policy
    interval = settings.collect_interval_seconds
    duration = settings.once_seconds
    err.write(
        f"loadline agent --once: sampling {node} for {duration:g}s every {interval:g}s "
        f"(cgroups under {settings.cgroup_root}, collectors {', '.join(c.name for c in collectors)})\n"
    )
    progress = _Progress(err, duration)
    cycles = max(math.ceil(duration / interval) + 1, 2)  # +1: the first cycle only sets rate baselines
    started = time.monotonic()
    try:
        for i in range(cycles):
            await sampler.cycle()
            progress.show(time.monotonic() - started, len(discovery.pods()), len(sampler.ring))
            if i + 1 < cycles:
                await asyncio.sleep(max(started + (i + 1) * interval - time.monotonic(), 0.0))
    finally:
        progress.end()
        pipeline.close()
    status = pipeline.status_model()
    metric = NodeMetric(metadata=ObjectMeta(name=node), status=status)
    sampled = time.monotonic() - started
    cold = [w for w in policy.windows if sampled < 0.5 * w]
    for st in sampler.stats.values():
        if not st.last_success:
            err.write(f"collector {st.name} failed: {st.last_error}\n")
    out.write(f"# NodeMetric that `loadline agent` would publish for {node}, from {sampled:.1f}s of samples.\n")
    if cold:
        names = ", ".join(GoDuration.from_seconds(w).canonical() for w in cold)
        out.write(
            f"# Windows {names} are cold (less than half covered), so their aggregates are {{}} as on a freshly\n"
            f"# started agent; e.g. `--once-seconds 20 --windows 10s,30s` shows percentiles.\n"
        )
    out.write(yaml.safe_dump(metric.to_wire(), sort_keys=False))
    out.flush()
    return 0


# ------------------------------------------------------------------------------------------------ CLI
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loadline agent",
        description="Loadline node agent: samples cgroups and /proc, publishes the node's NodeMetric, serves /metrics.",
        epilog="Every setting is also an environment variable LOADLINE_AGENT_<SETTING> and a key of the --config "
        "YAML file; flags win over the environment, which wins over the file. Durations: seconds or 30s, 5m.",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="no cluster: sample this machine, print the NodeMetric YAML")
    mode.add_argument(
        "--simulate",
        action="store_true",
        help="publish NodeMetrics for many fake (kwok) nodes; pods may declare loadline.io/simulated-cpu, "
        "loadline.io/simulated-memory and loadline.io/simulated-burstiness (see agent/simulate.py)",
    )
    parser.add_argument("--config", metavar="FILE", help="YAML file of settings (also LOADLINE_AGENT_CONFIG)")
    for name, field in AgentSettings.model_fields.items():
        flags = [flag_name(name), *FLAG_ALIASES.get(name, ())]
        default = field.get_default(call_default_factory=True)
        help_text = f"{field.description or ''} (default: {_show(default)})"
        if field.annotation is bool:
            parser.add_argument(
                *flags, dest=name, nargs="?", const="true", default=None, metavar="true|false", help=help_text
            )
        else:
            parser.add_argument(*flags, dest=name, default=None, metavar=name.upper(), help=help_text)
    return parser


def _show(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(_show(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if hasattr(value, "value"):
        return str(value.value)
    return str(value)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    flags = {name: getattr(args, name) for name in AgentSettings.model_fields}
    config_file = args.config or os.environ.get("LOADLINE_AGENT_CONFIG")
    try:
        settings = load(flags, file=config_file)
    except ConfigError as exc:
        print(f"loadline agent: {exc}", file=sys.stderr)
        return 2
    if settings.node_name is None and not (args.once or args.simulate):
        print(
            "loadline agent: invalid configuration:\n"
            "  node_name: required (set --node-name, LOADLINE_AGENT_NODE_NAME or NODE_NAME; or use --once)",
            file=sys.stderr,
        )
        return 2
    setup_logging(settings.log_level, json_output=settings.log_json)
    try:
        if args.once:
            return asyncio.run(run_once(settings))
        if args.simulate:
            from agent.simulate import run_simulation

            return asyncio.run(run_simulation(settings))
        return asyncio.run(run_daemon(settings))
    except KeyboardInterrupt:
        return 130
    except KubeConfigError as exc:
        print(f"loadline agent: invalid configuration:\n  {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"loadline agent: {exc}", file=sys.stderr)
        return 1
