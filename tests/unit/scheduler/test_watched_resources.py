"""Plugins own what they watch: the scheduler's informers follow the enabled plugins' declarations."""

from __future__ import annotations

from prometheus_client import REGISTRY

from common.kube.http import KubeHTTP
from common.kube.kubeconfig import ClusterAccess
from common.kube.malformed import MalformedObjects
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.events import NODE_METRIC
from scheduler_plugin.framework.interfaces import WatchedResource, watched_by
from scheduler_plugin.framework.nodecolumns import (
    FIXED_RESOURCES,
    MAX_POD_RESOURCE_COLUMNS,
    MAX_RESOURCE_COLUMNS,
    UNTRACKED,
)
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.coscheduling.gangs import POD_GROUP_RESOURCES
from scheduler_plugin.plugins.loadaware.plugin import NODE_METRICS
from scheduler_plugin.plugins.noderesources import NodeResourcesFit, NodeResourcesFitArgs
from scheduler_plugin.plugins.registry import frameworks_from_config
from scheduler_plugin.server.cache import ClusterCache
from tests.objects import node, node_metric, pod, pod_group


class Listener:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.gangs: list[str] = []

    def pod_changed(self, pod: PodInfo, *, is_new: bool, spec_changed: bool) -> None: ...

    def pod_deleted(self, key: str, pod: PodInfo | None) -> None: ...

    def cluster_event(self, event: str, pod: PodInfo | None = None, old: PodInfo | None = None) -> None:
        self.events.append(event)

    def gang_changed(self, gang_key: str) -> None:
        self.gangs.append(gang_key)


def kinds(config: dict[str, object] | None) -> list[tuple[str, str]]:
    frameworks = frameworks_from_config(config, snapshot=Snapshot())
    return [(r.kind, r.group) for r in watched_by(p for f in frameworks.values() for p in f.plugins.values())]


