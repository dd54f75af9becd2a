from __future__ import annotations

import numpy as np
import pytest

from common.api.pod import defaulted_priority_class, priority_class_from, qos_class_from
from common.api.pod import is_prod as is_prod_of
from scheduler_plugin.descheduler.model import PodSnapshot
from scheduler_plugin.descheduler.sorting import NO_METRIC_SCORE, eviction_order, usage_fit_scores
from tests.unit.descheduler.builders import GiB, rs_pod

CPU_MEM_WEIGHTS = np.array([1.0, 1.0])


# The descheduler classifies its pod records through common.api.pod, as the scheduler does.
def priority_class(pod: PodSnapshot) -> str:
    return priority_class_from(pod.labels, pod.priority)


def priority_class_with_default(pod: PodSnapshot) -> str:
    return defaulted_priority_class(
        priority_class_from(pod.labels, pod.priority), qos_class_from(pod.labels, pod.k8s_qos)
    )


def is_prod(pod: PodSnapshot) -> bool:
    return is_prod_of(pod.labels, pod.priority, pod.k8s_qos)


def scores(pod_usage: list[list[float]], excess: list[float], weights: np.ndarray = CPU_MEM_WEIGHTS) -> list[float]:
    return usage_fit_scores(np.array(pod_usage, dtype=np.float64), np.array(excess, dtype=np.float64), weights).tolist()


def test_usage_fit_score_single_resource() -> None:
    # Node is 1000m cpu over its threshold, memory under (excess <= 0 is ignored).
    got = scores([[250, 9e9], [500, 0], [1000, 0], [1250, 0], [2000, 0], [4000, 0], [0, 0]], [1000, -5 * GiB])
    # ratio .25 -> .25; .5 -> .5; 1 -> 1 + 1/1 = 2; 1.25 -> 1 + .8 = 1.8; 2 -> 1.5; 4 -> 1.25; 0 -> 0
    assert got == pytest.approx([0.25, 0.5, 2.0, 1.8, 1.5, 1.25, 0.0])


def test_usage_fit_score_weighted_mean_over_exceeding_resources() -> None:
    # excess cpu 1000m, memory 2 GiB; pod cpu 500m (ratio .5 -> .5), memory 4 GiB (ratio 2 -> 1.5)
    pod = [[500, 4 * GiB]]
    assert scores(pod, [1000, 2 * GiB]) == pytest.approx([1.0])  # (0.5 + 1.5) / 2
    assert scores(pod, [1000, 2 * GiB], np.array([3.0, 1.0])) == pytest.approx([0.75])  # (1.5 + 1.5) / 4


def test_usage_fit_score_without_metric_sorts_last() -> None:
    assert scores([[np.nan, np.nan], [1, 1]], [1000, 1000]) == pytest.approx(
        [NO_METRIC_SCORE, 0.001]
    )  # (.001 + .001) / 2


def test_usage_fit_score_when_nothing_exceeds() -> None:
    assert scores([[500, 1]], [-1, 0]) == [0.0]


def order(pods: list[PodSnapshot], fit: list[float] | None = None) -> list[str]:
    fit_arr = np.array(fit if fit is not None else [0.0] * len(pods), dtype=np.float64)
    return [pods[int(i)].name for i in eviction_order(pods, fit_arr)]


def test_priority_class_first_free_batch_mid_prod_none() -> None:
    pods = [
        rs_pod("none", "n"),
        rs_pod("prod", "n", priority=9500),
        rs_pod("batch", "n", priority=5500),
        rs_pod("mid", "n", labels={"koordinator.sh/priority-class": "koord-mid"}),
        rs_pod("free", "n", priority=3100),
    ]
    assert order(pods) == ["free", "batch", "mid", "prod", "none"]


def test_then_priority_then_k8s_qos_then_koord_qos() -> None:
    pods = [
        rs_pod("p10-guaranteed", "n", priority=10, k8s_qos="Guaranteed"),
        rs_pod("p10-besteffort", "n", priority=10, k8s_qos="BestEffort"),
        rs_pod("p10-burstable-lsr", "n", priority=10, labels={"koordinator.sh/qosClass": "LSR"}),
        rs_pod("p10-burstable-be", "n", priority=10, labels={"koordinator.sh/qosClass": "BE"}),
        rs_pod("p10-burstable-none", "n", priority=10),
        rs_pod("p5", "n", priority=5, k8s_qos="Guaranteed"),
    ]
    assert order(pods) == [
        "p5",
        "p10-besteffort",
        "p10-burstable-be",
        "p10-burstable-lsr",
        "p10-burstable-none",
        "p10-guaranteed",
    ]


