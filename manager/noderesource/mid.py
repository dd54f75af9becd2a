"""Koordinator's mid-tier resources (`kubernetes.io/mid-cpu`, `kubernetes.io/mid-memory`) as pure functions.

Reference: `pkg/slo-controller/noderesource/plugins/midresource/plugin.go` and `plugins/util/util.go`
(CalculateMidResourceByPolicy / ...ByStaticMode), v1.8.0; its `plugin_test.go` table is mirrored in
tests/unit/manager/test_mid_formulas.py.

    default mode:  mid = min( min(prodReclaimable, nodeUnused) + unallocated x midUnallocatedPercent/100,
                              capacity x midThresholdPercent/100 )
    static mode:   mid = min( capacity x midStatic*ReservedPercent/100, capacity x midThresholdPercent/100 )

    prodReclaimable = NodeMetric `status.prodReclaimableMetric` (0 when absent or empty: the agent did not predict)
    nodeUnused      = capacity - NodeMetric nodeUsage (0 when nodeUsage lacks cpu or memory), the min taken at >= 0
    unallocated     = max(capacity - max(nodeReserved, systemUsed) - Σ requests of the Running/Pending pods that
                      are not koord-mid, koord-batch or koord-free, 0)
    systemUsed      = NodeMetric systemUsage + usage of host applications of a priority above koord-mid (koord-prod)

CPU in integer milli-cores (mid-cpu is written as the bare number, like batch-cpu), memory in bytes; percentages
become ratios in float64 (`percent / 100`) and products are truncated, as Koordinator's quantities are. Degrade is
the batch resources' rule (a missing, never-updated or expired NodeMetric removes them); a NodeMetric without
`prodReclaimableMetric` is not a degrade, it lends 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from common.api.constants import MID_CPU, MID_MEMORY, RESOURCE_CPU, RESOURCE_MEMORY
from common.api.nodemetric_digest import HostAppUsage, NodeMetricDigest
from manager.noderesource.formulas import node_reserved, usage_pair, withheld_verdict
from manager.noderesource.model import (
    ACTIVE_POD_PHASES,
    ZERO,
    BatchVerdict,
    NodeCapacity,
    PodOnNode,
    ResourcePair,
)

MID_RESOURCE_NAMES: Final = (MID_CPU, MID_MEMORY)
# Pods that run on what the Prod tier leaves, not on the node's plain cpu/memory.
NOT_PROD_ALLOCATED: Final = frozenset({"koord-mid", "koord-batch", "koord-free"})
ABOVE_MID_HOST_APPS: Final = frozenset({"koord-prod"})  # Koordinator: default priority above koord-mid's
STATIC_MODE: Final = "static"


@dataclass(frozen=True, slots=True)
class MidStrategy:
    """The ColocationStrategy fields the mid calculation reads, already merged for one node (percent integers)."""

    enable: bool = False
    degrade_time_minutes: int = 15
    cpu_threshold_percent: int = 100
    memory_threshold_percent: int = 100
    unallocated_percent: int = 0
    static_cpu_reserved_percent: int = 0
    static_memory_reserved_percent: int = 0
    static_mode: bool = False  # midReclaimMode: static


@dataclass(frozen=True, slots=True)
class MidResources:
    cpu_milli: int
    memory_bytes: int

    def as_resource_map(self) -> dict[str, int]:
        return {MID_CPU: self.cpu_milli, MID_MEMORY: self.memory_bytes}


@dataclass(frozen=True, slots=True)
class MidBreakdown:
    capacity: ResourcePair
    prod_reclaimable: ResourcePair
    node_unused: ResourcePair
    unallocated: ResourcePair
    unallocated_percent: int
    cpu_threshold_percent: int
    memory_threshold_percent: int
    static_mode: bool = False

    def explain(self, result: MidResources) -> str:
        """Koordinator's midAllocatable messages, CPU in milli-cores and memory in bytes."""
        if self.static_mode:
            return (
                f"mid-cpu {result.cpu_milli} = min(capacity {self.capacity.cpu_milli} x static reserved, capacity x "
                f"{self.cpu_threshold_percent}%); mid-memory {result.memory_bytes} = min(capacity "
                f"{self.capacity.memory_bytes} x static reserved, capacity x {self.memory_threshold_percent}%)"
            )
        return (
            f"mid-cpu {result.cpu_milli} = min(min(prodReclaimable {self.prod_reclaimable.cpu_milli}, nodeUnused "
            f"{self.node_unused.cpu_milli}) + unallocated {self.unallocated.cpu_milli} x {self.unallocated_percent}%, "
            f"capacity {self.capacity.cpu_milli} x {self.cpu_threshold_percent}%); mid-memory {result.memory_bytes} = "
            f"min(min(prodReclaimable {self.prod_reclaimable.memory_bytes}, nodeUnused {self.node_unused.memory_bytes})"
            f" + unallocated {self.unallocated.memory_bytes} x {self.unallocated_percent}%, capacity "
            f"{self.capacity.memory_bytes} x {self.memory_threshold_percent}%)"
        )


@dataclass(frozen=True, slots=True)
class MidOutcome:
    verdict: BatchVerdict
    resources: MidResources | None  # None: remove them from the Node
    breakdown: MidBreakdown | None = field(default=None, compare=False)


def _ratio_of(value: int, percent: int) -> int:
    """`int64(float64(value) * (float64(percent) / 100))`."""
    return int(float(value) * (float(percent) / 100))


