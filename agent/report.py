"""The NodeMetric status built from the store, the way koordlet builds it (koordinator
pkg/koordlet/statesinformer/impl/states_nodemetric.go).

- `nodeUsage`: average over `aggregateDurationSeconds` of node CPU and of the node memory series that
  `nodeMemoryCollectPolicy` names (`usageWithoutPageCache`: MemTotal - MemAvailable; `usageWithPageCache`:
  MemTotal - MemFree; `usageWithHotPageCache` needs kidled's hot-page data, which we do not collect, so it
  reports usage without page cache, as koordlet does without kidled), plus node-level devices.
- `aggregatedNodeUsages`: one entry per window of `nodeAggregatePolicy.durations`, shortest first, each with
  `avg p50 p90 p95 p99` (nearest rank, `agent.store.aggregate`). A window in which the CPU or the memory
  samples span less than half of it is cold and maps every key to `{}`.
- `systemUsage` / `aggregatedSystemUsages`: the same for node - sum(pods), clamped at 0 (`agent.sampler`).
- `podsMetric`: per pod known to the pod source, average over `aggregateDurationSeconds` of its pod cgroup's
  CPU and anon-only memory (koordlet's pod "memory usage"), with Koordinator's defaulted `priority` and `qos`
  (`common.api.pod`), and its devices; pods without samples are skipped; sorted by namespace, then name.
- `updateTime`: when the status was built.

Units: CPU as a milli-quantity, truncated (`int(cores * 1000)`), memory as whole bytes in BinarySI.

Devices come from any collector that is a `DeviceSource` (`agent.collectors.devices`): each `Device` names
the series behind each of its `DeviceInfo.resources`; this module only supplies the aggregated values. GPUs
carry Koordinator's keys (`koordinator.sh/gpu-core`, `gpu-memory`, `gpu-memory-ratio`); InfiniBand ports
are `devices[]` of type `rdma`, with whatever resources their collector declares. A topology without
the three fields the CRD requires (socketID, nodeID, pcieID) is left out, so the API server accepts it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np
from pydantic import ValidationError

from agent.collectors.base import Collector
from agent.collectors.devices import Device, device_info
from agent.series import (
    CPU_CFS_THROTTLED_RATIO,
    CPU_USAGE_CORES,
    MEMORY_ANON_USAGE_BYTES,
    MEMORY_WORKING_SET_BYTES,
    NODE_CPU_USAGE_CORES,
    NODE_MEMORY_USAGE_BYTES,
    NODE_MEMORY_USAGE_WITH_PAGE_CACHE_BYTES,
    SYSTEM_CPU_USAGE_CORES,
    SYSTEM_MEMORY_USAGE_BYTES,
    SeriesKey,
)
from agent.store.aggregate import WindowStats, average_window, build_report
from agent.store.ring import SampleRing
from common.api.malformed import MalformedObjectError, from_validation_error
from common.api.nodemetric import (
    AGGREGATION_TYPES,
    AggregatedUsage,
    DeviceInfo,
    NodeMemoryCollectPolicy,
    NodeMetricCollectPolicy,
    NodeMetricInfo,
    NodeMetricStatus,
    PodMetricInfo,
    ResourceMap,
    check_aggregate_seconds,
    check_aggregate_windows,
)
from common.api.poddigest import PodDigest, digest_pod
from common.api.quantity import MAX_CONSUMER_UNITS, Format, Quantity
from common.api.wire import GoDuration

log = logging.getLogger("loadline.agent.report")

CPU = "cpu"
MEMORY = "memory"

# Node memory series per nodeMemoryCollectPolicy (hot page cache needs kidled: falls back, as koordlet does).
NODE_MEMORY_SERIES: Mapping[NodeMemoryCollectPolicy, str] = {
    NodeMemoryCollectPolicy.USAGE_WITHOUT_PAGE_CACHE: NODE_MEMORY_USAGE_BYTES,
    NodeMemoryCollectPolicy.USAGE_WITH_HOT_PAGE_CACHE: NODE_MEMORY_USAGE_BYTES,
    NodeMemoryCollectPolicy.USAGE_WITH_PAGE_CACHE: NODE_MEMORY_USAGE_WITH_PAGE_CACHE_BYTES,
}

# Series whose window percentiles someone reads (NodeMetric or /metrics); the others get the average only.
QUANTILE_METRICS = frozenset(
    {
        NODE_CPU_USAGE_CORES,
        NODE_MEMORY_USAGE_BYTES,
        NODE_MEMORY_USAGE_WITH_PAGE_CACHE_BYTES,
        SYSTEM_CPU_USAGE_CORES,
        SYSTEM_MEMORY_USAGE_BYTES,
        CPU_USAGE_CORES,
        MEMORY_ANON_USAGE_BYTES,
        MEMORY_WORKING_SET_BYTES,
        CPU_CFS_THROTTLED_RATIO,
    }
)


def wants_window_quantiles(key: Hashable, *, pods: bool = True) -> bool:
    """Node, system and (with `pods`) pod-level series we report, and every device series; never containers.

    Pod-level percentiles are read by /metrics only (a pod's NodeMetric entry is its average over the aggregate
    duration), so an agent that does not export them (`ReportPolicy.pod_windows` off) does not compute them."""
    if not isinstance(key, SeriesKey) or key.container or (key.pod and not pods):
        return False
    return bool(key.device) or key.metric in QUANTILE_METRICS


# ------------------------------------------------------------------------------------------------ policy
@dataclass(frozen=True)
class ReportPolicy:
    """What the agent acts on: its configuration overlaid by the NodeMetric's spec.metricCollectPolicy."""

    aggregate_duration_seconds: float = 300.0
    report_interval_seconds: float = 60.0
    windows: tuple[float, ...] = (300.0, 600.0, 1800.0)  # ascending
    node_memory_collect_policy: NodeMemoryCollectPolicy = NodeMemoryCollectPolicy.USAGE_WITHOUT_PAGE_CACHE
    # Per-pod window series (percentiles and averages) on /metrics: 60 lines a pod with the default windows, 71 % of
    # a 300-pod scrape's series; off by default (--pod-window-metrics, docs/monitoring.md "Cardinality"). Not in the
    # NodeMetric's spec: a setting of the agent.
    pod_windows: bool = False

    def __post_init__(self) -> None:
        if not self.windows:
            raise ValueError("a report policy needs at least one window")
        object.__setattr__(self, "windows", tuple(sorted(set(self.windows))))

    @property
    def retention_seconds(self) -> float:
        """History the store must keep for this policy."""
        return max(*self.windows, self.aggregate_duration_seconds)

    def describe(self) -> str:
        windows = ",".join(GoDuration.from_seconds(w).canonical() for w in self.windows)
        return (
            f"aggregate={self.aggregate_duration_seconds:g}s report={self.report_interval_seconds:g}s "
            f"windows={windows} memory={self.node_memory_collect_policy.value} "
            f"pod-window-metrics={'on' if self.pod_windows else 'off'}"
        )


