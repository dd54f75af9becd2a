"""prodReclaimable against koordlet's tables (pkg/koordlet/prediction/peak_predictor_test.go, v1.8.0).

The pods are pod objects read by `predicted_pod`, so priority defaulting (a pod of no priority class is Prod when
its QoS is LS) and requests are read as the agent reads them; predictions are given per model, as the Go tests'
mock PredictServer gives them."""

from __future__ import annotations

from typing import Any

import pytest

from agent.prediction.models import Prediction, node_item_uid
from agent.prediction.predictor import node_allocatable, predicted_pod
from agent.prediction.reclaimable import PredictedPod, ReclaimPolicy, Resources, prod_reclaimable
from tests import objects

NOW = 1_800_000_000.0
MI, GI = 1 << 20, 1 << 30
HOUR = 3600.0
PROD_MIN, BATCH_MIN, BATCH_MAX = 9000, 5000, 5999


def pod(uid: str, cpu: str, memory: str, age: float, *, priority: int | None = None, deleted: bool = False,
        batch: bool = False) -> dict[str, Any]:  # fmt: skip
    names = ("kubernetes.io/batch-cpu", "kubernetes.io/batch-memory") if batch else ("cpu", "memory")
    return objects.pod(uid, None, None, uid=uid, requests={names[0]: cpu, names[1]: memory}, priority=priority,
                       created=NOW - age, deleted=NOW if deleted else None, phase="Running")  # fmt: skip


def pods(*objs: dict[str, Any]) -> list[PredictedPod]:
    out = [predicted_pod(o) for o in objs]
    assert all(p is not None for p in out)
    return [p for p in out if p is not None]


def result(cpu_p95_milli: int, mem_p98: int, *, cpu_p98_milli: int = 0, mem_p95: int = 0) -> Prediction:
    """A prediction with the Go tests' p95/p98 entries (CPU in cores here, as the models give it)."""
    return Prediction(
        {"p95": cpu_p95_milli / 1000, "p98": (cpu_p98_milli or cpu_p95_milli) / 1000},
        {"p95": float(mem_p95 or mem_p98), "p98": float(mem_p98)},
    )


ZERO = result(0, 0)
PRED_DEFAULT = result(500, 768 * MI, cpu_p98_milli=800, mem_p95=512 * MI)  # testPredictionResult


def node(cpu_milli: int, memory: int) -> Resources:
    return node_allocatable({"status": {"allocatable": {"cpu": f"{cpu_milli}m", "memory": str(memory)}}}) or Resources()


# ------------------------------------------------------------------ TestProdReclaimablePredictor_AddPod
SYS = result(300, 512 * MI, cpu_p98_milli=500)
PROD = result(1000, GI, cpu_p98_milli=1200)
POD = result(500, GI, cpu_p98_milli=1000, mem_p95=768 * MI)
MIN_PODS = pods(
    pod("pod-1-uid", "1000m", str(GI), 60, priority=PROD_MIN),  # cold start
    pod("pod-2-uid", "2000m", str(2 * GI), 2 * HOUR, priority=PROD_MIN),  # normal
    pod("pod-3-uid", "2000m", str(2 * GI), 2 * HOUR, deleted=True),  # being deleted (no class: LS -> Prod)
)
MIN_PREDICTIONS = {
    node_item_uid("koord-prod"): PROD,
    node_item_uid("koord-batch"): ZERO,
    node_item_uid(""): ZERO,  # the Go mock's DefaultResult for an unlisted UID: all zero
    node_item_uid("sys"): SYS,
    "pod-1-uid": POD,
    "pod-2-uid": POD,
    "pod-3-uid": ZERO,
}
PEAK_1GI = int(1.1 * GI)  # number1 = 1.1 * 1024Mi
PEAK_1_5GI = int(1.1 * 1536 * MI)  # number2


