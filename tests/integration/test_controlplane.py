"""The foundation against a real kube-apiserver: CRDs, API objects, kubectl, kwok, RBAC, tokens."""

from __future__ import annotations

import asyncio
import copy
import json
import subprocess
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
import yaml
from kubernetes.aio import client as kclient

from common.api.nodemetric import NodeMetric
from common.api.podgroup import PodGroup
from common.kube.client import api_client
from tests.examples import KOORDINATOR_NODEMETRIC, PODGROUPS
from tests.harness.build import ETCD_VERSION, HELM_VERSION, KUBERNETES_VERSION, KWOK_VERSION
from tests.harness.controlplane import ControlPlane

pytestmark = pytest.mark.integration
T = TypeVar("T")


def with_custom_api(plane: ControlPlane, work: Callable[[kclient.CustomObjectsApi], Awaitable[T]]) -> T:
    async def run() -> T:
        api = await api_client(plane.kubeconfig)
        try:
            return await work(kclient.CustomObjectsApi(api))
        finally:
            await api.close()

    return asyncio.run(run())


NM = ("slo.koordinator.sh", "v1alpha1", "nodemetrics")


def koordinator_nodemetric(name: str) -> dict[str, Any]:
    obj = yaml.safe_load(KOORDINATOR_NODEMETRIC)
    obj["metadata"]["name"] = name
    return dict(obj)


def create_with_status(plane: ControlPlane, obj: dict[str, Any]) -> dict[str, Any]:
    """POST the object, then PUT its status through the status subresource, as koordlet does."""

    async def work(api: kclient.CustomObjectsApi) -> dict[str, Any]:
        body = {k: v for k, v in obj.items() if k != "status"}
        created = await api.create_cluster_custom_object(*NM, body)
        created["status"] = obj["status"]
        updated: dict[str, Any] = await api.replace_cluster_custom_object_status(*NM, obj["metadata"]["name"], created)
        return updated

    return with_custom_api(plane, work)


def test_components_report_the_real_release(cluster: ControlPlane) -> None:
    versions = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert versions["serverVersion"]["gitVersion"] == f"v{KUBERNETES_VERSION}"
    assert versions["clientVersion"]["gitVersion"] == f"v{KUBERNETES_VERSION}"
    raw = json.loads(cluster.kubectl("get", "--raw", "/version").stdout)
    assert raw["gitVersion"] == f"v{KUBERNETES_VERSION}" and raw["minor"] == KUBERNETES_VERSION.split(".")[1]

    def run(name: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(cluster.binary(name)), *args], capture_output=True, text=True, check=True)

    assert f"etcd Version: {ETCD_VERSION}" in run("etcd", "--version").stdout
    assert run("helm", "version", "--template", "{{.Version}}").stdout.strip() == f"v{HELM_VERSION}"
    assert f"v{KWOK_VERSION}" in run("kwok", "--version").stdout
    scheduler = run("kube-scheduler", "--version").stdout
    assert f"v{KUBERNETES_VERSION}" in scheduler


def test_nodemetric_status_round_trips_field_for_field(cluster: ControlPlane) -> None:
    name = f"nm-{uuid.uuid4().hex[:8]}"
    sent = koordinator_nodemetric(name)
    create_with_status(cluster, sent)
    got = with_custom_api(cluster, lambda api: api.get_cluster_custom_object(*NM, name))
    model = NodeMetric.from_wire(got)
    assert model.to_wire() == got  # our model re-serialises the stored object unchanged
    assert got["spec"] == sent["spec"]
    assert got["status"] == sent["status"]  # Koordinator's exact shape is accepted, nothing pruned
    assert model.status is not None and model.status.node_metric is not None
    assert model.status.node_metric.node_usage is not None
    assert (model.status.node_metric.node_usage.resources or {})["cpu"].milli_value() == 3512


def test_status_update_through_the_model(cluster: ControlPlane) -> None:
    from common.api.quantity import Quantity

    name = f"nm-{uuid.uuid4().hex[:8]}"
    create_with_status(cluster, koordinator_nodemetric(name))

    async def modify(api: kclient.CustomObjectsApi) -> dict[str, Any]:
        current = NodeMetric.from_wire(await api.get_cluster_custom_object(*NM, name))
        assert current.status and current.status.node_metric and current.status.node_metric.node_usage
        current.status.node_metric.node_usage.resources = {
            "cpu": Quantity.from_milli(1250),
            "memory": Quantity.from_int(3 << 30),
        }
        await api.replace_cluster_custom_object_status(*NM, name, current.to_wire())
        result: dict[str, Any] = await api.get_cluster_custom_object(*NM, name)
        return result

    got = with_custom_api(cluster, modify)
    assert got["status"]["nodeMetric"]["nodeUsage"]["resources"] == {"cpu": "1250m", "memory": "3Gi"}
    assert got["status"]["podsMetric"][0]["podUsage"]["devices"][0]["resources"]["koordinator.sh/gpu-core"] == "35"


