"""NodeMetric (`slo.koordinator.sh/v1alpha1`): one per node, named after it.

Field names and units are Koordinator's (apis/slo/v1alpha1/nodemetric_types.go): CPU as
milli-quantities, memory in bytes, aggregation keys `avg p50 p90 p95 p99`, durations as
Go duration text. The agent writes `status`; the manager owns `spec`.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import Field

from common.api.constants import SLO_API_VERSION
from common.api.quantity import ResourceList
from common.api.wire import CRD, INT32, GoDuration, KubeModel, ObjectMeta, Time

AGGREGATION_TYPES: Final = ("avg", "p50", "p90", "p95", "p99")
AggregationType = Literal["avg", "p50", "p90", "p95", "p99"]

# An updateTime further ahead of the reader's clock than this is not fresh: clocks of nodes
# and control plane agree within it (NTP keeps them within milliseconds), and a report
# from the future would otherwise count as fresh until that time, however long its agent
# has been dead. Koordinator has no such bound; consumers treat it as an expired report
# (`nodemetric_digest.report_staleness`, the one rule).
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
    # in the CRD's enum order (Koordinator's)
    USAGE_WITH_HOT_PAGE_CACHE = "usageWithHotPageCache"
    USAGE_WITHOUT_PAGE_CACHE = "usageWithoutPageCache"
    USAGE_WITH_PAGE_CACHE = "usageWithPageCache"


# The fields' descriptions and CRD markers are the CRD's (common/api/crdgen/from_model.py generates it from here).
PRIORITY_CLASSES = "koord-prod, koord-mid, koord-batch, koord-free or empty"
QOS_CLASSES = "LSE, LSR, LS, BE, SYSTEM or empty"


class DeviceTopology(KubeModel):
    socket_id: Annotated[int | None, CRD(fmt="int32", required=True)] = Field(
        default=None, alias="socketID", description="CPU socket the device belongs to."
    )
    node_id: Annotated[int | None, CRD(fmt="int32", required=True)] = Field(
        default=None, alias="nodeID", description="NUMA node the device belongs to (unique across sockets)."
    )
    pcie_id: Annotated[str | None, CRD(required=True)] = Field(
        default=None, alias="pcieID", description="PCIe switch the device is connected to (unique across NUMA nodes)."
    )
    bus_id: str | None = Field(
        default=None, alias="busID", description="PCI domain:bus:device.function of the device."
    )


class VirtualFunction(KubeModel):
    minor: Annotated[int, CRD(fmt="int32", required=True)] = Field(
        description="Minor number of the virtual function, from 0."
    )
    bus_id: str | None = Field(
        default=None, alias="busID", description="PCI domain:bus:device.function of the virtual function."
    )


class VirtualFunctionGroup(KubeModel):
    labels: dict[str, str] | None = Field(
        default=None, description="Properties of the virtual functions in this group."
    )
    vfs: list[VirtualFunction] | None = Field(default=None, description="Virtual functions in the group.")


class DeviceInfo(KubeModel):
    """A device's identity and usage: `gpu`, `fpga` or `rdma` (our InfiniBand ports)."""

    type: str | None = Field(default=None, description="Device type: gpu, fpga, rdma or xpu.")
    id: str | None = Field(default=None, alias="id", description="UUID of the device.")
    minor: Annotated[int | None, INT32] = Field(default=None, description="Minor number of the device, from 0.")
    module_id: Annotated[int | None, INT32] = Field(
        default=None, alias="moduleID", description="Physical id of the device."
    )
    health: Annotated[bool, CRD(required=True, default=False)] = Field(
        default=False, description="Whether the device is healthy (always serialized)."
    )  # Go writes it even when false
    labels: dict[str, str] | None = Field(default=None, description="Device properties for selection.")
    resources: ResourceList | None = Field(
        default=None,
        description="Resource quantities of the device; in NodeMetric its usage, e.g. koordinator.sh/gpu-core, "
        "koordinator.sh/gpu-memory, koordinator.sh/gpu-memory-ratio.",
    )
    topology: DeviceTopology | None = Field(default=None, description="Topology of the device.")
    vf_groups: list[VirtualFunctionGroup] | None = Field(
        default=None, alias="vfGroups", description="Virtual function groups of the device."
    )
    conditions: list[Annotated[dict[str, Any], CRD(schema="metav1.Condition")]] | None = Field(
        default=None, description="Health conditions of the device."
    )

    _always_emit: ClassVar[tuple[str, ...]] = ("health",)


class ResourceMap(KubeModel):
    """Koordinator's ResourceMap: `{resources: ResourceList, devices: [DeviceInfo]}` (usages, never negative)."""

    resources: ResourceList | None = Field(
        default=None, description="Usage per resource name (koordlet writes cpu in milli-cores and memory)."
    )
    devices: list[DeviceInfo] | None = Field(default=None, description="Per-device usage.")


