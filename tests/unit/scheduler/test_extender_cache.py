"""The extender's caches: watch events into the snapshot; malformed objects are skipped and counted."""

from __future__ import annotations

from prometheus_client import REGISTRY

from common.kube.http import KubeHTTP
from common.kube.kubeconfig import ClusterAccess
from scheduler_plugin.extender.cache import ASSIGNED_PODS, ExtenderCache
from scheduler_plugin.plugins.loadaware.nodeload import NodeLoads
from scheduler_plugin.plugins.loadaware.plugin import NODE_METRICS
from tests.objects import node, node_metric, pod


def malformed_count(kind: str, reason: str) -> float:
    value = REGISTRY.get_sample_value("loadline_malformed_objects_total", {"kind": kind, "reason": reason})
    assert value is not None, f"no series for {kind} {reason}"
    return value


def make_cache() -> ExtenderCache:
    return ExtenderCache(KubeHTTP(ClusterAccess("http://127.0.0.1:1")), resources=[NODE_METRICS])


def test_events_feed_the_snapshot() -> None:
    cache = make_cache()
    # the kinds the extender reads are counted from 0, so a dashboard shows 0 before the first bad object
    assert all(malformed_count(kind, "wrong_type") >= 0 for kind in ("Node", "Pod", "NodeMetric"))
    snap = cache.snapshot
    cache.nodes._emit("ADDED", node("a"), None)
    cache.watched["NodeMetric"]._emit("ADDED", node_metric("a", cpu="1", memory="1Gi"), None)
    cache.pods._emit("ADDED", pod("p", node_name="a"), None)
    loads = snap.store(NodeLoads)
    assert snap.node_by_name("a") is not None and loads.get("a") is not None
    assert snap.node_of("default/p") == "a"
    cache.pods._emit("DELETED", pod("p", node_name="a"), None)
    assert snap.node_of("default/p") is None
    cache.watched["NodeMetric"]._emit("DELETED", node_metric("a"), None)
    assert loads.get("a") is None
    cache.nodes._emit("DELETED", node("a"), None)
    assert snap.node_by_name("a") is None


def test_malformed_objects_are_skipped_and_counted() -> None:
    cache = make_cache()
    counted = (("Node", "invalid_quantity"), ("Pod", "negative_quantity"), ("NodeMetric", "invalid_quantity"))
    before = {k: malformed_count(*k) for k in counted}
    cache.nodes._emit("ADDED", node("a"), None)
    broken_node = node("a", cpu="4")
    broken_node["status"]["allocatable"]["cpu"] = "four"
    cache.nodes._emit("MODIFIED", broken_node, None)
    cache.pods._emit("ADDED", pod("p", cpu="-1", node_name="a"), None)
    broken_metric = node_metric("a", cpu="1")
    broken_metric["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] = "NaN"
    cache.watched["NodeMetric"]._emit("ADDED", broken_metric, None)
    assert [malformed_count(*k) - v for k, v in before.items()] == [1, 1, 1]
    cache.pods._emit("MODIFIED", pod("p", cpu="-1", node_name="a"), None)  # the same version again: counted once
    assert malformed_count("Pod", "negative_quantity") - before[("Pod", "negative_quantity")] == 1
    info = cache.snapshot.node_by_name("a")
    assert info is not None and info.allocatable["cpu"] == 4000  # the last good version stays
    assert "default/p" not in cache.snapshot.pods
    # and the cache goes on with good objects
    cache.pods._emit("ADDED", pod("q", node_name="a"), None)
    assert cache.snapshot.node_of("default/q") == "a"


def test_only_assigned_live_pods_are_watched() -> None:
    cache = make_cache()
    assert cache.pods.selectors == {"fieldSelector": ASSIGNED_PODS}
    assert ASSIGNED_PODS == "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
    assert not cache.synced


def test_a_pod_with_an_unusable_part_is_stored_and_counted_once() -> None:
    # Issue 29, example 5 in the extender: a `memory: 9Pi` limit no longer drops the pod's requests.
    cache = make_cache()
    before = malformed_count("Pod", "out_of_range")
    cache.nodes._emit("ADDED", node("a"), None)
    big_limit = pod("p", cpu="1", node_name="a")
    big_limit["spec"]["containers"][0]["resources"]["limits"] = {"memory": "9Pi"}
    cache.pods._emit("ADDED", big_limit, None)
    cache.pods._emit("MODIFIED", big_limit, None)  # the same version again: counted once
    assert cache.snapshot.node_of("default/p") == "a"
    assert cache.snapshot.pods["default/p"].requests["cpu"] == 1000
    assert malformed_count("Pod", "out_of_range") - before == 1