def effective_policy(
    base: ReportPolicy,
    spec: NodeMetricCollectPolicy | Mapping[str, Any] | None,
    *,
    min_aggregate_seconds: float = 60.0,
    min_report_seconds: float = 30.0,
) -> ReportPolicy:
    """`base` with every field the spec sets replacing it; spec values are clamped as koordlet clamps them."""
    if spec is None:
        return base
    if not isinstance(spec, NodeMetricCollectPolicy):
        spec = NodeMetricCollectPolicy.from_wire(spec)
    changes: dict[str, Any] = {}
    if spec.aggregate_duration_seconds:
        try:
            check_aggregate_seconds(spec.aggregate_duration_seconds)
        except ValueError as exc:
            raise ValueError(f"aggregateDurationSeconds: {exc}") from None
        changes["aggregate_duration_seconds"] = float(max(spec.aggregate_duration_seconds, min_aggregate_seconds))
    if spec.report_interval_seconds:
        changes["report_interval_seconds"] = float(max(spec.report_interval_seconds, min_report_seconds))
    durations = spec.node_aggregate_policy.durations if spec.node_aggregate_policy else None
    windows = tuple(d.seconds for d in durations or () if d.nanoseconds > 0)
    try:
        check_aggregate_windows(windows)  # each window sizes the ring: a ValueError ignores the spec
    except ValueError as exc:
        raise ValueError(f"nodeAggregatePolicy.durations: {exc}") from None
    if windows:
        changes["windows"] = windows
    if spec.node_memory_collect_policy:
        changes["node_memory_collect_policy"] = spec.node_memory_collect_policy
    return replace(base, **changes) if changes else base