class AggregatedUsage(KubeModel):
    """Usage percentiles over one window; an aggregation maps to `{}` while the window is cold."""

    # Go reads a null entry as an empty one
    usage: dict[str, ResourceMap | None] | None = Field(
        default=None,
        description="Usage per aggregation type (avg, p50, p90, p95, p99); an empty map value means the window "
        "does not have enough samples yet.",
    )
    duration: GoDuration | None = Field(default=None, description="Aggregation window as a Go duration, e.g. 5m0s.")


class NUMANodeMetric(KubeModel):
    numa_node_id: Annotated[int, CRD(fmt="int32", required=True)] = Field(
        alias="numaNodeID", description="NUMA node id."
    )
    node_usage: ResourceMap | None = Field(default=None, description="Total usage of the NUMA node.")
    system_usage: ResourceMap | None = Field(default=None, description="System (non-pod) usage of the NUMA node.")


class NodeMetricInfo(KubeModel):
    node_usage: ResourceMap | None = Field(default=None, description="Total resource usage of the node.")
    aggregated_node_usages: list[AggregatedUsage] | None = Field(
        default=None,
        description="Aggregated node usage per window, reported only when there are enough samples. "
        "The Loadline agent writes the windows shortest first.",
    )
    system_usage: ResourceMap | None = Field(
        default=None, description="Usage of daemons and the kernel: node usage minus pod and host-app usage."
    )
    aggregated_system_usages: list[AggregatedUsage] | None = Field(
        default=None, description="Aggregated system usage per window."
    )
    numa_usages: list[NUMANodeMetric] | None = Field(default=None, description="Usage per NUMA node.")


class PodMetricInfo(KubeModel):
    name: str | None = Field(default=None, description="Pod name.")
    namespace: str | None = Field(default=None, description="Pod namespace.")
    pod_usage: ResourceMap | None = Field(default=None, description="Resource usage of the pod.")
    priority: str | None = Field(
        default=None, description=f"Defaulted priority class of the pod: {PRIORITY_CLASSES}."
    )
    qos: str | None = Field(default=None, description=f"Defaulted QoS class of the pod: {QOS_CLASSES}.")
    extensions: dict[str, Any] | None = Field(default=None, description="Third-party extensions.")


class HostApplicationMetricInfo(KubeModel):
    name: str | None = Field(default=None, description="Host application name.")
    usage: ResourceMap | None = Field(default=None, description="Resource usage of the host application.")
    priority: str | None = Field(
        default=None, description=f"Priority class of the application: {PRIORITY_CLASSES}."
    )
    qos: str | None = Field(default=None, description=f"QoS class of the application: {QOS_CLASSES}.")


class ReclaimableMetric(KubeModel):
    resource: ResourceMap | None = Field(default=None, description="Predicted resource amount.")


class NodeMetricStatus(KubeModel):
    update_time: Time | None = Field(
        default=None, description="When the agent built this status; consumers use it for expiry."
    )
    node_metric: NodeMetricInfo | None = Field(default=None, description="Metrics of the node.")
    pods_metric: list[PodMetricInfo] | None = Field(
        default=None, description="Metrics of the pods on the node, sorted by namespace and name."
    )
    host_application_metric: list[HostApplicationMetricInfo] | None = Field(
        default=None, description="Metrics of out-of-band host applications."
    )
    prod_reclaimable_metric: ReclaimableMetric | None = Field(
        default=None, description="Predicted reclaimable resources of Prod pods."
    )
    prod_peak_metric: ReclaimableMetric | None = Field(
        default=None, description="Predicted peak usage of Prod pods including system usage."
    )


class AggregatePolicy(KubeModel):
    durations: list[GoDuration] | None = Field(
        default=None, description="Aggregation windows as Go durations, e.g. 5m0s."
    )


class NodeMetricCollectPolicy(KubeModel):
    aggregate_duration_seconds: int | None = Field(
        default=None, description="Window in seconds for nodeUsage, systemUsage and podsMetric averages."
    )
    report_interval_seconds: int | None = Field(
        default=None, description="Period in seconds at which the agent reports the status."
    )
    node_aggregate_policy: AggregatePolicy | None = Field(
        default=None, description="Windows of the aggregated node usages."
    )
    node_memory_collect_policy: Annotated[NodeMemoryCollectPolicy | None, CRD(enum=True)] = Field(
        default=None, description="How node memory usage is computed (default usageWithoutPageCache)."
    )


class EffectiveCollectPolicy(KubeModel):
    """The collect policy with koordlet's defaults and clamps applied (what the agent acts on)."""

    aggregate_duration_seconds: int
    report_interval_seconds: int
    durations: list[GoDuration]
    node_memory_collect_policy: NodeMemoryCollectPolicy


class NodeMetricSpec(KubeModel):
    metric_collect_policy: NodeMetricCollectPolicy | None = Field(
        default=None, description="Metric collection policy, set by the manager."
    )


class NodeMetric(KubeModel):
    api_version: str = SLO_API_VERSION
    kind: str = "NodeMetric"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: NodeMetricSpec | None = Field(default=None, description="Desired collection policy of the NodeMetric.")
    status: NodeMetricStatus | None = Field(default=None, description="Observed metrics, written by the node agent.")

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
