"""Plain input and output records of one LowNodeLoad round.

The I/O layer (informers, NodeMetric parsing) builds these from API objects; everything in this
package below the I/O layer works on them only, so it can be unit-tested and benchmarked in-process.

Units: ``cpu`` is in millicores (Koordinator compares ``MilliValue()``), every other resource in its
base unit (bytes, count). A quantity that could not be parsed is passed as ``None`` or ``NaN``;
the core treats it as malformed and skips the node, it never raises on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from common.api import constants as c
from common.api.scheduling import SelectorTerm, Taint, Toleration

# Resource quantities as parsed by the I/O layer; None or NaN mark a quantity that did not parse.
ResourceValues = Mapping[str, float | None]

CPU = c.RESOURCE_CPU
MEMORY = c.RESOURCE_MEMORY
PODS = c.RESOURCE_PODS

@dataclass(frozen=True, slots=True)
class OwnerRef:
    """The pod's controller owner reference (the one with controller: true)."""

    kind: str
    name: str
    uid: str = ""

    @property
    def workload_key(self) -> str:
        return self.uid or f"{self.kind}/{self.name}"


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    name: str
    allocatable: ResourceValues
    labels: Mapping[str, str] = field(default_factory=dict)
    # Parsed ``node.koordinator.sh/raw-allocatable`` annotation (CPU normalisation / amplification
    # case); None when the node has no such annotation.
    raw_allocatable: ResourceValues | None = None
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeMetricSnapshot:
    """What the round needs from a NodeMetric (``slo.koordinator.sh/v1alpha1``)."""

    node_name: str
    update_time: float | None  # status.updateTime, epoch seconds
    # status.nodeMetric.systemUsage.resources; None when status.nodeMetric itself is absent.
    system_usage: ResourceValues | None
    # status.podsMetric[].podUsage.resources keyed by (namespace, name).
    pod_usages: Mapping[tuple[str, str], ResourceValues] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PodSnapshot:
    namespace: str
    name: str
    node_name: str
    owner: OwnerRef | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    priority: int | None = None  # spec.priority
    k8s_qos: str = "BestEffort"  # status.qosClass: Guaranteed | Burstable | BestEffort
    creation_timestamp: float | None = None  # epoch seconds
    requests: ResourceValues = field(default_factory=dict)  # effective pod requests (incl. init containers, overhead)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    required_node_affinity: tuple[SelectorTerm, ...] | None = None  # None: no required affinity
    tolerations: tuple[Toleration, ...] = ()
    has_local_storage: bool = False  # emptyDir or hostPath volume
    ready: bool = True
    terminating: bool = False  # metadata.deletionTimestamp set
    phase: str = "Running"
    # spec.replicas of the owning workload when the I/O layer knows it; else the round counts pods.
    workload_replicas: int | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class PlannedEviction:
    pod: PodSnapshot
    node_name: str
    reason: str
    pool: str
    prod: bool  # chosen by the prod pass (prod usage over prodHighThresholds)
    # The low node whose headroom was reserved for this pod (nodeFit); a hint, the scheduler decides.
    target_node: str | None


@dataclass(slots=True)
class PoolSummary:
    name: str
    nodes: int = 0
    low: int = 0
    both_low: int = 0
    normal: int = 0
    high: int = 0
    prod_low: int = 0
    prod_high: int = 0
    anomalous: list[str] = field(default_factory=list)
    # Why the pool stopped before or during balancing (None when it ran its passes to completion).
    stop_reason: str | None = None


@dataclass(slots=True)
class RoundPlan:
    """Result of one round: what to evict, in order, and why nothing else happened."""

    evictions: list[PlannedEviction] = field(default_factory=list)
    skipped_nodes: dict[str, str] = field(default_factory=dict)  # node -> why it was left alone
    pools: list[PoolSummary] = field(default_factory=list)
    pods_considered: int = 0
    pod_skips: dict[str, int] = field(default_factory=dict)  # skip reason -> count
    paused: bool = False

    def count_skip(self, reason: str) -> None:
        self.pod_skips[reason] = self.pod_skips.get(reason, 0) + 1
