"""Extender mode against the real kube-scheduler (issue 4, test e).

The extender runs as its own process (`python -m scheduler_plugin.extender`), caching nodes,
pods and NodeMetrics from the session API server. kube-scheduler (built by the harness) is
configured to call it for filter and prioritize, with nodeCacheCapable on and off. On four
kwok nodes with NodeMetrics written by the test — one hot (80 % cpu), the others at 50, 30 and
10 % — a pod must land on the 10 % node (the hot one filtered out by LoadAware's 65 % threshold,
the least used winning the score), and a pod that may only go to the hot node must stay
pending with LoadAware's reason in kube-scheduler's message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.kube.http import KubeError, KubeHTTP, resource_path
from tests import objects
from tests.harness.controlplane import ControlPlane
from tests.harness.processes import Component, free_port, http_ok, wait_until
from tests.objects import MakeNodeMetric

pytestmark = pytest.mark.integration

NM_PATH = resource_path("slo.koordinator.sh", "v1alpha1", "nodemetrics")
HOT_REASON = "node(s) cpu usage exceed threshold"
EXTENDER_CONFIG = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [
        {
            "schedulerName": "loadline-extender",
            "pluginConfig": [
                {"name": "LoadAwareScheduling", "args": {"usageThresholds": {"cpu": 65, "memory": 95}}}
            ],
        }
    ],
}


async def write_node_metrics(kubeconfig: Path, usage: dict[str, tuple[str, str]]) -> None:
    """Create each node's NodeMetric (if needed) and PUT its status, updateTime = now."""
    http = await KubeHTTP.connect(kubeconfig)
    try:
        for name, (cpu, memory) in usage.items():
            body = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": name},
                    "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 60}}}
            try:
                current = await http.create(NM_PATH, body)
            except KubeError as exc:
                if not exc.is_conflict:
                    raise
                current = await http.get(f"{NM_PATH}/{name}")
            current["status"] = MakeNodeMetric(name).updated(time.time()).node_usage(cpu, memory).status()
            await http.replace(f"{NM_PATH}/{name}/status", current)
    finally:
        await http.close()


async def delete_node_metrics(kubeconfig: Path, names: list[str]) -> None:
    http = await KubeHTTP.connect(kubeconfig)
    try:
        for name in names:
            with contextlib.suppress(KubeError):
                await http.delete(f"{NM_PATH}/{name}")
    finally:
        await http.close()


def post_json(url: str, payload: Any) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


@pytest.fixture
def extender(cluster: ControlPlane, tmp_path: Path) -> Iterator[Callable[[], str]]:
    """Factory: start the extender process; returns its base URL (verbs under /loadline)."""
    started: list[Component] = []

    def start() -> str:
        port = free_port()
        config = tmp_path / "extender.yaml"
        config.write_text(yaml.safe_dump(EXTENDER_CONFIG))
        component = Component(
            f"loadline-extender-{port}",
            [sys.executable, "-m", "scheduler_plugin.extender", f"--kubeconfig={cluster.kubeconfig}",
             "--bind-address=127.0.0.1", f"--port={port}", f"--config={config}", "--url-prefix=/loadline",
             "--log-level=debug"],
            cluster.root / "logs" / f"loadline-extender-{port}.log",
        )
        component.start()
        cluster.extra.append(component)  # its log is printed with the others when the test fails
        started.append(component)
        base = f"http://127.0.0.1:{port}"
        wait_until("extender /readyz", lambda: http_ok(f"{base}/readyz"), 60, alive=[component])
        return base

    yield start
    for component in started:
        cluster.stop_component(component)


def pod(name: str, namespace: str, scheduler: str, selector: dict[str, str]) -> dict[str, Any]:
    return objects.for_api_server(objects.pod(name, "1", "1Gi", namespace=namespace, image="fake",
                                              scheduler_name=scheduler, node_selector=selector or None))  # fmt: skip


