"""`PodInfo`: a pod parsed once into what scheduling needs (kube-scheduler's PodInfo).

Resource amounts are integers in Koordinator's vector unit: `cpu` in milli-cores, every
other resource (memory, pods, kubernetes.io/batch-cpu, nvidia.com/gpu, ...) by value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.api.malformed import MalformedObjectError
from common.api.pod import PriorityClass
from common.api.poddigest import PodDigest, digest_pod
from common.api.podgroup import GangRef, GangSpecError, gang_of
from common.api.podvolumes import PodVolume, parse_pod_volumes
from common.api.scheduling import (
    HostPort,
    PodAffinity,
    PreferredTerm,
    SelectorTerm,
    Toleration,
    TopologySpreadConstraint,
    normalized_image_name,
    parse_host_ports,
    parse_node_affinity,
    parse_pod_affinity,
    parse_tolerations,
    parse_topology_spread_constraints,
    string_map,
)
from common.api.wire import parse_time
from scheduler_plugin.framework.podfields import RefusedField, refused_fields


def pod_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


class PodInfo:
    """Read-only view of one pod. `memo` is per-pod scratch that plugins may cache derived values in."""

    __slots__ = (
        "annotations",
        "creation_timestamp",
        "deleting",
        "gang",
        "gang_error",
        "host_ports",
        "images",
        "initialized_at",
        "is_daemonset",
        "key",
        "koord_priority_class",
        "labels",
        "limits",
        "memo",
        "name",
        "namespace",
        "node_name",
        "node_selector",
        "nominated_node_name",
        "nonzero_requests",
        "num_containers",
        "part_problem",
        "phase",
        "pod_affinity",
        "preempt_never",
        "preferred_affinity",
        "priority",
        "raw",
        "refused_fields",
        "requests",
        "required_affinity",
        "scheduled_at",
        "scheduler_name",
        "scheduling_gates",
        "start_time",
        "tolerations",
        "topology_spread",
        "uid",
        "volumes",
    )

    raw: Mapping[str, Any]
    namespace: str
    name: str
    key: str
    uid: str
    labels: dict[str, str]
    annotations: dict[str, str]
    creation_timestamp: float
    priority: int
    koord_priority_class: PriorityClass  # Koordinator's defaulted class (label, priority range, else QoS)
    scheduler_name: str
    node_name: str
    phase: str
    deleting: bool
    is_daemonset: bool
    part_problem: MalformedObjectError | None  # the digest's: a part held at its safe value (counted by the cache)
    requests: dict[str, int]
    limits: dict[str, int]
    nonzero_requests: tuple[int, int]
    node_selector: dict[str, str]
    required_affinity: tuple[SelectorTerm, ...] | None
    preferred_affinity: tuple[PreferredTerm, ...]
    tolerations: tuple[Toleration, ...]
    scheduling_gates: tuple[str, ...]
    scheduled_at: float | None
    initialized_at: float | None
    start_time: float | None  # status.startTime (kubelet), None until the pod runs
    nominated_node_name: str  # status.nominatedNodeName: where preemption made room for it
    preempt_never: bool  # spec.preemptionPolicy: Never
    gang: GangRef | None
    gang_error: str | None
    memo: dict[str, Any]
    # spec.volumes as the volume plugins read them (common/api/podvolumes.py)
    volumes: tuple[PodVolume, ...]
    # host ports (NodePorts), images (ImageLocality), fields Loadline refuses (PodFieldGuard)
    host_ports: tuple[HostPort, ...]  # NodePorts: (protocol, hostPort, hostIP) the pod binds on its node
    images: tuple[str, ...]  # ImageLocality: normalised images of init containers, containers, image volumes
    num_containers: int  # init containers + containers (ImageLocality's threshold scales with it)
    refused_fields: tuple[RefusedField, ...]  # fields that affect placement and Loadline does not implement
    # inter-pod placement (InterPodAffinity, PodTopologySpread)
    pod_affinity: PodAffinity | None  # None: no pod affinity or anti-affinity term
    topology_spread: tuple[TopologySpreadConstraint, ...]

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> PodInfo:
        """Parse a pod as the API server returns it. Raises MalformedObjectError naming the bad field.

        The scheduler's policy for a malformed pod (the digest's `problem`, or a scheduling field below that
        does not parse): it is not scheduled, and a bound one keeps its last readable version accounted on its
        node (`server/cache.py`, which also counts it)."""
        digest = digest_pod(obj)
        if digest.problem is not None:
            raise digest.problem
        return cls.from_digest(obj, digest)

    @classmethod
    def from_digest(cls, obj: Mapping[str, Any], digest: PodDigest) -> PodInfo:
        """The scheduling fields of a readable pod: the digest's, plus what only scheduling reads."""
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        self = cls.__new__(cls)
        self.raw = obj
        self.name = digest.name
        self.namespace = digest.namespace or "default"
        self.key = pod_key(self.namespace, self.name)
        self.uid = digest.uid or self.key
        self.labels = digest.labels
        self.annotations = digest.annotations
        self.creation_timestamp = digest.creation_timestamp or 0.0
        self.deleting = digest.deleting
        self.priority = digest.priority or 0
        self.koord_priority_class = digest.priority_class
        self.scheduler_name = str(spec.get("schedulerName") or "default-scheduler")
        self.node_name = digest.node_name
        self.phase = digest.phase
        self.is_daemonset = digest.is_daemonset
        self.requests = digest.requests
        self.limits = digest.limits
        self.part_problem = digest.part_problem
        self.nonzero_requests = digest.resources.nonzero_requests
        self.node_selector = string_map(spec.get("nodeSelector"), "spec.nodeSelector")
        self.required_affinity, self.preferred_affinity = parse_node_affinity(spec.get("affinity"))
        self.tolerations = parse_tolerations(spec.get("tolerations"))
        gates = spec.get("schedulingGates") or []
        self.scheduling_gates = tuple(str(g.get("name", "")) for g in gates if isinstance(g, Mapping))
        self.scheduled_at, self.initialized_at = _condition_times(status.get("conditions"))
        self.start_time = parse_time(status.get("startTime"), "status.startTime")
        self.nominated_node_name = str(status.get("nominatedNodeName") or "")
        policy = spec.get("preemptionPolicy") or "PreemptLowerPriority"
        if policy not in ("PreemptLowerPriority", "Never"):
            raise MalformedObjectError(f"spec.preemptionPolicy: unknown value {policy!r}")
        self.preempt_never = policy == "Never"
        try:
            self.gang, self.gang_error = gang_of(obj), None
        except GangSpecError as exc:
            # The pod is still schedulable data-wise; Coscheduling rejects it with this reason.
            self.gang, self.gang_error = None, str(exc)
        self.host_ports = parse_host_ports(spec)
        self.images, self.num_containers = _images(spec)
        self.refused_fields = refused_fields(spec)
        self.memo = {}
        self.volumes = parse_pod_volumes(spec, self.name)
        self.pod_affinity = parse_pod_affinity(spec.get("affinity"), self.namespace)
        self.topology_spread = parse_topology_spread_constraints(spec.get("topologySpreadConstraints"))
        return self

    def with_status_of(self, obj: Mapping[str, Any]) -> PodInfo:
        """This pod at a newer version whose spec (but for nodeName), labels and annotations are unchanged.

        Only what comes from `status`, `metadata.deletionTimestamp` and `spec.nodeName` is read
        again: most watch events of a pod are its binding and status updates (the kubelet
        reporting it running), and parsing requests, affinity and tolerations again for each of
        them is wasted work. The caller checks that the other scheduling fields are unchanged."""
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        if not isinstance(meta, Mapping) or not isinstance(spec, Mapping) or not isinstance(status, Mapping):
            raise MalformedObjectError("pod: metadata, spec and status must be objects")
        new = PodInfo.__new__(PodInfo)
        for name in PodInfo.__slots__:
            setattr(new, name, getattr(self, name))
        new.raw = obj
        new.node_name = str(spec.get("nodeName") or "")
        new.deleting = meta.get("deletionTimestamp") is not None
        new.phase = str(status.get("phase") or "")
        new.scheduled_at, new.initialized_at = _condition_times(status.get("conditions"))
        new.start_time = parse_time(status.get("startTime"), "status.startTime")
        new.nominated_node_name = str(status.get("nominatedNodeName") or "")
        new.memo = dict(self.memo)
        return new

    @property
    def is_terminated(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    def __repr__(self) -> str:
        return f"PodInfo({self.key})"


def _images(spec: Mapping[str, Any]) -> tuple[tuple[str, ...], int]:
    """Normalised image references of init containers, containers and image volumes (each occurrence,
    as imagelocality.sumImageScores adds one score per container), and the number of containers."""
    images: list[str] = []
    containers = 0
    for kind in ("initContainers", "containers"):
        for container in _objects(spec.get(kind), f"spec.{kind}"):
            containers += 1
            image = container.get("image")
            if isinstance(image, str):
                images.append(normalized_image_name(image))
    for volume in _objects(spec.get("volumes"), "spec.volumes"):
        source = volume.get("image")
        reference = source.get("reference") if isinstance(source, Mapping) else None
        if isinstance(reference, str):
            images.append(normalized_image_name(reference))
    return tuple(images), containers


def _objects(value: Any, field: str) -> list[Mapping[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        raise MalformedObjectError(f"{field}: expected a list of objects")
    return value


def _condition_times(conditions: Any) -> tuple[float | None, float | None]:
    scheduled = initialized = None
    if not isinstance(conditions, list):
        return None, None
    for i, cond in enumerate(conditions):
        if not isinstance(cond, Mapping) or cond.get("status") != "True":
            continue
        when = parse_time(cond.get("lastTransitionTime"), f"status.conditions[{i}].lastTransitionTime")
        if cond.get("type") == "PodScheduled":
            scheduled = when
        elif cond.get("type") == "Initialized":
            initialized = when
    return scheduled, initialized
