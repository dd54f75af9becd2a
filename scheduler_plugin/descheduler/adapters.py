"""API objects (Node, Pod, NodeMetric, workload dicts as watches deliver them) → the core's records.

Nodes and pods come from their digests (`common/api/nodedigest.py`, `poddigest.py`): one that cannot be read
raises its MalformedObjectError; a NodeMetric's digest carries its ``problem``. Either way the round skips the
node and says why.

Units follow the core (model.py): cpu in millicores, everything else by value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from common.api.nodedigest import NodeDigest, digest_node
from common.api.nodemetric_digest import NodeMetricDigest
from common.api.poddigest import PodDigest, digest_pod
from common.api.scheduling import parse_node_affinity, parse_tolerations
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


# ----------------------------------------------------------------------------- nodes
def _floats(values: Mapping[str, int]) -> dict[str, float | None]:
    return {name: float(value) for name, value in values.items()}


def node_snapshot(obj: JSON, digest: NodeDigest | None = None) -> NodeSnapshot:
    """The round's record of a node (from its digest, `common/api/nodedigest.py`).

    The descheduler's policy for a malformed node: this raises the digest's MalformedObjectError, and the
    round leaves the node alone with that reason (`inputs.py`, which also counts it)."""
    digest = digest if digest is not None else digest_node(obj)
    if digest.problem is not None:
        raise digest.problem
    return NodeSnapshot(
        name=digest.name,
        allocatable=_floats(digest.allocatable),
        labels=digest.labels,
        raw_allocatable=_floats(digest.raw_allocatable) if digest.raw_allocatable is not None else None,
        unschedulable=digest.unschedulable,
        taints=digest.taints,
    )


# ----------------------------------------------------------------------------- pods
def _has_local_storage(spec: Mapping[str, Any]) -> bool:
    return any(_is_map(v) and ("emptyDir" in v or "hostPath" in v) for v in _list(spec.get("volumes")))


def _ready(status: Mapping[str, Any]) -> bool:
    return any(
        _is_map(cond) and cond.get("type") == "Ready" and cond.get("status") == "True"
        for cond in _list(status.get("conditions"))
    )


def owner_of(digest: PodDigest) -> OwnerRef | None:
    ref = digest.controller
    return OwnerRef(kind=ref.kind, name=ref.name, uid=ref.uid) if ref is not None else None


def pod_snapshot(obj: JSON, workload_replicas: int | None = None, digest: PodDigest | None = None) -> PodSnapshot:
    """The round's record of a pod (from its digest, `common/api/poddigest.py`).

    The descheduler's policy for a malformed pod: this raises the digest's MalformedObjectError, and the
    round leaves the pod's node alone with that reason (`inputs.py`, which also counts it): what a pod we
    cannot read uses, and whether it may move, is unknown."""
    digest = digest if digest is not None else digest_pod(obj)
    if digest.problem is not None:
        raise digest.problem
    spec, status = _map(obj.get("spec")), _map(obj.get("status"))
    return PodSnapshot(
        namespace=digest.namespace,
        name=digest.name,
        node_name=digest.node_name,
        owner=owner_of(digest),
        labels=digest.labels,
        annotations=digest.annotations,
        priority=digest.priority,
        k8s_qos=str(digest.kube_qos),
        creation_timestamp=digest.creation_timestamp,
        requests={name: float(value) for name, value in digest.requests.items()},
        node_selector=_str_map(spec.get("nodeSelector")),
        required_node_affinity=parse_node_affinity(spec.get("affinity"))[0],
        tolerations=parse_tolerations(spec.get("tolerations")),
        has_local_storage=_has_local_storage(spec),
        ready=_ready(status),
        terminating=digest.deleting,
        phase=digest.phase or "Pending",
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
