"""Priority/QoS classes (Koordinator), requests/limits (kube-scheduler) and gang membership, by hand."""

from __future__ import annotations

from typing import Any

import pytest

from common.api.pod import (
    KoordQoSClass,
    KubeQoSClass,
    PriorityClass,
    kube_qos_class,
    pod_limits,
    pod_requests,
    priority_class_of,
    priority_class_raw,
    qos_class_of,
    scalars,
)
from common.api.podgroup import GangMode, GangSource, GangSpecError, gang_of
from tests import objects


def pod(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        containers: list[dict[str, Any]] | None = None, **kw: Any) -> dict[str, Any]:  # fmt: skip
    """A pod with no containers unless given: only what the test names decides its class."""
    return objects.pod(namespace="ns", labels=labels, annotations=annotations, containers=containers or [], **kw)


def ctr(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": "c", "resources": {"requests": requests or {}, "limits": limits or {}}, **extra}


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        (pod({"koordinator.sh/priority-class": "koord-batch"}, priority=9500), PriorityClass.BATCH),  # label wins
        (pod(priority=9000), PriorityClass.PROD),
        (pod(priority=9999), PriorityClass.PROD),
        (pod(priority=7500), PriorityClass.MID),
        (pod(priority=5000), PriorityClass.BATCH),
        (pod(priority=3999), PriorityClass.FREE),
        (pod(priority=4000), PriorityClass.NONE),
        (pod(priorityClassName="koord-free"), PriorityClass.FREE),  # no admission filled spec.priority
        (pod({"koordinator.sh/priority-class": "gold"}), PriorityClass.NONE),
    ],
)
def test_priority_class_raw(p: dict[str, Any], expected: PriorityClass) -> None:
    assert priority_class_raw(p) is expected


def test_priority_class_defaults_from_qos() -> None:
    assert priority_class_of(pod(containers=[ctr({"cpu": "1"})])) is PriorityClass.PROD  # Burstable → LS → prod
    assert priority_class_of(pod(containers=[ctr()])) is PriorityClass.BATCH  # BestEffort → BE → batch
    assert priority_class_of(pod(priority=5500, containers=[ctr({"cpu": "1"})])) is PriorityClass.BATCH