@pytest.mark.parametrize(
    ("allocatable", "by_pods", "by_priority"),
    [
        # node allocatable == pods' requests
        (node(3000, 3 * GI), Resources(2000 - 550, 2 * GI - PEAK_1GI), Resources(3000 - 1430, 3 * GI - PEAK_1_5GI)),
        # node allocatable > pods' requests
        (node(8000, 8 * GI), Resources(2000 - 550, 2 * GI - PEAK_1GI), Resources(3000 - 1430, 3 * GI - PEAK_1_5GI)),
        # node allocatable < pods' requests
        (node(1000, GI), Resources(1000 - 550, 0), Resources(0, 0)),
    ],
)
def test_prod_reclaimable_is_the_minimum_of_both_views(
    allocatable: Resources, by_pods: Resources, by_priority: Resources
) -> None:
    policy = ReclaimPolicy(cold_start_seconds=HOUR, safety_margin_percent=10)
    got = prod_reclaimable(MIN_PODS, MIN_PREDICTIONS, allocatable, policy, now=NOW)
    assert (got.by_pods, got.by_priority) == (by_pods, by_priority)
    assert got.reclaimable == by_pods.min(by_priority)
    # the peak the priority view holds back is what prodPeakMetric publishes: (sys + prod) x 1.1
    assert got.peak == Resources(1430, PEAK_1_5GI)


# ------------------------------------------------------------------ TestPodReclaimablePredictor
POD_VIEW_PODS = pods(
    pod("pod-1-uid", "1000m", str(GI), 60, priority=PROD_MIN),  # cold start
    pod("pod-2-uid", "2000m", str(2 * GI), 2 * HOUR, priority=PROD_MIN),  # normal
    pod("pod-3-uid", "2000m", str(2 * GI), 2 * HOUR, priority=PROD_MIN, deleted=True),
    pod("pod-4-uid", "2000m", str(2 * GI), 2 * HOUR, priority=BATCH_MIN),  # batch: not Prod
)
PEAK_768 = int(1.1 * 768 * MI)


@pytest.mark.parametrize(
    ("allocatable", "expected"),
    [
        (node(3000, 3 * GI), Resources(2000 - 550, 2 * GI - PEAK_768)),
        (node(1000, GI), Resources(1000 - 550, GI - PEAK_768)),
    ],
)
def test_pod_view(allocatable: Resources, expected: Resources) -> None:
    predictions = {p.uid: PRED_DEFAULT for p in POD_VIEW_PODS}
    policy = ReclaimPolicy(cold_start_seconds=HOUR, safety_margin_percent=10)
    got = prod_reclaimable(POD_VIEW_PODS, predictions, allocatable, policy, now=NOW)
    assert got.by_pods == expected
    assert got.reclaimable is None  # no node-level models in this table: the minimum cannot be taken


# ------------------------------------------------------------------ Test_priorityReclaimablePredictor
PRIO_PODS = pods(
    pod("pod-1-uid", "1000m", str(2048 * MI), 60, priority=PROD_MIN),
    pod("pod-2-uid", "0", "0", 2 * HOUR, priority=BATCH_MAX, batch=True),  # batch resources only
)
PRIO_PREDICTIONS = {
    node_item_uid("koord-prod"): result(500, GI, cpu_p98_milli=800, mem_p95=768 * MI),
    node_item_uid("koord-batch"): result(1000, 2048 * MI, cpu_p98_milli=1500, mem_p95=GI),
    node_item_uid("sys"): result(300, 512 * MI, cpu_p98_milli=500),
    node_item_uid(""): ZERO,
}


@pytest.mark.parametrize(
    ("allocatable", "expected"),
    [
        (node(3000, 3 * GI), Resources(1000 - 800, (2048 - 1536) * MI)),
        (node(900, GI), Resources(900 - 800, 0)),
    ],
)
def test_priority_view(allocatable: Resources, expected: Resources) -> None:
    policy = ReclaimPolicy(cold_start_seconds=HOUR, safety_margin_percent=0)
    got = prod_reclaimable(PRIO_PODS, PRIO_PREDICTIONS, allocatable, policy, now=NOW)
    assert got.by_priority == expected


