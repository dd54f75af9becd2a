"""What the enforcer reads from API objects: node capacity and reservations, pod classes and exclusive CPUs."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from common.api.constants import RESOURCE_CPU, RESOURCE_MEMORY
from common.api.pod import KoordQoSClass, KubeQoSClass, kube_qos_class, qos_class_of
from common.api.quantity import Quantity, QuantityError
from common.api.reservation import node_reservation
from common.cpulist import parse_cpu_list

# Koordinator's scheduler records the CPUs it bound an LSE/LSR pod to here: {"cpuset": "0-3"}.
ANNOTATION_RESOURCE_STATUS: Final = "scheduling.koordinator.sh/resource-status"


@dataclass(frozen=True, slots=True)
class NodeFacts:
    capacity_cpu_milli: int
    capacity_memory_bytes: int
    reserved_cpu_milli: int  # max(kubelet reserved = capacity - allocatable, node.koordinator.sh/reservation)
    reserved_cpus: tuple[int, ...]  # reservation `reservedCPUs`: BE never runs there


def _quantity(resources: Mapping[str, Any], name: str, milli: bool) -> int:
    raw = resources.get(name)
    if raw is None:
        return 0
    q = Quantity.parse(raw, field=name)
    return q.milli_value() if milli else q.value()


def node_facts(node: Mapping[str, Any]) -> NodeFacts:
    """Raises QuantityError/ValueError on a malformed Node (the caller skips the round)."""
    status = node.get("status") or {}
    capacity = status.get("capacity") or {}
    allocatable = status.get("allocatable") or {}
    cap_cpu = _quantity(capacity, RESOURCE_CPU, True)
    reserved = max(cap_cpu - _quantity(allocatable, RESOURCE_CPU, True), 0)
    parsed = node_reservation((node.get("metadata") or {}).get("annotations"))
    reserved_cpus: tuple[int, ...] = ()
    if parsed is not None:  # an unusable annotation is ignored, as Koordinator does
        reserved = max(reserved, parsed.cpu_milli)
        reserved_cpus = parsed.reserved_cpus
    return NodeFacts(cap_cpu, _quantity(capacity, RESOURCE_MEMORY, False), reserved, reserved_cpus)


def pod_uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def is_best_effort(pod: Mapping[str, Any]) -> bool:
    """koordinator.sh/qosClass=BE, or a Kubernetes BestEffort pod (what lands in the besteffort cgroup)."""
    try:
        return qos_class_of(pod) is KoordQoSClass.BE or kube_qos_class(pod) is KubeQoSClass.BEST_EFFORT
    except (QuantityError, ValueError):
        return False


def is_terminating(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    return bool(meta.get("deletionTimestamp")) or phase in ("Succeeded", "Failed")


def exclusive_cpus(pods: Iterable[Mapping[str, Any]]) -> tuple[list[int], list[int]]:
    """(LSE CPUs, LSR CPUs) bound by Koordinator's scheduler, from the pods' resource-status annotation."""
    lse: set[int] = set()
    lsr: set[int] = set()
    for pod in pods:
        if is_terminating(pod):
            continue
        text = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_RESOURCE_STATUS)
        if not text:
            continue
        try:
            qos = qos_class_of(pod)
            doc = json.loads(text)
            cpus = parse_cpu_list(doc.get("cpuset") or "") if isinstance(doc, dict) else []
        except (json.JSONDecodeError, QuantityError, ValueError, AttributeError):
            continue
        if qos is KoordQoSClass.LSE:
            lse.update(cpus)
        elif qos is KoordQoSClass.LSR:
            lsr.update(cpus)
    return sorted(lse), sorted(lsr)