def test_then_deletion_cost_then_eviction_cost_then_fit_then_newest() -> None:
    pods = [
        rs_pod("cost5", "n", annotations={"controller.kubernetes.io/pod-deletion-cost": "5"}),
        rs_pod("cost-5", "n", annotations={"controller.kubernetes.io/pod-deletion-cost": "-5"}),
        rs_pod("evict-cost9", "n", annotations={"scheduling.koordinator.sh/eviction-cost": "9"}),
        rs_pod("fit1-old", "n", created=100),
        rs_pod("fit1-new", "n", created=200),
        rs_pod("fit2", "n", created=50),
        rs_pod("garbage-cost", "n", annotations={"controller.kubernetes.io/pod-deletion-cost": "lots"}, created=10),
        rs_pod("no-timestamp", "n", created=None),
    ]
    fit = [0, 0, 0, 1.0, 1.0, 2.0, 0, 1.0]
    assert order(pods, fit) == [
        "cost-5",  # deletion cost -5
        "fit2",  # cost 0, eviction cost 0, best fit
        "fit1-new",  # same fit: newest first
        "fit1-old",
        "no-timestamp",  # no creationTimestamp counts as oldest
        "garbage-cost",  # unparsable cost counts as 0, fit 0
        "evict-cost9",
        "cost5",
    ]


def test_name_breaks_remaining_ties_deterministically() -> None:
    pods = [rs_pod("b", "n"), rs_pod("a", "n"), rs_pod("c", "n")]
    assert order(pods) == ["a", "b", "c"]


def test_priority_class_resolution() -> None:
    assert priority_class(rs_pod("x", "n", labels={"koordinator.sh/priority-class": "koord-batch"}, priority=9500)) == (
        "koord-batch"
    )
    assert priority_class(rs_pod("x", "n", priority=7999)) == "koord-mid"
    assert priority_class(rs_pod("x", "n", priority=100)) == ""
    # Defaulted class: by QoS when nothing else says.
    assert priority_class_with_default(rs_pod("x", "n", k8s_qos="Guaranteed")) == "koord-prod"
    assert priority_class_with_default(rs_pod("x", "n", k8s_qos="BestEffort")) == "koord-batch"
    assert not is_prod(rs_pod("x", "n", labels={"koordinator.sh/qosClass": "BE"}))
    assert is_prod(rs_pod("x", "n", priority=9000))


@pytest.mark.parametrize("priority", [None, 0, 2999, 3000, 3999, 4000, 5500, 6500, 7000, 7999, 8500, 9000, 9999, 10000])
@pytest.mark.parametrize("k8s_qos", ["Guaranteed", "Burstable", "BestEffort"])
@pytest.mark.parametrize(
    "labels",
    [
        {},
        {"koordinator.sh/priority-class": "koord-prod"},
        {"koordinator.sh/priority-class": "koord-batch"},
        {"koordinator.sh/priority-class": "bogus"},
        {"koordinator.sh/qosClass": "BE"},
        {"koordinator.sh/qosClass": "LSR"},
    ],
)
def test_fast_is_prod_agrees_with_the_defaulted_priority_class(
    priority: int | None, k8s_qos: str, labels: dict[str, str]
) -> None:
    pod = rs_pod("x", "n", priority=priority, k8s_qos=k8s_qos, labels=labels)
    assert is_prod(pod) == (priority_class_with_default(pod) == "koord-prod")


@pytest.mark.parametrize(
    "cost",
    ["99999999999999999999", "-99999999999999999999", "2147483648", "+5", "007", " 5", "1_0", "٣", "9" * 5000],
)
def test_a_cost_past_int32_or_not_as_go_reads_it_counts_as_0_and_the_round_still_sorts(cost: str) -> None:
    """Issue 29: a pod-deletion-cost past int64 made the round's int64 array raise, every round, for every node."""
    pods = [
        rs_pod("hostile", "n", annotations={"controller.kubernetes.io/pod-deletion-cost": cost}, created=10),
        rs_pod("hostile-evict", "n", annotations={"scheduling.koordinator.sh/eviction-cost": cost}, created=20),
        rs_pod("cheap", "n", annotations={"controller.kubernetes.io/pod-deletion-cost": "-1"}),
        rs_pod("dear", "n", annotations={"controller.kubernetes.io/pod-deletion-cost": "2147483647"}),
    ]
    assert order(pods) == ["cheap", "hostile-evict", "hostile", "dear"]
