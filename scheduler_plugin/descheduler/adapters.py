"""API objects (Node, Pod, NodeMetric, workload dicts as watches deliver them) → the core's records.

Nothing here raises on what the cluster holds (but a creationTimestamp that is not RFC 3339,
`common.api.wire.parse_time`): a field that does not parse becomes ``None``/NaN
(the core skips the node or refuses to place the pod) or, for a NodeMetric, a ``problem`` string
naming the field, so the round can skip that node and say why.

Units follow the core (model.py): cpu in millicores, everything else by value.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from common.api import constants as c
from common.api.nodemetric_digest import NodeMetricDigest
from common.api.pod import kube_qos_class, pod_requests
from common.api.quantity import Quantity, QuantityError, consumer_units
from common.api.scheduling import parse_node_affinity, parse_taints, parse_tolerations
from common.api.wire import parse_time
from scheduler_plugin.descheduler.model import (
    NodeMetricSnapshot,
    NodeSnapshot,
    OwnerRef,
    PodSnapshot,
    ResourceValues,
)

JSON = Mapping[str, Any]
NAN = math.nan


_EMPTY: Mapping[str, Any] = {}


def _is_map(value: Any) -> bool:
    return type(value) is dict or isinstance(value, Mapping)


def _map(value: Any) -> Mapping[str, Any]:
    # JSON from the API server is made of dicts; the dict check first keeps the common case off
    # the (slow) ABC instance check.
    return value if _is_map(value) else _EMPTY


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in _map(value).items()}


# Quantity text repeats a lot across pods and reports ("100m", "1Gi"); parsing is the expensive part.
_SCALAR_MEMO: dict[tuple[bool, str], float] = {}
_SCALAR_MEMO_LIMIT = 100_000


def scalar_value(name: str, raw: Any) -> float:
    """One quantity in the core's unit; NaN when it does not parse."""
    key = (name == c.RESOURCE_CPU, raw) if type(raw) is str else None
    if key is not None:
        found = _SCALAR_MEMO.get(key)
        if found is not None:
            return found
    try:
        q = Quantity.parse(raw)
        value = float(consumer_units(name, q))
    except (QuantityError, TypeError, ValueError):
        value = NAN
    if key is not None:
        if len(_SCALAR_MEMO) >= _SCALAR_MEMO_LIMIT:
            _SCALAR_MEMO.clear()
        _SCALAR_MEMO[key] = value
    return value


# ----------------------------------------------------------------------------- nodes
def node_snapshot(obj: JSON) -> NodeSnapshot:
    meta, spec, status = _map(obj.get("metadata")), _map(obj.get("spec")), _map(obj.get("status"))
    allocatable: dict[str, float | None] = {
        str(name): scalar_value(str(name), raw) for name, raw in _map(status.get("allocatable")).items()
    }
    taints = parse_taints(spec.get("taints"))
    return NodeSnapshot(
        name=str(meta.get("name", "")),
        allocatable=allocatable,
        labels=_str_map(meta.get("labels")),
        raw_allocatable=raw_allocatable(_str_map(meta.get("annotations"))),
        unschedulable=bool(spec.get("unschedulable", False)),
        taints=taints,
    )


def raw_allocatable(annotations: Mapping[str, str]) -> ResourceValues | None:
    """``node.koordinator.sh/raw-allocatable`` (JSON ResourceList); None when absent or malformed,
    so status.allocatable is used, as Koordinator does when the annotation does not unmarshal."""
    text = annotations.get(c.ANNOTATION_RAW_ALLOCATABLE)
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, Mapping):
        return None
    values = {str(k): scalar_value(str(k), v) for k, v in data.items()}
    if any(math.isnan(v) for v in values.values()):
        return None
    return values


# ----------------------------------------------------------------------------- pods
def controller_of(meta: Mapping[str, Any]) -> OwnerRef | None:
    """The owner reference with ``controller: true`` (metav1.GetControllerOf)."""
    for ref in _list(meta.get("ownerReferences")):
        if _is_map(ref) and ref.get("controller") is True:
            return OwnerRef(kind=str(ref.get("kind", "")), name=str(ref.get("name", "")), uid=str(ref.get("uid", "")))
    return None


def _has_local_storage(spec: Mapping[str, Any]) -> bool:
    return any(_is_map(v) and ("emptyDir" in v or "hostPath" in v) for v in _list(spec.get("volumes")))


def _ready(status: Mapping[str, Any]) -> bool:
    return any(
        _is_map(cond) and cond.get("type") == "Ready" and cond.get("status") == "True"
        for cond in _list(status.get("conditions"))
    )


def _requests(obj: JSON) -> ResourceValues:
    try:
        totals = pod_requests(obj)
        return {name: float(consumer_units(name, q)) for name, q in totals.items()}
    except (QuantityError, TypeError, ValueError, AttributeError):
        # Unknown requests: nodeFit finds no safe target for the pod (model.py's NaN contract).
        return {c.RESOURCE_CPU: NAN, c.RESOURCE_MEMORY: NAN}