# ------------------------------------------------------------------------------------------------ pods
@dataclass(frozen=True, slots=True)
class PodIdentity:
    """What the report says about a pod besides its usage."""

    uid: str
    namespace: str
    name: str
    priority: str  # Koordinator's defaulted class: koord-prod, koord-batch, ... or ""
    qos: str  # LSE, LSR, LS, BE, SYSTEM

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any]) -> PodIdentity:
        return cls.from_digest(digest_pod(pod))

    @classmethod
    def from_digest(cls, digest: PodDigest) -> PodIdentity:
        """A pod that cannot be read (see agent/podwatch.py pod_ref) is named without classes."""
        if digest.problem is not None:
            return cls(digest.uid, digest.namespace, digest.name, "", "")
        return cls(digest.uid, digest.namespace, digest.name, digest.priority_class.value, digest.koord_qos.value)


# ------------------------------------------------------------------------------------------------ aggregates
@dataclass(frozen=True)
class Aggregates:
    """Everything a report or an export reads, computed once per aggregation and detached from the ring."""

    now: float  # monotonic time the windows end at
    policy: ReportPolicy
    rows: dict[Hashable, int]
    average: WindowStats  # over aggregateDurationSeconds, no cold-start rule (nodeUsage, podsMetric)
    windows: dict[float, WindowStats]  # policy windows, cold-start rule applied, percentiles where wanted
    duration_seconds: float = 0.0
    computed_at: Mapping[float, float] = field(default_factory=dict)  # window -> the `now` its stats are for

    def avg(self, key: Hashable) -> float | None:
        """Average over the aggregate duration, or None without samples."""
        row = self.rows.get(key)
        stats = self.average
        if row is None or row >= stats.reported.shape[0] or not stats.reported[row]:
            return None
        value = float(stats.avg[row])
        return value if math.isfinite(value) else None

    def window(self, key: Hashable, duration: float) -> dict[str, float] | None:
        """{"avg": .., "p50": .., ...} over one window, or None (no samples, or cold)."""
        row = self.rows.get(key)
        stats = self.windows[duration]
        if row is None or row >= stats.reported.shape[0] or not stats.reported[row]:
            return None
        out = {"avg": float(stats.avg[row])}
        for name, values in stats.quantiles.items():
            value = float(values[row])
            if math.isfinite(value):
                out[name] = value
        return out


# A window's statistics are computed again once this share of it is new samples: 5m every 15 s, 10m every 30 s, 30m
# every 90 s; in between, the last ones serve. Fifteen new samples of 1,800 barely move a 30m percentile, while
# sorting the long windows was most of each aggregation (at 300 pods x 3: the 30m window half of it, the window
# series' text again as much). koordlet computes its windows once per NodeMetric report (60 s).
WINDOW_REFRESH_SHARE = 1 / 20
WINDOW_REFRESH_SLACK_SECONDS = 1.0  # the aggregation loop's jitter: a window due at 15 s is due at 14.99 s too


def window_due(duration: float, computed_at: float, now: float) -> bool:
    """Whether window `duration`, last computed for `computed_at`, is computed again for `now`."""
    age = now - computed_at
    return not 0.0 <= age < duration * WINDOW_REFRESH_SHARE - WINDOW_REFRESH_SLACK_SECONDS


