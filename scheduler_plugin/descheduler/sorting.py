"""Eviction order of the removable pods of one hot node.

Keys, first decides (Koordinator's pod sorter): koord priority class (free < batch < mid < prod <
none), spec.priority ascending, k8s QoS (BestEffort < Burstable < Guaranteed), koord QoS (BE < LS <
LSR < LSE = SYSTEM < none), pod-deletion-cost ascending, eviction-cost ascending, usage-fit score
descending, newest first; namespace/name last so a round is deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from common.api.constants import ANNOTATION_EVICTION_COST, ANNOTATION_POD_DELETION_COST
from common.api.pod import KoordQoSClass, KubeQoSClass, PriorityClass, koord_qos_label, priority_class_from
from scheduler_plugin.descheduler.model import PodSnapshot
from scheduler_plugin.descheduler.usage import FloatArray, IntArray

# Lower rank = evicted earlier (Koordinator's pod sorter).
PRIORITY_CLASS_RANK = {
    PriorityClass.FREE: 1,
    PriorityClass.BATCH: 2,
    PriorityClass.MID: 3,
    PriorityClass.PROD: 4,
    PriorityClass.NONE: 5,
}
K8S_QOS_RANK: dict[str, int] = {KubeQoSClass.BEST_EFFORT: 1, KubeQoSClass.BURSTABLE: 2, KubeQoSClass.GUARANTEED: 3}
KOORD_QOS_RANK = {
    KoordQoSClass.BE: 1,
    KoordQoSClass.LS: 2,
    KoordQoSClass.LSR: 3,
    KoordQoSClass.LSE: 4,
    KoordQoSClass.SYSTEM: 4,
    KoordQoSClass.NONE: 5,
}

# Score of a pod without a metric entry: after every measured pod of the same class.
NO_METRIC_SCORE = -1.0


def usage_fit_scores(pod_usage: FloatArray, excess: FloatArray, weights: FloatArray) -> FloatArray:
    """How well each pod's usage matches what its node must shed (Koordinator PR #2092).

    ``pod_usage`` (P, R), NaN rows for pods without metrics; ``excess`` (R,) for one node or
    (P, R) per pod = node usage − node high threshold; only resources with excess > 0 count.
    Per resource ratio = pod/excess; score = ratio below 1 (the pod removes part of the excess),
    else 1 + 1/ratio (peak 2 when the pod removes exactly the excess, falling as it overshoots).
    Result: weighted mean over the over-threshold resources.
    """
    if pod_usage.shape[0] == 0:
        return np.zeros(0, dtype=np.float64)
    over = np.broadcast_to(excess > 0, pod_usage.shape)
    w = np.where(over, weights, 0.0)
    total_w = w.sum(axis=1)
    safe_excess = np.where(over, excess, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = pod_usage / safe_excess
        per_resource = np.where(ratio < 1.0, ratio, 1.0 + 1.0 / ratio)
        scores = np.where(total_w > 0, (np.where(over, per_resource, 0.0) * w).sum(axis=1) / total_w, 0.0)
    missing = np.isnan(pod_usage).any(axis=1)
    return np.asarray(np.where(missing, NO_METRIC_SCORE, scores), dtype=np.float64)


def eviction_order(pods: Sequence[PodSnapshot], fit_scores: FloatArray, group: IntArray | None = None) -> IntArray:
    """Indices into ``pods`` in eviction order; with ``group`` (the source node's position in the
    drain order, per pod) all nodes are sorted in one call, group first."""
    n = len(pods)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    class_rank = np.fromiter(
        (PRIORITY_CLASS_RANK[priority_class_from(p.labels, p.priority)] for p in pods), np.int64, n
    )
    priority = np.fromiter((p.priority or 0 for p in pods), np.int64, n)
    k8s_qos = np.fromiter((K8S_QOS_RANK.get(p.k8s_qos, 0) for p in pods), np.int64, n)
    koord_qos = np.fromiter((KOORD_QOS_RANK[koord_qos_label(p.labels)] for p in pods), np.int64, n)
    del_cost = np.fromiter((int_annotation(p, ANNOTATION_POD_DELETION_COST) for p in pods), np.int64, n)
    evict_cost = np.fromiter((int_annotation(p, ANNOTATION_EVICTION_COST) for p in pods), np.int64, n)
    # A pod without creationTimestamp counts as the oldest (Go's zero time), so it goes last.
    created = np.fromiter(
        (p.creation_timestamp if p.creation_timestamp is not None else -np.inf for p in pods), np.float64, n
    )
    names = np.array([f"{p.namespace}/{p.name}" for p in pods])
    name_rank = np.argsort(np.argsort(names, kind="stable"), kind="stable")
    keys = [name_rank, -created, -fit_scores, evict_cost, del_cost, koord_qos, k8s_qos, priority, class_rank]
    if group is not None:
        keys.append(group)
    # np.lexsort sorts by the LAST key first.
    return np.asarray(np.lexsort(keys), dtype=np.int64)


_INT32 = range(-(2**31), 2**31)
_INT32_CHARACTERS = 12  # "-" and up to 11 digits: enough for every int32 (with leading zeros after a minus)
_GO_INT = re.compile(r"-[0-9]+|0|[1-9][0-9]*", re.ASCII)  # Go's: no '+', no leading zero but "0", no space


def int_annotation(pod: PodSnapshot, key: str) -> int:
    """A cost annotation's value, an int32 as Kubernetes reads pod-deletion-cost and Koordinator eviction-cost
    (`GetDeletionCostFromPodAnnotations`, pkg/apis/core/helper/helpers.go): 0 when absent, garbage or past int32,
    which must not make the pod unsortable (a value past int64 did make the round's int64 array raise)."""
    raw = pod.annotations.get(key)
    if raw is None:
        return 0
    if len(raw) > _INT32_CHARACTERS or not _GO_INT.fullmatch(raw):
        return 0
    value = int(raw)
    return value if value in _INT32 else 0
