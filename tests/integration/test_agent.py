"""The node agent against a real kube-apiserver: NodeMetric publishing, spec policy, /metrics, outages.

Intervals and windows are shortened through the agent's own settings (collect 0.2 s, windows 2s/4s,
report 1 s) so each test runs in seconds; the cold-start rule still applies.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import time
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.config import AgentSettings
from agent.main import NodeAgent
from agent.series import NODE_MEMORY_USAGE_BYTES, SeriesKey
from common.api.nodemetric import NodeMetric
from tests.harness.controlplane import ControlPlane

pytestmark = pytest.mark.integration
AGGREGATIONS = ("avg", "p50", "p90", "p95", "p99")


def fast_settings(plane: ControlPlane, node: str, **overrides: Any) -> AgentSettings:
    values: dict[str, Any] = {
        "node_name": node,
        "kubeconfig": str(plane.kubeconfig),
        "collect_interval_seconds": 0.2,
        "report_interval_seconds": 1.0,
        "aggregate_duration_seconds": 2.0,
        "aggregate_windows": [2.0, 4.0],
        "aggregation_interval_seconds": 0.5,
        "publish_qps": 20.0,
        "publish_burst": 5,
        "retry_initial_seconds": 0.2,
        "retry_max_seconds": 1.0,
        "request_timeout_seconds": 5.0,
        "bind_address": "127.0.0.1",
        "port": 0,
    }
    values.update(overrides)
    return AgentSettings.model_validate(values)


def all_windows_warm(obj: dict[str, Any] | None, durations: tuple[str, ...]) -> bool:
    if not obj:
        return False
    windows = ((obj.get("status") or {}).get("nodeMetric") or {}).get("aggregatedNodeUsages") or []
    if tuple(w.get("duration") for w in windows) != durations:
        return False
    return all(
        set((w["usage"].get(a) or {}).get("resources") or {}) == {"cpu", "memory"}
        for w in windows
        for a in AGGREGATIONS
    )


async def eventually(predicate: Callable[[], bool], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what}")
        await asyncio.sleep(0.1)


def get_nodemetric(plane: ControlPlane, name: str) -> dict[str, Any]:
    return dict(json.loads(plane.kubectl("get", "nodemetric", name, "-o", "json").stdout))



def test_agent_publishes_a_valid_nodemetric_with_every_window(cluster: ControlPlane, namespace: str, promtool: str) -> None:
    node = f"agent-{uuid.uuid4().hex[:8]}"
    # A pod bound to the node: the agent's pod watch sees it (this machine has no cgroup for it).
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": namespace},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "fake"}]},
        }
    )
    published: list[dict[str, Any]] = []

    async def run() -> tuple[str, dict[str, str], int]:
        agent = NodeAgent(fast_settings(cluster, node))
        await agent.start()
        try:
            assert agent.publisher is not None and agent.exporter is not None
            publisher = agent.publisher

            def record() -> bool:
                last = publisher.last_published
                if last is not None and (not published or published[-1] is not last):
                    published.append(last)
                return all_windows_warm(last, ("2s", "4s"))

            await eventually(record, 20, "a NodeMetric with every window warm")
            await eventually(lambda: "web" in {p.name for p in agent.podwatch.infos().values()}, 10, "pod watch")
            await eventually(lambda: agent.timings.renders > 0, 10, "an aggregation for /metrics")
            health = {}
            async with aiohttp.ClientSession() as session:
                base = f"http://127.0.0.1:{agent.exporter.port}"
                for path in ("/healthz", "/readyz"):
                    async with session.get(base + path) as r:
                        health[path] = f"{r.status} {(await r.text()).strip()}"
                async with session.get(base + "/metrics") as r:
                    assert r.status == 200
                    text = await r.text()
            return text, health, len(published)
        finally:
            await agent.stop()

    text, health, _ = asyncio.run(run())
    # The first publish came before the 4 s window was half covered: cold, every aggregation `{}`.
    first = published[0]["status"]["nodeMetric"]["aggregatedNodeUsages"]
    assert [w["duration"] for w in first] == ["2s", "4s"]
    assert first[1]["usage"] == {a: {} for a in AGGREGATIONS}

    # What the API server stored (it validated every write against the CRD schema) reads back as a model.
    stored = get_nodemetric(cluster, node)
    model = NodeMetric.from_wire(stored)
    assert model.metadata.name == node and model.status is not None and model.status.node_metric is not None
    usage = model.status.node_metric.node_usage
    assert usage is not None and usage.resources is not None and set(usage.resources) == {"cpu", "memory"}
    assert usage.resources["memory"].value() > 0
    system = model.status.node_metric.system_usage
    assert system is not None and system.resources is not None and "cpu" in system.resources
    assert all_windows_warm(stored, ("2s", "4s"))
    assert (model.update_age_seconds() or 99) < 30
    assert not model.status.pods_metric  # no cgroups for the fake pod on this machine: nothing measured
    columns = cluster.kubectl("get", "nm", node, "--no-headers").stdout.split()
    assert columns[0] == node and columns[3] not in ("", "<none>")  # the P95-CPU printer column reads window 0

    assert health == {"/healthz": "200 ok", "/readyz": "200 ok"}
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["loadline_node_cpu_usage_seconds"].type == "counter"
    quantiles = families["loadline_node_cpu_usage_window_cores"]
    assert {(s.labels["window"], s.labels["quantile"]) for s in quantiles.samples} >= {("2s", "0.95"), ("4s", "0.99")}
    assert families["loadline_agent_last_publish_success_timestamp_seconds"].samples[0].value > time.time() - 60
    assert {s.labels["collector"] for s in families["loadline_agent_collector_success"].samples} >= {"node", "cgroups"}
    assert families["loadline_agent_build_info"].samples[0].value == 1
    assert families["loadline_agent_store_series"].samples[0].value > 0
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert check.returncode == 0 and not (check.stdout + check.stderr).strip(), check.stdout + check.stderr


def test_agent_follows_the_nodemetric_spec(cluster: ControlPlane) -> None:
    node = f"agent-{uuid.uuid4().hex[:8]}"

    async def run() -> tuple[int, dict[str, Any]]:
        agent = NodeAgent(
            fast_settings(cluster, node, spec_min_aggregate_duration_seconds=0, spec_min_report_interval_seconds=0)
        )
        await agent.start()
        try:
            assert agent.publisher is not None
            publisher = agent.publisher
            await eventually(lambda: all_windows_warm(publisher.last_published, ("2s", "4s")), 20, "first windows")
            # Koordinator's manager (here: kubectl) sets the collect policy in the spec; the agent follows.
            patch = {
                "spec": {
                    "metricCollectPolicy": {
                        "nodeAggregatePolicy": {"durations": ["1s", "3s", "6s"]},
                        "nodeMemoryCollectPolicy": "usageWithPageCache",
                        "reportIntervalSeconds": 1,
                    }
                }
            }
            await asyncio.to_thread(
                cluster.kubectl, "patch", "nodemetric", node, "--type=merge", "-p", json.dumps(patch)
            )
            await eventually(
                lambda: all_windows_warm(publisher.last_published, ("1s", "3s", "6s")), 30, "the spec's windows"
            )
            return agent.sampler.ring.slots, agent.reporter.policy.__dict__
        finally:
            await agent.stop()

    slots, policy = asyncio.run(run())
    assert slots >= 6 / 0.2  # the store grew to hold the new longest window
    assert policy["node_memory_collect_policy"] == "usageWithPageCache" and policy["windows"] == (1.0, 3.0, 6.0)
    stored = get_nodemetric(cluster, node)
    assert stored["spec"]["metricCollectPolicy"]["nodeAggregatePolicy"]["durations"] == ["1s", "3s", "6s"]


def test_creation_off_waits_for_the_object(cluster: ControlPlane) -> None:
    node = f"agent-{uuid.uuid4().hex[:8]}"

    async def run() -> str:
        agent = NodeAgent(fast_settings(cluster, node, create_nodemetric=False, metrics_enabled=False))
        await agent.start()
        try:
            assert agent.publisher is not None
            publisher = agent.publisher
            await eventually(lambda: publisher.state == "missing", 10, "waiting for the NodeMetric")
            assert cluster.kubectl("get", "nodemetric", node, check=False).returncode != 0
            manifest = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": node}}
            await asyncio.to_thread(cluster.apply, manifest)  # Koordinator's manager would do this
            await eventually(lambda: publisher.last_published is not None, 15, "a status on the manager's object")
            return publisher.state
        finally:
            await agent.stop()

    assert asyncio.run(run()) == "healthy"
    assert get_nodemetric(cluster, node)["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"]


def test_apiserver_outage_loses_no_history_and_publishing_resumes(
    fresh_control_plane: ControlPlane, caplog: pytest.LogCaptureFixture
) -> None:
    plane = fresh_control_plane
    node = f"agent-{uuid.uuid4().hex[:8]}"
    interval = 0.2

    async def run() -> dict[str, Any]:
        settings = fast_settings(plane, node, aggregate_windows=[2.0, 30.0], metrics_enabled=False)
        agent = NodeAgent(settings)
        await agent.start()
        try:
            assert agent.publisher is not None
            publisher = agent.publisher
            await eventually(lambda: publisher.stats.successes > 0, 20, "a first publish")
            stopped_at = time.monotonic()
            await asyncio.to_thread(plane.stop_apiserver)
            await eventually(lambda: publisher.state == "failing", 10, "publishing fails while the API server is down")
            cycles_before = agent.sampler.cycles
            await asyncio.sleep(3)
            assert agent.sampler.cycles >= cycles_before + 10  # sampling went on
            failed_attempts = publisher.stats.attempts
            await asyncio.to_thread(plane.start_apiserver)
            restarted_at = time.monotonic()
            restarted_wall = time.time()
            await eventually(
                lambda: (publisher.stats.last_success_unix or 0) > restarted_wall, 30, "a publish after the restart"
            )
            recovered_in = time.monotonic() - restarted_at
            # Every collect cycle across the outage is in the store: no NaN column for the node's memory.
            ring = agent.sampler.ring
            row = ring.row_of(SeriesKey(NODE_MEMORY_USAGE_BYTES))
            assert row is not None
            times = ring.times
            inside = np.flatnonzero((times >= stopped_at) & (times <= restarted_at))
            values = ring.values[row, inside]
            gaps = np.diff(np.sort(times[inside]))
            await eventually(lambda: all_windows_warm(publisher.last_published, ("2s", "30s")), 40, "30 s window warm")
            return {
                "columns": int(inside.size),
                "nan": int(np.isnan(values).sum()),
                "max_gap": float(gaps.max()) if gaps.size else 0.0,
                "outage": restarted_at - stopped_at,
                "recovered_in": recovered_in,
                "attempts_during_outage": failed_attempts,
                "state": publisher.state,
            }
        finally:
            await agent.stop()

    with caplog.at_level(logging.INFO, "loadline.agent.publisher"):
        result = asyncio.run(run())
    assert result["nan"] == 0
    assert result["columns"] >= 0.8 * result["outage"] / interval, result
    assert result["max_gap"] < 3 * interval, result
    assert result["recovered_in"] < 10, result
    assert result["state"] == "healthy"
    messages = [r.getMessage() for r in caplog.records if r.name == "loadline.agent.publisher"]
    assert sum("failing" in m for m in messages) == 1, messages  # one line per state change, not per attempt
    assert sum("recovered" in m for m in messages) == 1, messages
    stored = get_nodemetric(plane, node)
    NodeMetric.from_wire(stored)
    thirty = stored["status"]["nodeMetric"]["aggregatedNodeUsages"][1]
    assert thirty["duration"] == "30s" and thirty["usage"]["p99"]["resources"]["cpu"]
