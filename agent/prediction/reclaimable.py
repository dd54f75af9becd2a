"""What of the Prod pods' requests the node can lend out (`prodReclaimableMetric`), as pure functions.

koordlet's `ProdReclaimablePredictor` (`pkg/koordlet/prediction/peak_predictor.go`) is the minimum of two views:

- per pod (`pod_view`): each Prod pod (priority class koord-prod or none) older than the cold start lends
  `request - peak`, peak = p95(CPU) and p98(memory) of its own model x (1 + safetyMargin/100); only positive
  amounts count. Result: min(Σ lent, allocatable - Σ peaks), never below 0.
- per priority (`priority_view`): the Prod pods' summed requests minus the peak of the node's Prod tier, peak =
  (p95/p98 of the `sys` model + of each Prod class's summed usage) x (1 + margin). Result:
  min(max(requests - peak, 0), max(allocatable - peak, 0)).

The node's allocatable is the `node.koordinator.sh/raw-allocatable` annotation when set, else its
`status.allocatable`. A pod that the per-pod view cannot predict (no model) is left out of both views (koordlet's
minPredictor stops at the first view that fails for a pod); a pod being deleted or finished lends nothing and asks
for nothing. Loadline adds one rule (`min_history_seconds`): a pod whose model is younger than that lends nothing
yet, so an agent that lost its checkpoint does not lend from its first minute of samples (koordlet does; 0 gives
koordlet's behaviour).

The per-priority peak is also published as `prodPeakMetric` (the newer field of Koordinator's NodeMetric): what
the Prod tier and the system are predicted to use at most, the input of the manager's `prediction` batch policy.
Units: CPU in milli-cores (`int64(cores * 1000)`, truncated, as koordlet's milli-quantities), memory in bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from agent.prediction.models import PRIORITY_ITEMS, SYSTEM_ITEM, Prediction, node_item_uid

PROD_CLASSES: Final = frozenset({"koord-prod", ""})  # Koordinator's isPriorityClassReclaimableForProd
CPU_PERCENTILE: Final = "p95"
MEMORY_PERCENTILE: Final = "p98"


@dataclass(frozen=True, slots=True)
class Resources:
    """CPU in milli-cores, memory in bytes."""

    cpu_milli: int = 0
    memory_bytes: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu_milli + other.cpu_milli, self.memory_bytes + other.memory_bytes)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu_milli - other.cpu_milli, self.memory_bytes - other.memory_bytes)

    def min(self, other: Resources) -> Resources:
        return Resources(min(self.cpu_milli, other.cpu_milli), min(self.memory_bytes, other.memory_bytes))

    def at_least_zero(self) -> Resources:
        return Resources(max(self.cpu_milli, 0), max(self.memory_bytes, 0))

    def scaled(self, ratio: float) -> Resources:
        """koordlet's MultiplyMilliQuant / MultiplyQuant: `int64(float64(v) * ratio)`."""
        return Resources(int(float(self.cpu_milli) * ratio), int(float(self.memory_bytes) * ratio))


@dataclass(frozen=True, slots=True)
class PredictedPod:
    """What the reclaimable calculation reads of a pod on the node."""

    uid: str
    priority: str  # Koordinator's defaulted priority class ("" for none)
    request: Resources
    created_at: float | None = None  # epoch seconds; None: unknown (counted as old)
    terminating: bool = False  # deletionTimestamp set, or phase Succeeded / Failed
    key: str = ""  # namespace/name, for logs


@dataclass(frozen=True, slots=True)
class ReclaimPolicy:
    cold_start_seconds: float = 24 * 3600.0
    safety_margin_percent: int = 10
    min_history_seconds: float = 0.0

    @property
    def margin_ratio(self) -> float:
        return float(100 + self.safety_margin_percent) / 100


@dataclass(frozen=True, slots=True)
class ReclaimResult:
    """`reclaimable` is None when the node-level models are missing (nothing trained yet): publish it empty."""

    reclaimable: Resources | None
    peak: Resources | None
    by_pods: Resources | None = None
    by_priority: Resources | None = None
    skipped: tuple[str, ...] = ()  # pods left out, "namespace/name: why"


def peak_of(prediction: Prediction) -> Resources:
    """p95 CPU and p98 memory of a prediction, in milli-cores and bytes (koordlet's quantities, truncated)."""
    return Resources(int(prediction.cpu[CPU_PERCENTILE] * 1000.0), int(prediction.memory[MEMORY_PERCENTILE]))


def _is_warm(pod: PredictedPod, now: float, policy: ReclaimPolicy, model_since: float | None) -> bool:
    if pod.created_at is not None and now - pod.created_at <= policy.cold_start_seconds:
        return False
    return not (
        policy.min_history_seconds > 0 and (model_since is None or now - model_since < policy.min_history_seconds)
    )


def prod_reclaimable(
    pods: Iterable[PredictedPod],
    predictions: Mapping[str, Prediction],
    allocatable: Resources | None,
    policy: ReclaimPolicy,
    *,
    now: float,
    model_since: Mapping[str, float] | None = None,
) -> ReclaimResult:
    """Both views and their minimum (koordlet's minPredictor over podReclaimable and priorityReclaimable)."""
    if allocatable is None:
        return ReclaimResult(None, None, skipped=("node: allocatable unknown",))
    since = model_since or {}
    ratio = policy.margin_ratio
    seen: set[str] = set()
    skipped: list[str] = []
    lent = Resources()
    held = Resources()  # Σ peaks of the warm pods
    requested = Resources()  # the priority view's Σ requests
    for pod in pods:
        if pod.priority not in PROD_CLASSES:
            continue
        if pod.uid in seen:
            skipped.append(f"{pod.key or pod.uid}: listed twice")
            continue
        seen.add(pod.uid)
        if _is_warm(pod, now, policy, since.get(pod.uid)) and not pod.terminating:
            prediction = predictions.get(pod.uid)
            if prediction is None:
                skipped.append(f"{pod.key or pod.uid}: no model")
                continue  # neither view counts it
            peak = peak_of(prediction).scaled(ratio)
            held += peak
            gives = pod.request - peak
            lent += gives.at_least_zero()
        if not pod.terminating:
            requested += pod.request
    by_pods = (allocatable - held).at_least_zero().min(lent)

    node_items = [node_item_uid(SYSTEM_ITEM), *(node_item_uid(c) for c in PRIORITY_ITEMS if c in PROD_CLASSES)]
    missing = [uid for uid in node_items if uid not in predictions]
    if missing:
        return ReclaimResult(
            None, None, by_pods=by_pods, skipped=(*skipped, f"node: no model for {', '.join(missing)}")
        )
    tier_peak = Resources()
    for uid in node_items:
        tier_peak += peak_of(predictions[uid])
    tier_peak = tier_peak.scaled(ratio)
    by_priority = (requested - tier_peak).at_least_zero().min((allocatable - tier_peak).at_least_zero())
    return ReclaimResult(by_pods.min(by_priority), tier_peak, by_pods, by_priority, tuple(skipped))


__all__ = [
    "PROD_CLASSES",
    "PredictedPod",
    "ReclaimPolicy",
    "ReclaimResult",
    "Resources",
    "peak_of",
    "prod_reclaimable",
]
