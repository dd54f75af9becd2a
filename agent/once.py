"""`loadline agent --once`: sample this machine for a few seconds (no cluster) and print what the agent measured.

The default output is a table in human units (cores, MiB/GiB); `--once-output yaml` prints the NodeMetric the
agent would publish. Unless windows are given, they fit the sampling time (half of it and all of it), so the
percentiles are not empty. Pods are the cgroup tree's, named by their UID (there is no API server to ask).
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from typing import IO

from agent.collectors.registry import build_collectors
from agent.config import AgentSettings
from agent.pipeline import NodePipeline, collector_context, local_node_name
from agent.podwatch import CgroupPodDiscovery
from agent.series import NODE_CPU_CAPACITY_CORES, NODE_MEMORY_TOTAL_BYTES, SeriesKey
from common.api.nodemetric import AGGREGATION_TYPES, NodeMetric, NodeMetricStatus, ResourceMap
from common.api.wire import GoDuration, ObjectMeta
from common.humanize import human_bytes, human_cores

DEFAULT_WINDOWS = AgentSettings.model_fields["aggregate_windows"].get_default(call_default_factory=True)


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


def fitted(settings: AgentSettings) -> AgentSettings:
    """Windows (and the usage average) that fit the sampling time, unless windows were chosen."""
    if list(settings.aggregate_windows) != list(DEFAULT_WINDOWS):
        return settings
    total = settings.once_seconds
    windows = sorted({max(total / 2, settings.collect_interval_seconds * 2), total})
    return settings.model_copy(update={"aggregate_windows": windows, "aggregate_duration_seconds": total})


async def run_once(settings: AgentSettings, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    """Sample this machine for `once_seconds` (no cluster), print the result."""
    out = out or sys.stdout
    err = err or sys.stderr
    settings = fitted(settings)
    node = settings.node_name or local_node_name()
    discovery = CgroupPodDiscovery(settings.cgroup_root, settings.cgroup_parent, pod_logs_dir=settings.pod_logs_dir)
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
        discovery.close()  # its inotify descriptor
    status = pipeline.status_model()
    sampled = time.monotonic() - started
    cold = [w for w in policy.windows if sampled < 0.5 * w]
    for st in sampler.stats.values():
        if not st.last_success:
            err.write(f"collector {st.name} failed: {st.last_error}\n")
    latest = sampler.latest
    if settings.once_output == "yaml":
        # A pod with no namespace was named by its UID only (no pod log directory): a NodeMetric entry needs both
        # (common/api/nodemetric_digest.py), so it is listed in a comment, not in podsMetric.
        unnamed = [p for p in status.pods_metric or [] if not p.namespace]
        if unnamed:
            status = status.model_copy(update={"pods_metric": [p for p in status.pods_metric or [] if p.namespace]})
        metric = NodeMetric(metadata=ObjectMeta(name=node), status=status)
        out.write(f"# NodeMetric that `loadline agent` would publish for {node}, from {sampled:.1f}s of samples.\n")
        if cold:
            names = ", ".join(GoDuration.from_seconds(w).canonical() for w in cold)
            out.write(
                f"# Windows {names} are cold (less than half covered), so their aggregates are {{}} as on a "
                f"freshly\n# started agent; e.g. `--once-seconds 20 --windows 10s,30s` shows percentiles.\n"
            )
        if unnamed:
            uids = ", ".join(str(p.name) for p in unnamed)
            out.write(
                f"# {len(unnamed)} pod(s) found in the cgroup tree have no pod log directory under "
                f"{settings.pod_logs_dir} to name them, so podsMetric leaves them out: {uids}\n"
            )
        import yaml

        out.write(yaml.safe_dump(metric.to_wire(), sort_keys=False))
    else:
        out.write(
            table(
                node,
                status,
                sampled,
                cpus=latest.get(SeriesKey(NODE_CPU_CAPACITY_CORES)),
                memory=latest.get(SeriesKey(NODE_MEMORY_TOTAL_BYTES)),
            )
        )
    out.flush()
    return 0


def _cpu(rmap: ResourceMap | None) -> float | None:
    q = (rmap.resources or {}).get("cpu") if rmap is not None else None
    return q.as_float() if q is not None else None


def _memory(rmap: ResourceMap | None) -> float | None:
    q = (rmap.resources or {}).get("memory") if rmap is not None else None
    return q.as_float() if q is not None else None


def _cell(value: float | None, fmt: str) -> str:
    if value is None:
        return "-"
    return human_cores(value) if fmt == "cpu" else human_bytes(value)


def table(node: str, status: NodeMetricStatus, sampled: float, *, cpus: float | None, memory: float | None) -> str:
    """What `--once` measured, in human units: usage, window percentiles, pods."""
    info = status.node_metric
    lines = [f"{node}: {sampled:.1f}s of samples"]
    if cpus is not None or memory is not None:
        lines.append(f"capacity      {_cell(cpus, 'cpu'):>10}  {_cell(memory, 'memory'):>10}")
    rows: list[tuple[str, ResourceMap | None]] = []
    if info is not None:
        rows += [("node usage", info.node_usage), ("system usage", info.system_usage)]
    lines.append(f"{'':12}  {'CPU':>10}  {'MEMORY':>10}")
    for label, rmap in rows:
        lines.append(f"{label:12}  {_cell(_cpu(rmap), 'cpu'):>10}  {_cell(_memory(rmap), 'memory'):>10}")
    for window in (info.aggregated_node_usages or []) if info is not None else []:
        usage = window.usage or {}
        name = str(window.duration)
        if not any(r is not None and r.resources for r in usage.values()):
            lines.append(f"{'window ' + name:12}  cold (less than half of it sampled)")
            continue
        cpu = "  ".join(f"{k} {_cell(_cpu(usage.get(k)), 'cpu')}" for k in AGGREGATION_TYPES)
        mem = "  ".join(f"{k} {_cell(_memory(usage.get(k)), 'memory')}" for k in AGGREGATION_TYPES)
        lines.append(f"{'window ' + name:12}  CPU     {cpu}")
        lines.append(f"{'':12}  memory  {mem}")
    pods = status.pods_metric or []
    if pods:
        lines.append("")
        width = max(len(f"{p.namespace}/{p.name}" if p.namespace else str(p.name)) for p in pods)
        lines.append(f"{'POD':{width}}  {'CPU':>10}  {'MEMORY':>10}  QOS  PRIORITY")
        for p in pods:
            name = f"{p.namespace}/{p.name}" if p.namespace else str(p.name)
            usage_map = p.pod_usage
            lines.append(
                f"{name:{width}}  {_cell(_cpu(usage_map), 'cpu'):>10}  {_cell(_memory(usage_map), 'memory'):>10}"
                f"  {p.qos or '-':4} {p.priority or '-'}"
            )
    return "\n".join(lines) + "\n"
