"""The storage digests (common/api/storage.py, podvolumes.py, csimigration.py) against the helpers of
k8s.io/component-helpers/storage/volume and k8s.io/csi-translation-lib they mirror."""

from __future__ import annotations

import pytest

from common.api.csimigration import inline_volume, migrated_node_affinity
from common.api.csimigration import persistent_volume as in_tree_pv
from common.api.malformed import MalformedObjectError
from common.api.podvolumes import parse_pod_volumes
from common.api.scheduling import parse_int64
from common.api.storage import (
    parse_claim,
    parse_csi_node,
    parse_persistent_volume,
    parse_storage_capacity,
    parse_storage_class,
    parse_volume_affinity,
)
from tests.storage_objects import claim, csi_node, node_affinity, persistent_volume, storage_capacity, storage_class


def test_a_claims_class_comes_from_the_beta_annotation_first() -> None:
    obj = claim("c", storage_class="spec-class", annotations={"volume.beta.kubernetes.io/storage-class": "beta"})
    assert parse_claim(obj).storage_class == "beta"
    assert parse_claim(claim("c")).storage_class == ""
    assert parse_claim(claim("c", volume_name="pv", bound=True)).fully_bound
    assert not parse_claim(claim("c", volume_name="pv")).fully_bound  # the PV controller has not finished


def test_pv_node_affinity_is_matched_on_labels_only() -> None:
    fields_only = {"required": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["elsewhere"]}]}]}}  # fmt: skip
    pv = parse_persistent_volume(persistent_volume("pv", affinity=fields_only))
    assert pv.node_affinity is not None and pv.node_affinity.matches({})  # CheckNodeAffinity sees no node fields
    local = parse_persistent_volume(persistent_volume("pv", hostname="a"))
    assert local.node_affinity is not None
    assert local.node_affinity.matches({"kubernetes.io/hostname": "a"})
    assert not local.node_affinity.matches({"kubernetes.io/hostname": "b"})
    assert parse_persistent_volume(persistent_volume("pv")).node_affinity is None


def test_an_unreadable_affinity_term_matches_nothing_and_is_named() -> None:
    affinity = {"required": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "rank", "operator": "Gt", "values": ["high"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}  # fmt: skip
    pv = parse_persistent_volume(persistent_volume("pv", affinity=affinity))
    assert pv.node_affinity is not None
    assert pv.node_affinity.matches({"zone": "a", "rank": "9"})  # the readable term still matches
    assert not pv.node_affinity.matches({"rank": "9"})
    assert pv.node_affinity.problem is not None and "'high' is not an integer" in pv.node_affinity.problem


def test_bad_quantities_are_malformed_with_the_field_named() -> None:
    bad = persistent_volume("pv", capacity="lots")
    with pytest.raises(MalformedObjectError, match=r"spec\.capacity\.storage"):
        parse_persistent_volume(bad)


def test_storage_class_topologies_and_binding_mode() -> None:
    sc = parse_storage_class(storage_class("s", provisioner="p", allowed_topologies={"zone": ["a", "b"]}))
    assert sc.waits_for_first_consumer and sc.provisions
    assert sc.topology_allows({"zone": "b"}) and not sc.topology_allows({"zone": "c"}) and not sc.topology_allows({})
    assert parse_storage_class(storage_class("s", mode=None)).binding_mode is None
    assert not parse_storage_class(storage_class("s")).provisions  # kubernetes.io/no-provisioner


def test_csi_objects() -> None:
    node = parse_csi_node(csi_node("n", {"a": 3, "b": None}, migrated=["kubernetes.io/gce-pd"]))
    assert node.limits == {"a": 3} and node.drivers == {"a", "b"} and node.migrated_plugins == {"kubernetes.io/gce-pd"}
    capacity = parse_storage_capacity(storage_capacity("c", "fast", "10Gi", node_labels={"zone": "a"}, maximum="2Gi"))
    assert capacity.limit is not None and capacity.limit.value() == 2 * 1024**3
    assert capacity.node_topology is not None and capacity.node_topology.matches({"zone": "a"})


def test_pod_volumes() -> None:
    spec = {"volumes": [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}},
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
        {"name": "cfg", "configMap": {"name": "x"}},
        {"name": "disk", "gcePersistentDisk": {"pdName": "pd-1", "readOnly": True}},
    ]}  # fmt: skip
    volumes = parse_pod_volumes(spec, "web-0")
    assert [(v.name, v.claim, v.ephemeral) for v in volumes] == [
        ("data", "data-0", False), ("scratch", "web-0-scratch", True), ("disk", "", False),
    ]
    disk = volumes[2]
    assert disk.disk is not None and disk.disk.read_only and disk.in_tree is not None
    assert disk.in_tree.plugin.driver == "pd.csi.storage.gke.io"
    assert disk.in_tree.handle == "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/pd-1"
    with pytest.raises(MalformedObjectError):
        parse_pod_volumes({"volumes": [{"persistentVolumeClaim": {}}]}, "p")


