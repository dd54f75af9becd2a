"""Prometheus exposition and health endpoints (`/metrics`, `/healthz`, `/readyz`) on `agent.httpd`.

Names follow Prometheus conventions: base units (`_seconds`, `_bytes`, cores for CPU rates), counters end in
`_total`, ratios are 0..1 and end in `_ratio`; everything is under the `loadline_` prefix.

- Raw values of the last collect cycle, as the collectors emit them: node series as `loadline_node_*`
  (node_exporter's shapes: `loadline_node_pressure_cpu_waiting_seconds_total`, ...), pod and container
  cgroups as cAdvisor's `container_*` shapes under our prefix with labels `namespace`, `pod`, `container`
  (`container=""` is the pod cgroup, as kubelet's cAdvisor does): `loadline_container_cpu_usage_seconds_total`,
  `loadline_container_cpu_cfs_periods_total`, `..._cfs_throttled_periods_total`, `..._cfs_throttled_seconds_total`,
  `loadline_container_memory_working_set_bytes`, Koordinator's anon-only `loadline_container_memory_anon_usage_bytes`,
  `loadline_container_pressure_{cpu,memory,io}_{waiting,stalled}_seconds_total`. Device series keep their
  collector's name under the prefix (`loadline_node_infiniband_*`, ...) with a `device` label.
- Window aggregates, node and system level (and pod level with `--pod-window-metrics`, off by default: 60 lines a
  pod, most of a busy node's scrape; containers stay raw, so cardinality stays bounded):
  percentiles as `loadline_<series>_window_<unit>{window="5m0s",quantile="0.95"}` and the window average
  as `loadline_<series>_window_avg_<unit>{window="5m0s"}`. The percentile families are declared as
  `summary`: `promtool check metrics` rejects a `quantile` label on any other type, and a summary is
  Prometheus' type for quantiles over a sliding window; they have no `_sum`/`_count` (those would not be
  counters here). Queried like gauges: `loadline_node_cpu_usage_window_cores{quantile="0.95",window="5m0s"}`.
- Self-metrics: `loadline_agent_collector_duration_seconds` and `_success` per collector (node_exporter's
  pattern), series errors by reason, store series count and size, collect cycles, aggregation and render
  durations, publishes, publish errors by reason, last successful publish timestamp, `loadline_agent_build_info`.
  Plus `process_*` and `python_*` (`agent.procself`), and prometheus_client's default registry where it is loaded
  (with a cluster: reflector metrics, and its own `process_*`, `python_*` instead).

Raw series are as of the last collect cycle: a scrape renders them (in a worker thread, at most once per
cycle) from the sampler's last cycle, which is replaced as a whole each cycle. What only a scrape reads (the
containers' cgroups, by default) the scrape reads first, on the loop (`read_on_scrape`). Window aggregates are rendered
to bytes on the aggregation cadence in a worker thread from data detached from the store, each window only when its
statistics were computed again (`WindowText`); a scrape only
concatenates those with the raw series and the few self-metric lines, so it never blocks sampling, and no
percentile is ever computed inside a scrape.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import platform
import re
import sys
import time
import weakref
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from agent import malloc
from agent.collectors.base import SERIES_ERROR_REASONS, CollectorStats
from agent.exposition import Families, escape_help, joined_labels
from agent.httpd import Handler, HTTPServer, Response
from agent.report import Aggregates, PodIdentity, wants_window_quantiles
from agent.series import BlockLayout, Kind, Sample, SampleBlock, SeriesKey
from agent.store.aggregate import WindowStats
from common.api.wire import GoDuration
from common.version import __version__

log = logging.getLogger("loadline.agent.exporter")

PREFIX = "loadline_"
QUANTILE_LABELS = {"p50": "0.5", "p90": "0.9", "p95": "0.95", "p99": "0.99"}
# Longest first, so `bytes_per_second` wins over `seconds`.
UNITS = (
    "bytes_per_second",
    "packets_per_second",
    "per_second",
    "cores",
    "bytes",
    "ratio",
    "seconds",
    "celsius",
    "watts",
    "joules",
    "hertz",
)
_INVALID = re.compile(r"[^a-zA-Z0-9_:]")

HELP = {
    "node_cpu_usage_seconds_total": "CPU time the node spent busy (user+nice+system+irq+softirq, Koordinator's set).",
    "node_cpu_capacity_cores": "CPUs of the node.",
    "node_memory_total_bytes": "MemTotal of the node.",
    "node_memory_usage_bytes": "Node memory in use without page cache (MemTotal - MemAvailable).",
    "node_memory_usage_with_page_cache_bytes": "Node memory in use with page cache (MemTotal - MemFree).",
    "container_cpu_usage_seconds_total": 'Cumulative CPU time of the cgroup (container="" is the pod cgroup).',
    "container_cpu_cfs_periods_total": "Elapsed CFS enforcement periods.",
    "container_cpu_cfs_throttled_periods_total": "CFS periods in which the cgroup was throttled.",
    "container_cpu_cfs_throttled_seconds_total": "Time the cgroup was throttled by CFS.",
    "container_memory_anon_usage_bytes": "Anonymous and unevictable memory (Koordinator's usage, no page cache).",
    "container_memory_working_set_bytes": "Working set: usage minus inactive file (kubelet's and cAdvisor's).",
}


def metric_name(base: str) -> str:
    name = PREFIX + _INVALID.sub("_", base)
    return name


def raw_name(key: SeriesKey, kind: Kind) -> str:
    return _raw_name(key.metric, bool(key.pod), kind is Kind.COUNTER, kind is Kind.GAUGE)


@functools.cache  # a few dozen metrics: one string each, not one per series
def _raw_name(metric: str, pod: bool, counter: bool, gauge: bool) -> str:
    base = metric if not pod else f"container_{metric}"
    if counter and not base.endswith("_total"):
        base += "_total"
    elif gauge and base.endswith("_total"):
        base = base[: -len("_total")]
    return metric_name(base)


def window_names(key: SeriesKey) -> tuple[str, str]:
    """(percentile family, average family) of an aggregated series."""
    return _window_names(key.metric, bool(key.pod))


@functools.cache  # a few dozen metrics, asked for by every series of every window render
def _window_names(metric: str, pod: bool) -> tuple[str, str]:
    base = f"pod_{metric}" if pod else metric
    for unit in UNITS:
        if base.endswith("_" + unit):
            stem = base[: -len(unit) - 1]
            return metric_name(f"{stem}_window_{unit}"), metric_name(f"{stem}_window_avg_{unit}")
    return metric_name(f"{base}_window"), metric_name(f"{base}_window_avg")


# ------------------------------------------------------------------------------------------------ bulk
@dataclass(frozen=True)
class ExportInput:
    """A detached view of one node's state, safe to render on another thread."""

    raw: Sequence[Sequence[Sample]]  # the sampler's last cycle, per collector
    aggregates: Aggregates | None
    pods: Mapping[str, PodIdentity]
    node: str = ""  # label value when one process exports several nodes (`--simulate`)