def aggregate(
    ring: SampleRing,
    now: float,
    policy: ReportPolicy,
    *,
    executor: Executor | None = None,
    previous: Aggregates | None = None,
) -> Aggregates:
    """Aggregate every series for `policy`. Runs on the caller's thread; the result shares nothing with
    the ring, so it can be handed to another thread (export rendering) while sampling goes on.

    With the `previous` aggregation of the same ring, a window not yet due (`window_due`) keeps its statistics;
    rows that hold another series since are not reported in it until it is computed again (a series that new is
    cold in every window that is not due yet)."""
    import time

    started = time.perf_counter()
    rows = ring.rows()
    carried: dict[float, tuple[WindowStats, float]] = {}
    wants = wants_window_quantiles if policy.pod_windows else _node_window_quantiles
    if previous is not None and previous.policy.pod_windows != policy.pod_windows:
        previous = None  # its windows lack (or carry) the pods' percentiles: nothing to carry over
    if previous is not None and previous.policy.windows == policy.windows:
        if rows == previous.rows:
            rows = previous.rows  # the same object: renderers key their cached text on it
            moved: list[int] = []
        else:
            moved = [row for key, row in rows.items() if previous.rows.get(key) != row]
        for duration in policy.windows:
            at = previous.computed_at.get(duration, previous.now)
            if not window_due(duration, at, now):
                carried[duration] = (_without_rows(previous.windows[duration], moved), at)
    due = [d for d in policy.windows if d not in carried]
    report = build_report(ring, now, due, wants_quantiles=wants, executor=executor, rows=rows)
    average = average_window(ring, now, policy.aggregate_duration_seconds)
    windows = {d: carried[d][0] if d in carried else report.windows[d] for d in policy.windows}
    return Aggregates(
        now=now,
        policy=policy,
        rows=rows,
        average=average,
        windows=windows,
        duration_seconds=time.perf_counter() - started,
        computed_at={d: carried[d][1] if d in carried else now for d in policy.windows},
    )


def _node_window_quantiles(key: Hashable) -> bool:
    return wants_window_quantiles(key, pods=False)


def _without_rows(stats: WindowStats, rows: Sequence[int]) -> WindowStats:
    """`stats` with `rows` not reported (the same object when none of them is in it)."""
    inside = [row for row in rows if row < stats.reported.shape[0]]
    if not inside:
        return stats
    picked = np.asarray(inside, dtype=np.intp)
    reported = stats.reported.copy()
    reported[picked] = False
    return replace(stats, reported=reported)


# ------------------------------------------------------------------------------------------------ quantities
def cpu_quantity(cores: float) -> Quantity | None:
    """Koordinator: `resource.NewMilliQuantity(int64(cores*1000), DecimalSI)` (truncated). None for a value no
    consumer could hold (not finite, or above MAX_CONSUMER_UNITS: it would make the whole NodeMetric
    malformed); the inputs are range-checked where they are read, so this is the last guard only."""
    if not math.isfinite(cores) or cores * 1000 > MAX_CONSUMER_UNITS:
        return None
    return Quantity.from_milli(max(int(cores * 1000), 0), Format.DECIMAL_SI)


def memory_quantity(value: float) -> Quantity | None:
    """Koordinator: `resource.NewQuantity(int64(bytes), BinarySI)`; None as for `cpu_quantity`."""
    if not math.isfinite(value) or value > MAX_CONSUMER_UNITS:
        return None
    return Quantity.from_int(max(int(value), 0), Format.BINARY_SI)


def _resources(cpu: float | None, memory: float | None) -> dict[str, Quantity]:
    out: dict[str, Quantity] = {}
    if cpu is not None and (q := cpu_quantity(cpu)) is not None:
        out[CPU] = q
    if memory is not None and (q := memory_quantity(memory)) is not None:
        out[MEMORY] = q
    return out


def _resource_map(resources: Mapping[str, Quantity], devices: Sequence[DeviceInfo] = ()) -> ResourceMap:
    """A ResourceMap with only the parts that have content (`{}` when empty, as Go's omitempty writes it)."""
    rmap = ResourceMap()
    if resources:
        rmap.resources = dict(resources)
    if devices:
        rmap.devices = list(devices)
    return rmap


# ------------------------------------------------------------------------------------------------ devices
DeviceLookup = Callable[[SeriesKey], "float | None"]


