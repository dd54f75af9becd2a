"""Koordinator priority classes and QoS classes of a pod, and their eviction ranks.

Lower rank = evicted earlier. Ranks follow Koordinator's pod sorter: koord-free < koord-batch <
koord-mid < koord-prod < none; BestEffort < Burstable < Guaranteed; BE < LS < LSR < LSE = SYSTEM < none.
"""

from __future__ import annotations

from common.api.constants import (
    ANNOTATION_EVICTION_COST,
    ANNOTATION_POD_DELETION_COST,
    LABEL_PRIORITY_CLASS,
    LABEL_QOS_CLASS,
)
from scheduler_plugin.descheduler.model import PodSnapshot

PRIORITY_PROD = "koord-prod"
PRIORITY_MID = "koord-mid"
PRIORITY_BATCH = "koord-batch"
PRIORITY_FREE = "koord-free"
PRIORITY_NONE = ""

# (class, lowest value, highest value) of spec.priority.
_PRIORITY_RANGES = (
    (PRIORITY_PROD, 9000, 9999),
    (PRIORITY_MID, 7000, 7999),
    (PRIORITY_BATCH, 5000, 5999),
    (PRIORITY_FREE, 3000, 3999),
)
_KNOWN_PRIORITY_CLASSES = frozenset(c for c, _, _ in _PRIORITY_RANGES)

PRIORITY_CLASS_RANK = {PRIORITY_FREE: 1, PRIORITY_BATCH: 2, PRIORITY_MID: 3, PRIORITY_PROD: 4, PRIORITY_NONE: 5}
K8S_QOS_RANK = {"BestEffort": 1, "Burstable": 2, "Guaranteed": 3}
KOORD_QOS_RANK = {"BE": 1, "LS": 2, "LSR": 3, "LSE": 4, "SYSTEM": 4, "": 5}
_KOORD_QOS_CLASSES = frozenset(KOORD_QOS_RANK) - {""}

# Pods at or above this priority are system-critical (system-cluster-critical is 2000000000).
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
# Koordinator never migrates a pod whose eviction cost is MaxInt32.
EVICTION_COST_NEVER = 2**31 - 1


def priority_class(pod: PodSnapshot) -> str:
    """Koordinator's GetPodPriorityClassRaw: the label if present (an unknown value: none), else by
    spec.priority range, else none."""
    if LABEL_PRIORITY_CLASS in pod.labels:
        label = pod.labels[LABEL_PRIORITY_CLASS]
        return label if label in _KNOWN_PRIORITY_CLASSES else PRIORITY_NONE
    if pod.priority is not None:
        for name, low, high in _PRIORITY_RANGES:
            if low <= pod.priority <= high:
                return name
    return PRIORITY_NONE


def koord_qos_class(pod: PodSnapshot) -> str:
    """The koordinator.sh/qosClass label, or none."""
    label = pod.labels.get(LABEL_QOS_CLASS, "")
    return label if label in _KOORD_QOS_CLASSES else ""


def priority_class_with_default(pod: PodSnapshot) -> str:
    """GetPodPriorityClassWithDefault: an unclassified pod is prod unless its QoS is BE (then batch)."""
    cls = priority_class(pod)
    if cls:
        return cls
    qos = koord_qos_class(pod)
    if not qos:
        qos = {"Guaranteed": "LSR", "Burstable": "LS"}.get(pod.k8s_qos, "BE")
    return PRIORITY_BATCH if qos == "BE" else PRIORITY_PROD


def is_prod(pod: PodSnapshot) -> bool:
    """``priority_class_with_default(pod) == koord-prod``, unrolled: it runs for every pod of
    every node each round when prod thresholds are set."""
    labels = pod.labels
    label = labels.get(LABEL_PRIORITY_CLASS) if labels else None
    if label in _KNOWN_PRIORITY_CLASSES:
        return label == PRIORITY_PROD
    p = None if label is not None else pod.priority  # an unknown label value: no class, straight to QoS
    if p is not None and 3000 <= p <= 9999:
        if p >= 9000:
            return True
        if p <= 3999 or 5000 <= p <= 5999 or 7000 <= p <= 7999:
            return False  # free, batch or mid
    qos = labels.get(LABEL_QOS_CLASS, "") if labels else ""
    if qos in _KOORD_QOS_CLASSES:
        return qos != "BE"
    return pod.k8s_qos in ("Guaranteed", "Burstable")


def _int_annotation(pod: PodSnapshot, key: str) -> int:
    raw = pod.annotations.get(key)
    if raw is None:
        return 0
    try:
        return int(raw.strip())
    except ValueError:
        return 0  # a garbage annotation must not make the pod unsortable


def deletion_cost(pod: PodSnapshot) -> int:
    return _int_annotation(pod, ANNOTATION_POD_DELETION_COST)


def eviction_cost(pod: PodSnapshot) -> int:
    return _int_annotation(pod, ANNOTATION_EVICTION_COST)
