"""The pod digest every component reads (common/api/poddigest.py): values, and what is wrong with a bad pod."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from common.api.malformed import MalformedReason
from common.api.pod import KoordQoSClass, KubeQoSClass, PriorityClass
from common.api.poddigest import NONZERO_DEFAULT_MEMORY, NONZERO_DEFAULT_MILLI_CPU, digest_pod
from tests import objects

MiB = 1024 * 1024
CREATED = 1795849200.0  # 2026-11-28T07:00:00Z


def pod(**kw: Any) -> dict[str, Any]:
    """web-0 of ReplicaSet `web` on n1, requesting 1 cpu; a ConfigMap owns it too (not as its controller)."""
    obj = objects.pod("web-0", "1", None, namespace="shop", uid="u-1", rv="17", labels={"app": "web"},
                      created=CREATED, node_name="n1", owner=("ReplicaSet", "web"), **kw)  # fmt: skip
    obj["metadata"]["ownerReferences"].insert(0, {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "u-cm"})
    return obj


def test_a_readable_pod() -> None:
    d = digest_pod(pod(priority=9500))
    assert d.problem is None and d.key == "shop/web-0" and (d.uid, d.resource_version) == ("u-1", "17")
    assert d.node_name == "n1" and d.phase == "Running" and not d.deleting
    assert d.requests == {"cpu": 1000} and d.limits == {}
    assert d.kube_qos is KubeQoSClass.BURSTABLE and d.koord_qos is KoordQoSClass.LS
    assert d.priority == 9500 and d.priority_class is PriorityClass.PROD
    assert d.controller is not None and (d.controller.kind, d.controller.uid) == ("ReplicaSet", "uid-web")
    assert d.creation_timestamp == 1795849200.0


def test_requests_limits_and_qos_follow_kube_scheduler() -> None:
    # component-helpers resource.PodRequests: the larger of the app containers' sum and the init peak; a
    # restartable init container (sidecar) runs beside the later ones and the app containers; overhead added.
    d = digest_pod(
        pod(
            containers=[{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2"}}}],
            initContainers=[
                {"restartPolicy": "Always", "resources": {"requests": {"cpu": "500m", "memory": "100Mi"}}},
                {"resources": {"requests": {"cpu": "3", "memory": "10Mi"}}},
            ],
            overhead={"cpu": "100m"},
        )
    )
    assert d.requests == {"cpu": 3600, "memory": 1024 * MiB + 100 * MiB}
    assert d.limits == {"cpu": 2100}
    # Guaranteed needs requests == limits for cpu and memory in every container: kubelet's rule.
    both = {"cpu": "1", "memory": "1Gi"}
    assert digest_pod(pod(containers=[{"resources": {"requests": both, "limits": both}}])).kube_qos == "Guaranteed"
    assert digest_pod(pod(containers=[{"name": "c"}])).koord_qos is KoordQoSClass.BE


def test_missing_requests_score_as_kube_schedulers_defaults() -> None:
    # pkg/scheduler/util: a container without a cpu (memory) request counts as 100m (200Mi) when scoring.
    d = digest_pod(pod(containers=[{"name": "a"}, {"resources": {"requests": {"cpu": "250m"}}}]))
    assert d.resources.nonzero_requests == (NONZERO_DEFAULT_MILLI_CPU + 250, 2 * NONZERO_DEFAULT_MEMORY)
    assert d.requests == {"cpu": 250}


def test_pods_of_one_template_share_one_computation() -> None:
    a, b = pod(), pod()
    b["metadata"]["name"] = "web-1"
    assert digest_pod(a).resources is digest_pod(b).resources


@pytest.mark.parametrize(
    ("breakage", "field", "reason"),
    [
        (lambda p: p["spec"]["containers"][0]["resources"]["requests"].update(cpu="lots"), "", "invalid_quantity"),
        (
            lambda p: p["spec"]["containers"][0]["resources"]["requests"].update(cpu="-1"),
            "spec.containers[*].resources.requests.cpu",
            "negative_quantity",
        ),
        (lambda p: p["spec"].update(priority="high"), "spec.priority", "wrong_type"),
        (lambda p: p["metadata"]["labels"].update(tier=3), "metadata.labels.tier", "wrong_type"),
        (lambda p: p["metadata"].update(creationTimestamp="yesterday"), "metadata.creationTimestamp", "invalid_time"),
        (lambda p: p.update(spec=[]), "spec", "wrong_type"),
        (lambda p: p["metadata"].pop("name"), "metadata.name", "missing_field"),
    ],
)
def test_a_malformed_pod_says_what_and_keeps_its_identity(breakage: Any, field: str, reason: str) -> None:
    obj = copy.deepcopy(pod())
    breakage(obj)
    d = digest_pod(obj)
    assert d.problem is not None and d.problem.reason is MalformedReason(reason) and d.problem.kind == "Pod"
    assert d.problem.field == field or (not field and "spec.containers[0].resources.requests.cpu" in str(d.problem))
    assert d.uid == "u-1" and d.resource_version == "17" and d.namespace == "shop"
    assert d.requests == {} and d.priority_class is PriorityClass.NONE  # nothing else is filled
    if reason != "missing_field":
        assert "shop/web-0" in str(d.problem)


def test_not_an_object_at_all() -> None:
    d = digest_pod(["not", "a", "pod"])  # type: ignore[arg-type]
    assert d.problem is not None and d.problem.reason is MalformedReason.WRONG_TYPE


# ----------------------------------------------------------------------------- issue 29: a bad part never hides the rest
def test_a_limit_past_the_range_rule_keeps_the_requests_in_force() -> None:
    # Issue 29, example 5: sane requests, `memory: 9Pi` limit. The pod was dropped whole, so its requests were
    # never accounted on its node. Now the limit is held at the range rule and reported as the pod's part problem.
    resources = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "9Pi"}}
    d = digest_pod(pod(containers=[{"resources": resources}]))
    assert d.problem is None
    assert d.requests == {"cpu": 1000, "memory": 1024 * MiB}
    assert d.limits == {"memory": 2**53}
    assert d.part_problem is not None and d.part_problem.reason is MalformedReason.OUT_OF_RANGE
    assert d.part_problem.name == "shop/web-0" and d.part_problem.field.endswith("limits.memory")


@pytest.mark.parametrize(("resource", "text"), [("memory", "8Ei"), ("cpu", "1e16"), ("memory", "9Pi")])
def test_a_request_past_the_range_rule_fills_its_node_and_keeps_the_pod(resource: str, text: str) -> None:
    # Issue 29, "a bad part never hides the rest": such a request made the whole pod malformed, so a bound pod's
    # usage vanished from its node's accounting (the permissive direction). Now the pod stays, the request is held
    # at the range rule (more than any node has: its node is full of that resource), and the part is reported.
    requests = {"cpu": "1", "memory": "1Gi", resource: text}
    d = digest_pod(pod(containers=[{"resources": {"requests": requests}}]))
    assert d.problem is None and d.key == "shop/web-0" and d.node_name == "n1"
    assert d.requests[resource] == 2**53
    other = "memory" if resource == "cpu" else "cpu"
    assert d.requests[other] == {"cpu": 1000, "memory": 1024 * MiB}[other]
    assert d.resources.nonzero_requests[0 if resource == "cpu" else 1] == 2**53
    assert d.part_problem is not None and d.part_problem.reason is MalformedReason.OUT_OF_RANGE
    assert d.part_problem.field == f"spec.containers[*].resources.requests.{resource}"
    assert d.part_problem.name == "shop/web-0"


def test_a_request_that_is_no_quantity_or_negative_is_still_the_pods_problem() -> None:
    # Not a range problem: the API server refuses both, so only a request body (the extender) carries them.
    assert digest_pod(pod(containers=[{"resources": {"requests": {"cpu": "-1"}}}])).problem is not None
    assert digest_pod(pod(containers=[{"resources": {"requests": {"cpu": "lots"}}}])).problem is not None


def test_resource_status_cpus_are_read_once_in_the_digest() -> None:
    ok = pod()
    ok["metadata"]["annotations"] = {"scheduling.koordinator.sh/resource-status": '{"cpuset": "2-3,8"}'}
    d = digest_pod(ok)
    assert d.bound_cpus == (2, 3, 8) and d.part_problem is None


@pytest.mark.parametrize(
    "text",
    [
        '{"cpuset": "0-4294967295"}',  # issue 29, example 1: 4·10⁹ ids to expand, the agent OOM-killed
        '{"cpuset": "8192"}',
        '{"cpuset": "3-1"}',
        '{"cpuset": 7}',
        "not json",
        "[" * 100_000,
    ],
)
def test_an_unusable_resource_status_binds_no_cpu_and_is_a_part_problem(text: str) -> None:
    bad = pod()
    bad["metadata"]["annotations"] = {"scheduling.koordinator.sh/resource-status": text}
    d = digest_pod(bad)
    assert d.problem is None and d.requests == {"cpu": 1000}  # the pod is otherwise in force
    assert d.bound_cpus == ()
    assert d.part_problem is not None and "resource-status" in d.part_problem.field


def test_a_pod_naming_more_resources_than_the_bound_is_malformed() -> None:
    # Issue 29: each distinct name is a column of every node in the scheduler; one pod could add thousands.
    from common.api.poddigest import MAX_POD_RESOURCE_NAMES

    many = {f"example.com/r{i}": "1" for i in range(MAX_POD_RESOURCE_NAMES + 1)}
    d = digest_pod(pod(containers=[{"resources": {"requests": many, "limits": many}}]))
    assert d.problem is not None and d.problem.reason is MalformedReason.OUT_OF_RANGE
    assert "distinct resource names" in d.problem.detail
    del many["example.com/r0"]
    assert digest_pod(pod(containers=[{"resources": {"requests": many, "limits": many}}])).problem is None