Identity = tuple[str, str]  # a pod's (namespace, name), its series' labels
NO_POD: Identity = ("", "")  # node, system and device series


def _identity(pods: Mapping[str, PodIdentity], uid: str) -> Identity | None:
    """The labels of pod `uid`'s series; None for a pod we no longer know (its series are about to expire)."""
    info = pods.get(uid)
    return None if info is None else (info.namespace, info.name)


def _label_text(key: SeriesKey, node: str, pod: Identity, *, container: bool) -> str:
    """A series' labels as exposition text (`k="v",...`): node, namespace and pod, container (raw series), device."""
    labels = [("node", node)] if node else []
    if key.pod:
        labels += [("namespace", pod[0]), ("pod", pod[1])]
        if container:
            labels.append(("container", key.container))
    if key.device:
        labels.append(("device", key.device))
    return joined_labels(labels)


def render_series(inputs: Iterable[ExportInput]) -> bytes:
    """Raw series of the last cycle and window aggregates, for one or more nodes."""
    inputs = list(inputs)
    return render_raw(inputs) + render_windows(inputs)


def render_raw(inputs: Iterable[ExportInput]) -> bytes:
    """Raw series of the last collect cycle (rendered per scrape: fresh to within one cycle)."""
    families = Families()
    for inp in inputs:
        _add_raw(families, inp)
    return families.render().encode()