@pytest.mark.parametrize(
    ("containers", "kube", "koord"),
    [
        ([ctr()], KubeQoSClass.BEST_EFFORT, KoordQoSClass.BE),
        ([ctr({"cpu": "0"})], KubeQoSClass.BEST_EFFORT, KoordQoSClass.BE),
        ([ctr({"cpu": "1"})], KubeQoSClass.BURSTABLE, KoordQoSClass.LS),
        ([ctr({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})], KubeQoSClass.GUARANTEED, KoordQoSClass.LSR),
        (
            [ctr(None, {"cpu": "1", "memory": "1Gi"})],
            KubeQoSClass.GUARANTEED,
            KoordQoSClass.LSR,
        ),  # requests default to limits
        (
            [ctr({"cpu": "1000m", "memory": "1024Mi"}, {"cpu": "1", "memory": "1Gi"})],
            KubeQoSClass.GUARANTEED,
            KoordQoSClass.LSR,
        ),
        ([ctr({"cpu": "1"}, {"cpu": "2", "memory": "1Gi"})], KubeQoSClass.BURSTABLE, KoordQoSClass.LS),
        (
            [ctr({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"}), ctr({"cpu": "1"})],
            KubeQoSClass.BURSTABLE,
            KoordQoSClass.LS,
        ),
    ],
)
def test_qos_classes(containers: list[dict[str, Any]], kube: KubeQoSClass, koord: KoordQoSClass) -> None:
    p = pod(containers=containers)
    assert kube_qos_class(p) is kube
    assert qos_class_of(p) is koord


def test_qos_label_and_reported_status_win() -> None:
    assert qos_class_of(pod({"koordinator.sh/qosClass": "LSE"}, containers=[ctr()])) is KoordQoSClass.LSE
    reported = pod(containers=[ctr()]) | {"status": {"qosClass": "Guaranteed"}}
    assert kube_qos_class(reported) is KubeQoSClass.GUARANTEED


def test_requests_sum_containers_and_take_init_maximum() -> None:
    p = pod(
        containers=[
            ctr({"cpu": "500m", "memory": "1Gi"}),
            ctr({"cpu": "250m", "memory": "512Mi", "nvidia.com/gpu": "1"}),
        ],
        initContainers=[ctr({"cpu": "2", "memory": "100Mi"}), ctr({"cpu": "100m", "memory": "4Gi"})],
        overhead={"cpu": "50m", "memory": "10Mi"},
    )
    # app: cpu 750m, mem 1.5Gi; init peak: cpu 2, mem 4Gi → max then + overhead
    assert scalars(pod_requests(p)) == {"cpu": 2050, "memory": (4 << 30) + (10 << 20), "nvidia.com/gpu": 1}


def test_sidecars_add_to_the_app_and_to_later_init_containers() -> None:
    p = pod(
        containers=[ctr({"cpu": "1"})],
        initContainers=[
            ctr({"cpu": "200m"}, restartPolicy="Always"),  # sidecar: runs alongside everything after it
            ctr({"cpu": "1500m"}),  # runs while the sidecar runs → 1700m
        ],
    )
    # app + sidecar = 1200m; init peak = max(200m, 1500m+200m) = 1700m
    assert scalars(pod_requests(p)) == {"cpu": 1700}


def test_pod_level_resources_and_limits() -> None:
    p = pod(
        containers=[ctr({"cpu": "1", "memory": "1Gi"}, {"cpu": "2"}), ctr(None, {"cpu": "1", "memory": "2Gi"})],
        resources={"requests": {"memory": "8Gi"}},
        overhead={"cpu": "100m", "memory": "64Mi"},
    )
    assert scalars(pod_requests(p), ["cpu", "memory"]) == {"cpu": 1100, "memory": (8 << 30) + (64 << 20)}
    assert scalars(pod_limits(p)) == {"cpu": 3100, "memory": (2 << 30) + (64 << 20)}


def test_bad_request_names_the_container_field() -> None:
    with pytest.raises(ValueError, match=r"spec\.containers\[1\]\.resources\.requests\.cpu"):
        pod_requests(pod(containers=[ctr({"cpu": "1"}), ctr({"cpu": "lots"})]))


def test_gang_membership_forms() -> None:
    crd = gang_of(pod({"scheduling.x-k8s.io/pod-group": "pg1"}))
    assert crd is not None and (crd.key, crd.source, crd.uses_crd) == ("ns/pg1", GangSource.POD_GROUP, True)
    legacy = gang_of(pod({"pod-group.scheduling.sigs.k8s.io": "pg2"}))
    assert legacy is not None and legacy.source is GangSource.POD_GROUP_LEGACY
    light = gang_of(
        pod(
            {
                "pod-group.scheduling.sigs.k8s.io/name": "tf-smoke-gpu",
                "pod-group.scheduling.sigs.k8s.io/min-available": "2",
            }
        )
    )
    assert light is not None and (light.name, light.min_available, light.uses_crd) == ("tf-smoke-gpu", 2, False)
    koord = gang_of(
        pod(
            annotations={
                "gang.scheduling.koordinator.sh/name": "g",
                "gang.scheduling.koordinator.sh/min-available": "3",
                "gang.scheduling.koordinator.sh/total-number": "2",
                "gang.scheduling.koordinator.sh/waiting-time": "90s",
                "gang.scheduling.koordinator.sh/mode": "NonStrict",
                "gang.scheduling.koordinator.sh/groups": '["ns/g", "ns/h"]',
            }
        )
    )
    assert koord is not None
    assert (koord.min_available, koord.total_number, koord.mode, koord.groups) == (
        3,
        3,
        GangMode.NON_STRICT,
        ("ns/g", "ns/h"),
    )
    assert koord.waiting_time is not None and koord.waiting_time.seconds == 90
    assert gang_of(pod()) is None


@pytest.mark.parametrize(
    ("labels", "annotations", "needle"),
    [
        ({"pod-group.scheduling.sigs.k8s.io/name": "x"}, {}, "min-available"),
        (
            {"pod-group.scheduling.sigs.k8s.io/name": "x", "pod-group.scheduling.sigs.k8s.io/min-available": "two"},
            {},
            "'two'",
        ),
        (
            {},
            {"gang.scheduling.koordinator.sh/name": "x", "gang.scheduling.koordinator.sh/min-available": "0"},
            "at least 1",
        ),
        ({}, {"gang.scheduling.koordinator.sh/name": "x", "gang.scheduling.koordinator.sh/mode": "Loose"}, "Loose"),
        ({}, {"gang.scheduling.koordinator.sh/name": "x", "gang.scheduling.koordinator.sh/groups": "ns/a"}, "JSON"),
    ],
)
def test_malformed_gang_keys_are_named(labels: dict[str, str], annotations: dict[str, str], needle: str) -> None:
    with pytest.raises(GangSpecError, match=needle):
        gang_of(pod(labels, annotations))
