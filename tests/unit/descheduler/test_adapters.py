"""API objects → the core's records, and the round inputs built from reflector stores."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from prometheus_client import REGISTRY

from common.api.malformed import MalformedObjectError, MalformedReason
from common.api.nodemetric_digest import digest_node_metric
from common.api.scheduling import Requirement, Taint, Toleration
from scheduler_plugin.descheduler import DetectorStore, plan_round
from scheduler_plugin.descheduler.adapters import malformed_problem, node_snapshot, pod_snapshot, round_node_metric
from scheduler_plugin.descheduler.inputs import InputCache
from scheduler_plugin.descheduler.model import OwnerRef
from tests.unit.descheduler.builders import make_args
from tests.unit.descheduler.objects import (
    NOW,
    GiB,
    node_obj,
    nodemetric_obj,
    pod_obj,
    replicaset_obj,
    store,
)


def build(cache: InputCache, *stores: Any) -> Any:
    return asyncio.run(cache.build(*stores))


# ----------------------------------------------------------------------------- nodes
def test_node_allocatable_in_core_units_with_taints_and_raw_allocatable() -> None:
    obj = node_obj(
        "n1",
        cpu="7500m",
        memory="32Gi",
        labels={"pool": "a"},
        annotations={"node.koordinator.sh/raw-allocatable": json.dumps({"cpu": "10", "memory": "40Gi"})},
        unschedulable=True,
        taints=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}, {"key": "x", "effect": "NoExecute"}],
    )
    snap = node_snapshot(obj)
    assert snap.allocatable == {"cpu": 7500.0, "memory": 32.0 * GiB, "pods": 110.0}
    assert snap.raw_allocatable == {"cpu": 10_000.0, "memory": 40.0 * GiB}
    assert snap.labels == {"pool": "a"} and snap.unschedulable
    assert snap.taints == (Taint("gpu", "true", "NoSchedule"), Taint("x", "", "NoExecute"))


def test_malformed_raw_allocatable_falls_back_to_status_allocatable() -> None:
    for text in ("{not json", '["cpu"]', '{"cpu": "lots"}'):
        obj = node_obj("n1", annotations={"node.koordinator.sh/raw-allocatable": text})
        assert node_snapshot(obj).raw_allocatable is None


def test_an_unreadable_raw_allocatable_annotation_is_counted_once_per_version_and_the_node_stays() -> None:
    # Issue 29: the round read it as absent (as Koordinator does) but never counted it.
    def counted() -> float:
        labels = {"kind": "Node", "reason": "invalid_value"}
        return REGISTRY.get_sample_value("loadline_malformed_objects_total", labels) or 0.0

    before = counted()
    cache = InputCache()
    bad = node_obj("n1", annotations={"node.koordinator.sh/raw-allocatable": '{"cpu": "lots"}'})
    inputs = build(cache, store(bad), {}, store(nodemetric_obj("n1")))
    assert [n.name for n in inputs.nodes] == ["n1"] and inputs.nodes[0].raw_allocatable is None
    assert inputs.nodes[0].allocatable["cpu"] == 10_000.0 and inputs.node_problems == {}
    assert counted() == before + 1
    build(cache, store(json.loads(json.dumps(bad))), {}, store(nodemetric_obj("n1")))  # re-listed, same version
    assert counted() == before + 1
    assert cache.malformed.current() == [("Node", "n1")]


def test_unparseable_allocatable_is_malformed_and_the_round_skips_the_node() -> None:
    with pytest.raises(MalformedObjectError) as bad:
        node_snapshot(node_obj("n1", cpu="ten"))
    assert bad.value.field == "status.allocatable.cpu" and bad.value.reason is MalformedReason.INVALID_QUANTITY
    inputs = build(InputCache(), store(node_obj("n1", cpu="ten")), {}, store(nodemetric_obj("n1")))
    plan = plan_round(
        make_args(), inputs.nodes, inputs.pods, inputs.node_metrics, detectors=DetectorStore(300), now=NOW
    )
    assert inputs.nodes == [] and inputs.node_problems["n1"].startswith("Node malformed")
    assert "n1" not in plan.skipped_nodes  # not measured at all


# ----------------------------------------------------------------------------- pods
def test_a_pod_requesting_past_the_range_rule_stays_in_the_round_counted_once_per_version() -> None:
    # Issue 29, "a bad part never hides the rest": a `memory: 8Ei` request made the whole pod malformed and the round
    # left its node out. Now the digest holds the request at the range rule (the node full of memory, the pod fitting
    # nowhere else, so it is never moved), the round keeps the node, and the part is counted once per version.
    def counted() -> float:
        labels = {"kind": "Pod", "reason": "out_of_range"}
        return REGISTRY.get_sample_value("loadline_malformed_objects_total", labels) or 0.0

    before = counted()
    huge = pod_obj("huge", "n1", memory="8Ei")
    cache = InputCache()
    inputs = build(cache, store(node_obj("n1")), store(huge), store(nodemetric_obj("n1")))
    assert inputs.node_problems == {} and [n.name for n in inputs.nodes] == ["n1"]
    (snap,) = inputs.pods
    assert snap.requests["memory"] == float(2**53) and snap.requests["cpu"] == 100.0
    assert counted() == before + 1
    build(cache, store(node_obj("n1")), store(json.loads(json.dumps(huge))), store(nodemetric_obj("n1")))
    assert counted() == before + 1  # the same version re-listed


def test_pod_fields_the_round_uses() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]
            }
        }
    }
    obj = pod_obj(
        "p",
        "n1",
        cpu="1500m",
        memory="1Gi",
        labels={"koordinator.sh/priority-class": "koord-batch"},
        priority=5500,
        nodeSelector={"disk": "ssd"},
        affinity=affinity,
        tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        volumes=[{"name": "scratch", "emptyDir": {}}],
        initContainers=[{"name": "init", "resources": {"requests": {"cpu": "2"}}}],
    )
    obj["status"]["qosClass"] = "Burstable"
    snap = pod_snapshot(obj, workload_replicas=6)
    assert snap.key == ("default", "p") and snap.node_name == "n1"
    assert snap.owner == OwnerRef("ReplicaSet", "web", "uid-web")
    assert snap.priority == 5500 and snap.k8s_qos == "Burstable"
    assert snap.requests == {"cpu": 2000.0, "memory": float(GiB)}  # init container peak, as kube-scheduler
    assert snap.node_selector == {"disk": "ssd"}
    (term,) = snap.required_node_affinity
    assert term.match_expressions == (Requirement("zone", "In", ("a", "b")),)
    assert snap.tolerations == (Toleration("gpu", "Exists", "", "NoSchedule"),)
    assert snap.has_local_storage and snap.ready and not snap.terminating
    assert snap.phase == "Running" and snap.workload_replicas == 6
    assert snap.creation_timestamp == NOW - 3600


def test_owner_is_the_controller_reference_only() -> None:
    obj = pod_obj("p", "n1", owner=None)
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "u"}]
    assert pod_snapshot(obj).owner is None  # not a controller: the pod counts as bare


def test_terminating_not_ready_and_garbage_quantities() -> None:
    obj = pod_obj("p", "n1", ready=False, deleted=NOW)
    snap = pod_snapshot(obj)
    assert snap.terminating and not snap.ready
    obj["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "a lot"
    with pytest.raises(MalformedObjectError) as bad_cpu:
        pod_snapshot(obj)  # the round leaves the node alone: what the pod uses is unknown
    assert bad_cpu.value.reason is MalformedReason.INVALID_QUANTITY and "default/p" in str(bad_cpu.value)
    obj = pod_obj("p", "n1")
    obj["spec"]["priority"] = "high"
    with pytest.raises(MalformedObjectError) as bad_priority:
        pod_snapshot(obj)
    assert bad_priority.value.field == "spec.priority" and bad_priority.value.reason is MalformedReason.WRONG_TYPE


# ----------------------------------------------------------------------------- NodeMetrics
def test_node_metric_usages_in_core_units() -> None:
    digest = digest_node_metric(nodemetric_obj("n1", [("ns", "a", "300m", "1Gi")], system_cpu="0.5"))
    assert malformed_problem(digest) is None
    parsed = round_node_metric(digest)
    assert parsed.update_time == NOW - 30
    assert parsed.system_usage == {"cpu": 500.0, "memory": 2.0 * GiB}
    assert parsed.pod_usages == {("ns", "a"): {"cpu": 300.0, "memory": float(GiB)}}


def test_node_metric_never_reported_is_not_malformed() -> None:
    digest = digest_node_metric({"metadata": {"name": "n1"}})
    assert malformed_problem(digest) is None
    assert round_node_metric(digest).system_usage is None  # the core says "no status.nodeMetric"


def test_only_the_pods_kept_on_the_node_count() -> None:
    digest = digest_node_metric(nodemetric_obj("n1", [("ns", "a", "300m", "1Gi"), ("ns", "gone", "1", "1Gi")]))
    assert set(round_node_metric(digest, keep={("ns", "a")}).pod_usages) == {("ns", "a")}


def test_malformed_node_metrics_name_the_field() -> None:
    negative = nodemetric_obj("n1", [("ns", "a", "300m", "1Gi"), ("ns", "b", "-100m", "1Gi")])
    bad_time = nodemetric_obj("n1")
    bad_time["status"]["updateTime"] = "yesterday"
    nameless = nodemetric_obj("n1", [("ns", "", "1", "1")])
    garbage = nodemetric_obj("n1", system_cpu="many")
    wrong_type = nodemetric_obj("n1")
    wrong_type["status"]["podsMetric"] = {"a": 1}
    cases = {
        "status.podsMetric[1].podUsage.resources.cpu: '-100m' is not a valid usage quantity": negative,
        "status.updateTime: 'yesterday' is not an RFC 3339 time": bad_time,
        "status.podsMetric[0]: needs a namespace and a name": nameless,
        "status.nodeMetric.systemUsage.resources.cpu: 'many' is not a valid usage quantity": garbage,
        "status.podsMetric: must be a list": wrong_type,
    }
    for expected, obj in cases.items():
        assert malformed_problem(digest_node_metric(obj)) == "NodeMetric malformed: " + expected


# ----------------------------------------------------------------------------- round inputs
def test_conversions_are_reused_while_the_store_holds_the_same_object() -> None:
    cache = InputCache()
    nodes, pods = store(node_obj("n1")), store(pod_obj("p", "n1"))
    first = build(cache, nodes, pods, {})
    second = build(cache, nodes, pods, {})
    assert first.nodes[0] is second.nodes[0] and first.pods[0] is second.pods[0]
    changed = store(pod_obj("p", "n1", cpu="2", rv="2"))
    third = build(cache, nodes, changed, {})
    assert third.pods[0] is not second.pods[0] and third.pods[0].requests["cpu"] == 2000.0
    assert build(cache, nodes, {}, {}).pods == []  # deleted objects leave the cache


def test_workload_replicas_come_from_the_replicaset() -> None:
    cache = InputCache()
    pods = store(pod_obj("p", "n1"), pod_obj("q", "n1", owner=("ReplicaSet", "other")))
    inputs = build(cache, {}, pods, {}, [store(replicaset_obj("web", 6))])
    by_name = {p.name: p for p in inputs.pods}
    assert by_name["p"].workload_replicas == 6
    assert by_name["q"].workload_replicas is None  # unknown owner: the round counts its pods
    inputs = build(cache, {}, pods, {}, [store(replicaset_obj("web", 9, rv="2"))])
    assert {p.name: p.workload_replicas for p in inputs.pods}["p"] == 9


def test_metric_entries_of_departed_and_terminating_pods_do_not_count() -> None:
    metric = nodemetric_obj(
        "n1", [("default", "stays", "1", "0"), ("default", "leaving", "2", "0"), ("default", "gone", "3", "0")]
    )
    pods = store(pod_obj("stays", "n1"), pod_obj("leaving", "n1", deleted=NOW), pod_obj("elsewhere", "n2"))
    inputs = build(InputCache(), store(node_obj("n1")), pods, store(metric))
    assert set(inputs.node_metrics["n1"].pod_usages) == {("default", "stays")}


def test_a_malformed_node_metric_is_reported_and_left_out() -> None:
    bad = nodemetric_obj("n1", system_cpu="-1")
    inputs = build(InputCache(), store(node_obj("n1"), node_obj("n2")), {}, store(bad, nodemetric_obj("n2")))
    assert set(inputs.node_metrics) == {"n2"}
    assert inputs.node_problems == {
        "n1": "NodeMetric malformed: status.nodeMetric.systemUsage.resources.cpu: '-1' is not a valid usage quantity"
    }


def test_api_objects_to_a_plan_hand_computed() -> None:
    """The integration scenario in-process: hot at 86 % (system 500m + 8100m), excess 1100m over 75 %.
    web-a is koord-batch (first); of the rest web-d fits the excess best (1500/1100 → 1.73).
    a: 8600 → 8300, still hot; d: 8300 → 6800 ≤ 7500, done. kube-system's koord-free pod is never a candidate."""
    usage = {"web-a": 300, "web-b": 2000, "web-c": 1000, "web-d": 1500, "web-e": 1600, "web-f": 1600}
    batch = {"koordinator.sh/priority-class": "koord-batch"}
    pods = [pod_obj(n, "hot", cpu=f"{u}m", labels=batch if n == "web-a" else None) for n, u in usage.items()]
    pods.append(pod_obj("ks", "hot", namespace="kube-system", labels={"koordinator.sh/priority-class": "koord-free"}))
    metric_pods = [("default", n, f"{u}m", "1Gi") for n, u in usage.items()] + [("kube-system", "ks", "100m", "256Mi")]
    inputs = build(
        InputCache(),
        store(node_obj("hot"), node_obj("idle-0"), node_obj("idle-1")),
        store(*pods),
        store(nodemetric_obj("hot", metric_pods), nodemetric_obj("idle-0"), nodemetric_obj("idle-1")),
        [store(replicaset_obj("web", 6))],
    )
    args = make_args()
    plan = plan_round(args, inputs.nodes, inputs.pods, inputs.node_metrics, detectors=DetectorStore(300), now=NOW)
    assert [e.pod.name for e in plan.evictions] == ["web-a", "web-d"]
    assert [e.reason for e in plan.evictions] == [
        "node is overutilized, node cpu usage(86.00%)>threshold(75.00%)",
        "node is overutilized, node cpu usage(83.00%)>threshold(75.00%)",
    ]
    assert [e.target_node for e in plan.evictions] == ["idle-0", "idle-1"]
    assert plan.pod_skips.get("namespace not evictable") == 1


def test_an_object_that_fails_to_convert_skips_its_node_not_the_round(monkeypatch: pytest.MonkeyPatch) -> None:
    from scheduler_plugin.descheduler import inputs as inputs_module

    real = inputs_module.pod_snapshot

    def fragile(obj: dict[str, Any], workload_replicas: int | None = None, digest: Any = None) -> Any:
        if obj["metadata"]["name"] == "odd":
            raise KeyError("surprise")
        return real(obj, workload_replicas, digest)

    monkeypatch.setattr(inputs_module, "pod_snapshot", fragile)
    pods = store(pod_obj("odd", "n1"), pod_obj("fine", "n2"))
    inputs = build(
        InputCache(), store(node_obj("n1"), node_obj("n2")), pods, store(nodemetric_obj("n1"), nodemetric_obj("n2"))
    )
    assert [p.name for p in inputs.pods] == ["fine"]
    assert inputs.node_problems == {"n1": "pod default/odd malformed: KeyError: 'surprise'"}
    assert set(inputs.node_metrics) == {"n2"}
