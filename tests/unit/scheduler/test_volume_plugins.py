"""VolumeRestrictions, VolumeZone and NodeVolumeLimits against the cases of kube-scheduler's
volume_restrictions_test.go, volume_zone_test.go and csi_test.go (same objects, same statuses)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.runtime import Framework
from scheduler_plugin.framework.status import Code
from scheduler_plugin.plugins import nodevolumelimits, volumerestrictions, volumezone
from scheduler_plugin.plugins.nodevolumelimits import NodeVolumeLimits
from scheduler_plugin.plugins.volumerestrictions import VolumeRestrictions
from scheduler_plugin.plugins.volumezone import VolumeZone
from tests.objects import node, pod
from tests.storage_objects import (
    claim,
    csi_node,
    persistent_volume,
    storage_class,
    volume_attachment,
    with_claims,
)
from tests.unit.scheduler.volume_support import filter_all, volume_snapshot

Obj = dict[str, Any]
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"


# --------------------------------------------------------------------------- VolumeRestrictions
def gce(name: str, read_only: bool = False) -> Obj:
    return {"name": f"v-{name}", "gcePersistentDisk": {"pdName": name, "readOnly": read_only}}


def ebs(volume_id: str) -> Obj:
    return {"name": f"v-{volume_id}", "awsElasticBlockStore": {"volumeID": volume_id}}


def rbd(image: str, monitors: list[str], read_only: bool = False) -> Obj:
    return {"name": f"v-{image}", "rbd": {"monitors": monitors, "pool": "rbd", "image": image, "readOnly": read_only}}


def iscsi(iqn: str, read_only: bool = False) -> Obj:
    return {"name": f"v-{iqn}", "iscsi": {"targetPortal": "127.0.0.1:3260", "iqn": iqn, "lun": 0,
                                           "readOnly": read_only}}  # fmt: skip


@pytest.mark.parametrize(("existing", "new", "conflict"), [
    (gce("foo"), gce("foo"), True),
    (gce("foo"), gce("bar"), False),
    (gce("foo", True), gce("foo", True), False),  # both read-only
    (gce("foo", True), gce("foo"), True),
    (ebs("vol-1"), ebs("vol-1"), True),  # EBS: never shared
    (ebs("vol-1"), ebs("vol-2"), False),
    (rbd("img", ["a", "b"]), rbd("img", ["b", "c"]), True),  # a monitor in common
    (rbd("img", ["a"]), rbd("img", ["c"]), False),
    (rbd("img", ["a"], True), rbd("img", ["a"], True), False),
    (iscsi("iqn.a"), iscsi("iqn.a"), True),
    (iscsi("iqn.a", True), iscsi("iqn.a", True), False),
])  # fmt: skip
def test_inline_disks_conflict_as_kube_scheduler_says(existing: Obj, new: Obj, conflict: bool) -> None:
    snap = volume_snapshot([node("a"), node("b")], [with_claims(pod("old", node_name="a"), inline=[existing])])
    status, rejected, result = filter_all(VolumeRestrictions(Framework("t", snapshot=snap)), snap,
                                          with_claims(pod("new"), inline=[new]))  # fmt: skip
    assert status.is_success()
    assert rejected == ({"a": [volumerestrictions.DISK_CONFLICT]} if conflict else {})
    if conflict:
        assert result is not None and result.rejections[0].code is Code.UNSCHEDULABLE  # preemption can help


def test_read_write_once_pod_claim_in_use_anywhere_keeps_the_pod_off_every_node() -> None:
    rwop = claim("rwop", storage_class="wait", access_modes=["ReadWriteOncePod"])
    user = with_claims(pod("user", node_name="a"), "rwop")
    snap = volume_snapshot([node("a"), node("b")], [user], claims=[rwop, claim("plain", storage_class="wait")])
    plugin = VolumeRestrictions(Framework("t", snapshot=snap))
    state = CycleState()
    status, rejected, _ = filter_all(plugin, snap, with_claims(pod("p"), "rwop"), state)
    assert status.is_success()
    reason = volumerestrictions.READ_WRITE_ONCE_POD_CONFLICT
    assert rejected == {"a": [reason], "b": [reason]}
    # Preemption removing the user from node a makes room there only (kube-scheduler clones the state per node).
    info = PodInfo.from_dict(with_claims(pod("p"), "rwop"))
    a = snap.node_by_name("a")
    assert a is not None
    plugin.remove_pods(state, info, snap, np.asarray([a.index], np.intp), [snap.pods["default/user"]])
    after = plugin.filter(state, info, snap, snap.node_indices())
    assert after.feasible is not None and after.feasible.tolist() == [True, False]
    # A claim nobody uses, or not ReadWriteOncePod: nothing to check.
    assert filter_all(plugin, snap, with_claims(pod("q"), "plain"))[0].is_skip()


def test_a_missing_claim_is_refused_before_anything_else() -> None:
    snap = volume_snapshot([node("a")])
    status, _, _ = filter_all(VolumeRestrictions(Framework("t", snapshot=snap)), snap, with_claims(pod("p"), "gone"))
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.message == 'persistentvolumeclaim "gone" not found'


# --------------------------------------------------------------------------- VolumeZone
ZONE_PVS = [
    persistent_volume("Vol_1", labels={BETA_ZONE: "us-west1-a"}, phase="Bound"),
    persistent_volume("Vol_2", labels={BETA_REGION: "us-west1", "uselessLabel": "none"}, phase="Bound"),
    persistent_volume("Vol_Stable_1", labels={ZONE: "us-west1-a"}, phase="Bound"),
    persistent_volume("Vol_Stable_2", labels={REGION: "us-west1"}, phase="Bound"),
    persistent_volume("Vol_Multi", labels={ZONE: "us-west1-a__us-west1-b"}, phase="Bound"),
]
ZONE_CLAIMS = [claim(f"PVC_{pv['metadata']['name']}", volume_name=pv["metadata"]["name"], bound=True)
               for pv in ZONE_PVS]  # fmt: skip


@pytest.mark.parametrize(("pv", "labels", "fits"), [
    ("Vol_1", {}, True),  # a node without zone labels fits any volume
    ("Vol_1", {BETA_ZONE: "us-west1-a", "uselessLabel": "none"}, True),
    ("Vol_1", {BETA_ZONE: "no_us-west1-a"}, False),
    ("Vol_2", {BETA_REGION: "us-west1"}, True),
    ("Vol_2", {BETA_REGION: "no_us-west1"}, False),
    ("Vol_1", {ZONE: "us-west1-a"}, True),  # the PV's beta label against the node's GA label
    ("Vol_1", {ZONE: "us-west1-b"}, False),
    ("Vol_Stable_1", {ZONE: "us-west1-a"}, True),
    ("Vol_Stable_1", {BETA_ZONE: "us-west1-a"}, False),  # a GA PV label is not matched against beta node labels
    ("Vol_Stable_2", {REGION: "no_us-west1"}, False),
    ("Vol_Multi", {ZONE: "us-west1-b"}, True),
    ("Vol_Multi", {ZONE: "us-west1-c"}, False),
])  # fmt: skip
def test_volume_zone_single_node(pv: str, labels: dict[str, str], fits: bool) -> None:
    snap = volume_snapshot([node("host1", labels=labels)], pvs=ZONE_PVS, claims=ZONE_CLAIMS)
    status, rejected, result = filter_all(VolumeZone(), snap, with_claims(pod("p"), f"PVC_{pv}"))
    assert status.is_success()
    assert rejected == ({} if fits else {"host1": [volumezone.REASON]})
    if not fits:
        assert result is not None and result.rejections[0].code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE


@pytest.mark.parametrize(("claims", "classes", "message"), [
    ([claim("c", volume_name="Vol_not_exist", bound=True)], [], 'persistentvolume "Vol_not_exist" not found'),
    ([claim("c")], [], "PersistentVolumeClaim had no pv name and storageClass name"),
    ([claim("c", storage_class="gone")], [], 'storageclass.storage.k8s.io "gone" not found'),
    ([claim("c", storage_class="now")], [storage_class("now", mode="Immediate")], "PersistentVolume had no name"),
    ([], [], 'persistentvolumeclaim "c" not found'),
])  # fmt: skip
def test_volume_zone_refuses_what_it_cannot_find(claims: list[Obj], classes: list[Obj], message: str) -> None:
    snap = volume_snapshot([node("host1")], claims=claims, classes=classes)
    status, _, _ = filter_all(VolumeZone(), snap, with_claims(pod("p"), "c"))
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE and status.message == message


def test_volume_zone_skips_unbound_wait_for_first_consumer_claims_and_pods_without_claims() -> None:
    snap = volume_snapshot([node("host1", labels={ZONE: "z"})], claims=[claim("c", storage_class="wait")],
                           classes=[storage_class("wait")])  # fmt: skip
    assert filter_all(VolumeZone(), snap, with_claims(pod("p"), "c"))[0].is_skip()
    assert filter_all(VolumeZone(), snap, pod("q"))[0].is_skip()


# --------------------------------------------------------------------------- NodeVolumeLimits
def csi_pv(name: str, handle: str, driver: str = "csi.example.com") -> Obj:
    return persistent_volume(name, csi=(driver, handle), phase="Bound")


def limits_snapshot(existing: list[Obj], *, limit: int | None = 2, extra_pvs: list[Obj] | None = None,
                    attachments: list[Obj] | None = None, classes: list[Obj] | None = None,
                    claims: list[Obj] | None = None) -> Any:  # fmt: skip
    pvs = [csi_pv(f"pv-{i}", f"h{i}") for i in range(4)] + (extra_pvs or [])
    bound = [claim(f"c{i}", volume_name=f"pv-{i}", bound=True) for i in range(4)] + (claims or [])
    return volume_snapshot([node("limited"), node("free")], existing, pvs=pvs, claims=bound, classes=classes or [],
                           csi_nodes=[csi_node("limited", {"csi.example.com": limit})],
                           attachments=attachments or [])  # fmt: skip


def test_volumes_over_the_csi_node_limit_are_refused_there() -> None:
    existing = [with_claims(pod("e1", node_name="limited"), "c0"), with_claims(pod("e2", node_name="limited"), "c1")]
    snap = limits_snapshot(existing)
    status, rejected, result = filter_all(NodeVolumeLimits(), snap, with_claims(pod("p"), "c2"))
    assert status.is_success()
    assert rejected == {"limited": [nodevolumelimits.REASON]}
    assert result is not None and result.rejections[0].code is Code.UNSCHEDULABLE
    # A volume already attached there does not count again.
    assert filter_all(NodeVolumeLimits(), snap, with_claims(pod("q"), "c1"))[1] == {}


def test_volume_attachments_count_and_a_node_without_a_limit_takes_anything() -> None:
    existing = [with_claims(pod("e1", node_name="limited"), "c0")]
    snap = limits_snapshot(existing, attachments=[volume_attachment("va", "limited", "csi.example.com", "pv-3")])
    assert filter_all(NodeVolumeLimits(), snap, with_claims(pod("p"), "c2"))[1] == {"limited": [nodevolumelimits.REASON]}
    unlimited = limits_snapshot(existing, limit=None)
    assert filter_all(NodeVolumeLimits(), unlimited, with_claims(pod("p"), "c2"))[1] == {}


def test_a_volume_attached_twice_counts_once() -> None:
    """csi.go getNodeVolumeAttachmentInfo keys the node's attachments by driver/handle: two VolumeAttachments of one
    PV there are one volume (found by the differential test: two attachments and a limit of 2 left room for one)."""
    twice = [volume_attachment(f"va-{i}", "limited", "csi.example.com", "pv-3") for i in range(2)]
    snap = limits_snapshot([], attachments=twice)
    assert filter_all(NodeVolumeLimits(), snap, with_claims(pod("p"), "c2"))[1] == {}
    snap = limits_snapshot([], attachments=[*twice, volume_attachment("va-2", "limited", "csi.example.com", "pv-0")])
    assert filter_all(NodeVolumeLimits(), snap, with_claims(pod("p"), "c2"))[1] == {"limited": [nodevolumelimits.REASON]}


def test_unbound_claims_count_under_their_provisioner_and_in_tree_volumes_under_their_csi_driver() -> None:
    fast = storage_class("fast", provisioner="csi.example.com")
    existing = [with_claims(pod("e1", node_name="limited"), "c0")]
    snap = limits_snapshot(existing, limit=1, classes=[fast], claims=[claim("new", storage_class="fast")])
    assert filter_all(NodeVolumeLimits(), snap, with_claims(pod("p"), "new"))[1] == {"limited": [nodevolumelimits.REASON]}
    ebs_pvs = [persistent_volume("ebs-1", source={"awsElasticBlockStore": {"volumeID": "aws://us-a/vol-1"}},
                                 phase="Bound")]  # fmt: skip
    snap = volume_snapshot(
        [node("n")], [with_claims(pod("e", node_name="n"), inline=[ebs("vol-2")])], pvs=ebs_pvs,
        claims=[claim("ebs", volume_name="ebs-1", bound=True)], csi_nodes=[csi_node("n", {"ebs.csi.aws.com": 1})],
    )  # fmt: skip
    assert filter_all(NodeVolumeLimits(), snap, with_claims(pod("p"), "ebs"))[1] == {"n": [nodevolumelimits.REASON]}
    # The same EBS volume inline (aws://zone/id or the bare id) is the one already attached: no new volume.
    assert filter_all(NodeVolumeLimits(), snap, with_claims(pod("q"), inline=[ebs("vol-2")]))[1] == {}


def test_a_new_pods_missing_claim_is_refused_on_every_node() -> None:
    snap = limits_snapshot([])
    _, rejected, _ = filter_all(NodeVolumeLimits(), snap, with_claims(pod("p"), "gone"))
    message = 'looking up PVC default/gone: persistentvolumeclaim "gone" not found'
    assert rejected == {"limited": [message], "free": [message]}


def test_pods_without_attachable_volumes_skip_the_plugin() -> None:
    snap = limits_snapshot([])
    assert filter_all(NodeVolumeLimits(), snap, pod("p"))[0].is_skip()
    assert filter_all(NodeVolumeLimits(), snap, with_claims(pod("p"), inline=[iscsi("iqn.x")]))[0].is_skip()
