"""Pod helpers over Kubernetes JSON (plain dicts, as watches deliver them).

Priority and QoS classes follow Koordinator (apis/extension/priority.go, qos.go);
requests and limits follow kube-scheduler (component-helpers resource.PodRequests):
app containers summed, init containers as a running maximum with restartable
(sidecar) init containers added, pod-level resources when set, then overhead.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any, Final

from common.api import constants as c
from common.api.quantity import Quantity, consumer_units


class PriorityClass(enum.StrEnum):
    PROD = "koord-prod"
    MID = "koord-mid"
    BATCH = "koord-batch"
    FREE = "koord-free"
    NONE = ""


# Koordinator's value ranges (inclusive); the chart's PriorityClass objects use the lower bound.
PRIORITY_RANGES: Final = {
    PriorityClass.PROD: (9000, 9999),
    PriorityClass.MID: (7000, 7999),
    PriorityClass.BATCH: (5000, 5999),
    PriorityClass.FREE: (3000, 3999),
}


class KoordQoSClass(enum.StrEnum):
    """Koordinator's QoS class (apis/extension/qos.go): label `koordinator.sh/qosClass`, else from KubeQoSClass."""

    LSE = "LSE"
    LSR = "LSR"
    LS = "LS"
    BE = "BE"
    SYSTEM = "SYSTEM"
    NONE = ""


class KubeQoSClass(enum.StrEnum):
    """Kubernetes' QoS class (status.qosClass, as kubelet computes it); it picks the pod's cgroup tier."""

    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


def _meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def _spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("spec") or {}


def priority_class_of_value(priority: int | None) -> PriorityClass:
    if priority is None:
        return PriorityClass.NONE
    for cls, (low, high) in PRIORITY_RANGES.items():
        if low <= priority <= high:
            return cls
    return PriorityClass.NONE


def priority_class_from(
    labels: Mapping[str, str], priority: int | None, class_name: str | None = None
) -> PriorityClass:
    """Label `koordinator.sh/priority-class`, else the range of `priority`, else `class_name`.

    As in Koordinator (GetPodPriorityClassRaw), the label's presence decides: a label with an
    unknown value means no class (the caller's QoS default then applies), not a fall-back to
    spec.priority. The scheduler, the descheduler and the manager all classify through here, so
    koordlet-reported podsMetric priorities, prod checks and eviction order agree.
    """
    if c.LABEL_PRIORITY_CLASS in labels:
        label = labels[c.LABEL_PRIORITY_CLASS]
        return PriorityClass(label) if label in PRIORITY_RANGES else PriorityClass.NONE
    by_value = priority_class_of_value(priority)
    if by_value is not PriorityClass.NONE:
        return by_value
    # Without the Priority admission plugin spec.priority may be empty; the class name still says it.
    return PriorityClass(class_name) if class_name in PRIORITY_RANGES else PriorityClass.NONE


def priority_class_raw(pod: Mapping[str, Any]) -> PriorityClass:
    """Koordinator's GetPodPriorityClassRaw over a pod object (see priority_class_from)."""
    spec = _spec(pod)
    return priority_class_from(_meta(pod).get("labels") or {}, spec.get("priority"), spec.get("priorityClassName"))


def defaulted_priority_class(raw: PriorityClass, qos: KoordQoSClass) -> PriorityClass:
    """Koordinator's GetPodPriorityClassWithDefault: an unclassified pod is prod unless its QoS is BE."""
    if raw is not PriorityClass.NONE:
        return raw
    if qos in (KoordQoSClass.SYSTEM, KoordQoSClass.LSE, KoordQoSClass.LSR, KoordQoSClass.LS):
        return PriorityClass.PROD
    if qos is KoordQoSClass.BE:
        return PriorityClass.BATCH
    return PriorityClass.NONE


def priority_class_of(pod: Mapping[str, Any]) -> PriorityClass:
    """The defaulted class Koordinator reports in NodeMetric `podsMetric[].priority`."""
    raw = priority_class_raw(pod)
    return raw if raw is not PriorityClass.NONE else defaulted_priority_class(raw, qos_class_of(pod))


def is_prod(labels: Mapping[str, str], priority: int | None, kube_qos: str) -> bool:
    """``defaulted_priority_class(...) is PROD`` without building the classes: the descheduler asks
    it for every pod of every node each round when prod thresholds are set."""
    label = labels.get(c.LABEL_PRIORITY_CLASS) if labels else None
    if label is None:
        by_value = priority_class_of_value(priority)
        if by_value is not PriorityClass.NONE:
            return by_value is PriorityClass.PROD
    elif label in PRIORITY_RANGES:
        return label == PriorityClass.PROD
    qos = koord_qos_label(labels) if labels else KoordQoSClass.NONE
    if qos is not KoordQoSClass.NONE:
        return qos is not KoordQoSClass.BE
    return kube_qos in (KubeQoSClass.GUARANTEED, KubeQoSClass.BURSTABLE)


def kube_qos_class(pod: Mapping[str, Any]) -> KubeQoSClass:
    """status.qosClass when the API server set it, else computed the way kubelet does."""
    reported = (pod.get("status") or {}).get("qosClass")
    if isinstance(reported, str) and reported in KubeQoSClass.__members__.values():
        return KubeQoSClass(reported)
    spec = _spec(pod)
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    any_set = False
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        for name in (c.RESOURCE_CPU, c.RESOURCE_MEMORY):
            request = requests.get(name, limits.get(name))  # kubelet defaults requests to limits
            limit = limits.get(name)
            if _nonzero(request) or _nonzero(limit):
                any_set = True
            if limit is None or request is None or Quantity.parse(request) != Quantity.parse(limit):
                guaranteed = False
    if not any_set:
        return KubeQoSClass.BEST_EFFORT
    return KubeQoSClass.GUARANTEED if guaranteed else KubeQoSClass.BURSTABLE