# ------------------------------------------------------------------ rules around the tables
def test_a_pod_without_a_model_is_left_out_of_both_views() -> None:
    predictions = {**MIN_PREDICTIONS}
    del predictions["pod-2-uid"]
    got = prod_reclaimable(MIN_PODS, predictions, node(8000, 8 * GI), ReclaimPolicy(HOUR, 10), now=NOW)
    assert got.by_pods == Resources(0, 0)
    assert got.by_priority == Resources(1000 - 1430, GI - PEAK_1_5GI).at_least_zero()  # only pod-1's request
    assert any("pod-2-uid: no model" in s for s in got.skipped)


def test_nothing_before_the_node_models_exist() -> None:
    got = prod_reclaimable(MIN_PODS, {"pod-2-uid": POD}, node(8000, 8 * GI), ReclaimPolicy(HOUR, 10), now=NOW)
    assert got.reclaimable is None and got.peak is None


def test_no_allocatable_no_result() -> None:
    assert prod_reclaimable(MIN_PODS, MIN_PREDICTIONS, None, ReclaimPolicy(), now=NOW).reclaimable is None


def test_min_history_keeps_young_models_from_lending() -> None:
    policy = ReclaimPolicy(cold_start_seconds=HOUR, safety_margin_percent=10, min_history_seconds=HOUR)
    young = prod_reclaimable(MIN_PODS, MIN_PREDICTIONS, node(8000, 8 * GI), policy, now=NOW,
                             model_since={"pod-2-uid": NOW - 60})  # fmt: skip
    assert young.by_pods == Resources(0, 0)
    old = prod_reclaimable(MIN_PODS, MIN_PREDICTIONS, node(8000, 8 * GI), policy, now=NOW,
                           model_since={"pod-2-uid": NOW - 2 * HOUR})  # fmt: skip
    assert old.by_pods == Resources(2000 - 550, 2 * GI - PEAK_1GI)


def test_never_more_than_allocatable_minus_peak() -> None:
    """However the models are wrong (a peak above the request), nothing negative and nothing beyond what the
    node could give."""
    huge = result(50_000, 100 * GI)
    predictions = {**MIN_PREDICTIONS, "pod-2-uid": huge, node_item_uid("koord-prod"): huge}
    got = prod_reclaimable(MIN_PODS, predictions, node(3000, 3 * GI), ReclaimPolicy(HOUR, 10), now=NOW)
    assert got.reclaimable == Resources(0, 0)


def test_raw_allocatable_annotation_wins() -> None:
    obj = {
        "metadata": {"annotations": {"node.koordinator.sh/raw-allocatable": '{"cpu": "4", "memory": "8Gi"}'}},
        "status": {"allocatable": {"cpu": "8", "memory": "16Gi"}},
    }
    assert node_allocatable(obj) == Resources(4000, 8 * GI)
    obj["metadata"]["annotations"]["node.koordinator.sh/raw-allocatable"] = "not json"
    assert node_allocatable(obj) == Resources(8000, 16 * GI)
    assert node_allocatable({"status": {"allocatable": {"cpu": "eight"}}}) is None


def test_unreadable_pod_is_skipped() -> None:
    bad = pod("x", "1", "1Gi", HOUR)
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    assert predicted_pod(bad) is None
    assert predicted_pod({"metadata": {}}) is None


def test_wire_form_is_koordinators_reclaimable_metric() -> None:
    """`{resource: {resources: {cpu, memory}}}`; without a value koordlet writes `{resource: {}}`."""
    from agent.prediction.node import reclaimable_metric

    assert reclaimable_metric(None).to_wire() == {"resource": {}}
    assert reclaimable_metric(Resources(1450, 2 * GI - PEAK_1GI)).to_wire() == {
        "resource": {"resources": {"cpu": "1450m", "memory": str(2 * GI - PEAK_1GI)}}
    }
