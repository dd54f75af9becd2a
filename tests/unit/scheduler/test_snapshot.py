"""Snapshot: nodes as numpy rows built from Kubernetes JSON, kept current incrementally."""

from __future__ import annotations

import re

import numpy as np
import pytest

from common.api.malformed import MalformedObjectError
from common.api.nodemetric_digest import PodUsage, digest_node_metric
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import CPU, MEMORY, PODS, Snapshot
from scheduler_plugin.plugins.loadaware.nodeload import NodeLoads
from tests.objects import T0, node, node_metric, pod
from tests.unit.scheduler.builders import pod_metric

GI = 1024**3


def test_rows_from_json() -> None:
    snap = Snapshot.from_objects(
        nodes=[node("a", cpu="3500m", memory="8Gi", extra={"kubernetes.io/batch-cpu": "12000"}), node("b")],
        pods=[pod("p1", cpu="250m", memory="1Gi", node_name="a"), pod("p2", cpu=None, memory=None, node_name="a"),
              pod("pending")],
    )
    a = snap.node_by_name("a")
    assert a is not None
    assert snap.allocatable[CPU, a.index] == 3500
    assert snap.allocatable[MEMORY, a.index] == 8 * GI
    assert snap.allocatable[snap.resource_column("kubernetes.io/batch-cpu"), a.index] == 12000
    assert snap.requested[[CPU, MEMORY, PODS], a.index].tolist() == [250, GI, 2]
    # scoring view: the request-less pod counts as 100m / 200Mi
    assert snap.nonzero_requested[:, a.index].tolist() == [350, GI + 200 * 1024**2]
    assert set(snap.pods) == {"default/p1", "default/p2", "default/pending"}
    assert set(snap.records) == {"default/p1", "default/p2"}


def test_effective_requests_follow_kube_scheduler() -> None:
    obj = pod("p", cpu="1", memory="1Gi")
    obj["spec"]["initContainers"] = [
        {"name": "init", "resources": {"requests": {"cpu": "3", "memory": "100Mi"}}},
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m", "memory": "64Mi"}}},
    ]
    obj["spec"]["overhead"] = {"cpu": "100m"}
    info = PodInfo.from_dict(obj)
    # max(app 1 + sidecar 0.5, init 3) + overhead 0.1 = 3.1 cpu; memory: 1Gi + 64Mi vs 100Mi → 1088Mi
    assert info.requests["cpu"] == 3100
    assert info.requests["memory"] == 1088 * 1024**2


def test_assume_forget_and_confirm() -> None:
    snap = Snapshot.from_objects(nodes=[node("a")])
    info = PodInfo.from_dict(pod("p", cpu="2"))
    generation = snap.generation.copy()
    snap.assume_pod(info, "a", T0)
    assert snap.requested[CPU, 0] == 2000 and snap.records["default/p"].assumed
    assert (snap.generation != generation).all()
    with pytest.raises(ValueError, match="already assumed"):
        snap.assume_pod(info, "a", T0)
    snap.forget_pod("default/p")
    assert snap.requested[CPU, 0] == 0
    snap.assume_pod(info, "a", T0)
    # the API server's view arrives: the pod is now bound on "a" — the assumption is confirmed, not doubled
    snap.upsert_pod(pod("p", cpu="2", node_name="a"))
    assert snap.requested[CPU, 0] == 2000 and not snap.records["default/p"].assumed
    snap.forget_pod("default/p")  # a bound pod is not forgotten
    assert snap.requested[CPU, 0] == 2000
    snap.remove_pod("default/p")
    assert snap.requested[CPU, 0] == 0 and "default/p" not in snap.pods


def test_pods_for_unknown_nodes_wait_and_node_removal_frees_the_row() -> None:
    snap = Snapshot.from_objects(pods=[pod("early", cpu="1", node_name="late-node")])
    assert snap.records == {}
    snap.upsert_node(node("late-node"))
    assert snap.node_of("default/early") == "late-node"
    row = snap.node_by_name("late-node").index  # type: ignore[union-attr]
    snap.upsert_node(node("other"))
    snap.remove_node("late-node")
    assert snap.node_indices().tolist() == [snap.node_by_name("other").index]  # type: ignore[union-attr]
    assert snap.requested[:, row].sum() == 0 and snap.records == {}
    snap.upsert_node(node("again"))
    assert snap.node_by_name("again").index == row  # type: ignore[union-attr]  # the row is reused


def test_finished_pods_do_not_hold_resources() -> None:
    done = pod("done", cpu="3", node_name="a")
    done["status"]["phase"] = "Succeeded"
    snap = Snapshot.from_objects(nodes=[node("a")], pods=[done])
    assert snap.requested[CPU, 0] == 0 and "default/done" in snap.pods


def test_label_columns_follow_node_updates() -> None:
    snap = Snapshot.from_objects(nodes=[node("a", labels={"zone": "z1"}), node("b")])
    column = snap.label_column("zone")
    assert column.codes[:2].tolist() == [column.vocab["z1"], -1]
    snap.upsert_node(node("b", labels={"zone": "z2", "gen": "7"}))
    snap.upsert_node(node("c", labels={"zone": "z1"}))
    column = snap.label_column("zone")
    assert [snap.node_name(r) for r in np.flatnonzero(column.codes == column.vocab["z1"])] == ["a", "c"]
    gen = snap.label_column("gen")
    assert gen.is_number[1] and gen.numbers[1] == 7


