"""Migration limits of one round: per node, per namespace, globally and per workload.

Counts start from what is already in flight (pods terminating now) so a slow eviction from the
previous round still counts against ``maxMigratingPerNode``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from scheduler_plugin.descheduler.args import LowNodeLoadArgs
from scheduler_plugin.descheduler.model import PodSnapshot

LIMIT_NODE = "maxMigratingPerNode reached"
LIMIT_NAMESPACE = "maxMigratingPerNamespace reached"
LIMIT_GLOBAL = "maxMigratingGlobally reached"
LIMIT_WORKLOAD = "maxUnavailablePerWorkload reached"
LIMIT_WORKLOAD_TOO_SMALL = "workload too small to migrate"

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def max_unavailable(replicas: int, configured: int | str | None) -> int:
    """Koordinator's maxUnavailablePerWorkload: explicit int, "N%" of replicas (rounded down, at
    least 1), or by default 10 % above 10 replicas, 2 for 4..10 replicas, else 1."""
    if configured is None:
        if replicas > 10:
            return max(1, math.floor(replicas * 0.10))
        if replicas >= 4:
            return 2
        return 1
    if isinstance(configured, int):
        return configured
    m = re.fullmatch(r"(\d+)%", configured)
    pct = int(m.group(1)) if m else 100
    return max(1, math.floor(replicas * pct / 100))


@dataclass(slots=True)
class _Workload:
    pods: int = 0
    unavailable: int = 0  # not Ready or terminating
    replicas: int | None = None
    planned: int = 0


@dataclass(slots=True)
class MigrationLimits:
    per_node: int | None
    per_namespace: int | None
    globally: int | None
    per_workload: int | str | None
    node_count: Counter[str] = field(default_factory=Counter)
    namespace_count: Counter[str] = field(default_factory=Counter)
    planned_total: int = 0
    workloads: dict[str, _Workload] = field(default_factory=dict)

    @classmethod
    def from_pods(cls, args: LowNodeLoadArgs, pods: Iterable[PodSnapshot]) -> MigrationLimits:
        limits = cls(
            per_node=args.max_migrating_per_node,
            per_namespace=args.max_migrating_per_namespace,
            globally=args.max_migrating_globally,
            per_workload=args.max_unavailable_per_workload,
        )
        workloads = limits.workloads
        # One tight pass over every pod of the cluster: this runs for 100k pods each round.
        for pod in pods:
            if pod.phase in _TERMINAL_PHASES:
                continue
            if pod.terminating:
                limits.node_count[pod.node_name] += 1
                limits.namespace_count[pod.namespace] += 1
            owner = pod.owner
            if owner is None:
                continue
            key = owner.workload_key
            wl = workloads.get(key)
            if wl is None:
                wl = workloads[key] = _Workload()
            wl.pods += 1
            if pod.terminating or not pod.ready:
                wl.unavailable += 1
            if pod.workload_replicas is not None:
                wl.replicas = pod.workload_replicas
        return limits

    def node_exhausted(self, node: str) -> bool:
        return self.per_node is not None and self.node_count[node] >= self.per_node

    def globally_exhausted(self) -> bool:
        return self.globally is not None and self.planned_total >= self.globally

    def blocker(self, pod: PodSnapshot) -> str | None:
        if self.globally_exhausted():
            return LIMIT_GLOBAL
        if self.node_exhausted(pod.node_name):
            return LIMIT_NODE
        if self.per_namespace is not None and self.namespace_count[pod.namespace] >= self.per_namespace:
            return LIMIT_NAMESPACE
        if pod.owner is not None:
            wl = self.workloads.get(pod.owner.workload_key)
            if wl is not None:
                replicas = wl.replicas if wl.replicas is not None else wl.pods
                allowed = max_unavailable(replicas, self.per_workload)
                # Moving every replica at once (or the only one) would take the workload down.
                if replicas <= allowed:
                    return LIMIT_WORKLOAD_TOO_SMALL
                if wl.unavailable + wl.planned >= allowed:
                    return LIMIT_WORKLOAD
        return None

    def record(self, pod: PodSnapshot) -> None:
        self.planned_total += 1
        self.node_count[pod.node_name] += 1
        self.namespace_count[pod.namespace] += 1
        if pod.owner is not None:
            wl = self.workloads.get(pod.owner.workload_key)
            if wl is not None:
                wl.planned += 1
