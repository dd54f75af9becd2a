"""The standalone agent (no API server) in-process over fixture trees: what it serves, and how fresh it is."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import pytest

from agent.collectors.cgroup_layout import CgroupDriver, CgroupVersion
from agent.config import AgentSettings
from agent.main import NodeAgent, cluster_configured
from agent.podwatch import CgroupPodDiscovery, LocalPods
from common.api.pod import KubeQoSClass
from tests.fakes.cgroup_trees import CgroupValues, FakeCgroupTree, ProcValues, make_pod, write_proc

INTERVAL = 0.2


def settings(tmp_path: Path, **more: object) -> AgentSettings:
    return AgentSettings.model_validate(
        {
            "proc_root": tmp_path / "proc",
            "sys_root": tmp_path / "sys",
            "cgroup_root": tmp_path / "cgroup",
            "collectors": ["node", "cgroups"],
            "collect_interval_seconds": INTERVAL,
            "aggregation_interval_seconds": 60,  # far longer than the test: raw values must not wait for it
            "aggregate_windows": [1.0],
            "aggregate_duration_seconds": 1.0,
            "port": 0,
            "kubelet_url": "",
            **more,
        }
    )


def value_of(text: str, name: str) -> float:
    lines = [line for line in text.splitlines() if line.startswith(name + " ") or line.startswith(name + "{")]
    assert len(lines) == 1, lines
    return float(lines[0].rsplit(" ", 1)[1])


def test_no_cluster_configuration_means_standalone(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("HOME", str(tmp_path))
    s = AgentSettings()
    assert not cluster_configured(s, {})
    assert cluster_configured(s, {"KUBECONFIG": "/x"}) and cluster_configured(s, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert cluster_configured(AgentSettings(kubeconfig="/etc/kube.conf"), {})
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("{}")
    assert cluster_configured(s, {})


def test_standalone_serves_fresh_metrics_health_and_the_nodemetric_without_an_api_server(tmp_path: Path) -> None:
    proc = ProcValues()
    write_proc(tmp_path / "proc", proc)
    tree = FakeCgroupTree(tmp_path / "cgroup", CgroupVersion.V2, CgroupDriver.SYSTEMD)
    pod = make_pod(1, KubeQoSClass.BURSTABLE, containers=1)
    tree.add_pod(pod, CgroupValues())

    async def scenario() -> None:
        agent = NodeAgent(settings(tmp_path, node_name="box"), standalone=True)
        await agent.start()
        try:
            assert agent.http is None and agent.publisher is None and agent.qos is None
            assert agent.exporter is not None and agent.exporter.address == "127.0.0.1"  # loopback by default
            base = f"http://127.0.0.1:{agent.exporter.port}"
            async with aiohttp.ClientSession() as session:
                await asyncio.sleep(3 * INTERVAL)

                async def scrape() -> str:
                    async with session.get(f"{base}/metrics") as response:
                        assert response.status == 200
                        return await response.text()

                text = await scrape()
                assert value_of(text, "loadline_node_memory_usage_bytes") == (16 - 10) * 1024**3
                assert f'pod="{pod.uid}"' in text  # the pod found in the cgroup tree, named by its UID
                # Freshness: the fixture changes; within one collect interval (plus the cycle) a scrape shows it,
                # although the aggregation (60 s) has not run again.
                proc.mem_available_kb = 9 * 1024 * 1024
                write_proc(tmp_path / "proc", proc)
                changed_at = time.monotonic()
                while value_of(await scrape(), "loadline_node_memory_usage_bytes") != 7 * 1024**3:
                    assert time.monotonic() - changed_at < 2 * INTERVAL + 0.3, "raw series not fresh"
                    await asyncio.sleep(0.02)
                # A container's series are read when scraped (the default), at most once a cycle: as fresh.
                container = pod.containers[0]
                tree.write(tree.container_rel(pod, container), CgroupValues(inactive_anon=70 * 1024**2))
                changed_at = time.monotonic()
                named = container.container_id.partition("://")[2][:12]  # named by its ID in the cgroup tree
                anon = f'loadline_container_memory_anon_usage_bytes{{namespace="",pod="{pod.uid}",container="{named}"}}'
                while value_of(await scrape(), anon) != CgroupValues(inactive_anon=70 * 1024**2).anon_usage:
                    assert time.monotonic() - changed_at < 2 * INTERVAL + 0.3, "container series not fresh"
                    await asyncio.sleep(0.02)
                async with session.get(f"{base}/healthz") as response:
                    assert response.status == 200
                async with session.get(f"{base}/nodemetric") as response:
                    assert response.status == 200
                    body = await response.json()
                assert body["kind"] == "NodeMetric" and body["metadata"]["name"] == "box"
                assert body["status"]["nodeMetric"]["nodeUsage"]["resources"]["memory"]
                assert [p["name"] for p in body["status"].get("podsMetric", [])] == [pod.uid]
        finally:
            await agent.stop()

    asyncio.run(scenario())


def test_local_pods_are_named_by_the_kubelet_when_it_answers(tmp_path: Path) -> None:
    tree = FakeCgroupTree(tmp_path, CgroupVersion.V2, CgroupDriver.SYSTEMD)
    pod = make_pod(1, KubeQoSClass.BURSTABLE, containers=1)
    tree.add_pod(pod, CgroupValues())
    local = LocalPods(CgroupPodDiscovery(tmp_path), "http://127.0.0.1:1")  # nothing listens on port 1
    assert [p.name for p in local.infos().values()] == [pod.uid]  # cgroups only: named by UID
    with pytest.raises((aiohttp.ClientError, OSError)):
        asyncio.run(local.fetch())  # no kubelet there
    assert not local.from_kubelet and [p.uid for p in local.pods()] == [pod.uid]
    local.apply(
        {
            "items": [
                {
                    "metadata": {"uid": pod.uid, "namespace": "shop", "name": "web-0"},
                    "status": {
                        "phase": "Running",
                        "qosClass": "Burstable",
                        "containerStatuses": [{"name": "app", "containerID": pod.containers[0].container_id}],
                    },
                }
            ]
        }
    )
    assert local.from_kubelet
    assert [(i.namespace, i.name) for i in local.infos().values()] == [("shop", "web-0")]
    assert [c.container_id for p in local.pods() for c in p.containers] == [pod.containers[0].container_id]