def test_the_default_profile_watches_node_metrics_both_pod_group_groups_and_the_storage_objects() -> None:
    storage = "storage.k8s.io"
    assert kinds(None) == [
        ("PodGroup", "scheduling.x-k8s.io"), ("PodGroup", "scheduling.sigs.k8s.io"),
        # the volume plugins' (each resource once, however many plugins read it)
        ("PersistentVolumeClaim", ""), ("PersistentVolume", ""), ("StorageClass", storage), ("CSINode", storage),
        ("VolumeAttachment", storage), ("CSIDriver", storage), ("CSIStorageCapacity", storage),
        # PodTopologySpread's default constraints read the pods' Services and controllers
        ("Service", ""), ("ReplicationController", ""), ("ReplicaSet", "apps"), ("StatefulSet", "apps"),
        ("Namespace", ""),  # InterPodAffinity's namespaceSelector
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


def test_how_a_change_wakes_pods_is_the_resources_own_declaration() -> None:
    """A NodeMetric change is a cluster event; a PodGroup change wakes only its gang (`wakes="gang"`), and a
    malformed PodGroup version (the last readable one stays) wakes nobody and is reported with its API version,
    since both PodGroup groups are watched and may hold the same name."""
    assert NODE_METRICS.wakes == "cluster" and {r.wakes for r in POD_GROUP_RESOURCES} == {"gang"}
    snapshot, listener, malformed = Snapshot(), Listener(), MalformedObjects()
    http = KubeHTTP(ClusterAccess("http://127.0.0.1:1"))
    cache = ClusterCache(http, snapshot, listener, malformed, resources=[*POD_GROUP_RESOURCES, NODE_METRICS])
    groups = cache._store_handler(POD_GROUP_RESOURCES[0], POD_GROUP_RESOURCES[0].store)  # type: ignore[arg-type]
    metrics = cache._store_handler(NODE_METRICS, NODE_METRICS.store)  # type: ignore[arg-type]

    metrics("ADDED", node_metric("n1", "1", "1Gi"), None)
    groups("ADDED", pod_group("g", 2), None)
    broken = pod_group("g", 2)
    broken["spec"]["minMember"] = "many"
    groups("MODIFIED", broken, None)
    assert listener.events == [NODE_METRIC]
    assert listener.gangs == ["default/g"]
    assert malformed.current() == [("PodGroup", "default/g (scheduling.x-k8s.io/v1alpha1)")]


def test_pod_and_node_events_inter_pod_placement_waits_for() -> None:
    """A pod becoming bound (by any scheduler) is AssignedPodAdd, a bound pod relabelled AssignedPodUpdate (what pod
    affinity and spreading wait for), a known node deleted NodeDelete; namespaces go into their store and report
    NamespaceChange."""
    from scheduler_plugin.framework.events import (
        ASSIGNED_POD_ADD,
        ASSIGNED_POD_UPDATE,
        NAMESPACE_CHANGE,
        NODE_ADD,
        NODE_DELETE,
    )
    from scheduler_plugin.plugins.interpodaffinity.namespaces import NAMESPACES, Namespaces

    snapshot, listener = Snapshot(), Listener()
    http = KubeHTTP(ClusterAccess("http://127.0.0.1:1"))
    cache = ClusterCache(http, snapshot, listener, MalformedObjects(), resources=[NAMESPACES])
    cache._on_node("ADDED", node("n1"), None)
    pending = pod("p", labels={"app": "a"})
    cache._on_pod("ADDED", pending, None)
    bound = pod("p", labels={"app": "a"}, node_name="n1")
    cache._on_pod("MODIFIED", bound, pending)
    status_only = {**bound, "status": {"phase": "Running", "podIP": "10.0.0.1"}}
    cache._on_pod("MODIFIED", status_only, bound)
    relabelled = pod("p", labels={"app": "b"}, node_name="n1")
    cache._on_pod("MODIFIED", relabelled, status_only)
    cache._on_node("DELETED", node("n1"), None)
    cache._on_node("DELETED", node("never-seen"), None)
    namespaces = cache._store_handler(NAMESPACES, Namespaces)
    namespaces("ADDED", {"metadata": {"name": "team-a", "labels": {"team": "a"}}}, None)
    assert listener.events == [NODE_ADD, ASSIGNED_POD_ADD, ASSIGNED_POD_UPDATE, NODE_DELETE, NAMESPACE_CHANGE]
    assert snapshot.store(Namespaces).labels("team-a") == {"team": "a"}
    assert snapshot.store(Namespaces).labels("unknown") == {}


def malformed_count(kind: str, reason: str) -> float:
    labels = {"kind": kind, "reason": reason}
    return REGISTRY.get_sample_value("loadline_malformed_objects_total", labels) or 0.0


def test_resource_columns_are_bounded_and_names_past_the_bound_fit_no_node() -> None:
    """Issue 29: every distinct resource name a pod requested became a column of every node's arrays, without bound.
    Pods may add MAX_POD_RESOURCE_COLUMNS columns for names no node offers; past it their new names share the
    UNTRACKED column, which no node offers: those pods are counted (once per version), a pending pod requesting one
    fits no node, bound pods stay counted. What nodes offer still gets a column up to MAX_RESOURCE_COLUMNS (a device
    plugin installed after tenants wrote made-up names); a node's names past that are not offered (counted)."""
    snapshot = Snapshot()
    cache = ClusterCache(KubeHTTP(ClusterAccess("http://127.0.0.1:1")), snapshot, Listener(), MalformedObjects())
    cache._on_node("ADDED", node("n1", cpu="64", memory="64Gi", rv="1"), None)
    pods_before, nodes_before = malformed_count("Pod", "out_of_range"), malformed_count("Node", "out_of_range")
    for i in range(6):  # 6 x 60 names, each pod within MAX_POD_RESOURCE_NAMES: 360 names no node offers
        names = {f"example.com/r{i}-{j}": "1" for j in range(60)}
        cache._on_pod("ADDED", pod(f"p{i}", cpu="100m", requests=names, node_name="n1", rv="1"), None)
    fixed = len(FIXED_RESOURCES)
    assert len(snapshot.resource_names) == fixed + MAX_POD_RESOURCE_COLUMNS + 1
    assert snapshot.resource_names[-1] == UNTRACKED
    assert malformed_count("Pod", "out_of_range") == pods_before + 4  # p2 past the bound from its 9th name, p3-p5
    a = snapshot.node_by_name("n1")
    assert a is not None and set(a.pods) == {f"default/p{i}" for i in range(6)}  # all still counted on their node
    untracked = snapshot.resource_column(UNTRACKED)
    assert snapshot.requested[untracked, a.index] == 360 - MAX_POD_RESOURCE_COLUMNS
    assert snapshot.allocatable[untracked].max() == 0
    # A pending pod requesting a name past the bound fits no node (it is counted); one without fits.
    fit = NodeResourcesFit(NodeResourcesFitArgs())
    for requested, fits in (({}, True), ({"vendor.com/new": "1"}, False)):
        info = PodInfo.from_dict(pod("pending", cpu="100m", requests=requested))
        result = fit.filter(CycleState(), info, snapshot, snapshot.node_indices())
        assert (result.feasible is None or bool(result.feasible.all())) is fits, requested  # None: all pass
        assert (snapshot.part_problem(info) is None) is fits
    assert [r.reason for r in result.rejections] == [f"Insufficient {UNTRACKED}"]
    # A device plugin's resource that appears after all that still gets its column and is offered (not counted).
    gpu = node("n2", extra={"vendor.com/gpu": "8"}, rv="1")
    cache._on_node("ADDED", gpu, None)
    n2 = snapshot.node_by_name("n2")
    assert n2 is not None and snapshot.allocatable[snapshot.resource_column("vendor.com/gpu"), n2.index] == 8
    assert malformed_count("Node", "out_of_range") == nodes_before
    # Names nodes offer past MAX_RESOURCE_COLUMNS are not offered (counted once per version); the rest are.
    many = node("n3", extra={f"vendor.com/d{j}": "1" for j in range(200)}, rv="1")
    cache._on_node("ADDED", many, None)
    cache._on_node("MODIFIED", many, many)
    assert malformed_count("Node", "out_of_range") == nodes_before + 1
    assert len(snapshot.resource_names) == MAX_RESOURCE_COLUMNS
    n3 = snapshot.node_by_name("n3")
    assert n3 is not None and snapshot.allocatable[untracked, n3.index] == 0 and snapshot.allocatable[0, n3.index] == 4000
    assert "vendor.com/d199" not in snapshot.resource_names and "vendor.com/d0" in snapshot.resource_names


def test_an_unreadable_raw_allocatable_annotation_is_counted_by_the_scheduler() -> None:
    """Issue 29: the Node digest reads Koordinator's raw-allocatable annotation as absent when it does not read (as
    Koordinator does), but the scheduler never counted it. Now it is {kind="Node", reason="invalid_value"}, once per
    version, and the node keeps its status.allocatable (LoadAware's denominator without the annotation)."""
    snapshot = Snapshot()
    malformed = MalformedObjects()
    cache = ClusterCache(KubeHTTP(ClusterAccess("http://127.0.0.1:1")), snapshot, Listener(), malformed)
    before = malformed_count("Node", "invalid_value")
    bad = node("n1", rv="1", annotations={"node.koordinator.sh/raw-allocatable": '{"cpu": "lots"}'})
    cache._on_node("ADDED", bad, None)
    cache._on_node("MODIFIED", bad, None)  # the same version re-listed
    assert malformed_count("Node", "invalid_value") == before + 1
    info = snapshot.node_by_name("n1")
    assert info is not None and info.raw_allocatable is None and info.allocatable["cpu"] == 4000
    assert malformed.current() == [("Node", "n1")]
    fixed = node("n1", rv="2", annotations={"node.koordinator.sh/raw-allocatable": '{"cpu": "8"}'})
    cache._on_node("MODIFIED", fixed, bad)
    assert malformed.current() == [] and info.raw_allocatable == {"cpu": 8000}