def _k8s_qos(obj: JSON) -> str:
    try:
        return str(kube_qos_class(obj))
    except (QuantityError, TypeError, ValueError, AttributeError):
        return "BestEffort"


def _freeze(value: Any) -> Any:
    if type(value) is dict:
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if type(value) is list:
        return tuple(_freeze(v) for v in value)
    if isinstance(value, Mapping):
        return _freeze(dict(value))
    return value


def _resource_signature(spec: Mapping[str, Any], status: Mapping[str, Any]) -> Any:
    """Everything pod_requests and kube_qos_class read, as a hashable value."""
    return (
        tuple(_freeze(ctr.get("resources")) if _is_map(ctr) else ctr for ctr in _list(spec.get("containers"))),
        tuple(
            (_freeze(ctr.get("resources")), ctr.get("restartPolicy")) if _is_map(ctr) else ctr
            for ctr in _list(spec.get("initContainers"))
        ),
        _freeze(spec.get("resources")),
        _freeze(spec.get("overhead")),
        status.get("qosClass"),
    )


# Pods of one workload share their resources, so a memo turns ~20 quantity parses per pod into a
# lookup (100k pods: seconds → well under one). Bounded: cleared when it grows past the limit.
_RESOURCE_MEMO: dict[Any, tuple[ResourceValues, str]] = {}
_RESOURCE_MEMO_LIMIT = 50_000


def _resources(obj: JSON, spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[ResourceValues, str]:
    try:
        key = _resource_signature(spec, status)
        hash(key)
    except TypeError:  # an unhashable oddity somewhere in the spec: no memo for this pod
        return _requests(obj), _k8s_qos(obj)
    found = _RESOURCE_MEMO.get(key)
    if found is None:
        if len(_RESOURCE_MEMO) >= _RESOURCE_MEMO_LIMIT:
            _RESOURCE_MEMO.clear()
        found = _RESOURCE_MEMO[key] = (_requests(obj), _k8s_qos(obj))
    return found


def pod_snapshot(obj: JSON, workload_replicas: int | None = None) -> PodSnapshot:
    meta, spec, status = _map(obj.get("metadata")), _map(obj.get("spec")), _map(obj.get("status"))
    priority = spec.get("priority")
    requests, k8s_qos = _resources(obj, spec, status)
    return PodSnapshot(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        node_name=str(spec.get("nodeName", "") or ""),
        owner=controller_of(meta),
        labels=_str_map(meta.get("labels")),
        annotations=_str_map(meta.get("annotations")),
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else None,
        k8s_qos=k8s_qos,
        creation_timestamp=parse_time(meta.get("creationTimestamp"), "metadata.creationTimestamp"),
        requests=requests,
        node_selector=_str_map(spec.get("nodeSelector")),
        required_node_affinity=parse_node_affinity(spec.get("affinity"))[0],
        tolerations=parse_tolerations(spec.get("tolerations")),
        has_local_storage=_has_local_storage(spec),
        ready=_ready(status),
        terminating=bool(meta.get("deletionTimestamp")),
        phase=str(status.get("phase", "") or "Pending"),
        workload_replicas=workload_replicas,
    )


def workload_replicas(obj: JSON) -> tuple[str, int] | None:
    """(uid, spec.replicas) of a ReplicaSet or StatefulSet; None when it has no usable count."""
    uid = _map(obj.get("metadata")).get("uid")
    replicas = _map(obj.get("spec")).get("replicas", 1)  # the API server defaults replicas to 1
    if not uid or not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        return None
    return str(uid), replicas


# ----------------------------------------------------------------------------- NodeMetrics
def malformed_problem(digest: NodeMetricDigest) -> str | None:
    """Why the round cannot use this NodeMetric (the digest's own finding, in the round's words), or None."""
    if digest.problem is None:
        return None
    return f"NodeMetric malformed: {digest.problem.field}: {digest.problem.detail}"


def round_node_metric(
    digest: NodeMetricDigest, keep: AbstractSet[tuple[str, str]] | None = None
) -> NodeMetricSnapshot:
    """The round's record of a usable digest; with ``keep``, only the podsMetric entries of those pods count.

    A NodeMetric the agent never filled in gives ``system_usage=None`` (the core says "no status.nodeMetric")."""
    if not digest.has_status:
        return NodeMetricSnapshot(node_name=digest.node_name, update_time=None, system_usage=None)
    usages = {
        (pod.namespace, pod.name): _values(pod.usage)
        for pod in digest.pod_usages.values()
        if keep is None or (pod.namespace, pod.name) in keep
    }
    return NodeMetricSnapshot(
        node_name=digest.node_name,
        update_time=digest.update_time,
        system_usage=_values(digest.system_usage) if digest.has_node_metric else None,
        pod_usages=usages,
    )


def _values(usage: Mapping[str, int] | None) -> ResourceValues:
    return {name: float(value) for name, value in (usage or {}).items()}
