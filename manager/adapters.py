"""API objects (plain dicts from the watches) mapped onto the batch core's dataclasses.

Conversions run once per watch event, not per reconcile, so a resync over thousands of
nodes only does arithmetic. Anything malformed raises `InputError` naming the object and
field; the caller logs it once and treats the object as unusable.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from common.api.constants import BATCH_CPU, BATCH_MEMORY, RESOURCE_CPU, RESOURCE_MEMORY
from common.api.pod import pod_requests, priority_class_of, qos_class_of
from common.api.quantity import Quantity, QuantityError, consumer_units
from manager.noderesource.model import (
    ZERO,
    HostAppUsage,
    NodeCapacity,
    NodeMetricSnapshot,
    PodOnNode,
    PodUsage,
    ResourcePair,
)
from manager.noderesource.reservation import reservation_from_annotations

BATCH_RESOURCES = (BATCH_CPU, BATCH_MEMORY)


class InputError(ValueError):
    """An API object the manager cannot use (the message names it and the field)."""


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
        raise InputError(f"{where}: {exc}") from None
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


def node_batch_resources(node: Mapping[str, Any], field: str = "allocatable") -> dict[str, int]:
    """The batch resources a Node carries in `status.<field>` (integers; absent names left out).

    An unparsable value counts as absent, so the next write replaces it.
    """
    resources = (node.get("status") or {}).get(field) or {}
    found: dict[str, int] = {}
    for name in BATCH_RESOURCES:
        if name in resources:
            try:
                found[name] = Quantity.parse(resources[name]).value()
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
        raise InputError(f"pod {namespace}/{name}: {exc}") from None
    return PodOnNode(
        namespace=namespace,
        name=name,
        phase=str((pod.get("status") or {}).get("phase") or "Pending"),
        priority_class=priority,
        qos_class=qos,
        request=request,
    )


# --- NodeMetric --------------------------------------------------------------------------
# Read straight from the dict (the pydantic model costs ~1 ms per NodeMetric, and every node's agent
# reports every minute); values are validated as the model would: quantities, never negative.
_USAGE_MEMO: dict[tuple[str, Any], int] = {}


def _usage(raw: Any, resource: str, where: str) -> int:
    key = (resource, raw)
    try:
        cached = _USAGE_MEMO.get(key)
    except TypeError:  # unhashable: certainly not a quantity
        raise InputError(f"{where}: {resource} {raw!r} is not a quantity") from None
    if cached is not None:
        return cached
    try:
        q = Quantity.parse(raw, field=f"{where}.{resource}")
    except (QuantityError, TypeError) as exc:
        raise InputError(str(exc)) from None
    if q.sign() < 0:
        raise InputError(f"{where}.{resource}: usage must not be negative, got {raw!r}")
    try:
        value = consumer_units(resource, q, f"{where}.{resource}")
    except QuantityError as exc:
        raise InputError(str(exc)) from None
    if len(_USAGE_MEMO) >= _MEMO_LIMIT * 8:
        _USAGE_MEMO.clear()
    _USAGE_MEMO[key] = value
    return value


def _resource_map(rmap: Any, where: str) -> ResourcePair:
    if rmap is None:
        return ZERO
    if not isinstance(rmap, Mapping):
        raise InputError(f"{where} must be an object")
    resources = rmap.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise InputError(f"{where}.resources must be an object")
    cpu = resources.get(RESOURCE_CPU)
    memory = resources.get(RESOURCE_MEMORY)
    return ResourcePair(
        _usage(cpu, RESOURCE_CPU, f"{where}.resources") if cpu is not None else 0,
        _usage(memory, RESOURCE_MEMORY, f"{where}.resources") if memory is not None else 0,
    )


def _time(raw: Any, where: str) -> datetime | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise InputError(f"{where}: not a time: {raw!r}")
    try:
        parsed = datetime.fromisoformat(raw[:-1] + "+00:00" if raw.endswith("Z") else raw)
    except ValueError:
        raise InputError(f"{where}: invalid RFC 3339 time {raw!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _entries(value: Any, where: str) -> list[Mapping[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise InputError(f"{where} must be a list of objects")
    return value


def node_metric_snapshot(obj: Mapping[str, Any]) -> NodeMetricSnapshot | None:
    """The status parts the batch formula reads; None when the agent never wrote a status."""
    status = obj.get("status")
    if not status:
        return None
    where = f"NodeMetric {_meta(obj).get('name')}: status"
    if not isinstance(status, Mapping):
        raise InputError(f"{where} must be an object")
    info = status.get("nodeMetric") or {}
    if not isinstance(info, Mapping):
        raise InputError(f"{where}.nodeMetric must be an object")
    pods = tuple(
        PodUsage(
            str(p.get("namespace") or ""),
            str(p.get("name") or ""),
            str(p.get("priority") or ""),
            _resource_map(p.get("podUsage"), f"{where}.podsMetric[{i}].podUsage"),
        )
        for i, p in enumerate(_entries(status.get("podsMetric"), f"{where}.podsMetric"))
    )
    apps = tuple(
        HostAppUsage(
            str(a.get("name") or ""),
            str(a.get("priority") or ""),
            _resource_map(a.get("usage"), f"{where}.hostApplicationMetric[{i}].usage"),
        )
        for i, a in enumerate(_entries(status.get("hostApplicationMetric"), f"{where}.hostApplicationMetric"))
    )
    return NodeMetricSnapshot(
        update_time=_time(status.get("updateTime"), f"{where}.updateTime"),
        system_usage=_resource_map(info.get("systemUsage"), f"{where}.nodeMetric.systemUsage"),
        pods=pods,
        host_apps=apps,
    )