def test_node_metric_digest() -> None:
    metric = node_metric(
        "a", cpu="1500m", memory="2Gi", updated=T0, report_interval=30,
        aggregated=[
            {"duration": "5m0s", "usage": {"p95": {"resources": {"cpu": "2"}}, "avg": {}}},
            {"duration": "30m0s", "usage": {"p95": {"resources": {"cpu": "3"}}}},
            {"duration": "10m0s", "usage": {"p95": {}}},
        ],
        pods=[pod_metric("web", cpu="120m", memory="100Mi", priority="koord-prod")],
    )
    load = digest_node_metric(metric)
    assert load.update_time == T0 and load.report_interval == 30
    assert load.node_usage == {"cpu": 1500, "memory": 2 * GI}
    assert load.aggregated_usage("p95", 300) == {"cpu": 2000}
    assert load.aggregated_usage("p95", 600) is None  # cold window
    assert load.aggregated_usage("p95", None) == {"cpu": 3000}  # longest window with data
    assert load.aggregated_usage("avg", None) == {"cpu": 1500, "memory": 2 * GI}  # no avg anywhere: nodeUsage
    assert load.pod_usages["default/web"] == PodUsage("default", "web", {"cpu": 120, "memory": 100 * 1024**2}, "koord-prod")
    snap = Snapshot.from_objects(stores={NodeLoads: [metric]})  # a NodeMetric may come before its node
    info = snap.upsert_node(node("a"))
    loads = snap.store(NodeLoads)
    stored = loads.get("a")
    assert stored is not None and stored.node_usage == {"cpu": 1500, "memory": 2 * GI}
    generation = int(snap.generation[info.index])
    loads.remove(metric)
    assert loads.get("a") is None and snap.generation[info.index] > generation


@pytest.mark.parametrize(("obj", "field"), [
    ({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}},
     "spec.containers[0].resources.requests.cpu"),
    ({"metadata": {"name": "p"}, "spec": {"priority": "high"}}, "spec.priority"),
    ({"metadata": {"name": "p"}, "spec": {"tolerations": [{"key": "a", "operator": "Maybe"}]}}, "spec.tolerations[0].operator"),
    ({"metadata": {"name": "p"}, "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["x"]}]}]}}}}},
     "nodeSelectorTerms[0].matchExpressions[0].values[0]"),
    ({"metadata": {}}, "metadata.name"),
    ({"metadata": {"name": "p", "labels": {"a": 1}}}, "metadata.labels.a"),
])
def test_malformed_pods_name_the_field(obj: dict[str, object], field: str) -> None:
    with pytest.raises(MalformedObjectError, match=re.escape(field)):
        PodInfo.from_dict(obj)


def test_malformed_nodes_and_metrics_name_the_field_and_leave_the_snapshot_intact() -> None:
    snap = Snapshot.from_objects(nodes=[node("a")])
    bad = node("a", cpu="four")
    with pytest.raises(MalformedObjectError, match=r"status\.allocatable\.cpu"):
        snap.upsert_node(bad)
    assert snap.allocatable[CPU, 0] == 4000
    tainted = node("b", taints=[{"key": "k", "effect": "Sometimes"}])
    with pytest.raises(MalformedObjectError, match=r"spec.taints\[0\].effect"):
        snap.upsert_node(tainted)
    assert snap.node_by_name("b") is None
    metric = node_metric("a", cpu="1")
    metric["status"]["updateTime"] = "yesterday"
    with pytest.raises(MalformedObjectError, match=r"NodeMetric a status\.updateTime"):
        snap.store(NodeLoads).upsert(metric)


def test_a_pod_with_a_limit_past_the_range_rule_still_counts_its_requests_on_its_node() -> None:
    # Issue 29, example 5: the scheduler's pod parser dropped such a pod whole, overcommitting its node.
    big_limit = pod("p", cpu="1", memory="1Gi", node_name="a")
    big_limit["spec"]["containers"][0]["resources"]["limits"] = {"memory": "9Pi"}
    snap = Snapshot.from_objects(nodes=[node("a")], pods=[big_limit])
    assert snap.requested[[CPU, MEMORY, PODS], 0].tolist() == [1000, GI, 1]
    info = snap.pods["default/p"]
    assert info.part_problem is not None and "limits.memory" in info.part_problem.field


def test_a_bound_pod_requesting_past_the_range_rule_fills_its_node_for_that_resource() -> None:
    # Issue 29, "a bad part never hides the rest": a `memory: 8Ei` request made the whole pod malformed, so a bound
    # pod's requests vanished from its node (the permissive direction). Now it stays, the memory request held at the
    # range rule: the node has no memory left for anyone, its cpu is accounted as before.
    huge = pod("p", cpu="1", memory="8Ei", node_name="a")
    snap = Snapshot.from_objects(nodes=[node("a", memory="8Gi"), node("b")], pods=[huge])
    a = snap.node_by_name("a")
    assert a is not None and set(snap.records) == {"default/p"}
    assert snap.requested[[CPU, MEMORY, PODS], a.index].tolist() == [1000, 2**53, 1]
    assert snap.requested[MEMORY, a.index] > snap.allocatable[MEMORY, a.index]
    info = snap.pods["default/p"]
    assert info.part_problem is not None and info.part_problem.field.endswith("requests.memory")
