"""API objects (plain dicts from the watches) mapped onto the batch core's dataclasses.

Conversions run once per watch event, not per reconcile, so a resync over thousands of
nodes only does arithmetic. Anything malformed raises `MalformedObjectError` naming the object
and field; the caller logs it once and treats the object as unusable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from common.api.constants import BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY, RESOURCE_CPU, RESOURCE_MEMORY
from common.api.malformed import MalformedObjectError, MalformedReason
from common.api.nodemetric_digest import NodeMetricDigest, digest_node_metric
from common.api.pod import pod_requests, priority_class_of, qos_class_of
from common.api.quantity import Quantity, QuantityError, consumer_units
from manager.noderesource.model import ZERO, NodeCapacity, PodOnNode, ResourcePair
from manager.noderesource.reservation import reservation_from_annotations

BATCH_RESOURCES = (BATCH_CPU, BATCH_MEMORY)
NODE_RESOURCES = (BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY)  # what the manager writes into Node status


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _pair(resources: Mapping[str, Any] | None, where: str) -> ResourcePair:
    """cpu in milli-cores, memory in bytes from a ResourceList; absent means 0."""
    if not resources:
        return ZERO
    try:
        cpu = consumer_units(RESOURCE_CPU, Quantity.parse(resources[RESOURCE_CPU])) if RESOURCE_CPU in resources else 0
        memory = (
            consumer_units(RESOURCE_MEMORY, Quantity.parse(resources[RESOURCE_MEMORY]))
            if RESOURCE_MEMORY in resources
            else 0
        )
    except (QuantityError, TypeError) as exc:
        raise MalformedObjectError(f"{where}: {exc}", reason=MalformedReason.INVALID_QUANTITY) from None
    return ResourcePair(cpu, memory)


# --- Node --------------------------------------------------------------------------------
def node_capacity(node: Mapping[str, Any]) -> NodeCapacity:
    name = _meta(node).get("name")
    status = node.get("status") or {}
    return NodeCapacity(
        capacity=_pair(status.get("capacity"), f"node {name} status.capacity"),
        allocatable=_pair(status.get("allocatable"), f"node {name} status.allocatable"),
        annotation_reserved=reservation_from_annotations(_meta(node).get("annotations")),
    )


def node_batch_resources(
    node: Mapping[str, Any], field: str = "allocatable", names: Sequence[str] = BATCH_RESOURCES
) -> dict[str, int]:
    """The batch (or any of `names`) resources a Node carries in `status.<field>` (integers; absent names left out).

    An unparsable value counts as absent, so the next write replaces it.
    """
    resources = (node.get("status") or {}).get(field) or {}
    found: dict[str, int] = {}
    for name in names:
        if name in resources:
            try:
                found[name] = consumer_units(name, Quantity.parse(resources[name]))
            except (QuantityError, TypeError):
                continue
    return found


# --- Pod ---------------------------------------------------------------------------------
def pod_node_name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


# Pods come from a few templates: their requests are computed once per distinct resources spec.
_REQUESTS_MEMO: dict[Any, ResourcePair] = {}
_MEMO_LIMIT = 8192


def _resources_key(spec: Mapping[str, Any]) -> Any:
    parts: list[Any] = []
    for group in ("containers", "initContainers"):
        for container in spec.get(group) or ():
            requests = (container.get("resources") or {}).get("requests") or {}
            parts.append((group, container.get("restartPolicy"), tuple(requests.items())))
    parts.append(tuple(((spec.get("resources") or {}).get("requests") or {}).items()))
    parts.append(tuple((spec.get("overhead") or {}).items()))
    return tuple(parts)


def _pod_request(pod: Mapping[str, Any]) -> ResourcePair:
    key = _resources_key(pod.get("spec") or {})
    cached = _REQUESTS_MEMO.get(key)
    if cached is None:
        requests = pod_requests(pod)
        cpu = requests.get(RESOURCE_CPU)
        memory = requests.get(RESOURCE_MEMORY)
        cached = ResourcePair(
            consumer_units(RESOURCE_CPU, cpu) if cpu else 0, consumer_units(RESOURCE_MEMORY, memory) if memory else 0
        )
        if len(_REQUESTS_MEMO) >= _MEMO_LIMIT:
            _REQUESTS_MEMO.clear()
        _REQUESTS_MEMO[key] = cached
    return cached


def pod_on_node(pod: Mapping[str, Any]) -> PodOnNode:
    meta = _meta(pod)
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    try:
        request = _pod_request(pod)
        priority, qos = priority_class_of(pod).value, qos_class_of(pod).value
    except (QuantityError, TypeError, ValueError, AttributeError) as exc:
        raise MalformedObjectError(f"{exc}", kind="Pod", name=f"{namespace}/{name}") from None
    return PodOnNode(
        namespace=namespace,
        name=name,
        phase=str((pod.get("status") or {}).get("phase") or "Pending"),
        priority_class=priority,
        qos_class=qos,
        request=request,
    )


# --- NodeMetric --------------------------------------------------------------------------
def node_metric(obj: Mapping[str, Any]) -> NodeMetricDigest | None:
    """The shared digest; None when the agent never wrote a status. Raises the digest's
    MalformedObjectError when the object is unusable."""
    digest = digest_node_metric(obj)
    if digest.problem is not None:
        raise digest.problem
    return digest if digest.has_status else None