def render_windows(inputs: Iterable[ExportInput]) -> bytes:
    """Window aggregates, rendered afresh (a daemon keeps a `WindowText`, which renders only what changed)."""
    return b"".join(WindowText().render(inputs))


# (family name, type, help, the text before the value) of a raw series' line.
_RawLine = tuple[str, str, str, str]
# The lines of series that come as lists of samples (not blocks, whose plans hold their lines), by (key, kind, node
# label, pod identity): the labels of a series change only with its pod's identity. Bounded: cleared when full.
_RAW_LINES: dict[tuple[SeriesKey, bool, str, Identity], _RawLine] = {}
_MAX_RAW_LINES = 20_000


def _raw_line(key: SeriesKey, kind: Kind, node: str, pod: Identity) -> _RawLine:
    name = raw_name(key, kind)
    text = _label_text(key, node, pod, container=True)
    prefix = f"{name}{{{text}}} " if text else f"{name} "
    return name, "counter" if kind is Kind.COUNTER else "gauge", _raw_help(name, key.metric), prefix


@functools.cache  # one string per family, not one per series
def _raw_help(name: str, metric: str) -> str:
    return HELP.get(name[len(PREFIX) :], f"Loadline agent series {metric}.")


def _cached_raw_line(key: SeriesKey, kind: Kind, node: str, pod: Identity) -> _RawLine:
    cache_key = (key, kind is Kind.COUNTER, node, pod)  # an enum hashes in Python: slow
    entry = _RAW_LINES.get(cache_key)
    if entry is None:
        if len(_RAW_LINES) > _MAX_RAW_LINES:
            _RAW_LINES.clear()
        entry = _RAW_LINES[cache_key] = _raw_line(key, kind, node, pod)
    return entry


@dataclass(frozen=True, slots=True)
class _RawPlan:
    """How the slots of one block layout render for one node label and pod list: per family, its slots and
    their lines up to the value. A scrape then costs one array gather and one string join per family instead of
    a dozen Python steps per value (~11,000 values at 300 pods x 3 containers)."""

    pods: tuple[tuple[str, Identity | None], ...]  # (uid, its identity or None) as it was built
    families: tuple[tuple[str, str, str, npt.NDArray[np.intp], tuple[str, ...]], ...]  # name, type, help, ...

    @classmethod
    def build(cls, layout: BlockLayout, node: str, pods: Mapping[str, PodIdentity]) -> _RawPlan:
        seen: dict[str, Identity | None] = {}
        by_family: dict[str, tuple[str, str, list[int], list[str]]] = {}
        for slot, (key, kind) in enumerate(zip(layout.keys, layout.kinds, strict=True)):
            pod = NO_POD
            if key.pod:
                found = seen[key.pod] = _identity(pods, key.pod)
                if found is None:
                    continue
                pod = found
            family, type_, help_text, prefix = _raw_line(key, kind, node, pod)
            entry = by_family.get(family)
            if entry is None:
                entry = by_family[family] = (type_, help_text, [], [])
            entry[2].append(slot)
            entry[3].append(prefix)
        return cls(
            tuple(seen.items()),
            tuple(
                (family, type_, help_text, np.asarray(slots, dtype=np.intp), tuple(prefixes))
                for family, (type_, help_text, slots, prefixes) in by_family.items()
            ),
        )

    def holds_for(self, pods: Mapping[str, PodIdentity]) -> bool:
        return all(_identity(pods, uid) == identity for uid, identity in self.pods)