def get_pod(cluster: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(cluster.kubectl("get", "pod", name, "-n", namespace, "-o", "json").stdout)
    return result


@pytest.mark.parametrize("cache_capable", [True, False], ids=["nodeCacheCapable", "fullNodes"])
def test_kube_scheduler_places_pods_where_the_extender_says(
    cluster: ControlPlane,
    *,
    namespace: str,
    kwok_nodes: Callable[..., list[str]],
    kube_scheduler: Callable[..., Any],
    extender: Callable[[], str],
    cache_capable: bool,
) -> None:
    suite = uuid.uuid4().hex[:8]
    hot, mid, warm, cold = kwok_nodes(4, prefix=f"ext-{suite}", cpu="8", memory="32Gi",
                                      labels={"loadline-test": f"ext-{suite}"})
    base = extender()
    # Written after the extender synced, so they reach it through its watch, not its initial list.
    usage = {hot: ("6400m", "4Gi"), mid: ("4000m", "4Gi"), warm: ("2400m", "4Gi"), cold: ("800m", "4Gi")}
    asyncio.run(write_node_metrics(cluster.kubeconfig, usage))
    try:
        probe = {"Pod": pod("probe", namespace, "x", {}), "Nodes": None, "NodeNames": [hot, cold]}
        wait_until("the extender to see the NodeMetrics",
                   lambda: post_json(f"{base}/loadline/filter", probe)[1]["FailedNodes"] == {hot: HOT_REASON}, 30)
        scheduler = f"ext-{suite}"
        kube_scheduler(
            [{"schedulerName": scheduler}],
            extenders=[{
                "urlPrefix": f"{base}/loadline",
                "filterVerb": "filter",
                "prioritizeVerb": "prioritize",
                "weight": 5,
                "nodeCacheCapable": cache_capable,
                "httpTimeout": "10s",
                "managedResources": [],
            }],
        )  # fmt: skip

        # (1) hot filtered out (6400 + 850 = 91 % > 65 %); LoadAware scores cold 82, warm 72, mid 62,
        #     min-max over the three → extender scores 10, 5, 0.
        cluster.apply(pod("web", namespace, scheduler, {"loadline-test": f"ext-{suite}"}))
        cluster.kubectl("wait", "-n", namespace, "--for=condition=PodScheduled", "pod/web", "--timeout=90s",
                        timeout=100)
        assert get_pod(cluster, namespace, "web")["spec"]["nodeName"] == cold

        # (2) only the hot node allowed: pending, with LoadAware's reason in kube-scheduler's FitError.
        cluster.apply(pod("pinned", namespace, scheduler, {"kubernetes.io/hostname": hot}))

        def rejected() -> bool:
            conditions = get_pod(cluster, namespace, "pinned")["status"].get("conditions") or []
            return any(c["type"] == "PodScheduled" and c["status"] == "False" and HOT_REASON in c.get("message", "")
                       for c in conditions)

        wait_until("pinned pod rejected by the extender", rejected, 90, interval=0.5)
        assert not get_pod(cluster, namespace, "pinned")["spec"].get("nodeName")

        # The extender saw both verbs and answered every call with 200.
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
            metrics = response.read().decode()
        assert 'loadline_extender_requests_total{code="200",verb="filter"}' in metrics
        assert 'loadline_extender_requests_total{code="200",verb="prioritize"}' in metrics
        assert 'code="400"' not in metrics and 'code="500"' not in metrics
        # web was counted on cold right after prioritize, and its binding (seen before the pinned
        # pod's filter call) confirmed that guess.
        assert 'loadline_extender_provisional_placements_total{outcome="confirmed"} 1.0' in metrics
    finally:
        asyncio.run(delete_node_metrics(cluster.kubeconfig, list(usage)))


def test_extender_answers_400_to_malformed_bodies_and_keeps_serving(
    cluster: ControlPlane, extender: Callable[[], str]
) -> None:
    base = extender()
    status, body = post_json(f"{base}/loadline/filter", {"Pod": "nope", "NodeNames": []})
    assert status == 400 and body["Error"] == "Pod: expected an object, got a string"
    request = urllib.request.Request(f"{base}/loadline/prioritize", data=b"\x00garbage", method="POST")
    with pytest.raises(urllib.error.HTTPError) as excinfo:
        urllib.request.urlopen(request, timeout=5)
    assert excinfo.value.code == 400
    status, body = post_json(f"{base}/loadline/filter", {"Pod": pod("p", "default", "x", {}), "NodeNames": []})
    assert status == 200 and body["NodeNames"] == [] and body["Error"] == ""
    assert http_ok(f"{base}/healthz")


def test_kube_scheduler_preempts_only_victims_the_extender_accepts(
    cluster: ControlPlane,
    namespace: str,
    kwok_nodes: Callable[..., list[str]],
    kube_scheduler: Callable[..., Any],
    extender: Callable[[], str],
) -> None:
    """Two full kwok nodes: `hot` holds the cheapest victim (priority 3100) but measures 95 % cpu, and
    its pod reports no usage of its own, so evicting it leaves hot over LoadAware's 65 %; `cool` holds a
    dearer victim (5100). kube-scheduler alone would preempt on hot; with the extender's preemptVerb it
    is told hot's candidate does not work for Loadline, and preempts on cool instead."""
    from tests.integration.scheduler_support import Api, ApiError, unique, wait_for
    from tests.integration.test_scheduler_preemption import PROD, filler, priority_classes

    api = Api(cluster)
    suite = unique("extpre")
    hot, cool = kwok_nodes(2, prefix=suite, cpu="4", memory="16Gi", labels={"loadline-test": suite})
    base = extender()
    asyncio.run(write_node_metrics(cluster.kubeconfig, {hot: ("3800m", "2Gi"), cool: ("500m", "2Gi")}))
    try:
        with priority_classes(api, suite, {3100, 5100, PROD}):
            api.create(f"/api/v1/namespaces/{namespace}/pods",
                       filler("cheap", namespace, hot, cpu="4", priority_class=f"{suite}-3100"))
            api.create(f"/api/v1/namespaces/{namespace}/pods",
                       filler("dear", namespace, cool, cpu="4", priority_class=f"{suite}-5100"))
            probe = {"Pod": pod("probe", namespace, "x", {}), "Nodes": None, "NodeNames": [hot, cool]}
            wait_until("the extender to see the NodeMetrics",
                       lambda: post_json(f"{base}/loadline/filter", probe)[1]["FailedNodes"] == {hot: HOT_REASON}, 30)
            scheduler = f"ext-{suite}"
            kube_scheduler([{"schedulerName": scheduler}], extenders=[{
                "urlPrefix": f"{base}/loadline", "filterVerb": "filter", "preemptVerb": "preempt",
                "nodeCacheCapable": True, "httpTimeout": "10s"}])
            prod = pod("prod", namespace, scheduler, {"loadline-test": suite})
            prod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "2", "memory": "256Mi"}
            prod["spec"]["priorityClassName"] = f"{suite}-{PROD}"
            api.create(f"/api/v1/namespaces/{namespace}/pods", prod)

            def gone(name: str) -> bool:
                try:
                    api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
                except ApiError as exc:
                    return exc.status == 404
                return False

            wait_for("prod to be bound", lambda: bool(get_pod(cluster, namespace, "prod")["spec"].get("nodeName")),
                     timeout=120)
            assert get_pod(cluster, namespace, "prod")["spec"]["nodeName"] == cool
            assert gone("dear") and not gone("cheap")
            with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
                metrics = response.read().decode()
            assert 'loadline_extender_requests_total{code="200",verb="preempt"}' in metrics
            assert 'loadline_extender_preempt_candidates_total{result="dropped"} 1.0' in metrics
    finally:
        asyncio.run(delete_node_metrics(cluster.kubeconfig, [hot, cool]))
