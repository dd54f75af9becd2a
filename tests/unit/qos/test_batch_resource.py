"""A batch pod's cgroup values from its batch resources, against koordlet's own tables
(koordinator v1.8.0 pkg/koordlet/runtimehooks/hooks/batchresource/batch_resource_test.go)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from agent.qos.batch_resource import (
    ANNOTATION_EXTENDED_RESOURCE_SPEC,
    BatchSpecError,
    CgroupTargets,
    NodeLimits,
    batch_spec,
    batch_targets,
    cpu_normalization_ratio,
    cpu_shares,
    shares_to_weight,
)
from tests import objects

GI = 1024**3
CPU, MEM = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"
BOTH = {CPU: "500", MEM: "2Gi"}


def pod(*containers: dict[str, Any], annotation: Any = None) -> dict[str, Any]:
    annotations = {ANNOTATION_EXTENDED_RESOURCE_SPEC: annotation} if annotation is not None else None
    return objects.pod(namespace="ns", uid="u1", koord_qos="BE", annotations=annotations, containers=list(containers))


def container(name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "resources": resources}


def targets(p: dict[str, Any], node: NodeLimits | None = None, cfs_quota: bool = True) -> tuple[Any, ...]:
    spec = batch_spec(p)
    assert spec is not None
    t = batch_targets(spec, node or NodeLimits(), cfs_quota=cfs_quota)
    return t.pod, dict(t.containers)


@pytest.mark.parametrize(
    ("containers", "cfs_quota", "ratio", "want_pod"),
    [
        # "a Batch pod with cpu memory requests"
        ([container("c0", BOTH, BOTH)], True, None, CgroupTargets(512, 50_000, 2 * GI)),
        # "a Batch pod with cfs quota unset" (the rule's enableCFSQuota false: BE suppression by cfsQuota)
        ([container("c0", BOTH, BOTH)], False, None, CgroupTargets(512, -1, 2 * GI)),
        # "... requests 1": a second container with limits only counts for quota and memory, not shares
        ([container("c0", BOTH, BOTH), container("c1", None, {CPU: "1000", MEM: "2Gi"})], True, None,
         CgroupTargets(512, 150_000, 4 * GI)),
        # "a Batch pod with no limit"
        ([container("c0", BOTH)], True, None, CgroupTargets(512, -1, -1)),
        # "a Batch pod with partial limited": one container unlimited makes the pod unlimited
        ([container("c0", BOTH, BOTH), container("c1", BOTH)], True, None, CgroupTargets(1024, -1, -1)),
        # "a Batch pod scaled with ratio": ceil(50000 / 1.2)
        ([container("c0", BOTH, BOTH)], True, 1.2, CgroupTargets(512, math.ceil(50_000 / 1.2), 2 * GI)),
    ],
)  # fmt: skip
def test_pod_level_values_match_koordlets_table(
    containers: list[dict[str, Any]], cfs_quota: bool, ratio: float | None, want_pod: CgroupTargets
) -> None:
    got, _ = targets(pod(*containers), NodeLimits(cpu_normalization_ratio=ratio), cfs_quota)
    assert got == want_pod


def test_container_level_values_match_koordlets_table() -> None:
    _, got = targets(pod(container("c0", BOTH, BOTH), container("c1", None, {CPU: "1000", MEM: "2Gi"})))
    assert got == {
        "c0": CgroupTargets(512, 50_000, 2 * GI),  # "a Batch container with requests"
        "c1": CgroupTargets(2, 100_000, 2 * GI),  # "... requests 1": no request -> the minimum shares
    }
    _, scaled = targets(pod(container("c0", BOTH, BOTH)), NodeLimits(cpu_normalization_ratio=1.2))
    assert scaled["c0"].cfs_quota_us == math.ceil(50_000 / 1.2)  # "a Batch container scaled by ratio"


def test_the_issues_pod_and_the_quota_and_shares_bounds() -> None:
    one_core = {CPU: "1000", MEM: "512Mi"}
    assert targets(pod(container("burn", one_core, one_core)))[0] == CgroupTargets(1024, 100_000, 512 * 1024**2)
    assert targets(pod(container("c", {CPU: "1"}, {CPU: "1"})))[0] == CgroupTargets(2, 1_000, -1)  # 1 milli-core
    assert cpu_shares(0) == 2 and cpu_shares(10**9) == 262_144


def test_only_containers_naming_batch_resources_count() -> None:
    """A sidecar without batch resources neither makes the pod unlimited nor gets values of its own."""
    got_pod, got = targets(pod(container("c0", BOTH, BOTH), container("sidecar", {"cpu": "10m"})))
    assert got_pod == CgroupTargets(512, 50_000, 2 * GI) and set(got) == {"c0"}
    assert batch_spec(pod(container("app", {"cpu": "1"}, {"cpu": "1"}))) is None  # not a batch pod at all


def test_the_spec_wins_over_the_annotation_which_is_read_without_one() -> None:
    annotation = json.dumps({"containers": {"c0": {"requests": {CPU: "2000"}, "limits": {CPU: "2000", MEM: "1Gi"}}}})
    assert targets(pod(container("c0", BOTH, BOTH), annotation=annotation))[0].cfs_quota_us == 50_000
    from_annotation = batch_spec(pod(container("c0"), annotation=annotation))
    assert from_annotation is not None and from_annotation.source == "annotation"
    assert batch_targets(from_annotation).pod == CgroupTargets(2048, 200_000, GI)


def test_kubelets_pod_weight_conversion() -> None:
    # pkg/kubelet/cm getCPUWeight: 2 -> 1, 262144 -> 10000, 1024 -> 39
    assert [shares_to_weight(s) for s in (2, 512, 1024, 262_144, 10**9)] == [1, 20, 39, 10_000, 10_000]


@pytest.mark.parametrize(
    ("p", "message"),
    [
        (pod(container("c", {CPU: "500m"}, {CPU: "500m"})), "not a whole number"),
        (pod(container("c"), annotation='{"containers": {"c": {"limits": {"kubernetes.io/batch-cpu": "-1"}}}}'),
         "is negative"),
        (pod(container("c"), annotation='{"containers": {"c": {"limits": {"kubernetes.io/batch-memory": "1e30"}}}}'),
         "out of range"),
        (pod(container("c"), annotation="{not json"), "not JSON"),
        (pod(container("c"), annotation='{"containers": ["c"]}'), "expected"),
        (pod(container("c"), annotation='{"containers": {"c": {"limits": "lots"}}}'), "must be objects"),
        (pod(container("c"), annotation='{"containers": {"c": {"limits": {"kubernetes.io/batch-cpu": "x"}}}}'),
         "batch-cpu"),
    ],
)  # fmt: skip
def test_unreadable_batch_resources_are_an_error_naming_the_field(p: dict[str, Any], message: str) -> None:
    with pytest.raises(BatchSpecError, match=message):
        batch_spec(p)


def test_values_above_the_node_are_held_to_its_capacity() -> None:
    huge = {CPU: "64000", MEM: "1Ti"}
    spec = batch_spec(pod(container("c", huge, huge)))
    assert spec is not None
    t = batch_targets(spec, NodeLimits(2000, 8 * GI))
    assert t.pod == CgroupTargets(65_536, 200_000, 8 * GI)
    assert t.containers["c"] == CgroupTargets(65_536, 200_000, 8 * GI)
    assert t.clamped and "pod cfs quota 6400000 above the node's 200000" in t.clamped


@pytest.mark.parametrize(
    ("annotation", "want"), [("1.5", 1.5), ("1", None), ("0.5", None), ("-2", None), ("nan", None), ("x", None)]
)
def test_cpu_normalization_ratio_only_when_a_number_above_one(annotation: str, want: float | None) -> None:
    node = {"metadata": {"annotations": {"node.koordinator.sh/cpu-normalization-ratio": annotation}}}
    assert cpu_normalization_ratio(node) == want
    assert cpu_normalization_ratio(None) is None
