"""NodeMetric (`slo.koordinator.sh/v1alpha1`): one per node, named after it.

Field names and units are Koordinator's (apis/slo/v1alpha1/nodemetric_types.go): CPU as
milli-quantities, memory in bytes, aggregation keys `avg p50 p90 p95 p99`, durations as
Go duration text. The agent writes `status`; the manager owns `spec`.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any, ClassVar, Final, Literal

from pydantic import Field

from common.api.constants import SLO_API_VERSION
from common.api.quantity import ResourceList
from common.api.wire import GoDuration, KubeModel, ObjectMeta, Time

AGGREGATION_TYPES: Final = ("avg", "p50", "p90", "p95", "p99")
AggregationType = Literal["avg", "p50", "p90", "p95", "p99"]

# An updateTime further ahead of the reader's clock than this is not fresh: clocks of nodes
# and control plane agree within it (NTP keeps them within milliseconds), and a report
# from the future would otherwise count as fresh until that time, however long its agent
# has been dead. Koordinator has no such bound; consumers treat it as an expired report.
MAX_CLOCK_SKEW_SECONDS: Final = 60.0

DEFAULT_AGGREGATE_DURATION_SECONDS: Final = 300
DEFAULT_REPORT_INTERVAL_SECONDS: Final = 60
DEFAULT_AGGREGATE_DURATIONS: Final = (
    GoDuration.from_seconds(300),
    GoDuration.from_seconds(600),
    GoDuration.from_seconds(1800),
)
# Every agent keeps one sample per collect interval (1 s) per series for its longest window or aggregate
# duration: 1 h is 3,600 samples, twice Koordinator's longest default (30m); 168h would be ~605,000 per series.
MAX_AGGREGATE_WINDOW_SECONDS: Final = 3600
# Each window is one more percentile pass per report and one more aggregatedNodeUsages entry per NodeMetric.
MAX_AGGREGATE_WINDOWS: Final = 8


def check_aggregate_windows(seconds: list[float] | tuple[float, ...]) -> None:
    """Raises ValueError when windows cost the agents unbounded memory or work (checked by manager and agent)."""
    if len(seconds) > MAX_AGGREGATE_WINDOWS:
        raise ValueError(f"{len(seconds)} durations, at most {MAX_AGGREGATE_WINDOWS} (one percentile pass each)")
    for value in seconds:
        check_aggregate_seconds(value)


def check_aggregate_seconds(value: float) -> None:
    if value > MAX_AGGREGATE_WINDOW_SECONDS:
        raise ValueError(
            f"{value:g}s is longer than {MAX_AGGREGATE_WINDOW_SECONDS}s: every agent would keep one sample per second "
            "per series for it"
        )


class NodeMemoryCollectPolicy(enum.StrEnum):
    USAGE_WITHOUT_PAGE_CACHE = "usageWithoutPageCache"
    USAGE_WITH_HOT_PAGE_CACHE = "usageWithHotPageCache"
    USAGE_WITH_PAGE_CACHE = "usageWithPageCache"


class DeviceTopology(KubeModel):
    socket_id: int | None = Field(default=None, alias="socketID")
    node_id: int | None = Field(default=None, alias="nodeID")
    pcie_id: str | None = Field(default=None, alias="pcieID")
    bus_id: str | None = Field(default=None, alias="busID")


class VirtualFunction(KubeModel):
    minor: int
    bus_id: str | None = Field(default=None, alias="busID")


class VirtualFunctionGroup(KubeModel):
    labels: dict[str, str] | None = None
    vfs: list[VirtualFunction] | None = None


class DeviceInfo(KubeModel):
    """A device's identity and usage: `gpu`, `fpga` or `rdma` (our InfiniBand ports)."""

    type: str | None = None
    id: str | None = Field(default=None, alias="id")
    minor: int | None = None
    module_id: int | None = Field(default=None, alias="moduleID")
    health: bool = False  # Go writes it even when false
    labels: dict[str, str] | None = None
    resources: ResourceList | None = None
    topology: DeviceTopology | None = None
    vf_groups: list[VirtualFunctionGroup] | None = Field(default=None, alias="vfGroups")
    conditions: list[dict[str, Any]] | None = None

    _always_emit: ClassVar[tuple[str, ...]] = ("health",)


class ResourceMap(KubeModel):
    """Koordinator's ResourceMap: `{resources: ResourceList, devices: [DeviceInfo]}` (usages, never negative)."""

    resources: ResourceList | None = None
    devices: list[DeviceInfo] | None = None


class AggregatedUsage(KubeModel):
    """Usage percentiles over one window; an aggregation maps to `{}` while the window is cold."""

    usage: dict[str, ResourceMap | None] | None = None  # Go reads a null entry as an empty one
    duration: GoDuration | None = None


class NUMANodeMetric(KubeModel):
    numa_node_id: int = Field(alias="numaNodeID")
    node_usage: ResourceMap | None = None
    system_usage: ResourceMap | None = None


