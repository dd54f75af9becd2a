"""A Pod digested once per version into what every component reads: identity, requests, limits, classes.

Built from a pydantic model of the fields Loadline reads (`PodView`; everything else on the wire is ignored),
so the scheduler, the extender, the descheduler, the manager and the agent validate a pod the same way and
agree on what is wrong with it. A digest is always returned: a pod that cannot be used carries its `problem`
(a `MalformedObjectError` naming the field and a `MalformedReason`), and then only its identity (`namespace`,
`name`, `uid`, `resource_version`, `node_name`, `phase`, `deleting`) is meaningful. Each component states its
own policy for such a pod where it applies it, and counts it in `loadline_malformed_objects_total`
(`common/kube/malformed.py`).

Requests and limits follow kube-scheduler's PodRequests/PodLimits (`common/api/pod.py`), in Koordinator's
vector unit: `cpu` in milli-cores, everything else by value. Pods come from a few templates, so the resource
part is computed once per distinct resources spec (`_RESOURCES`), not once per pod.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import StrictInt, ValidationError

from common.api import constants as c
from common.api.malformed import MalformedObjectError, MalformedReason, from_validation_error, quantity_reason
from common.api.pod import (
    KoordQoSClass,
    KubeQoSClass,
    PriorityClass,
    defaulted_priority_class,
    kube_qos_class,
    pod_limits,
    pod_requests,
    priority_class_from,
    qos_class_from,
    scalar,
)
from common.api.quantity import MAX_CONSUMER_UNITS, Quantity, QuantityError, QuantityRangeError
from common.api.wire import MetaView, QuantityText, Time, WireView
from common.cpulist import parse_cpu_list

KIND: Final = "Pod"

# kube-scheduler scores a pod without a cpu/memory request as if it asked for these
# (pkg/scheduler/util/pod_resources.go: DefaultMilliCPURequest, DefaultMemoryRequest), so that many
# request-less pods do not all land on one node.
NONZERO_DEFAULT_MILLI_CPU: Final = 100
NONZERO_DEFAULT_MEMORY: Final = 200 * 1024 * 1024


# ----------------------------------------------------------------------------- the wire fields we read
class ResourceRequirements(WireView):
    requests: dict[str, QuantityText] | None = None
    limits: dict[str, QuantityText] | None = None


class ContainerResources(WireView):
    resources: ResourceRequirements | None = None
    restart_policy: str | None = None


class OwnerRef(WireView):
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None


class PodMeta(MetaView):
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None
    owner_references: list[OwnerRef] | None = None


class PodSpecView(WireView):
    containers: list[ContainerResources] | None = None
    init_containers: list[ContainerResources] | None = None
    resources: ResourceRequirements | None = None  # PodLevelResources
    overhead: dict[str, QuantityText] | None = None
    priority: StrictInt | None = None
    priority_class_name: str | None = None
    node_name: str | None = None


class PodStatusView(WireView):
    phase: str | None = None
    qos_class: str | None = None


class PodView(WireView):
    metadata: PodMeta | None = None
    spec: PodSpecView | None = None
    status: PodStatusView | None = None


# ----------------------------------------------------------------------------- resources, once per spec
@dataclass(frozen=True, slots=True)
class PodResources:
    requests: dict[str, int]  # effective pod requests (PodRequests)
    limits: dict[str, int]  # effective pod limits (PodLimits)
    nonzero_requests: tuple[int, int]  # (milli-cpu, memory) with kube-scheduler's defaults for missing values
    kube_qos: KubeQoSClass
    part_problem: MalformedObjectError | None = None  # a request or limit past the range rule, held at it (_held)


ResourceSignature = tuple[Any, ...]
# Distinct resource specs held (Pods come from a few templates; a cluster of 15,000 nodes has some thousands): each
# distinct one is computed once; past the limit the table starts over rather than grow with every tenant's spec.
_RESOURCES: dict[ResourceSignature, PodResources | MalformedObjectError] = {}
_RESOURCES_LIMIT: Final = 50_000
# Distinct resource names one pod may request or limit. Kubernetes bounds their number only by the object size
# (1.5 MiB), and each new name is a column of every node in the scheduler's arrays; a real pod names cpu, memory,
# ephemeral-storage, hugepages, Koordinator's batch/mid resources and a few devices: well under this.
MAX_POD_RESOURCE_NAMES: Final = 64


def _items(resources: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    return tuple(resources.items()) if resources else ()


def _containers_signature(containers: list[ContainerResources] | None) -> tuple[Any, ...]:
    if not containers:
        return ()
    out: list[tuple[Any, ...]] = []
    for ctr in containers:
        res = ctr.resources
        if res is None:
            out.append((ctr.restart_policy, (), ()))
        else:
            out.append((ctr.restart_policy, _items(res.requests), _items(res.limits)))
    return tuple(out)


def _signature(spec: PodSpecView, qos_reported: str | None) -> ResourceSignature:
    pod_level = spec.resources
    return (
        _containers_signature(spec.containers),
        _containers_signature(spec.init_containers),
        _items(pod_level.requests) if pod_level else (),
        _items(pod_level.limits) if pod_level else (),
        _items(spec.overhead),
        qos_reported,
    )


def _containers(signatures: tuple[Any, ...], defaulted: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for restart_policy, requests, limits in signatures:
        wanted = dict(requests)
        if defaulted:
            wanted.setdefault(c.RESOURCE_CPU, f"{NONZERO_DEFAULT_MILLI_CPU}m")
            wanted.setdefault(c.RESOURCE_MEMORY, str(NONZERO_DEFAULT_MEMORY))
        out.append({"restartPolicy": restart_policy, "resources": {"requests": wanted, "limits": dict(limits)}})
    return out


def _pod_of(signature: ResourceSignature, defaulted: bool = False) -> dict[str, Any]:
    """The smallest pod object the helpers of `common/api/pod.py` read for this signature."""
    containers, init_containers, pod_requests_, pod_limits_, overhead, qos_reported = signature
    return {
        "spec": {
            "containers": _containers(containers, defaulted),
            "initContainers": _containers(init_containers, defaulted),
            "resources": {"requests": dict(pod_requests_), "limits": dict(pod_limits_)},
            "overhead": dict(overhead),
        },
        "status": {"qosClass": qos_reported},
    }


def _compute_resources(signature: ResourceSignature) -> PodResources | MalformedObjectError:
    pod = _pod_of(signature)
    names = _resource_names(signature)
    if len(names) > MAX_POD_RESOURCE_NAMES:
        return MalformedObjectError(
            f"{len(names)} distinct resource names, at most {MAX_POD_RESOURCE_NAMES} (each is a column of every node)",
            kind=KIND,
            field="spec.containers[*].resources",
            reason=MalformedReason.OUT_OF_RANGE,
        )
    try:
        requests, requests_problem = _held(pod_requests(pod), "requests")
        limits, limits_problem = _held(pod_limits(pod), "limits")
        defaults, _ = _held(pod_requests(_pod_of(signature, defaulted=True)), "requests")
        kube_qos = kube_qos_class(pod)
    except QuantityError as exc:
        return MalformedObjectError(str(exc), kind=KIND, reason=quantity_reason(exc))
    for resource, amount in requests.items():
        if amount < 0:
            return MalformedObjectError(
                "must not be negative",
                kind=KIND,
                field=f"spec.containers[*].resources.requests.{resource}",
                reason=MalformedReason.NEGATIVE_QUANTITY,
            )
    nonzero = (defaults.get(c.RESOURCE_CPU, 0), defaults.get(c.RESOURCE_MEMORY, 0))
    part_problem = requests_problem or limits_problem
    return PodResources(requests, limits, nonzero, kube_qos, part_problem)


def _held(amounts: Mapping[str, Quantity], side: str) -> tuple[dict[str, int], MalformedObjectError | None]:
    """The pod's requests or limits in the vector unit; one past the range rule (`cpu: 1e16`, `memory: 8Ei`) is
    held at the rule (2^53, more than any node has) and reported, while the rest of the pod stays in force
    (issue 29). A request held there makes the pod's node full for that resource (a bound pod) or the pod fit no
    node (a pending one): the safe direction, where dropping the pod whole made its usage vanish from its node.
    A limit held there is no limit any node could reach. A quantity that does not parse raises QuantityError."""
    held: dict[str, int] = {}
    problem: MalformedObjectError | None = None
    for name, q in amounts.items():
        try:
            held[name] = scalar(name, q)
        except QuantityRangeError as exc:
            held[name] = MAX_CONSUMER_UNITS
            consequence = "its node is full of it" if side == "requests" else "no node reaches it"
            problem = problem or MalformedObjectError(
                f"{exc}; held at {MAX_CONSUMER_UNITS}: {consequence}, the rest of the pod counts",
                kind=KIND,
                field=f"spec.containers[*].resources.{side}.{name}",
                reason=MalformedReason.OUT_OF_RANGE,
            )
    return held, problem


def _resource_names(signature: ResourceSignature) -> set[str]:
    containers, init_containers, pod_requests_, pod_limits_, overhead, _ = signature
    names = {name for part in (pod_requests_, pod_limits_, overhead) for name, _ in part}
    for _, requests, limits in (*containers, *init_containers):
        names.update(name for name, _ in requests)
        names.update(name for name, _ in limits)
    return names


def pod_resources(spec: PodSpecView, qos_reported: str | None) -> PodResources | MalformedObjectError:
    signature = _signature(spec, qos_reported)
    found = _RESOURCES.get(signature)
    if found is None:
        if len(_RESOURCES) >= _RESOURCES_LIMIT:
            _RESOURCES.clear()
        found = _RESOURCES[signature] = _compute_resources(signature)
    return found


# Koordinator's classes depend on two labels, the priority, the class name and the Kubernetes QoS class: a few
# combinations in a cluster, looked up rather than derived for each pod.
_CLASSES: dict[tuple[Any, ...], tuple[KoordQoSClass, PriorityClass]] = {}


def _classes(
    labels: Mapping[str, str], priority: int | None, class_name: str | None, kube_qos: KubeQoSClass
) -> tuple[KoordQoSClass, PriorityClass]:
    key = (labels.get(c.LABEL_QOS_CLASS), labels.get(c.LABEL_PRIORITY_CLASS), priority, class_name, kube_qos)
    found = _CLASSES.get(key)
    if found is None:
        if len(_CLASSES) >= _RESOURCES_LIMIT:
            _CLASSES.clear()
        koord_qos = qos_class_from(labels, kube_qos)
        raw_class = priority_class_from(labels, priority, class_name)
        found = _CLASSES[key] = (koord_qos, defaulted_priority_class(raw_class, koord_qos))
    return found


# ----------------------------------------------------------------------------- bound CPUs
def _bound_cpus(annotations: Mapping[str, str]) -> tuple[tuple[int, ...], MalformedObjectError | None]:
    """The CPUs Koordinator's scheduler bound the pod to (`resource-status` {"cpuset": "0-3"}).

    An unusable annotation (not JSON, a cpu list that does not parse or names a CPU past MAX_CPU_ID) binds
    no CPU, as an absent one does in Koordinator (apis/extension/resource.go GetResourceStatus), and is the
    pod's part problem. Its size is bounded by Kubernetes (all annotations ≤ 256 KiB, TotalAnnotationSizeLimitB)."""
    text = annotations.get(c.ANNOTATION_RESOURCE_STATUS)
    if not text:
        return (), None
    try:
        doc = json.loads(text)
        listed = doc.get("cpuset") if isinstance(doc, dict) else None
        if listed is not None and not isinstance(listed, str):
            raise ValueError("cpuset must be a cpu list string")
        return tuple(parse_cpu_list(listed or "")), None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and CpuListError are ValueErrors
        where = f"metadata.annotations[{c.ANNOTATION_RESOURCE_STATUS}]"
        return (), MalformedObjectError(
            f"{str(exc)[:200]}; no CPU bound", kind=KIND, field=where, reason=MalformedReason.INVALID_VALUE
        )