def current_devices(collectors: Iterable[Collector]) -> list[Device]:
    """The devices of every collector's last inventory; a collector whose inventory fails is skipped."""
    out: list[Device] = []
    for collector in collectors:
        try:
            out.extend(collector.devices)
        except Exception:  # one broken device source must not cost the report
            log.debug("device inventory of %s failed", collector.name, exc_info=True)
    return out


def _device_infos(devices: Sequence[Device], value_of: DeviceLookup, pod: str = "") -> list[DeviceInfo]:
    if not devices:
        return []
    out = []
    for device in devices:
        try:
            info = device_info(device, value_of, pod)
        except Exception:
            log.debug("device %r could not be reported", getattr(device, "id", device), exc_info=True)
            continue
        if info is not None:
            out.append(_schema_safe(info))
    return out


def _schema_safe(info: DeviceInfo) -> DeviceInfo:
    """The CRD requires socketID, nodeID and pcieID in a topology: drop a partial one rather than be rejected."""
    topology = info.topology
    if topology is not None and (topology.socket_id is None or topology.node_id is None or topology.pcie_id is None):
        data = info.to_wire()
        data.pop("topology", None)
        return DeviceInfo.from_wire(data)
    return info


# ------------------------------------------------------------------------------------------------ status
def build_status(
    agg: Aggregates,
    pods: Mapping[str, PodIdentity],
    *,
    devices: Sequence[Device] = (),
    update_time: datetime | None = None,
) -> NodeMetricStatus:
    """The NodeMetric status for `agg` (see the module docstring for every field)."""
    policy = agg.policy
    node_memory = NODE_MEMORY_SERIES[policy.node_memory_collect_policy]
    node_cpu_key, node_mem_key = SeriesKey(NODE_CPU_USAGE_CORES), SeriesKey(node_memory)
    sys_cpu_key, sys_mem_key = SeriesKey(SYSTEM_CPU_USAGE_CORES), SeriesKey(SYSTEM_MEMORY_USAGE_BYTES)

    node_devices = _device_infos(devices, agg.avg)
    info = NodeMetricInfo(
        node_usage=_resource_map(_resources(agg.avg(node_cpu_key), agg.avg(node_mem_key)), node_devices),
        aggregated_node_usages=_aggregated(agg, node_cpu_key, node_mem_key, devices),
        system_usage=_resource_map(_resources(agg.avg(sys_cpu_key), agg.avg(sys_mem_key))),
        aggregated_system_usages=_aggregated(agg, sys_cpu_key, sys_mem_key, ()),
    )
    pods_metric = []
    for uid, pod in pods.items():
        resources = _resources(
            agg.avg(SeriesKey(CPU_USAGE_CORES, uid)), agg.avg(SeriesKey(MEMORY_ANON_USAGE_BYTES, uid))
        )
        if CPU not in resources or MEMORY not in resources:
            # koordlet's collectPodMetric gives up on a pod when either its CPU or its memory query fails (a pod
            # found since the last sample has memory but no CPU rate yet), so every entry it writes has both keys
            # and readers (koord-scheduler's estimator, the descheduler) never see a half-filled podUsage.
            continue
        pod_devices = _device_infos(devices, agg.avg, uid)
        pods_metric.append(
            PodMetricInfo(
                namespace=pod.namespace,
                name=pod.name,
                pod_usage=_resource_map(resources, pod_devices),
                priority=pod.priority,
                qos=pod.qos,
            )
        )
    pods_metric.sort(key=lambda p: (p.namespace or "", p.name or ""))
    status = NodeMetricStatus(update_time=(update_time or datetime.now(UTC)).replace(microsecond=0), node_metric=info)
    if pods_metric:  # Go's omitempty: no pods, no field
        status.pods_metric = pods_metric
    return status


