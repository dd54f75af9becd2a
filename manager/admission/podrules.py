"""The pod validating webhook's rules: Koordinator's (pkg/webhook/pod/validating/cluster_colocation_profile.go).

On every pod create and update:
- batch resources (kubernetes.io/batch-cpu, batch-memory) only with label koordinator.sh/qosClass=BE;
- BE never with no or a prod priority class; LSR only with a prod one;
- LSR and LSE pods request whole CPUs (they get exclusive cores).
On update, the QoS class, the priority class and label koordinator.sh/priority may not change.

A refusal answers every broken rule in the API server's words (field errors, several as `[e1, e2]`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.api import constants as c
from common.api.colocation import combination_error
from common.api.pod import KoordQoSClass, PriorityClass, koord_qos_label, pod_requests, priority_class_from
from common.api.validation import FieldError, forbidden, invalid, required


def _labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels if isinstance(labels, Mapping) else {}


def _raw_qos(pod: Mapping[str, Any]) -> KoordQoSClass:
    """GetPodQoSClassRaw: the label, NONE when absent or not a Koordinator class."""
    return koord_qos_label(_labels(pod))


def _raw_priority(pod: Mapping[str, Any]) -> PriorityClass:
    """GetPodPriorityClassRaw: label koordinator.sh/priority-class, else spec.priority's range."""
    priority = (pod.get("spec") or {}).get("priority")
    return priority_class_from(_labels(pod), priority if isinstance(priority, int) else None)


def _immutable(path: str, new: str, old: str) -> list[FieldError]:
    return [] if new == old else [invalid(path, new, "field is immutable")]


def pod_errors(pod: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> list[FieldError]:
    """Every rule `pod` breaks (`old`: the pod before an update). Raises QuantityError for a quantity that does not
    parse (the API server refuses that pod itself)."""
    errors: list[FieldError] = []
    qos, priority = _raw_qos(pod), _raw_priority(pod)
    if old is not None:
        errors += _immutable(f"labels.{c.LABEL_QOS_CLASS}", qos.value, _raw_qos(old).value)
        errors += _immutable("spec.priority", priority.value, _raw_priority(old).value)
        errors += _immutable(f"labels.{c.LABEL_SUB_PRIORITY}", _labels(pod).get(c.LABEL_SUB_PRIORITY, ""),
                             _labels(old).get(c.LABEL_SUB_PRIORITY, ""))  # fmt: skip
    requests = pod_requests(pod)
    batch = any(not requests[name].is_zero() for name in (c.BATCH_CPU, c.BATCH_MEMORY) if name in requests)
    if batch and qos is not KoordQoSClass.BE:
        errors.append(required(f"labels.{c.LABEL_QOS_CLASS}",
                               "must specify koordinator QoS BE with koordinator colocation resources"))  # fmt: skip
    if qos in (KoordQoSClass.BE, KoordQoSClass.LSR) and (problem := combination_error(qos, priority)):
        errors.append(forbidden("Pod", problem))
    if qos in (KoordQoSClass.LSR, KoordQoSClass.LSE):
        cpu = requests.get(c.RESOURCE_CPU)
        if cpu is None or cpu.is_zero():
            errors.append(required("pod.spec.containers[*].resources.requests", "LSR Pod must declare the requested "
                                                                                "CPUs"))  # fmt: skip
        elif cpu.milli_value() % 1000:
            errors.append(invalid("pod.spec.containers[*].resources.requests", cpu.canonical(),
                                  "the requested CPUs of LSR Pod must be integer"))  # fmt: skip
    return errors