# ----------------------------------------------------------------------------- the digest
_NO_RESOURCES: Final = PodResources({}, {}, (0, 0), KubeQoSClass.BEST_EFFORT)


@dataclass(slots=True)
class PodDigest:
    namespace: str  # as written: "" when absent (the API server always sets it; a pod in a request may not)
    name: str
    uid: str = ""
    resource_version: str = ""
    node_name: str = ""
    phase: str = ""
    deleting: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    creation_timestamp: float | None = None
    priority: int | None = None  # spec.priority
    priority_class_name: str = ""
    controller: OwnerRef | None = None  # the owner reference with controller: true (metav1.GetControllerOf)
    owners: tuple[OwnerRef, ...] = ()
    resources: PodResources = _NO_RESOURCES
    koord_qos: KoordQoSClass = KoordQoSClass.NONE  # label, else from the Kubernetes QoS class
    priority_class: PriorityClass = PriorityClass.NONE  # Koordinator's class, defaulted from the QoS class
    bound_cpus: tuple[int, ...] = ()  # resource-status cpuset: CPUs Koordinator's scheduler bound an LSE/LSR pod to
    problem: MalformedObjectError | None = None  # set: the pod is unusable; only the identity is filled
    # set: one part was unusable and is replaced by its safe value (named in the error); the rest is in force.
    # Components count it like a problem (once per version) and otherwise use the digest.
    part_problem: MalformedObjectError | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def requests(self) -> dict[str, int]:
        return self.resources.requests

    @property
    def limits(self) -> dict[str, int]:
        return self.resources.limits

    @property
    def kube_qos(self) -> KubeQoSClass:
        return self.resources.kube_qos

    @property
    def is_daemonset(self) -> bool:
        return any(ref.kind == "DaemonSet" for ref in self.owners)