def _aggregated(
    agg: Aggregates, cpu_key: SeriesKey, mem_key: SeriesKey, devices: Sequence[Device]
) -> list[AggregatedUsage]:
    out = []
    for duration in agg.policy.windows:  # ascending: shortest first, which the CRD's P95-CPU column reads
        cpu = agg.window(cpu_key, duration)
        mem = agg.window(mem_key, duration)
        usage: dict[str, ResourceMap] = {}
        for name in AGGREGATION_TYPES:
            if cpu is None or mem is None:
                # Cold (or no data): the whole window is `{}`, never CPU without memory or the reverse. The
                # CPU rate starts one cycle after memory (its first counter reading is only a baseline).
                usage[name] = ResourceMap()
                continue
            resources = _resources(cpu.get(name), mem.get(name))
            dev: list[DeviceInfo] = []
            if devices and resources:

                def value_of(key: SeriesKey, name: str = name, duration: float = duration) -> float | None:
                    found = agg.window(key, duration)
                    return found.get(name) if found else None

                dev = _device_infos(devices, value_of)
            usage[name] = _resource_map(resources, dev)
        out.append(AggregatedUsage(duration=GoDuration.from_seconds(duration), usage=usage))
    return out


# ------------------------------------------------------------------------------------------------ reporter
@dataclass
class NodeReporter:
    """One node's reporting state: its sampler's ring, the policy in force and where pods/devices come from.

    Shared by the daemon, `--once` and `--simulate` (one per simulated node).
    """

    node_name: str
    ring: Callable[[], SampleRing]
    base_policy: ReportPolicy
    pods: Callable[[], Mapping[str, PodIdentity]]
    devices: Callable[[], Sequence[Device]] = field(default=lambda: ())
    on_policy_change: Callable[[ReportPolicy], None] | None = None
    # Told what is wrong with the NodeMetric's spec (None: it reads again); the agent with a cluster counts it.
    on_spec_problem: Callable[[MalformedObjectError | None], None] | None = None
    min_aggregate_seconds: float = 60.0
    min_report_seconds: float = 30.0
    policy: ReportPolicy = field(init=False)
    spec_policy: NodeMetricCollectPolicy | None = field(init=False, default=None)
    last: Aggregates | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.policy = self.base_policy

    def _spec_problem(self, exc: ValueError) -> MalformedObjectError:
        where = "spec.metricCollectPolicy"
        if isinstance(exc, ValidationError):
            found = from_validation_error("NodeMetric", self.node_name, exc)
            field = f"{where}.{found.field}" if found.field else where
            return MalformedObjectError(
                found.detail, kind="NodeMetric", name=self.node_name, field=field, reason=found.reason
            )
        return MalformedObjectError(str(exc), kind="NodeMetric", name=self.node_name, field=where)

    def apply_spec(self, spec: Mapping[str, Any] | None) -> bool:
        """Follow `spec.metricCollectPolicy` of the NodeMetric (None: the object or the policy is gone).
        Returns True if the policy in force changed."""
        raw = (spec or {}).get("metricCollectPolicy")
        try:
            collect = NodeMetricCollectPolicy.from_wire(raw) if isinstance(raw, Mapping) else None
            policy = effective_policy(
                self.base_policy,
                collect,
                min_aggregate_seconds=self.min_aggregate_seconds,
                min_report_seconds=self.min_report_seconds,
            )
        except ValueError as exc:
            log.warning("ignoring invalid spec.metricCollectPolicy of NodeMetric %s: %s", self.node_name, exc)
            if self.on_spec_problem is not None:
                self.on_spec_problem(self._spec_problem(exc))
            return False
        if self.on_spec_problem is not None:
            self.on_spec_problem(None)
        self.spec_policy = collect
        if policy == self.policy:
            return False
        log.info("NodeMetric %s collect policy now %s", self.node_name, policy.describe())
        self.policy = policy
        if self.on_policy_change is not None:
            self.on_policy_change(policy)
        return True

    def aggregate(self, now: float) -> Aggregates:
        """Every window as of `now`, those not due yet (`window_due`) as of their last computation."""
        self.last = aggregate(self.ring(), now, self.policy, previous=self.last)
        return self.last

    def status(self, agg: Aggregates | None = None, *, now: float | None = None) -> NodeMetricStatus:
        if agg is None:
            import time

            agg = self.aggregate(time.monotonic() if now is None else now)
        return build_status(agg, self.pods(), devices=self.devices())