class NodeMetricInfo(KubeModel):
    node_usage: ResourceMap | None = None
    aggregated_node_usages: list[AggregatedUsage] | None = None
    system_usage: ResourceMap | None = None
    aggregated_system_usages: list[AggregatedUsage] | None = None
    numa_usages: list[NUMANodeMetric] | None = None


class PodMetricInfo(KubeModel):
    name: str | None = None
    namespace: str | None = None
    pod_usage: ResourceMap | None = None
    priority: str | None = None
    qos: str | None = None
    extensions: dict[str, Any] | None = None


class HostApplicationMetricInfo(KubeModel):
    name: str | None = None
    usage: ResourceMap | None = None
    priority: str | None = None
    qos: str | None = None


class ReclaimableMetric(KubeModel):
    resource: ResourceMap | None = None


class NodeMetricStatus(KubeModel):
    update_time: Time | None = None
    node_metric: NodeMetricInfo | None = None
    pods_metric: list[PodMetricInfo] | None = None
    host_application_metric: list[HostApplicationMetricInfo] | None = None
    prod_reclaimable_metric: ReclaimableMetric | None = None
    prod_peak_metric: ReclaimableMetric | None = None


class AggregatePolicy(KubeModel):
    durations: list[GoDuration] | None = None


class NodeMetricCollectPolicy(KubeModel):
    aggregate_duration_seconds: int | None = None
    report_interval_seconds: int | None = None
    node_aggregate_policy: AggregatePolicy | None = None
    node_memory_collect_policy: NodeMemoryCollectPolicy | None = None


class EffectiveCollectPolicy(KubeModel):
    """The collect policy with koordlet's defaults and clamps applied (what the agent acts on)."""

    aggregate_duration_seconds: int
    report_interval_seconds: int
    durations: list[GoDuration]
    node_memory_collect_policy: NodeMemoryCollectPolicy


class NodeMetricSpec(KubeModel):
    metric_collect_policy: NodeMetricCollectPolicy | None = None


class NodeMetric(KubeModel):
    api_version: str = SLO_API_VERSION
    kind: str = "NodeMetric"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: NodeMetricSpec | None = None
    status: NodeMetricStatus | None = None

    _always_emit: ClassVar[tuple[str, ...]] = ("api_version", "kind", "metadata")

    def effective_collect_policy(self) -> EffectiveCollectPolicy:
        """koordlet's reading of the spec: defaults 300 s / 60 s / 5m,10m,30m, clamped at 60 s and 30 s."""
        policy = self.spec.metric_collect_policy if self.spec and self.spec.metric_collect_policy else None
        aggregate = (policy.aggregate_duration_seconds if policy else None) or DEFAULT_AGGREGATE_DURATION_SECONDS
        report = (policy.report_interval_seconds if policy else None) or DEFAULT_REPORT_INTERVAL_SECONDS
        durations = (
            policy.node_aggregate_policy.durations
            if policy and policy.node_aggregate_policy and policy.node_aggregate_policy.durations
            else list(DEFAULT_AGGREGATE_DURATIONS)
        )
        memory = (
            policy.node_memory_collect_policy if policy else None
        ) or NodeMemoryCollectPolicy.USAGE_WITHOUT_PAGE_CACHE
        return EffectiveCollectPolicy(
            aggregate_duration_seconds=max(aggregate, 60),
            report_interval_seconds=max(report, 30),
            durations=sorted(durations),
            node_memory_collect_policy=memory,
        )

    def update_age_seconds(self, now: datetime | None = None) -> float | None:
        """Seconds since the agent last built the status, or None when it never did."""
        if self.status is None or self.status.update_time is None:
            return None
        now = now or datetime.now(UTC)
        return (now - self.status.update_time).total_seconds()

    def is_expired(self, expiration_seconds: float, now: datetime | None = None) -> bool:
        """Koordinator's rule: no updateTime, or now − updateTime ≥ the expiration, means expired;
        and ours: an updateTime more than MAX_CLOCK_SKEW_SECONDS in the future too."""
        age = self.update_age_seconds(now)
        return age is None or age >= expiration_seconds or age < -MAX_CLOCK_SKEW_SECONDS

    def aggregated_node_usage(
        self, aggregation: AggregationType, duration: GoDuration | None = None
    ) -> ResourceMap | None:
        """Usage for (aggregation, window); None means the longest window with data, as Koordinator does."""
        info = self.status.node_metric if self.status else None
        if info is None or not info.aggregated_node_usages:
            return None
        candidates = sorted(
            (u for u in info.aggregated_node_usages if u.duration is not None and u.usage),
            key=lambda u: u.duration.nanoseconds if u.duration else 0,
            reverse=True,
        )
        for entry in candidates:
            if duration is not None and entry.duration != duration:
                continue
            found = (entry.usage or {}).get(aggregation)
            if found is not None and found.resources:
                return found
        return None