# Per layout (weakly: a layout lives as long as its collector's set of series) and node label.
_RAW_PLANS: weakref.WeakKeyDictionary[BlockLayout, dict[str, _RawPlan]] = weakref.WeakKeyDictionary()


def _raw_plan(layout: BlockLayout, node: str, pods: Mapping[str, PodIdentity]) -> _RawPlan:
    plans = _RAW_PLANS.get(layout)
    if plans is None:
        plans = _RAW_PLANS[layout] = {}
    plan = plans.get(node)
    if plan is None or not plan.holds_for(pods):
        plan = plans[node] = _RawPlan.build(layout, node, pods)
    return plan


def _add_raw(families: Families, inp: ExportInput) -> None:
    node, pods = inp.node, inp.pods
    for samples in inp.raw:
        if isinstance(samples, SampleBlock):
            values = samples.array()
            for family, type_, help_text, slots, prefixes in _raw_plan(samples.layout, node, pods).families:
                picked = values[slots]
                finite = np.isfinite(picked)  # NaN: an empty slot
                lines = families.get(family, type_, help_text).lines
                if finite.all():
                    lines.extend(map(str.__add__, prefixes, map(repr, picked.tolist())))
                else:
                    where = np.flatnonzero(finite).tolist()
                    lines.extend([prefixes[i] + repr(v) for i, v in zip(where, picked[where].tolist(), strict=True)])
            continue
        for sample in samples:
            pod = _identity(pods, sample.key.pod) if sample.key.pod else NO_POD
            if pod is not None and math.isfinite(sample.value):
                family, type_, help_text, prefix = _cached_raw_line(sample.key, sample.kind, node, pod)
                families.get(family, type_, help_text).lines.append(f"{prefix}{float(sample.value)!r}")


# A window's lines of one family, by family name: (type, help, text).
_Chunk = dict[str, tuple[str, str, bytes]]


@dataclass(frozen=True)
class _SeriesPlan:
    """The window series of one row map and pod list: (row, label text ending in a comma, percentile family,
    average family, metric) for each series that has window series, in row-map order."""

    rows: Mapping[Hashable, int]  # compared by identity: `aggregate` keeps the object while the rows stay
    pods: Mapping[str, PodIdentity]
    series: list[tuple[int, str, str, str, str]]
    pod_windows: bool  # pod-level series included (`ReportPolicy.pod_windows`)

    @classmethod
    def build(
        cls, rows: Mapping[Hashable, int], pods: Mapping[str, PodIdentity], node: str, *, pod_windows: bool
    ) -> _SeriesPlan:
        series = []
        for key, row in rows.items():
            if not isinstance(key, SeriesKey) or not wants_window_quantiles(key, pods=pod_windows):
                continue
            pod = _identity(pods, key.pod) if key.pod else NO_POD
            if pod is None:
                continue  # a pod we no longer know: its series are about to expire
            text = _label_text(key, node, pod, container=False)
            series.append((row, text + "," if text else "", *window_names(key), key.metric))
        return cls(rows, pods, series, pod_windows)