@pytest.mark.parametrize("bad", ["abc", "12 cores", "1.1.1", "5Gb"])
def test_apiserver_rejects_usage_that_is_not_a_quantity(cluster: ControlPlane, bad: str) -> None:
    name = f"nm-{uuid.uuid4().hex[:8]}"
    obj = koordinator_nodemetric(name)
    create_with_status(cluster, obj)
    broken = copy.deepcopy(obj)
    broken["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] = bad

    async def work(api: kclient.CustomObjectsApi) -> None:
        current = await api.get_cluster_custom_object(*NM, name)
        current["status"] = broken["status"]
        await api.replace_cluster_custom_object_status(*NM, name, current)

    with pytest.raises(kclient.ApiException) as err:
        with_custom_api(cluster, work)
    assert err.value.status == 422
    assert "status.nodeMetric.nodeUsage.resources.cpu" in str(err.value.body)


def test_kubectl_prints_nodemetric_columns(cluster: ControlPlane) -> None:
    name = f"nm-{uuid.uuid4().hex[:8]}"
    create_with_status(cluster, koordinator_nodemetric(name))
    for resource in ("nodemetrics", "nm"):
        out = cluster.kubectl("get", resource, name).stdout.splitlines()
        header, row = out[0].split(), out[1].split()
        assert header[:5] == ["NAME", "CPU", "MEMORY", "P95-CPU", "UPDATED"], out
        assert row[:4] == [name, "3512m", "20498764Ki", "4300m"], out
        assert row[4].endswith(("d", "y")), out  # 2026-07-24 is months ago: an age, not <unknown>


@pytest.mark.parametrize("text", PODGROUPS)
def test_podgroup_round_trips_in_both_api_versions(cluster: ControlPlane, namespace: str, text: str) -> None:
    obj = yaml.safe_load(text)
    obj["metadata"]["namespace"] = namespace
    group, version = obj["apiVersion"].split("/")

    async def work(api: kclient.CustomObjectsApi) -> dict[str, Any]:
        body = {k: v for k, v in obj.items() if k != "status"}
        created = await api.create_namespaced_custom_object(group, version, namespace, "podgroups", body)
        created["status"] = obj["status"]
        await api.replace_namespaced_custom_object_status(
            group, version, namespace, "podgroups", obj["metadata"]["name"], created
        )
        result: dict[str, Any] = await api.get_namespaced_custom_object(
            group, version, namespace, "podgroups", obj["metadata"]["name"]
        )
        return result

    got = with_custom_api(cluster, work)
    assert got["spec"] == obj["spec"] and got["status"] == obj["status"]
    assert PodGroup.from_wire(got).to_wire() == got
    if group == "scheduling.x-k8s.io":
        listed = cluster.kubectl("get", "pg", "-n", namespace, "-o", "name").stdout.split()
        assert listed == [f"podgroup.scheduling.x-k8s.io/{obj['metadata']['name']}"]


def test_apiserver_rejects_podgroup_with_min_member_zero(cluster: ControlPlane, namespace: str) -> None:
    proc = cluster.kubectl(
        "apply", "-f", "-", check=False,
        input=json.dumps({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                          "metadata": {"name": "zero", "namespace": namespace}, "spec": {"minMember": 0}}),
    )  # fmt: skip
    assert proc.returncode != 0 and "spec.minMember" in proc.stderr


def test_fifty_kwok_nodes_become_ready(cluster: ControlPlane, kwok_nodes: Callable[..., list[str]]) -> None:
    names = kwok_nodes(50, cpu="16", memory="64Gi")
    nodes = json.loads(cluster.kubectl("get", "nodes", *names, "-o", "json").stdout)["items"]
    assert len(nodes) == 50
    for node in nodes:
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", node["metadata"]["name"]
        assert node["status"]["allocatable"]["cpu"] == "16" and node["status"]["allocatable"]["memory"] == "64Gi"


def test_rbac_enforced_and_pod_bound_service_account_tokens(
    cluster: ControlPlane, namespace: str, kwok_nodes: Callable[..., list[str]]
) -> None:
    node = kwok_nodes(1)[0]
    cluster.kubectl("create", "serviceaccount", "reader", "-n", namespace)
    cluster.apply({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holder", "namespace": namespace},
        "spec": {"nodeName": node, "serviceAccountName": "reader", "containers": [{"name": "c", "image": "fake"}]},
    })  # fmt: skip
    token = cluster.kubectl(
        "create",
        "token",
        "reader",
        "-n",
        namespace,
        "--bound-object-kind=Pod",
        "--bound-object-name=holder",
        "--duration=10m",
    ).stdout.strip()
    who = json.loads(cluster.kubectl("auth", "whoami", f"--token={token}", "-o", "json").stdout)["status"]["userInfo"]
    assert who["username"] == f"system:serviceaccount:{namespace}:reader"
    assert who["extra"]["authentication.kubernetes.io/pod-name"] == ["holder"]
    assert who["extra"]["authentication.kubernetes.io/node-name"] == [node]
    denied = cluster.kubectl("get", "nodemetrics", f"--token={token}", check=False)
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower()


def test_real_kube_scheduler_places_a_pod_on_a_kwok_node(
    cluster: ControlPlane, namespace: str, kwok_nodes: Callable[..., list[str]], kube_scheduler: Callable[..., Any]
) -> None:
    nodes = set(kwok_nodes(3, cpu="4", memory="8Gi"))
    kube_scheduler()
    cluster.apply({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "fake", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
    })  # fmt: skip
    cluster.kubectl("wait", "-n", namespace, "--for=condition=PodScheduled", "pod/web", "--timeout=60s")
    placed = cluster.kubectl("get", "pod", "web", "-n", namespace, "-o", "jsonpath={.spec.nodeName}").stdout
    assert placed in nodes
