"""API objects (plain dicts from the watches) mapped onto the batch core's dataclasses.

Every object comes through its digest (`common/api/poddigest.py`, `nodedigest.py`, `nodemetric_digest.py`),
built once per watch event, not per reconcile, so a resync over thousands of nodes only does arithmetic.
Anything malformed raises the digest's `MalformedObjectError` naming the object and field; the caller logs and
counts it once per version and treats the object as unusable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from common.api.constants import BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY, RESOURCE_CPU, RESOURCE_MEMORY
from common.api.nodedigest import NodeDigest, digest_node
from common.api.nodemetric_digest import NodeMetricDigest, digest_node_metric
from common.api.poddigest import PodDigest, digest_pod
from manager.noderesource.model import NodeCapacity, PodOnNode, ResourcePair

BATCH_RESOURCES = (BATCH_CPU, BATCH_MEMORY)
NODE_RESOURCES = (BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY)  # what the manager writes into Node status


def _pair(resources: Mapping[str, int]) -> ResourcePair:
    """cpu in milli-cores, memory in bytes; absent means 0."""
    return ResourcePair(resources.get(RESOURCE_CPU, 0), resources.get(RESOURCE_MEMORY, 0))


_OWN_FIELDS = frozenset(f"status.{where}.{name}" for where in ("allocatable", "capacity") for name in NODE_RESOURCES)


def _only_own_fields(digest: NodeDigest) -> bool:
    """All that is wrong are values the manager writes itself (it replaces them at the next write)."""
    problem = digest.problem
    return problem is not None and problem.field in _OWN_FIELDS and _OWN_FIELDS.issuperset(digest.unparsed)


# --- Node --------------------------------------------------------------------------------
def node_digest(node: Mapping[str, Any]) -> NodeDigest:
    """The Node's digest (`common/api/nodedigest.py`).

    The manager's policy for a malformed node: it raises the digest's MalformedObjectError, and the controller
    counts it and leaves the node's batch resources as they are until a readable version comes
    (`controller.py`). A batch or mid resource the manager itself writes that does not parse is not a problem:
    it counts as absent, and the next write replaces it."""
    digest = digest_node(node)
    if digest.problem is not None and not _only_own_fields(digest):
        raise digest.problem
    return digest


def node_capacity(digest: NodeDigest) -> NodeCapacity:
    return NodeCapacity(
        capacity=_pair(digest.capacity),
        allocatable=_pair(digest.allocatable),
        annotation_reserved=(
            ResourcePair(digest.reservation.cpu_milli, digest.reservation.memory_bytes) if digest.reservation else None
        ),
    )


def node_batch_resources(
    digest: NodeDigest, field: str = "allocatable", names: Sequence[str] = BATCH_RESOURCES
) -> dict[str, int]:
    """The batch (or any of `names`) resources a Node carries in `status.<field>` (absent names left out)."""
    resources = digest.allocatable if field == "allocatable" else digest.capacity
    return {name: resources[name] for name in names if name in resources}


# --- Pod ---------------------------------------------------------------------------------
def pod_node_name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def pod_on_node(pod: Mapping[str, Any], digest: PodDigest | None = None) -> PodOnNode:
    """The batch core's record of a pod, from its digest (`common/api/poddigest.py`).

    The manager's policy for a malformed pod: this raises the digest's MalformedObjectError; the controller
    counts it and leaves the pod out of its node's sums until a readable version comes (`controller.py`). A pod
    with a part problem is used as the digest holds it (a request past the range rule fills its node: no batch
    resources there) and the controller counts the part."""
    digest = digest if digest is not None else digest_pod(pod)
    if digest.problem is not None:
        raise digest.problem
    requests = digest.requests
    return PodOnNode(
        namespace=digest.namespace,
        name=digest.name,
        phase=digest.phase or "Pending",
        priority_class=digest.priority_class.value,
        qos_class=digest.koord_qos.value,
        request=ResourcePair(requests.get(RESOURCE_CPU, 0), requests.get(RESOURCE_MEMORY, 0)),
    )


# --- NodeMetric --------------------------------------------------------------------------
def node_metric(obj: Mapping[str, Any]) -> NodeMetricDigest | None:
    """The shared digest; None when the agent never wrote a status. Raises the digest's
    MalformedObjectError when the object is unusable."""
    digest = digest_node_metric(obj)
    if digest.problem is not None:
        raise digest.problem
    return digest if digest.has_status else None
