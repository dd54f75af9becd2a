"""The scheduler's Prometheus metrics (`loadline_scheduler_*`), modelled on kube-scheduler's.

Metric objects are module-level (one registry per process); gauges that describe live
state (queue sizes, gangs waiting in Permit) read it at scrape time from whichever
scheduler registered itself, so nothing is recomputed per cycle.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from scheduler_plugin.framework.status import Code

PREEMPTION_PLUGIN = "DefaultPreemption"

# kube-scheduler's buckets: exponential from 1 ms (attempts) and from 10 ms (end to end).
_ATTEMPT_BUCKETS = tuple(0.001 * 2**i for i in range(15))
_E2E_BUCKETS = tuple(0.01 * 2**i for i in range(20))
_PLUGIN_BUCKETS = tuple(0.00001 * 1.5**i for i in range(20))

SCHEDULE_ATTEMPTS = Counter(
    "loadline_scheduler_schedule_attempts_total",
    "Scheduling attempts by result (scheduled, unschedulable, error) and profile",
    ["result", "profile"],
)
ATTEMPT_DURATION = Histogram(
    "loadline_scheduler_scheduling_attempt_duration_seconds",
    "Duration of one scheduling cycle (PreFilter through Permit), by result and profile",
    ["result", "profile"],
    buckets=_ATTEMPT_BUCKETS,
)
E2E_DURATION = Histogram(
    "loadline_scheduler_pod_scheduling_duration_seconds",
    "From a pod entering the queue to its binding, over all its attempts, by profile",
    ["profile"],
    buckets=_E2E_BUCKETS,
)
POD_ATTEMPTS = Histogram(
    "loadline_scheduler_pod_scheduling_attempts",
    "Attempts a pod needed until it was bound",
    buckets=(1, 2, 4, 8, 16, 32, 64),
)
PREEMPTION_ATTEMPTS = Counter(
    "loadline_scheduler_preemption_attempts_total",
    "Preemption attempts (runs of the DefaultPreemption PostFilter), kube-scheduler's preemption_attempts_total",
)
PREEMPTION_VICTIMS = Histogram(
    "loadline_scheduler_preemption_victims",
    "Pods evicted by one successful preemption (kube-scheduler's preemption_victims)",
    buckets=(1, 2, 4, 8, 16, 32, 64),
)
PENDING_ATTEMPT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096, 16384)


class PendingPodAttempts(Collector):
    """`loadline_scheduler_pending_pod_scheduling_attempts`: attempts so far of the pods still queued.

    `pod_scheduling_attempts` is observed at binding, so a pod that is retried without end
    never shows there; this histogram, taken at scrape time, shows it in its top buckets."""

    def __init__(self) -> None:
        self.source: Callable[[], list[int]] = list

    def describe(self) -> Iterable[Metric]:
        return [HistogramMetricFamily(_PENDING_ATTEMPTS_NAME, _PENDING_ATTEMPTS_HELP)]

    def collect(self) -> Iterable[Metric]:
        attempts = self.source()
        buckets = [(str(b), float(sum(1 for a in attempts if a <= b))) for b in PENDING_ATTEMPT_BUCKETS]
        buckets.append(("+Inf", float(len(attempts))))
        family = HistogramMetricFamily(_PENDING_ATTEMPTS_NAME, _PENDING_ATTEMPTS_HELP)
        family.add_metric([], buckets, float(sum(attempts)))
        return [family]


_PENDING_ATTEMPTS_NAME = "loadline_scheduler_pending_pod_scheduling_attempts"
_PENDING_ATTEMPTS_HELP = "Scheduling attempts made so far for each pod still pending (taken at scrape time)"
PENDING_POD_ATTEMPTS = PendingPodAttempts()
REGISTRY.register(PENDING_POD_ATTEMPTS)
EXTENSION_POINT_DURATION = Histogram(
    "loadline_scheduler_framework_extension_point_duration_seconds",
    "Duration of running all plugins of one extension point",
    ["extension_point", "status", "profile"],
    buckets=_ATTEMPT_BUCKETS,
)
PLUGIN_DURATION = Histogram(
    "loadline_scheduler_plugin_execution_duration_seconds",
    "Duration of one plugin call at one extension point (Filter and Score calls cover many nodes)",
    ["plugin", "extension_point", "status"],
    buckets=_PLUGIN_BUCKETS,
)
BINDING_DURATION = Histogram(
    "loadline_scheduler_binding_duration_seconds",
    "Duration of the pods/binding call",
    buckets=_ATTEMPT_BUCKETS,
)
BIND_ERRORS = Counter(
    "loadline_scheduler_bind_errors_total",
    "Bindings that failed, by reason (conflict, not_found, unreachable, rejected, plugin)",
    ["reason"],
)
for _reason in ("conflict", "not_found", "unreachable", "rejected", "plugin"):
    BIND_ERRORS.labels(_reason)  # 0 from the start: panels show 0 rather than no data
PENDING_PODS = Gauge(
    "loadline_scheduler_pending_pods",
    "Pods waiting to be scheduled, by queue (active, backoff, unschedulable, gated)",
    ["queue"],
)
IN_FLIGHT_PODS = Gauge(
    "loadline_scheduler_in_flight_pods",
    "Pods past their scheduling cycle: waiting in Permit or being bound",
    ["stage"],
)
PERMIT_WAITING_GANGS = Gauge(
    "loadline_scheduler_permit_waiting_gangs",
    "Gangs with members reserved and waiting in Permit for the rest of the gang",
)
API_ERRORS = Counter(
    "loadline_scheduler_api_errors_total",
    "Failed API calls other than bindings (events, pod status), by call",
    ["call"],
)
for _call in ("binding", "pod status", "event"):
    API_ERRORS.labels(_call)
QUEUE_MOVES = Counter(
    "loadline_scheduler_queue_moves_total",
    "Unschedulable pods moved back to the active or backoff queue, by the cluster event that moved them",
    ["event"],
)
CACHE_SIZE = Gauge(
    "loadline_scheduler_cache_size",
    "Objects in the scheduler's snapshot, by type (nodes, pods, assumed_pods, node_metrics, pod_groups, "
    "persistent_volumes, persistent_volume_claims, assumed_volumes)",
    ["type"],
)


class FrameworkMetrics:
    """A `FrameworkObserver` feeding the per-plugin and per-extension-point histograms of one profile.

    Per-plugin durations are sampled (kube-scheduler's pluginMetricsSamplePercent, 10 %):
    a cycle makes some twenty plugin calls, and observing a Prometheus histogram for each
    would add a third to the cycle's cost. Label children are cached for the same reason."""

    def __init__(self, profile: str, plugin_sample_percent: float = 10.0) -> None:
        self.profile = profile
        self._sample = plugin_sample_percent / 100.0
        self._points: dict[tuple[str, Code], Callable[[float], None]] = {}
        self._plugins: dict[tuple[str, str, Code], Callable[[float], None]] = {}

    def plugin_done(self, point: str, plugin: str, code: Code, seconds: float) -> None:
        if point == "PostFilter" and plugin == PREEMPTION_PLUGIN:
            PREEMPTION_ATTEMPTS.inc()
        if self._sample < 1.0 and random.random() >= self._sample:
            return
        key = (point, plugin, code)
        observe = self._plugins.get(key)
        if observe is None:
            observe = self._plugins[key] = PLUGIN_DURATION.labels(plugin, point, str(code)).observe
        observe(seconds)

    def point_done(self, point: str, code: Code, seconds: float) -> None:
        key = (point, code)
        observe = self._points.get(key)
        if observe is None:
            observe = self._points[key] = EXTENSION_POINT_DURATION.labels(point, str(code), self.profile).observe
        observe(seconds)
