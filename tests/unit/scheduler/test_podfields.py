"""The pod field table and PodFieldGuard: every refused field is found wherever it sits in the pod, the
pod is refused out loud (UnschedulableAndUnresolvable, no preemption), and the table is consistent
with the registered plugins. (Its completeness against the API server's OpenAPI is
tests/integration/test_pod_field_coverage.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_plugin.framework.podfields import FIELDS, ROOT_TYPE, Implemented, Refused, Split, refused_fields
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.schedule_one import scheduling_cycle
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.framework.status import Code
from scheduler_plugin.plugins.podfieldguard import MAX_FIELDS_NAMED, NAME
from scheduler_plugin.plugins.registry import IN_TREE_REGISTRY
from tests.objects import node, pod
from tests.unit.scheduler.builders import default_framework

Obj = dict[str, Any]


def spec_with(**fields: Any) -> Obj:
    return {"containers": [{"name": "c", "image": "i"}], **fields}


@pytest.mark.parametrize(("spec", "paths"), [
    (spec_with(), []),
    (spec_with(resourceClaims=[{"name": "gpu", "resourceClaimName": "x"}]), ["spec.resourceClaims"]),
    # Claims, ephemeral volumes and inline disks are the volume plugins' (VolumeBinding, ...): not refused.
    (spec_with(volumes=[{"name": "a", "emptyDir": {}}, {"name": "b", "persistentVolumeClaim": {"claimName": "c"}},
                        {"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                        {"name": "d", "awsElasticBlockStore": {"volumeID": "v"}},
                        {"name": "g", "gcePersistentDisk": {"pdName": "p"}}]), []),
    (spec_with(volumes=[{"name": "c", "csi": {"driver": "d"}}, {"name": "n", "nfs": {"server": "s", "path": "/"}},
                        {"name": "i", "image": {"reference": "r"}}]), []),
    (spec_with(hostUsers=False), []),  # user namespaces alone need nothing from the node
    (spec_with(hostUsers=False, hostNetwork=True), ["spec.hostUsers"]),
    (spec_with(hostUsers=True, hostNetwork=True), []),
    (spec_with(initContainers=[{"name": "i", "restartPolicyRules": [
        {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}]}]),
     ["spec.initContainers[0].restartPolicyRules"]),
    (spec_with(containers=[{"name": "c", "restartPolicyRules": [
        {"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]}]), []),
    (spec_with(schedulingGroup={"podGroupName": "g"}), ["spec.schedulingGroup"]),
    (spec_with(resourceClaims=[{}], topologySpreadConstraints=[]),
     ["spec.resourceClaims"]),  # an empty entry is still set
    (spec_with(os={"name": "linux"}, overhead={"cpu": "1"}, resources={"requests": {"cpu": "1"}},
               runtimeClassName="kata", ephemeralContainers=[{"name": "e"}]), []),
])
def test_refused_fields_are_found_where_they_are(spec: Obj, paths: list[str]) -> None:
    found = refused_fields(spec)
    assert sorted(f.path for f in found) == sorted(paths)
    for f in found:
        rule = FIELDS[f.key]
        assert isinstance(rule, Refused) and f.reason == rule.reason


@pytest.mark.parametrize(("spec", "key"), [
    (spec_with(affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]},
                         "nodeAffinity": {}}), "Affinity.podAntiAffinity"),
    (spec_with(affinity={"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{}]}}),
     "Affinity.podAffinity"),
    (spec_with(topologySpreadConstraints=[{"maxSkew": 1}]), "PodSpec.topologySpreadConstraints"),
])
def test_inter_pod_fields_are_refused_until_their_plugins_are_registered(spec: Obj, key: str) -> None:
    assert [f.key for f in refused_fields(spec)] == ([key] if isinstance(FIELDS[key], Refused) else [])
    # Without terms there is nothing to honour, whichever way the row reads.
    assert refused_fields(spec_with(affinity={"podAffinity": {}, "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": []}})) == ()


def test_each_refused_row_is_reported_once() -> None:
    rules = [{"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}]
    containers = [{"name": f"c{i}", "restartPolicyRules": rules} for i in range(50)]
    assert [f.path for f in refused_fields(spec_with(initContainers=containers))] == [
        "spec.initContainers[0].restartPolicyRules"]


def test_a_refused_pod_is_unschedulable_and_unresolvable_with_the_fields_named() -> None:
    snap = Snapshot.from_objects([node("a"), node("b")])
    fw, _, _ = default_framework(snap)
    obj = pod("stateful", priority=1000)
    obj["spec"]["schedulingGroup"] = {"podGroupName": "g"}
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    result = scheduling_cycle(fw, PodInfo.from_dict(obj))
    assert result.status.code is Code.UNSCHEDULABLE
    message = result.status.message
    assert message.startswith("0/2 nodes are available: pod uses fields loadline-scheduler does not implement (")
    assert "spec.schedulingGroup: Workload API pod groups" in message
    assert "spec.resourceClaims: Dynamic Resource Allocation" in message
    assert "set spec.schedulerName to a scheduler that implements it" in message
    assert result.diagnosis is not None and result.diagnosis.unschedulable_plugins == {NAME}
    # Unresolvable: preemption finds nothing to do (kube-scheduler words it so after a PreFilter rejection too).
    assert result.nominated_node_name == ""
    assert message.endswith("preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")


def test_the_message_names_a_bounded_number_of_fields() -> None:
    from scheduler_plugin.plugins.podfieldguard import refusal_message

    spec = spec_with(resourceClaims=[{"name": "r"}], schedulingGroup={"podGroupName": "g"},
                     hostUsers=False, hostNetwork=True,
                     initContainers=[{"name": "i", "restartPolicyRules": [
                         {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [1]}}]}])
    fields = refused_fields(spec)
    assert len(fields) == 4
    message = refusal_message(fields)
    assert message.count("spec.") == MAX_FIELDS_NAMED + message.count("spec.schedulerName")
    assert "and 1 more" in message


def test_rows_name_registered_plugins_and_refusals_wait_for_unregistered_ones() -> None:
    for key, rule in FIELDS.items():
        if isinstance(rule, Implemented):
            missing = [p for p in rule.plugins if p not in IN_TREE_REGISTRY]
            assert not missing, f"{key}: implemented by unregistered plugins {missing}"
        if isinstance(rule, Refused) and rule.until:
            # The day that plugin is registered, this row must become Implemented((rule.until,)).
            assert rule.until not in IN_TREE_REGISTRY, f"{key}: {rule.until} is registered now: mark it Implemented"


def test_every_split_type_is_reachable_and_has_rows() -> None:
    split_types = {rule.type_name for rule in FIELDS.values() if isinstance(rule, Split)}
    row_types = {key.split(".", 1)[0] for key in FIELDS}
    assert row_types == split_types | {ROOT_TYPE}