def _nonzero(value: Any) -> bool:
    return value is not None and not Quantity.parse(value).is_zero()


_KOORD_QOS_CLASSES: Final = frozenset(KoordQoSClass) - {KoordQoSClass.NONE}
_QOS_OF_KUBE_QOS: Final[Mapping[str, KoordQoSClass]] = {
    KubeQoSClass.GUARANTEED: KoordQoSClass.LSR,
    KubeQoSClass.BURSTABLE: KoordQoSClass.LS,
    KubeQoSClass.BEST_EFFORT: KoordQoSClass.BE,
}


def koord_qos_label(labels: Mapping[str, str]) -> KoordQoSClass:
    """The `koordinator.sh/qosClass` label, NONE when absent or not a Koordinator QoS class."""
    label = labels.get(c.LABEL_QOS_CLASS)
    return KoordQoSClass(label) if label in _KOORD_QOS_CLASSES else KoordQoSClass.NONE


def qos_class_from(labels: Mapping[str, str], kube_qos: str) -> KoordQoSClass:
    """Label `koordinator.sh/qosClass`, else Guaranteed→LSR, Burstable→LS, anything else→BE."""
    label = koord_qos_label(labels)
    if label is not KoordQoSClass.NONE:
        return label
    return _QOS_OF_KUBE_QOS.get(kube_qos, KoordQoSClass.BE)


def qos_class_of(pod: Mapping[str, Any]) -> KoordQoSClass:
    """qos_class_from over a pod object; the kubelet QoS is only computed when no label says."""
    label = koord_qos_label(_meta(pod).get("labels") or {})
    return label if label is not KoordQoSClass.NONE else _QOS_OF_KUBE_QOS[kube_qos_class(pod)]


ResourceTotals = dict[str, Quantity]


def _add(into: ResourceTotals, resources: Mapping[str, Any], field: str) -> None:
    for name, raw in resources.items():
        q = Quantity.parse(raw, field=f"{field}.{name}")
        into[name] = into[name] + q if name in into else q


def _max_into(into: ResourceTotals, other: ResourceTotals) -> None:
    for name, q in other.items():
        if name not in into or q > into[name]:
            into[name] = q


def _aggregate(pod: Mapping[str, Any], kind: str) -> ResourceTotals:
    spec = _spec(pod)
    totals: ResourceTotals = {}
    for i, container in enumerate(spec.get("containers") or []):
        _add(totals, (container.get("resources") or {}).get(kind) or {}, f"spec.containers[{i}].resources.{kind}")
    sidecars: ResourceTotals = {}
    init_peak: ResourceTotals = {}
    for i, container in enumerate(spec.get("initContainers") or []):
        own: ResourceTotals = {}
        _add(own, (container.get("resources") or {}).get(kind) or {}, f"spec.initContainers[{i}].resources.{kind}")
        if container.get("restartPolicy") == "Always":
            # A sidecar keeps running next to the app containers and later init containers.
            for name, q in own.items():
                totals[name] = totals[name] + q if name in totals else q
            for name, q in own.items():
                sidecars[name] = sidecars[name] + q if name in sidecars else q
            step = dict(sidecars)
        else:
            step = dict(own)
            for name, q in sidecars.items():
                step[name] = step[name] + q if name in step else q
        _max_into(init_peak, step)
    _max_into(totals, init_peak)

    pod_level = (spec.get("resources") or {}).get(kind) or {}
    for name, raw in pod_level.items():  # PodLevelResources: the pod-level value wins for that resource
        totals[name] = Quantity.parse(raw, field=f"spec.resources.{kind}.{name}")

    overhead = spec.get("overhead") or {}
    if kind == "requests" or totals:
        for name, raw in overhead.items():
            if kind == "limits" and name not in totals:
                continue  # overhead only raises a limit that exists
            q = Quantity.parse(raw, field=f"spec.overhead.{name}")
            totals[name] = totals[name] + q if name in totals else q
    return totals


def pod_requests(pod: Mapping[str, Any]) -> ResourceTotals:
    """Effective pod requests as kube-scheduler computes them."""
    return _aggregate(pod, "requests")


def pod_limits(pod: Mapping[str, Any]) -> ResourceTotals:
    """Effective pod limits (containers summed, init containers as maximum, overhead added where a limit exists)."""
    return _aggregate(pod, "limits")


def scalar(name: str, q: Quantity) -> int:
    """Koordinator's vector unit: `cpu` in milli-cores, everything else (incl. batch-cpu) by value.

    Raises QuantityError when the value is beyond what the consumers can hold (see consumer_units)."""
    return consumer_units(name, q)


def scalars(resources: ResourceTotals, names: Iterable[str] | None = None) -> dict[str, int]:
    wanted = resources.keys() if names is None else names
    return {name: scalar(name, resources[name]) if name in resources else 0 for name in wanted}


def is_daemonset_pod(pod: Mapping[str, Any]) -> bool:
    return any(ref.get("kind") == "DaemonSet" for ref in _meta(pod).get("ownerReferences") or [])
