"""Plain inputs and outputs of the batch-resource calculation.

The controller maps Node and Pod objects onto these (a NodeMetric is read as the shared
`common.api.nodemetric_digest`); nothing here knows about the API. CPU is always integer
milli-cores and memory integer bytes, which is what Koordinator's quantities resolve to
(`MilliValue()` for CPU, `Value()` for memory).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final

from common.api.constants import BATCH_CPU, BATCH_MEMORY

# Priority classes whose pods and host applications *consume* batch resources rather
# than compete with them (Koordinator: extension.PriorityBatch / PriorityFree).
LOW_PRIORITY_CLASSES: Final = frozenset({"koord-batch", "koord-free"})
PRIORITY_MID: Final = "koord-mid"
QOS_LSE: Final = "LSE"
# Only these phases hold node resources (Koordinator skips Succeeded/Failed/Unknown).
ACTIVE_POD_PHASES: Final = frozenset({"Running", "Pending"})


@dataclass(frozen=True, slots=True)
class ResourcePair:
    """CPU in milli-cores and memory in bytes; the two resources every formula works on."""

    cpu_milli: int = 0
    memory_bytes: int = 0

    def __add__(self, other: ResourcePair) -> ResourcePair:
        return ResourcePair(self.cpu_milli + other.cpu_milli, self.memory_bytes + other.memory_bytes)

    def __sub__(self, other: ResourcePair) -> ResourcePair:
        return ResourcePair(self.cpu_milli - other.cpu_milli, self.memory_bytes - other.memory_bytes)

    def max(self, other: ResourcePair) -> ResourcePair:
        """Per-resource maximum (quotav1.Max)."""
        return ResourcePair(max(self.cpu_milli, other.cpu_milli), max(self.memory_bytes, other.memory_bytes))

    def min(self, other: ResourcePair) -> ResourcePair:
        """Per-resource minimum."""
        return ResourcePair(min(self.cpu_milli, other.cpu_milli), min(self.memory_bytes, other.memory_bytes))

    def clamp_non_negative(self) -> ResourcePair:
        return ResourcePair(max(self.cpu_milli, 0), max(self.memory_bytes, 0))


ZERO: Final = ResourcePair()


class CalculatePolicy(enum.StrEnum):
    """How high-priority pods are charged against the node (ColocationStrategy cpu/memoryCalculatePolicy)."""

    USAGE = "usage"  # default: reclaim what high-priority pods request but do not use
    REQUEST = "request"  # memory only: no overcommit between priority bands
    MAX_USAGE_REQUEST = "maxUsageRequest"  # charge max(request, usage): no overcommit, usage protected
    # Loadline's: charge the Prod tier its predicted peak (NodeMetric prodPeakMetric) instead of its last window,
    # never less than what "usage" charges; "usage" while no peak is published. Koordinator's manager reads any
    # value it does not know as "usage".
    PREDICTION = "prediction"


@dataclass(frozen=True, slots=True)
class BatchStrategy:
    """The ColocationStrategy fields the batch calculation reads, already merged for one node."""

    enable: bool = False
    cpu_reclaim_threshold_percent: int = 60
    memory_reclaim_threshold_percent: int = 65
    cpu_calculate_policy: CalculatePolicy = CalculatePolicy.USAGE
    memory_calculate_policy: CalculatePolicy = CalculatePolicy.USAGE
    batch_cpu_threshold_percent: int | None = None
    batch_memory_threshold_percent: int | None = None
    degrade_time_minutes: int = 15
    update_time_threshold_seconds: int = 300
    resource_diff_threshold: float = 0.1


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """What the Node object says about itself."""

    capacity: ResourcePair
    allocatable: ResourcePair
    # `node.koordinator.sh/reservation` resolved to quantities (see reservation.py); None if absent.
    annotation_reserved: ResourcePair | None = None


@dataclass(frozen=True, slots=True)
class PodOnNode:
    """A pod from the pod list bound to the node; classes defaulted as Koordinator does (koordinator
    apis/extension/priority.go, qos.go)."""

    namespace: str
    name: str
    phase: str
    priority_class: str
    qos_class: str
    request: ResourcePair

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class BatchResources:
    """`kubernetes.io/batch-cpu` (integer milli-cores) and `kubernetes.io/batch-memory` (bytes) for one node."""

    cpu_milli: int
    memory_bytes: int

    def as_resource_map(self) -> dict[str, int]:
        """The values to put into both `status.capacity` and `status.allocatable`."""
        return {BATCH_CPU: self.cpu_milli, BATCH_MEMORY: self.memory_bytes}


@dataclass(frozen=True, slots=True)
class BatchBreakdown:
    """Every term of the formula, so a log line or event can show how the number came about."""

    capacity: ResourcePair
    safety_margin: ResourcePair
    node_reserved: ResourcePair
    system_used: ResourcePair  # max(system usage + high-priority host apps, node reserved)
    hp_request: ResourcePair
    hp_used: ResourcePair
    hp_max_used_request: ResourcePair
    dangling_hp_used: ResourcePair
    prod_peak: ResourcePair | None = None  # prodPeakMetric, when a policy is "prediction" and the agent published it
    mid_used: ResourcePair = ZERO  # the koord-mid pods' part of hp_used (prodPeakMetric does not cover them)

    def explain(self, result: BatchResources, strategy: BatchStrategy) -> str:
        """One line with every term, in the shape of Koordinator's calculation messages."""
        cpu_usage = f"systemUsageOrNodeReserved {self.system_used.cpu_milli}m - podHPUsed {self.hp_used.cpu_milli}m"
        if strategy.cpu_calculate_policy is CalculatePolicy.MAX_USAGE_REQUEST:
            cpu_terms = (
                f"systemUsageOrNodeReserved {self.system_used.cpu_milli}m"
                f" - podHPMaxUsedRequest {self.hp_max_used_request.cpu_milli}m"
            )
        elif strategy.cpu_calculate_policy is CalculatePolicy.PREDICTION:
            cpu_terms = self._predicted(cpu_usage, "cpu_milli", "m")
        else:
            cpu_terms = cpu_usage
        mem_usage = f"systemUsage {self.system_used.memory_bytes} - podHPUsed {self.hp_used.memory_bytes}"
        if strategy.memory_calculate_policy is CalculatePolicy.REQUEST:
            mem_terms = f"nodeReserved {self.node_reserved.memory_bytes} - podHPRequest {self.hp_request.memory_bytes}"
        elif strategy.memory_calculate_policy is CalculatePolicy.MAX_USAGE_REQUEST:
            mem_terms = (
                f"systemUsage {self.system_used.memory_bytes}"
                f" - podHPMaxUsedRequest {self.hp_max_used_request.memory_bytes}"
            )
        elif strategy.memory_calculate_policy is CalculatePolicy.PREDICTION:
            mem_terms = self._predicted(mem_usage, "memory_bytes", "")
        else:
            mem_terms = mem_usage
        return (
            f"batch-cpu {result.cpu_milli}m = capacity {self.capacity.cpu_milli}m"
            f" - safetyMargin {self.safety_margin.cpu_milli}m - {cpu_terms};"
            f" batch-memory {result.memory_bytes} = capacity {self.capacity.memory_bytes}"
            f" - safetyMargin {self.safety_margin.memory_bytes} - {mem_terms}"
        )

    def _predicted(self, usage_terms: str, resource: str, unit: str) -> str:
        """The `prediction` policy's terms: the larger charge of the usage policy and of the predicted peak."""
        if self.prod_peak is None:
            return f"{usage_terms} (prediction: no prodPeakMetric, usage policy)"
        peak, mid = getattr(self.prod_peak, resource), getattr(self.mid_used, resource)
        return f"max({usage_terms.replace(' - ', ' + ')}, prodPeakOrNodeReserved {peak}{unit} + podMidUsed {mid}{unit})"


class BatchVerdict(enum.StrEnum):
    CALCULATED = "Calculated"
    COLOCATION_DISABLED = "ColocationDisabled"
    NODE_METRIC_MISSING = "NodeMetricMissing"
    NODE_METRIC_NEVER_UPDATED = "NodeMetricNeverUpdated"
    NODE_METRIC_EXPIRED = "NodeMetricExpired"


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """What the node should carry: `resources` to write, or None to remove the batch resources."""

    verdict: BatchVerdict
    resources: BatchResources | None
    breakdown: BatchBreakdown | None = field(default=None, compare=False)

    @property
    def removes(self) -> bool:
        return self.resources is None
