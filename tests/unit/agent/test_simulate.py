"""Simulated nodes: usage profiles from annotations, draws, and the same sampler/report path as real nodes."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from agent.collectors.simulated import (
    ProfileError,
    SimulatedNodeCollector,
    SimulationParams,
    draw_cpu,
    node_capacity,
    usage_profile,
)
from agent.exporter import render_windows
from agent.pipeline import NodePipeline
from agent.report import PodIdentity, ReportPolicy, aggregate, build_status
from agent.sampler import Sampler
from agent.series import (
    CPU_CFS_THROTTLED_RATIO,
    CPU_USAGE_CORES,
    MEMORY_ANON_USAGE_BYTES,
    NODE_CPU_USAGE_CORES,
    SYSTEM_CPU_USAGE_CORES,
    SeriesKey,
)
from agent.simulate import node_selected
from tests import objects

Mi = 1024 * 1024
PARAMS = SimulationParams(usage_fraction=0.5, burstiness=0.3, node_noise=0.1, system_cpu=0.2, system_memory=512 * Mi)


def pod(
    uid: str,
    annotations: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A running pod on kwok-0 requesting only what it is given."""
    return objects.pod(uid, None, None, namespace="ns", uid=uid, rv="1", node_name="kwok-0", annotations=annotations,
                       requests=requests, limits=limits)  # fmt: skip


def test_profile_from_annotations() -> None:
    p = usage_profile(
        pod(
            "a",
            {
                "loadline.io/simulated-cpu": "1500m",
                "loadline.io/simulated-memory": "2Gi",
                "loadline.io/simulated-burstiness": "0.8",
            },
        ),
        PARAMS,
    )
    assert (p.cpu, p.memory, p.burstiness) == (1.5, 2048 * Mi, 0.8)


def test_profile_defaults_to_a_fraction_of_requests_then_limits() -> None:
    p = usage_profile(pod("a", requests={"cpu": "2", "memory": "1Gi"}, limits={"cpu": "4"}), PARAMS)
    assert (p.cpu, p.memory, p.burstiness, p.cpu_limit) == (1.0, 512 * Mi, 0.3, 4.0)
    p = usage_profile(pod("b", limits={"cpu": "500m", "memory": "256Mi"}), PARAMS)
    assert (p.cpu, p.memory) == (0.25, 128 * Mi)
    p = usage_profile(pod("c"), PARAMS)  # BestEffort: a fraction of 100m / 128Mi
    assert (p.cpu, p.memory) == (0.05, 64 * Mi)


@pytest.mark.parametrize(
    "annotations",
    [
        {"loadline.io/simulated-cpu": "lots"},
        {"loadline.io/simulated-memory": "-1Gi"},
        {"loadline.io/simulated-burstiness": "high"},
        {"loadline.io/simulated-burstiness": "-0.5"},
    ],
)
def test_invalid_annotations_are_errors(annotations: dict[str, str]) -> None:
    with pytest.raises(ProfileError, match=r"loadline\.io/simulated-"):
        usage_profile(pod("a", annotations), PARAMS)


def test_cpu_draws_have_the_declared_mean_and_variation() -> None:
    rng = np.random.default_rng(7)
    draws = np.array([draw_cpu(rng, 2.0, 0.5) for _ in range(20000)])
    assert draws.min() >= 0
    assert draws.mean() == pytest.approx(2.0, rel=0.03)
    assert draws.std() / draws.mean() == pytest.approx(0.5, rel=0.05)
    assert draw_cpu(rng, 2.0, 0.0) == 2.0 and draw_cpu(rng, 0.0, 1.0) == 0.0


def test_node_selection_and_capacity() -> None:
    node = {
        "metadata": {"annotations": {"kwok.x-k8s.io/node": "fake"}},
        "status": {"allocatable": {"cpu": "32", "memory": "256Gi"}},
    }
    assert node_selected(node, "kwok.x-k8s.io/node") and node_selected(node, "kwok.x-k8s.io/node=fake")
    assert not node_selected(node, "kwok.x-k8s.io/node=real") and not node_selected(
        {"metadata": {}}, "kwok.x-k8s.io/node"
    )
    assert node_selected({"metadata": {}}, "")
    assert node_capacity(node) == (32.0, 256 * 1024**3)
    assert node_capacity({"status": {"capacity": {"cpu": "4"}}}) == (4.0, 0.0)


def simulate(
    pods: list[dict[str, Any]], cycles: int, *, cpu: float = 16.0, params: SimulationParams = PARAMS
) -> tuple[Sampler, float]:
    collector = SimulatedNodeCollector("kwok-0", lambda: pods, params, cpu=cpu, memory=64 * 1024**3, seed=3)
    now = [1000.0]
    sampler = Sampler([collector], interval=1.0, windows=(cycles + 10.0,), clock=lambda: now[0])

    async def run() -> None:
        for _ in range(cycles):
            now[0] += 1.0
            await sampler.cycle()

    asyncio.run(run())
    return sampler, now[0]