def _text(section: Any, name: str) -> str:
    value = section.get(name) if isinstance(section, Mapping) else None
    return value if isinstance(value, str) else ""


def _identity(obj: Mapping[str, Any]) -> PodDigest:
    """What can be read of a pod that does not validate: enough to find, clear and report it."""
    meta, spec, status = obj.get("metadata"), obj.get("spec"), obj.get("status")
    return PodDigest(
        namespace=_text(meta, "namespace"),
        name=_text(meta, "name"),
        uid=_text(meta, "uid"),
        resource_version=_text(meta, "resourceVersion"),
        node_name=_text(spec, "nodeName"),
        phase=_text(status, "phase"),
        deleting=isinstance(meta, Mapping) and meta.get("deletionTimestamp") is not None,
    )


def _malformed(obj: Mapping[str, Any], problem: MalformedObjectError) -> PodDigest:
    digest = _identity(obj)
    if not problem.name and digest.name:
        problem = MalformedObjectError(
            problem.detail, kind=KIND, name=digest.key, field=problem.field, reason=problem.reason
        )
    digest.problem = problem
    return digest


def digest_pod(obj: Mapping[str, Any]) -> PodDigest:
    """The digest of a pod as a watch (or a request) delivers it; never raises on what the cluster holds."""
    if not isinstance(obj, Mapping):
        wrong = MalformedObjectError(
            f"expected an object, got {type(obj).__name__}", kind=KIND, reason=MalformedReason.WRONG_TYPE
        )
        return PodDigest("", "", problem=wrong)
    try:
        view = PodView.model_validate(obj)
    except ValidationError as exc:
        return _malformed(obj, from_validation_error(KIND, "", exc))
    meta, spec, status = view.metadata or PodMeta(), view.spec or PodSpecView(), view.status or PodStatusView()
    if not meta.name:
        missing = MalformedObjectError(
            "required", kind=KIND, field="metadata.name", reason=MalformedReason.MISSING_FIELD
        )
        return _malformed(obj, missing)
    resources = pod_resources(spec, status.qos_class)
    if isinstance(resources, MalformedObjectError):
        return _malformed(obj, resources)
    labels = meta.labels or {}
    annotations = meta.annotations or {}
    owners = tuple(meta.owner_references or ())
    koord_qos, priority_class = _classes(labels, spec.priority, spec.priority_class_name, resources.kube_qos)
    bound_cpus, cpus_problem = _bound_cpus(annotations)
    part_problem = resources.part_problem or cpus_problem
    if part_problem is not None:
        part_problem = MalformedObjectError(
            part_problem.detail,
            kind=KIND,
            name=f"{meta.namespace or ''}/{meta.name}",
            field=part_problem.field,
            reason=part_problem.reason,
        )
    return PodDigest(
        namespace=meta.namespace or "",
        name=meta.name,
        uid=meta.uid or "",
        resource_version=meta.resource_version or "",
        node_name=spec.node_name or "",
        phase=status.phase or "",
        deleting=meta.deletion_timestamp is not None,
        labels=labels,
        annotations=annotations,
        creation_timestamp=meta.creation_timestamp.timestamp() if meta.creation_timestamp else None,
        priority=spec.priority,
        priority_class_name=spec.priority_class_name or "",
        controller=next((ref for ref in owners if ref.controller is True), None),
        owners=owners,
        resources=resources,
        koord_qos=koord_qos,
        priority_class=priority_class,
        bound_cpus=bound_cpus,
        part_problem=part_problem,
    )