class WindowText:
    """The window series' text, kept per node label and window: a window is rendered again only when its statistics
    are new (`agent.report.window_due`), the series' rows changed or a pod was renamed. A family's lines come window
    by window. One instance per exporting process (not thread-safe: one render at a time)."""

    def __init__(self) -> None:
        self._plans: dict[str, _SeriesPlan] = {}
        self._windows: dict[tuple[str, float], tuple[_SeriesPlan, WindowStats, _Chunk]] = {}  # (plan, stats, text)

    def render(self, inputs: Iterable[ExportInput]) -> list[bytes]:
        """The text as parts to join: each family's header, then its lines of each window."""
        families: dict[str, list[bytes]] = {}
        plans: dict[str, _SeriesPlan] = {}
        windows: dict[tuple[str, float], tuple[_SeriesPlan, WindowStats, _Chunk]] = {}
        for inp in inputs:
            agg = inp.aggregates
            if agg is None:
                continue
            plan = self._plans.get(inp.node)
            pod_windows = agg.policy.pod_windows
            if plan is None or plan.rows is not agg.rows or plan.pods != inp.pods or plan.pod_windows != pod_windows:
                plan = _SeriesPlan.build(agg.rows, inp.pods, inp.node, pod_windows=pod_windows)
            plans[inp.node] = plan
            for duration in agg.policy.windows:
                stats = agg.windows[duration]
                held = self._windows.get((inp.node, duration))
                if held is None or held[0] is not plan or held[1] is not stats:
                    held = (plan, stats, _render_window(plan, stats))
                windows[(inp.node, duration)] = held
                for name, (type_, help_text, text) in held[2].items():
                    parts = families.get(name)
                    if parts is None:
                        header = f"# HELP {name} {escape_help(help_text)}\n# TYPE {name} {type_}\n"
                        parts = families[name] = [header.encode()]
                    parts.append(text)
        self._plans, self._windows = plans, windows  # what this render did not use is gone
        return [part for parts in families.values() for part in parts]


def _render_window(plan: _SeriesPlan, stats: WindowStats) -> _Chunk:
    window = GoDuration.from_seconds(stats.duration).canonical()
    # The statistics as lists, read by row (as `Aggregates.window` does, without a dict per row).
    reported, avg = stats.reported.tolist(), stats.avg.tolist()
    quantile_rows = [(stats.quantiles[n].tolist(), q) for n, q in QUANTILE_LABELS.items() if n in stats.quantiles]
    isfinite, size = math.isfinite, len(reported)
    lines: dict[str, tuple[str, str, list[str]]] = {}
    for row, text, quantile_name, avg_name, metric in plan.series:
        if row >= size or not reported[row]:
            continue  # no samples, or cold (less than half the window covered)
        quantiles, average = lines.get(quantile_name), lines.get(avg_name)
        if quantiles is None or average is None:  # a metric's first series: its two families, in this order
            help_text = f"Percentiles of {metric} over each window (nearest rank)."
            quantiles = lines[quantile_name] = ("summary", help_text, [])
            average = lines[avg_name] = ("gauge", f"Average of {metric} over each window.", [])
        value = avg[row]
        if isfinite(value):
            average[2].append(f'{avg_name}{{{text}window="{window}"}} {value!r}')
        out = quantiles[2]
        for values, q in quantile_rows:
            if isfinite(value := values[row]):
                out.append(f'{quantile_name}{{{text}window="{window}",quantile="{q}"}} {value!r}')
    return {name: (t, h, ("\n".join(out) + "\n").encode()) for name, (t, h, out) in lines.items() if out}


# ------------------------------------------------------------------------------------------------ self
@dataclass
class NodeSelfState:
    """What one node's self-metrics are read from (references, read at scrape time)."""

    node: str
    sampler: Any  # agent.sampler.Sampler
    publisher: Any | None = None  # agent.publisher.NodeMetricPublisher


@dataclass
class AgentTimings:
    aggregation_seconds: float = 0.0
    render_seconds: float = 0.0
    last_render_unix: float | None = None
    renders: int = 0