def test_simulated_node_through_the_real_sampler_and_report() -> None:
    pods = [
        pod(
            "web",
            {
                "loadline.io/simulated-cpu": "1",
                "loadline.io/simulated-memory": "1Gi",
                "loadline.io/simulated-burstiness": "0.2",
            },
        ),
        pod("batch", requests={"cpu": "4", "memory": "4Gi"}, annotations={"loadline.io/simulated-burstiness": "0"}),
        {**pod("done"), "status": {"phase": "Succeeded"}},
    ]
    sampler, now = simulate(pods, 400)
    policy = ReportPolicy(aggregate_duration_seconds=300, windows=(300,))
    agg = aggregate(sampler.ring, now, policy)
    assert agg.avg(SeriesKey(CPU_USAGE_CORES, "web")) == pytest.approx(1.0, rel=0.05)
    assert agg.avg(SeriesKey(CPU_USAGE_CORES, "batch")) == pytest.approx(2.0, rel=1e-3)  # steady: half the request
    assert agg.avg(SeriesKey(MEMORY_ANON_USAGE_BYTES, "web")) == pytest.approx(1024 * Mi, rel=0.01)
    assert agg.avg(SeriesKey(CPU_USAGE_CORES, "done")) is None
    # the node's own usage: noise around the configured system share
    assert agg.avg(SeriesKey(SYSTEM_CPU_USAGE_CORES)) == pytest.approx(0.2, rel=0.1)
    window = agg.window(SeriesKey(NODE_CPU_USAGE_CORES), 300)
    assert window is not None and window["p99"] > window["p50"] > 3.0
    infos = {p["metadata"]["uid"]: PodIdentity.from_pod(p) for p in pods[:2]}
    status = build_status(agg, infos).to_wire()
    assert [p["name"] for p in status["podsMetric"]] == ["batch", "web"]
    assert status["nodeMetric"]["aggregatedNodeUsages"][0]["usage"]["p95"]["resources"]["cpu"]


def test_pods_never_use_more_cpu_than_the_node_has() -> None:
    hogs = [
        pod(f"hog{i}", {"loadline.io/simulated-cpu": "3", "loadline.io/simulated-burstiness": "0"}) for i in range(4)
    ]
    sampler, now = simulate(hogs, 20, cpu=8.0)
    agg = aggregate(sampler.ring, now, ReportPolicy(aggregate_duration_seconds=10, windows=(10,)))
    total = sum(agg.avg(SeriesKey(CPU_USAGE_CORES, f"hog{i}")) or 0 for i in range(4))
    assert total == pytest.approx(8.0, rel=1e-3)
    assert agg.avg(SeriesKey(NODE_CPU_USAGE_CORES)) == pytest.approx(8.0, rel=1e-3)


def test_an_invalid_annotation_falls_back_to_the_default_profile() -> None:
    bad = pod("bad", {"loadline.io/simulated-cpu": "lots"}, requests={"cpu": "1"})
    collector = SimulatedNodeCollector("kwok-0", lambda: [bad], PARAMS, cpu=4, memory=1024**3, seed=1)
    profile = collector.profile(bad)
    assert profile.cpu == 0.5 and collector.errors.by_reason == {"garbage": 1}
    collector.profile(bad)  # cached by resourceVersion: not re-parsed, not re-logged
    assert collector.errors.by_reason == {"garbage": 1}


@pytest.mark.parametrize("pod_windows", [False, True], ids=["default", "pod-window-metrics"])
def test_a_simulated_node_exports_pod_series_for_the_dashboards(pod_windows: bool) -> None:
    """The demo's Pods row reads the pods' raw series with namespace/pod labels: the simulated pipeline exports
    them; their window series only with --pod-window-metrics."""
    web = {
        **pod("web", {"loadline.io/simulated-cpu": "1"}),
        "metadata": {"uid": "web", "namespace": "shop", "name": "web-0"},
    }
    now = [100.0]
    collector = SimulatedNodeCollector("kwok-0", lambda: [web], PARAMS, cpu=4, memory=8 * 1024**3, seed=3)
    pipeline = NodePipeline(
        "kwok-0",
        [collector],
        pods=lambda: {"web": PodIdentity.from_pod(web)},
        policy=ReportPolicy(aggregate_duration_seconds=5, windows=(5,), pod_windows=pod_windows),
        interval=1.0,
    )
    pipeline.sampler._clock = lambda: now[0]
    for _ in range(8):
        asyncio.run(pipeline.sampler.cycle())
        now[0] += 1.0
    text = (
        pipeline.render_raw(node_label="kwok-0")
        + render_windows([pipeline.export_input(pipeline.aggregate(now[0] - 1), node_label="kwok-0")])
    ).decode()
    labels = 'node="kwok-0",namespace="shop",pod="web-0"'
    assert (f'loadline_pod_cpu_usage_window_cores{{{labels},window="5s",quantile="0.95"}}' in text) is pod_windows
    assert 'loadline_node_cpu_usage_window_cores{node="kwok-0",window="5s",quantile="0.95"}' in text
    for family in ("cpu_usage_seconds_total", "memory_working_set_bytes"):
        assert f'loadline_container_{family}{{{labels},container=""}}' in text, family


def test_pods_wanting_more_than_their_cpu_limit_are_throttled() -> None:
    """A cycle whose drawn demand exceeds the CPU limit counts all its CFS periods as throttled; a pod without a
    limit has no CFS series, as a real cgroup without a quota."""
    pods = [
        pod(
            "at-limit",
            {"loadline.io/simulated-cpu": "1", "loadline.io/simulated-burstiness": "0.3"},
            limits={"cpu": "1"},
        ),
        pod(
            "below", {"loadline.io/simulated-cpu": "500m", "loadline.io/simulated-burstiness": "0"}, limits={"cpu": "1"}
        ),
        pod("unlimited", {"loadline.io/simulated-cpu": "1"}),
    ]
    sampler, now = simulate(pods, 200)
    agg = aggregate(sampler.ring, now, ReportPolicy(aggregate_duration_seconds=150, windows=(150,)))
    assert 0.3 < (agg.avg(SeriesKey(CPU_CFS_THROTTLED_RATIO, "at-limit")) or 0) < 0.7  # demand around its limit
    assert agg.avg(SeriesKey(CPU_CFS_THROTTLED_RATIO, "below")) == 0
    assert agg.avg(SeriesKey(CPU_CFS_THROTTLED_RATIO, "unlimited")) is None
