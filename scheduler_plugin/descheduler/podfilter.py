"""Which pods on a hot node may be evicted at all (before any capacity or placement question)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from common.api.constants import ANNOTATION_DESCHEDULER_EVICT, ANNOTATION_EVICTION_COST, ANNOTATION_MIRROR_POD
from common.api.scheduling import LabelSelector
from scheduler_plugin.descheduler.args import PROTECTED_NAMESPACES, LowNodeLoadArgs
from scheduler_plugin.descheduler.model import PodSnapshot
from scheduler_plugin.descheduler.sorting import int_annotation

# Skip reasons (also the label values of the "pods skipped" metric).
SKIP_TERMINATING = "terminating"
SKIP_MIRROR = "mirror or static pod"
SKIP_DAEMONSET = "DaemonSet pod"
SKIP_BARE = "bare pod (no controller)"
SKIP_NAMESPACE = "namespace not evictable"
SKIP_SELECTOR = "not matched by podSelectors"
SKIP_EVICTION_COST = "eviction-cost is MaxInt32"
SKIP_CRITICAL = "system-critical priority"
SKIP_LOCAL_STORAGE = "local storage"
SKIP_REFUSED = "eviction recently refused"

# Pods at or above this priority are system-critical (system-cluster-critical is 2000000000).
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
# Koordinator never migrates a pod whose eviction cost is MaxInt32.
EVICTION_COST_NEVER = 2**31 - 1


@dataclass(frozen=True, slots=True)
class NamespaceFilter:
    include: frozenset[str]
    exclude: frozenset[str]

    @classmethod
    def from_args(cls, args: LowNodeLoadArgs) -> NamespaceFilter:
        ns = args.evictable_namespaces
        return cls(include=frozenset(ns.include), exclude=frozenset(ns.exclude))

    def allows(self, namespace: str) -> bool:
        if self.include:
            return namespace in self.include
        # kube-system and Loadline's own namespace stay protected even when a user replaces the
        # exclude list; only an explicit include opens them.
        return namespace not in self.exclude and namespace not in PROTECTED_NAMESPACES


@dataclass(frozen=True, slots=True)
class PodFilter:
    namespaces: NamespaceFilter
    # podSelectors, any of which lets a pod through; none at all lets every pod through.
    selectors: tuple[LabelSelector, ...]
    evict_local_storage: bool
    # (namespace, name) of pods whose eviction the API server refused recently (a PodDisruptionBudget
    # said "not now"); the I/O layer keeps them out for a while so they do not take the round's
    # per-node slots every round while other pods could relieve the node.
    refused: frozenset[tuple[str, str]] = field(default_factory=frozenset)

    @classmethod
    def from_args(cls, args: LowNodeLoadArgs, refused: Collection[tuple[str, str]] = ()) -> PodFilter:
        return cls(
            namespaces=NamespaceFilter.from_args(args),
            selectors=tuple(s.selector.compile() for s in args.pod_selectors if s.selector is not None),
            evict_local_storage=args.evict_local_storage_pods,
            refused=frozenset(refused),
        )

    def blocker(self, pod: PodSnapshot) -> str | None:
        """Why the pod must not be evicted, or None when it is a candidate."""
        if pod.terminating or pod.phase in ("Succeeded", "Failed"):
            return SKIP_TERMINATING
        if ANNOTATION_MIRROR_POD in pod.annotations:
            return SKIP_MIRROR
        if pod.owner is not None and pod.owner.kind == "DaemonSet":
            return SKIP_DAEMONSET  # the DaemonSet would recreate it on the same node
        if not self.namespaces.allows(pod.namespace):
            return SKIP_NAMESPACE
        if self.selectors and not any(s.matches(pod.labels) for s in self.selectors):
            return SKIP_SELECTOR
        if int_annotation(pod, ANNOTATION_EVICTION_COST) >= EVICTION_COST_NEVER:
            return SKIP_EVICTION_COST
        if self.refused and pod.key in self.refused:
            return SKIP_REFUSED
        # The descheduler's evict annotation opts a pod in despite the default evictor's checks.
        if ANNOTATION_DESCHEDULER_EVICT in pod.annotations:
            return None
        if pod.owner is None:
            return SKIP_BARE  # nothing would recreate it
        if pod.priority is not None and pod.priority >= SYSTEM_CRITICAL_PRIORITY:
            return SKIP_CRITICAL
        if pod.has_local_storage and not self.evict_local_storage:
            return SKIP_LOCAL_STORAGE
        return None
