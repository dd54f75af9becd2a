"""Plugins own what they watch: the scheduler's informers follow the enabled plugins' declarations."""

from __future__ import annotations

from common.kube.http import ClusterAccess, KubeHTTP
from common.kube.malformed import MalformedObjects
from scheduler_plugin.framework.interfaces import WatchedResource, watched_by
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.registry import frameworks_from_config
from scheduler_plugin.server.cache import ClusterCache


class Listener:
    def __init__(self) -> None:
        self.events: list[str] = []

    def pod_changed(self, pod: PodInfo, *, is_new: bool, spec_changed: bool) -> None: ...

    def pod_deleted(self, key: str, pod: PodInfo | None) -> None: ...

    def cluster_event(self, event: str) -> None:
        self.events.append(event)

    def gang_changed(self, gang_key: str) -> None: ...


def kinds(config: dict[str, object] | None) -> list[tuple[str, str]]:
    frameworks = frameworks_from_config(config, snapshot=Snapshot())
    return [(r.kind, r.group) for r in watched_by(p for f in frameworks.values() for p in f.plugins.values())]


def test_the_default_profile_watches_node_metrics_and_both_pod_group_groups() -> None:
    assert kinds(None) == [
        ("PodGroup", "scheduling.x-k8s.io"), ("PodGroup", "scheduling.sigs.k8s.io"),
        ("NodeMetric", "slo.koordinator.sh"),
    ]
    without_loadaware = {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "profiles": [{"plugins": {"multiPoint": {"disabled": [{"name": "LoadAwareScheduling"}]}}}],
    }
    assert ("NodeMetric", "slo.koordinator.sh") not in kinds(without_loadaware)


def test_an_out_of_tree_resource_is_watched_kept_and_reported_as_its_event() -> None:
    gpus = WatchedResource("GPUInventory", "example.com", "v1", "gpuinventories", "GPUInventoryChange")

    class OutOfTree:
        name = "OutOfTree"

        def watched_resources(self) -> tuple[WatchedResource, ...]:
            return (gpus, gpus)

    assert watched_by([OutOfTree()]) == [gpus]
    snapshot, listener = Snapshot(), Listener()
    http = KubeHTTP(ClusterAccess("http://127.0.0.1:1"))
    cache = ClusterCache(http, snapshot, listener, MalformedObjects(), resources=[gpus])
    assert list(cache.crds) == [gpus]
    handle = cache._custom_handler(gpus)
    obj = {"apiVersion": "example.com/v1", "kind": "GPUInventory", "metadata": {"name": "n1"}, "spec": {"free": 4}}
    handle("ADDED", obj, None)
    assert snapshot.custom_objects["GPUInventory"] == {"n1": obj}
    handle("DELETED", obj, None)
    assert snapshot.custom_objects["GPUInventory"] == {}
    assert listener.events == ["GPUInventoryChange", "GPUInventoryChange"]
