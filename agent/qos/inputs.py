"""What the enforcer reads from API objects: node capacity and reservations, pod classes and exclusive CPUs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from common.api.constants import RESOURCE_CPU, RESOURCE_MEMORY
from common.api.nodedigest import NodeDigest
from common.api.pod import KoordQoSClass, KubeQoSClass
from common.api.poddigest import PodDigest


@dataclass(frozen=True, slots=True)
class NodeFacts:
    capacity_cpu_milli: int
    capacity_memory_bytes: int
    reserved_cpu_milli: int  # max(kubelet reserved = capacity - allocatable, node.koordinator.sh/reservation)
    reserved_cpus: tuple[int, ...]  # reservation `reservedCPUs`: BE never runs there


def node_facts(digest: NodeDigest) -> NodeFacts:
    """From the Node's digest (`common/api/nodedigest.py`); the caller skips the round for a malformed one."""
    capacity_cpu = digest.capacity.get(RESOURCE_CPU, 0)
    reserved = max(capacity_cpu - digest.allocatable.get(RESOURCE_CPU, 0), 0)
    parsed = digest.reservation
    reserved_cpus: tuple[int, ...] = ()
    if parsed is not None:  # an unusable annotation is ignored, as Koordinator does
        reserved = max(reserved, parsed.cpu_milli)
        reserved_cpus = parsed.reserved_cpus
    return NodeFacts(capacity_cpu, digest.capacity.get(RESOURCE_MEMORY, 0), reserved, reserved_cpus)


# A pod as the enforcer holds it: the object (what an eviction and its event name) and its digest.
PodEntry = tuple[Mapping[str, Any], PodDigest]


def is_best_effort(pod: PodDigest) -> bool:
    """koordinator.sh/qosClass=BE, or a Kubernetes BestEffort pod (what lands in the besteffort cgroup).

    The enforcer's policy for a pod it cannot read (its digest's problem): never best-effort, so it is
    neither suppressed as one nor evicted."""
    if pod.problem is not None:
        return False
    return pod.koord_qos is KoordQoSClass.BE or pod.kube_qos is KubeQoSClass.BEST_EFFORT


def is_terminating(pod: PodDigest) -> bool:
    return pod.deleting or pod.phase in ("Succeeded", "Failed")


def exclusive_cpus(pods: Iterable[PodDigest]) -> tuple[list[int], list[int]]:
    """(LSE CPUs, LSR CPUs) bound by Koordinator's scheduler, from the pods' resource-status annotation
    (read in the pod digest: an unusable one is counted there and binds no CPU, as an absent one)."""
    lse: set[int] = set()
    lsr: set[int] = set()
    for pod in pods:
        if pod.problem is not None or is_terminating(pod):
            continue
        if pod.koord_qos is KoordQoSClass.LSE:
            lse.update(pod.bound_cpus)
        elif pod.koord_qos is KoordQoSClass.LSR:
            lsr.update(pod.bound_cpus)
    return sorted(lse), sorted(lsr)