def render_self(nodes: Sequence[NodeSelfState], timings: AgentTimings, mode: str, *, per_node: bool) -> str:
    families = Families()
    info = families.get("loadline_agent_build_info", "gauge", "Build of the running agent (value 1).")
    info.add([("version", __version__), ("python_version", platform.python_version()), ("mode", mode)], 1.0)
    f_duration = families.get(
        "loadline_agent_collector_duration_seconds", "gauge", "Duration of the collector's last run."
    )
    f_success = families.get("loadline_agent_collector_success", "gauge", "1 if the collector's last run succeeded.")
    f_runs = families.get("loadline_agent_collector_runs_total", "counter", "Runs of the collector.")
    f_failures = families.get("loadline_agent_collector_failures_total", "counter", "Runs that failed as a whole.")
    f_errors = families.get(
        "loadline_agent_collector_series_errors_total",
        "counter",
        f"Samples skipped by the collector, by reason ({', '.join(SERIES_ERROR_REASONS)}).",
    )
    f_series = families.get("loadline_agent_store_series", "gauge", "Series held in the sample store.")
    f_store = families.get("loadline_agent_store_bytes", "gauge", "Bytes of the sample store's arrays.")
    f_rejected = families.get(
        "loadline_agent_store_rejected_samples_total", "counter", "Samples dropped because the store was full."
    )
    f_cycles = families.get("loadline_agent_collect_cycles_total", "counter", "Collect cycles run.")
    f_cycle = families.get(
        "loadline_agent_collect_cycle_duration_seconds", "gauge", "Duration of the last collect cycle."
    )
    f_publishes = families.get("loadline_agent_publishes_total", "counter", "Successful NodeMetric status writes.")
    f_pub_errors = families.get(
        "loadline_agent_publish_errors_total", "counter", "Failed NodeMetric writes, by reason."
    )
    f_last = families.get(
        "loadline_agent_last_publish_success_timestamp_seconds",
        "gauge",
        "Unix time of the last successful NodeMetric status write.",
    )
    f_healthy = families.get("loadline_agent_publish_healthy", "gauge", "0 while NodeMetric writes are failing.")
    for node in nodes:
        base = [("node", node.node)] if per_node else []
        sampler = node.sampler
        stats: Mapping[str, CollectorStats] = sampler.stats
        for name, st in stats.items():
            labels = [*base, ("collector", name)]
            if st.runs:
                f_duration.add(labels, st.last_duration_seconds)
                f_success.add(labels, 1.0 if st.last_success else 0.0)
            f_runs.add(labels, float(st.runs))
            f_failures.add(labels, float(st.failures))
            for reason in SERIES_ERROR_REASONS:  # every reason from the start, at 0 until it happens
                f_errors.add([*labels, ("reason", reason)], float(st.series_errors.get(reason, 0)))
        ring = sampler.ring
        f_series.add(base, float(len(ring)))
        f_store.add(base, float(ring.nbytes()))
        f_rejected.add(base, float(ring.rejected_samples))
        f_cycles.add(base, float(sampler.cycles))
        if sampler.last_cycle_seconds is not None:
            f_cycle.add(base, float(sampler.last_cycle_seconds))
        publisher = node.publisher
        if publisher is not None:
            pstats = publisher.stats
            f_publishes.add(base, float(pstats.successes))
            from agent.publisher import PUBLISH_ERROR_REASONS

            for reason in PUBLISH_ERROR_REASONS:
                f_pub_errors.add([*base, ("reason", reason)], float(pstats.errors.get(reason, 0)))
            if pstats.last_success_unix is not None:
                f_last.add(base, pstats.last_success_unix)
            f_healthy.add(base, 1.0 if pstats.healthy else 0.0)
    families.get("loadline_agent_aggregation_duration_seconds", "gauge", "Duration of the last aggregation.").add(
        [], timings.aggregation_seconds
    )
    families.get("loadline_agent_render_duration_seconds", "gauge", "Duration of the last /metrics render.").add(
        [], timings.render_seconds
    )
    if timings.last_render_unix is not None:
        families.get(
            "loadline_agent_last_render_timestamp_seconds", "gauge", "Unix time the series in /metrics were prepared."
        ).add([], timings.last_render_unix)
    return families.render()