@pytest.mark.parametrize(("spec", "labels", "driver", "handle"), [
    ({"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-0123"}}, {}, "ebs.csi.aws.com", "vol-0123"),
    ({"awsElasticBlockStore": {"volumeID": "vol-0123"}}, {}, "ebs.csi.aws.com", "vol-0123"),
    ({"gcePersistentDisk": {"pdName": "pd"}}, {"topology.kubernetes.io/zone": "us-central1-a"},
     "pd.csi.storage.gke.io", "projects/UNSPECIFIED/zones/us-central1-a/disks/pd"),
    ({"gcePersistentDisk": {"pdName": "pd"}}, {"topology.kubernetes.io/zone": "us-central1-a__us-central1-b"},
     "pd.csi.storage.gke.io", "projects/UNSPECIFIED/regions/us-central1/disks/pd"),
    ({"azureDisk": {"diskName": "d", "diskURI": "/subs/d"}}, {}, "disk.csi.azure.com", "/subs/d"),
    ({"cinder": {"volumeID": "c-1"}}, {}, "cinder.csi.openstack.org", "c-1"),
    ({"portworxVolume": {"volumeID": "px-1"}}, {}, "pxd.portworx.com", "px-1"),
])  # fmt: skip
def test_in_tree_pvs_translate_to_their_csi_driver_and_handle(spec: dict[str, object], labels: dict[str, str],
                                                               driver: str, handle: str) -> None:  # fmt: skip
    found = in_tree_pv(spec, labels)
    assert found is not None and (found.plugin.driver, found.handle) == (driver, handle)
    assert inline_volume({"name": "v", "configMap": {}}) is None


@pytest.mark.parametrize(("zones", "problem"), [
    ("z1__z2", "zone in unexpected format, expected: {locale}-{region}-{zone}, got: z1"),
    ("us-central1-a__us-east1-b", "multiple or no regions gotten from zones, got: map[us-central1:{} us-east1:{}]"),
])  # fmt: skip
def test_a_regional_gce_pd_whose_zones_name_no_one_region_cannot_be_translated(zones: str, problem: str) -> None:
    """csi-translation-lib gceGetRegionFromZones fails on these; kube-scheduler's VolumeBinding then errors on a node
    that migrated the plugin, and NodeVolumeLimits does not count the volume (found by the differential test)."""
    found = in_tree_pv({"gcePersistentDisk": {"pdName": "pd"}}, {"topology.kubernetes.io/zone": zones})
    assert found is not None and found.handle == "" and found.problem == f"failed to get region from zones: {problem}"
    pv = parse_persistent_volume(persistent_volume("pv", source={"gcePersistentDisk": {"pdName": "pd"}},
                                                   labels={"topology.kubernetes.io/zone": zones}))  # fmt: skip
    assert pv.migration_problem == f"failed to get region from zones: {problem}"


def test_an_integer_is_read_as_go_reads_it() -> None:
    """strconv.ParseInt(v, 10, 64): a Gt value Python would read but Go would not makes the term unreadable."""
    assert [parse_int64(v) for v in ("5", "+5", "-5", "007")] == [5, 5, -5, 7]
    assert [parse_int64(v) for v in ("1_000", " 5", "5.0", "", "9223372036854775808")] == [None] * 5
    terms = [{"matchExpressions": [{"key": "rank", "operator": "Gt", "values": [v]}]} for v in ("1_000", "3")]
    affinity = parse_volume_affinity({"required": {"nodeSelectorTerms": terms}}, "spec.nodeAffinity")
    assert affinity is not None and len(affinity.terms) == 1
    assert affinity.matches({"rank": "4"}) and not affinity.matches({"rank": "4_0"})
    assert affinity.errors == ("nodeSelectorTerms[0].matchExpressions[0].values[0]: Invalid value: \"1_000\": "
                               "for 'Gt', 'Lt' operators, the value must be an integer",)


def test_a_migrated_pvs_zone_moves_to_the_drivers_topology_key() -> None:
    key = "topology.gke.io/zone"
    ga = node_affinity({"topology.kubernetes.io/zone": ["a"], "failure-domain.beta.kubernetes.io/region": ["r"]})
    out = migrated_node_affinity(ga, {}, key)
    assert out is not None
    keys = [e["key"] for e in out["required"]["nodeSelectorTerms"][0]["matchExpressions"]]
    assert keys == [key, "failure-domain.beta.kubernetes.io/region"]  # a GA zone leaves the region as it is
    beta = node_affinity({"failure-domain.beta.kubernetes.io/zone": ["a"],
                          "failure-domain.beta.kubernetes.io/region": ["r"]})  # fmt: skip
    out = migrated_node_affinity(beta, {}, key)
    assert out is not None
    keys = [e["key"] for e in out["required"]["nodeSelectorTerms"][0]["matchExpressions"]]
    assert keys == [key, "topology.kubernetes.io/region"]
    from_labels = migrated_node_affinity(None, {"topology.kubernetes.io/zone": "a__b"}, key)
    assert from_labels == {"required": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": key, "operator": "In", "values": ["a", "b"]}]}]}}  # fmt: skip