def _cap(value: int, capacity: int, percent: int) -> int:
    limit = float(capacity) * (float(percent) / 100)
    return int(limit) if value > int(limit) else value


def above_mid_host_app_usage(host_apps: Iterable[HostAppUsage]) -> ResourcePair:
    cpu = mem = 0
    for app in host_apps:
        if app.priority in ABOVE_MID_HOST_APPS:
            cpu += app.usage.get(RESOURCE_CPU, 0)
            mem += app.usage.get(RESOURCE_MEMORY, 0)
    return ResourcePair(cpu, mem)


def prod_allocated(pods: Iterable[PodOnNode]) -> ResourcePair:
    """Σ requests of the Running/Pending pods that are not mid, batch or free (Koordinator's getUnallocated)."""
    cpu = mem = 0
    for pod in pods:
        if pod.phase in ACTIVE_POD_PHASES and pod.priority_class not in NOT_PROD_ALLOCATED:
            cpu += pod.request.cpu_milli
            mem += pod.request.memory_bytes
    return ResourcePair(cpu, mem)


def node_unused(capacity: ResourcePair, metric: NodeMetricDigest) -> ResourcePair:
    """capacity - nodeUsage; zero (nothing unused) when nodeUsage lacks cpu or memory."""
    usage = metric.node_usage
    if not usage or RESOURCE_CPU not in usage or RESOURCE_MEMORY not in usage:
        return ZERO
    return capacity - usage_pair(usage)


def calculate_mid_resources(
    node: NodeCapacity, pods: Iterable[PodOnNode], metric: NodeMetricDigest, strategy: MidStrategy
) -> tuple[MidResources, MidBreakdown]:
    """Mid resources for a node whose NodeMetric is fresh (see `mid_outcome` for the gates)."""
    capacity = node.capacity
    if strategy.static_mode:
        cpu = _ratio_of(capacity.cpu_milli, strategy.static_cpu_reserved_percent)
        memory = _ratio_of(capacity.memory_bytes, strategy.static_memory_reserved_percent)
        reclaimable = unused = unallocated = ZERO
    else:
        reclaimable = usage_pair(metric.prod_reclaimable)
        system_used = usage_pair(metric.system_usage) + above_mid_host_app_usage(metric.host_apps)
        reserved = node_reserved(node).max(system_used)
        unallocated = (capacity - reserved - prod_allocated(pods)).clamp_non_negative()
        unused = node_unused(capacity, metric)
        cpu = max(min(reclaimable.cpu_milli, unused.cpu_milli), 0) + _ratio_of(
            unallocated.cpu_milli, strategy.unallocated_percent
        )
        memory = max(min(reclaimable.memory_bytes, unused.memory_bytes), 0) + _ratio_of(
            unallocated.memory_bytes, strategy.unallocated_percent
        )
    result = MidResources(
        _cap(cpu, capacity.cpu_milli, strategy.cpu_threshold_percent),
        _cap(memory, capacity.memory_bytes, strategy.memory_threshold_percent),
    )
    breakdown = MidBreakdown(
        capacity=capacity,
        prod_reclaimable=reclaimable,
        node_unused=unused,
        unallocated=unallocated,
        unallocated_percent=strategy.unallocated_percent,
        cpu_threshold_percent=strategy.cpu_threshold_percent,
        memory_threshold_percent=strategy.memory_threshold_percent,
        static_mode=strategy.static_mode,
    )
    return result, breakdown


def mid_outcome(
    node: NodeCapacity,
    pods: Iterable[PodOnNode],
    metric: NodeMetricDigest | None,
    strategy: MidStrategy,
    now: datetime,
) -> MidOutcome:
    """The mid resources the node should carry now, or their removal and why."""
    withheld = withheld_verdict(strategy.enable, metric, now, strategy.degrade_time_minutes)
    if withheld is not None or metric is None:
        return MidOutcome(withheld or BatchVerdict.NODE_METRIC_MISSING, None)
    resources, breakdown = calculate_mid_resources(node, pods, metric, strategy)
    return MidOutcome(BatchVerdict.CALCULATED, resources, breakdown)


def mid_strategy_from_colocation(strategy: Mapping[str, Any]) -> MidStrategy:
    """Read the fields the mid formula needs from a merged (defaulted, validated) colocation strategy."""
    d = MidStrategy()

    def percent(key: str, default: int) -> int:
        value = strategy.get(key)
        return default if value is None else int(value)

    return MidStrategy(
        enable=bool(strategy.get("enable", d.enable)),
        degrade_time_minutes=percent("degradeTimeMinutes", d.degrade_time_minutes),
        cpu_threshold_percent=percent("midCPUThresholdPercent", d.cpu_threshold_percent),
        memory_threshold_percent=percent("midMemoryThresholdPercent", d.memory_threshold_percent),
        unallocated_percent=percent("midUnallocatedPercent", d.unallocated_percent),
        static_cpu_reserved_percent=percent("midStaticCPUReservedPercent", d.static_cpu_reserved_percent),
        static_memory_reserved_percent=percent("midStaticMemoryReservedPercent", d.static_memory_reserved_percent),
        static_mode=strategy.get("midReclaimMode") == STATIC_MODE,
    )


__all__ = [
    "MID_RESOURCE_NAMES",
    "MidBreakdown",
    "MidOutcome",
    "MidResources",
    "MidStrategy",
    "calculate_mid_resources",
    "mid_outcome",
    "mid_strategy_from_colocation",
    "node_unused",
    "prod_allocated",
]