def default_series() -> bytes:
    """prometheus_client's default registry where something loaded it (the API client's metrics, QoS), else the
    same process and Python series without importing it (`agent.procself`)."""
    if "prometheus_client" in sys.modules:
        from prometheus_client import REGISTRY, generate_latest

        return generate_latest(REGISTRY)
    from agent.procself import render_process

    return render_process().encode()


# ------------------------------------------------------------------------------------------------ server
Check = Callable[[], tuple[bool, str]]
STATUS_PATH = "/nodemetric"  # JSON of the NodeMetric the agent would write now (standalone and daemon)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus text format 0.0.4


class Exporter:
    """The HTTP side. `update()` swaps in freshly rendered text (parts, joined per scrape); requests never compute
    anything heavy."""

    def __init__(
        self,
        address: str,
        port: int,
        *,
        live: Callable[[], str],
        health: Check,
        ready: Check,
        raw: Callable[[], bytes] | None = None,
        read_on_scrape: Callable[[], None] | None = None,
        status: Callable[[], Awaitable[Any]] | None = None,
        include_default_registry: bool = True,
    ) -> None:
        self.address = address
        self.requested_port = port
        self._live = live
        self._raw = raw
        self._read_on_scrape = read_on_scrape
        self._status = status
        self._health = health
        self._ready = ready
        self._include_default = include_default_registry
        self._parts: Sequence[bytes] = ()
        self._server: HTTPServer | None = None
        self.port: int | None = None
        self.scrapes = 0

    def update(self, parts: Sequence[bytes]) -> None:
        self._parts = parts

    @property
    def body(self) -> bytes:
        return b"".join(self._parts)

    def metrics_text(self, raw: bytes = b"") -> bytes:
        parts = [raw, *self._parts, self._live().encode()]
        if self._include_default:
            parts.append(default_series())
        return b"".join(parts)

    async def _metrics(self) -> Response:
        self.scrapes += 1
        # Raw series are rendered per scrape (off the loop) from the last collect cycle; aggregates are the
        # bytes the aggregation prepared.
        if self._read_on_scrape is not None:
            self._read_on_scrape()  # on the loop, as a collect cycle: what only a scrape reads (containers)
        raw = await asyncio.to_thread(self._raw) if self._raw is not None else b""
        # The text is megabytes at a few hundred pods: what glibc keeps of it once freed goes back after sending.
        return Response(200, self.metrics_text(raw), CONTENT_TYPE, after_sent=malloc.trim)

    async def _status_json(self) -> Response:
        assert self._status is not None
        body = json.dumps(await self._status(), indent=2) + "\n"
        return Response(200, body.encode(), "application/json; charset=utf-8")

    @staticmethod
    def _check(check: Check) -> Response:
        ok, detail = check()
        return Response(200 if ok else 503, ((detail or ("ok" if ok else "not ok")) + "\n").encode())

    async def _healthz(self) -> Response:
        return self._check(self._health)

    async def _readyz(self) -> Response:
        return self._check(self._ready)

    def routes(self) -> dict[str, Handler]:
        routes: dict[str, Handler] = {"/metrics": self._metrics, "/healthz": self._healthz, "/readyz": self._readyz}
        if self._status is not None:
            routes[STATUS_PATH] = self._status_json
        return routes

    async def start(self) -> int:
        server = HTTPServer(self.routes())
        self.port = await server.start(self.address, self.requested_port)
        self._server = server
        log.info("serving %s on %s:%s", ", ".join(server.routes), self.address, self.port)
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop()
            self._server = None


def render_timed(text: WindowText, inputs: Sequence[ExportInput], timings: AgentTimings) -> list[bytes]:
    """`text.render` with its duration recorded (runs on a worker thread)."""
    started = time.perf_counter()
    body = text.render(inputs)
    timings.render_seconds = time.perf_counter() - started
    timings.last_render_unix = time.time()
    timings.renders += 1
    return body
