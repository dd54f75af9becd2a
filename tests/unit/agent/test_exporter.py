"""/metrics: names, types and labels, window aggregates at pod level only, promtool, the HTTP server."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from agent.collectors.base import SeriesErrors
from agent.config import AgentSettings
from agent.exporter import (
    QUANTILE_LABELS,
    AgentTimings,
    Exporter,
    ExportInput,
    NodeSelfState,
    WindowText,
    raw_name,
    render_raw,
    render_self,
    render_series,
    render_windows,
    window_names,
)
from agent.exposition import Family
from agent.report import PodIdentity, ReportPolicy, aggregate, build_status, wants_window_quantiles
from agent.sampler import Sampler
from agent.series import (
    CPU_CFS_PERIODS,
    CPU_CFS_THROTTLED_PERIODS,
    CPU_USAGE_CORES,
    CPU_USAGE_SECONDS,
    MEMORY_ANON_USAGE_BYTES,
    MEMORY_WORKING_SET_BYTES,
    NODE_CPU_CAPACITY_CORES,
    NODE_CPU_USAGE_SECONDS,
    NODE_MEMORY_USAGE_BYTES,
    Kind,
    Sample,
    SampleBlock,
    SeriesKey,
    block_of,
)

UID = "0f0e0d0c-1111-2222-3333-444455556666"


class Counting:
    """Node, pod and container samples whose counters grow by a fixed step per cycle."""

    name = "fake"

    def __init__(self) -> None:
        self.n = 0
        self._errors = SeriesErrors()
        self._errors.record(SeriesErrors.VANISHED)

    @property
    def errors(self) -> SeriesErrors:
        return self._errors

    devices: Sequence[Any] = ()

    def close(self) -> None:
        pass

    def collect(self, now: float) -> SampleBlock:
        self.n += 1
        n = self.n
        return block_of(
            [
                Sample(SeriesKey(NODE_CPU_USAGE_SECONDS), 2.0 * n, Kind.COUNTER),
                Sample(SeriesKey(NODE_CPU_CAPACITY_CORES), 8.0),
                Sample(SeriesKey(NODE_MEMORY_USAGE_BYTES), 4e9 + n),
                Sample(SeriesKey(CPU_USAGE_SECONDS, UID), 0.5 * n, Kind.COUNTER, UID),
                Sample(SeriesKey(CPU_USAGE_SECONDS, UID, "app"), 0.4 * n, Kind.COUNTER, "containerd://a"),
                Sample(SeriesKey(CPU_CFS_PERIODS, UID, "app"), 10.0 * n, Kind.COUNTER, "containerd://a"),
                Sample(SeriesKey(CPU_CFS_THROTTLED_PERIODS, UID, "app"), 1.0 * n, Kind.COUNTER, "containerd://a"),
                Sample(SeriesKey(MEMORY_ANON_USAGE_BYTES, UID), 1e8),
                Sample(SeriesKey(MEMORY_WORKING_SET_BYTES, UID, "app"), 9e7),
                Sample(SeriesKey("pressure_cpu_waiting_seconds_total", UID), 0.1 * n, Kind.COUNTER, UID),
                Sample(SeriesKey("gpu_utilization_ratio", "", "", "GPU-1"), 0.5),
            ]
        )


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Varying(Counting):
    """As `Counting`, with the node's and the pod's memory different every cycle (percentiles that differ)."""

    def collect(self, now: float) -> SampleBlock:
        block = super().collect(now)
        values = block.array().copy()
        values[2] = 1000.0 * self.n**2  # node memory usage
        values[7] = 4096.0 * (self.n % 5)  # the pod's anonymous memory
        return SampleBlock(block.layout, values)


def sampled(
    cycles: int = 12, collector: Counting | None = None, *, pod_windows: bool = True
) -> tuple[Sampler, ExportInput]:
    """The fixture's cycles and aggregates; with the pods' window series (`--pod-window-metrics`) unless told."""
    clock = Clock()
    sampler = Sampler([collector or Counting()], interval=1.0, windows=(10.0,), clock=clock)

    async def run() -> None:
        for _ in range(cycles):
            clock.t += 1.0
            await sampler.cycle()

    asyncio.run(run())
    policy = ReportPolicy(aggregate_duration_seconds=5, windows=(4.0, 10.0), pod_windows=pod_windows)
    agg = aggregate(sampler.ring, clock.t, policy)
    pods = {UID: PodIdentity(UID, "shop", "web-1", "koord-prod", "LS")}
    return sampler, ExportInput(raw=list(sampler.last_samples), aggregates=agg, pods=pods)


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_names_follow_conventions_and_cadvisor_shapes() -> None:
    assert (
        raw_name(SeriesKey(CPU_USAGE_SECONDS, "u", "c"), Kind.COUNTER) == "loadline_container_cpu_usage_seconds_total"
    )
    assert (
        raw_name(SeriesKey(MEMORY_WORKING_SET_BYTES, "u", "c"), Kind.GAUGE)
        == "loadline_container_memory_working_set_bytes"
    )
    assert raw_name(SeriesKey(NODE_CPU_USAGE_SECONDS), Kind.COUNTER) == "loadline_node_cpu_usage_seconds_total"
    assert raw_name(SeriesKey("node_infiniband_port_data_received_bytes_total", device="mlx5_0/1"), Kind.COUNTER) == (
        "loadline_node_infiniband_port_data_received_bytes_total"
    )
    assert window_names(SeriesKey("node_cpu_usage_cores")) == (
        "loadline_node_cpu_usage_window_cores",
        "loadline_node_cpu_usage_window_avg_cores",
    )
    assert window_names(SeriesKey("cpu_cfs_throttled_ratio", "u")) == (
        "loadline_pod_cpu_cfs_throttled_window_ratio",
        "loadline_pod_cpu_cfs_throttled_window_avg_ratio",
    )
    assert window_names(SeriesKey("rx_bytes_per_second", device="eth0")) == (
        "loadline_rx_window_bytes_per_second",
        "loadline_rx_window_avg_bytes_per_second",
    )


def test_raw_series_and_window_aggregates_parse() -> None:
    _, inp = sampled()
    found = families(render_series([inp]).decode())
    cpu = found["loadline_container_cpu_usage_seconds"]  # the parser strips _total from counter families
    assert cpu.type == "counter"
    labels = {tuple(sorted(s.labels.items())) for s in cpu.samples}
    assert (("container", ""), ("namespace", "shop"), ("pod", "web-1")) in labels
    assert (("container", "app"), ("namespace", "shop"), ("pod", "web-1")) in labels
    assert found["loadline_node_cpu_usage_seconds"].samples[0].value == 24.0
    assert found["loadline_container_pressure_cpu_waiting_seconds"].type == "counter"
    assert found["loadline_node_memory_usage_bytes"].type == "gauge"
    assert found["loadline_gpu_utilization_ratio"].samples[0].labels == {"device": "GPU-1"}

    node_q = found["loadline_node_cpu_usage_window_cores"]
    assert node_q.type == "summary"
    got = {(s.labels["window"], s.labels["quantile"]): s.value for s in node_q.samples}
    assert got == {(w, q): 2.0 for w in ("4s", "10s") for q in ("0.5", "0.9", "0.95", "0.99")}
    avg = found["loadline_node_cpu_usage_window_avg_cores"]
    assert avg.type == "gauge" and {s.labels["window"] for s in avg.samples} == {"4s", "10s"}

    pod_q = found["loadline_pod_cpu_usage_window_cores"]
    assert {s.labels["pod"] for s in pod_q.samples} == {"web-1"}
    assert {s.value for s in pod_q.samples} == {0.5}
    assert all("container" not in s.labels for f in found.values() if "_window_" in f.name for s in f.samples)
    assert "loadline_system_cpu_usage_window_cores" in found
    assert "loadline_gpu_utilization_window_ratio" in found  # device series get windows too
    # container-level series are raw only; the PSI counter is not aggregated either
    assert not any(name.startswith("loadline_container_") and "_window" in name for name in found)


def test_pod_window_series_are_off_by_default() -> None:
    """Without --pod-window-metrics: node, system and device windows as before, no pod window series (nor their
    percentiles computed), the pods' raw series (cAdvisor's shape) and NodeMetric status unchanged."""
    assert ReportPolicy().pod_windows is False and AgentSettings().pod_window_metrics is False
    _, with_pods = sampled()
    _, inp = sampled(pod_windows=False)
    found = families(render_series([inp]).decode())
    assert not [name for name in found if name.startswith("loadline_pod_")]
    for name in ("loadline_node_cpu_usage_window_cores", "loadline_system_cpu_usage_window_cores",
                 "loadline_gpu_utilization_window_ratio"):  # fmt: skip
        assert found[name].samples == families(render_series([with_pods]).decode())[name].samples, name
    cpu = found["loadline_container_cpu_usage_seconds"]
    assert {(s.labels["pod"], s.labels["container"]) for s in cpu.samples} >= {("web-1", ""), ("web-1", "app")}
    assert inp.aggregates is not None and with_pods.aggregates is not None
    pod_cpu = SeriesKey(CPU_USAGE_CORES, UID)
    assert set(inp.aggregates.window(pod_cpu, 4.0) or {}) == {"avg"}  # percentiles not computed
    assert set(with_pods.aggregates.window(pod_cpu, 4.0) or {}) == {"avg", "p50", "p90", "p95", "p99"}
    at = datetime(2026, 1, 1, tzinfo=UTC)
    assert build_status(inp.aggregates, inp.pods, update_time=at) == build_status(
        with_pods.aggregates, with_pods.pods, update_time=at
    )


def test_cold_windows_are_absent_not_zero() -> None:
    _, inp = sampled(cycles=4)  # 3 rates over 2 s: the 10 s window is cold
    found = families(render_series([inp]).decode())
    windows = {s.labels["window"] for s in found["loadline_node_cpu_usage_window_cores"].samples}
    assert windows == {"4s"}


def test_series_of_unknown_pods_are_not_exported() -> None:
    _, inp = sampled()
    text = render_series([ExportInput(inp.raw, inp.aggregates, pods={})]).decode()
    assert "loadline_container_" not in text and "loadline_pod_" not in text
    assert "loadline_node_cpu_usage_seconds_total" in text


def test_a_block_renders_as_its_samples_while_values_and_pods_change() -> None:
    """A block renders through a plan kept per layout and node; it must give the lines its samples give one by
    one, as slots empty and fill, and as its pods are renamed, forgotten and known again."""
    block = Counting().collect(0.0)
    layout, full = block.layout, block.array()
    renamed = {UID: PodIdentity(UID, "shop", "web-2", "koord-prod", "LS")}
    known = {UID: PodIdentity(UID, "shop", "web-1", "koord-prod", "LS")}
    holes = full.copy()
    holes[[0, 4, 7]] = float("nan")
    cases = [(full, known, ""), (holes, known, ""), (full, renamed, ""), (holes, {}, ""), (full, known, "n1"),
             (full, known, "")]  # fmt: skip
    for values, pods, node in cases:
        as_block = SampleBlock(layout, values)
        one_by_one = list(as_block.samples())
        got = render_raw([ExportInput([as_block], None, pods, node)]).decode().splitlines()
        want = render_raw([ExportInput([one_by_one], None, pods, node)]).decode().splitlines()
        assert sorted(got) == sorted(want) and len(got) > 6
    assert not any('pod="web-1"' in line for line in render_raw([ExportInput([block], None, renamed)]).decode())


def test_window_lines_are_the_aggregates_values() -> None:
    """Every window line is `Aggregates.window`'s value for its series, window and statistic, and nothing more."""
    _, inp = sampled(collector=Varying())
    agg = inp.aggregates
    assert agg is not None
    got = {
        (f.name, s.labels.get("pod", ""), s.labels["window"], s.labels.get("quantile", "avg")): s.value
        for f in text_string_to_metric_families(render_windows([inp]).decode())
        for s in f.samples
    }
    want = {}
    for key in agg.rows:
        if not isinstance(key, SeriesKey) or not wants_window_quantiles(key):
            continue
        quantile_name, avg_name = window_names(key)
        pod = inp.pods[key.pod].name if key.pod else ""
        for duration, text in ((4.0, "4s"), (10.0, "10s")):
            for stat, value in (agg.window(key, duration) or {}).items():
                name, q = (avg_name, "avg") if stat == "avg" else (quantile_name, QUANTILE_LABELS[stat])
                want[(name, pod, text, q)] = value
    assert got == want and len(want) > 20
    assert len({v for (name, _, _, q), v in want.items() if name.startswith("loadline_node_memory") and q != "avg"}) > 2


def test_node_label_when_one_process_exports_many_nodes() -> None:
    _, inp = sampled()
    text = render_series([ExportInput(inp.raw, inp.aggregates, inp.pods, node="kwok-1")]).decode()
    found = families(text)
    assert all(s.labels.get("node") == "kwok-1" for f in found.values() for s in f.samples)


def test_label_values_are_escaped() -> None:
    family = Family("x", "gauge", "help")
    family.add([("pod", 'a"b\\c\nd')], 1.0)
    family.add([("pod", "nan")], float("nan"))  # dropped
    assert family.lines == ['x{pod="a\\"b\\\\c\\nd"} 1.0']


def self_text(sampler: Sampler) -> str:
    return render_self([NodeSelfState("node-a", sampler)], AgentTimings(0.01, 0.02, 1.7e9, 1), "node", per_node=True)


def test_self_metrics() -> None:
    sampler, _ = sampled()
    found = families(self_text(sampler))
    assert found["loadline_agent_build_info"].samples[0].labels["mode"] == "node"
    success = found["loadline_agent_collector_success"].samples[0]
    assert success.labels == {"node": "node-a", "collector": "fake"} and success.value == 1.0
    duration = found["loadline_agent_collector_duration_seconds"].samples[0]
    assert duration.labels == {"node": "node-a", "collector": "fake"}
    assert duration.value == sampler.stats["fake"].last_duration_seconds > 0  # the measured time, not a placeholder
    errors = found["loadline_agent_collector_series_errors"].samples
    assert errors[0].labels["reason"] == "vanished" and errors[0].value == 1.0
    assert found["loadline_agent_store_series"].samples[0].value == len(sampler.ring)
    assert found["loadline_agent_collect_cycles"].samples[0].value == 12


def test_promtool_finds_no_problems(promtool: str) -> None:
    sampler, inp = sampled()

    class Publisher:  # the self-metrics read only these fields
        stats = type(
            "S", (), {"successes": 3, "errors": {"unreachable": 2}, "last_success_unix": 1.7e9, "healthy": True}
        )()

    text = render_series([inp]).decode() + render_self(
        [NodeSelfState("node-a", sampler, Publisher())], AgentTimings(0.01, 0.02, 1.7e9, 1), "node", per_node=True
    )
    exporter = Exporter("127.0.0.1", 0, live=lambda: text, health=lambda: (True, ""), ready=lambda: (True, ""))
    body = exporter.metrics_text().decode()  # plus the default registry: process_*, python_*, reflector metrics
    result = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, text=True, check=False)
    assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), (
        result.stdout + result.stderr
    )
    assert list(text_string_to_metric_families(body))


def test_server_serves_prepared_bytes_and_health() -> None:
    ready = [False]

    async def run() -> None:
        exporter = Exporter(
            "127.0.0.1",
            0,
            live=lambda: "# HELP loadline_agent_x x\n# TYPE loadline_agent_x gauge\nloadline_agent_x 1.0\n",
            health=lambda: (True, "ok"),
            ready=lambda: (ready[0], "ok" if ready[0] else "no aggregation yet"),
            include_default_registry=False,
        )
        port = await exporter.start()
        try:
            async with aiohttp.ClientSession() as session:
                base = f"http://127.0.0.1:{port}"
                async with session.get(base + "/readyz") as r:
                    assert r.status == 503 and "no aggregation yet" in await r.text()
                exporter.update([b"# HELP loadline_node_x x\n# TYPE loadline_node_x gauge\nloadline_node_x 2.0\n"])
                ready[0] = True
                async with session.get(base + "/readyz") as r:
                    assert r.status == 200
                async with session.get(base + "/healthz") as r:
                    assert r.status == 200
                async with session.get(base + "/metrics") as r:
                    assert r.status == 200
                    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                    text = await r.text()
            assert set(families(text)) == {"loadline_node_x", "loadline_agent_x"}
            assert exporter.scrapes == 1
        finally:
            await exporter.stop()

    asyncio.run(run())


def test_own_process_series_are_prometheus_clients_default_ones() -> None:
    """The standalone agent renders process_* and python_* itself (no prometheus_client import): the same
    families, types, labels and (CPU time and fds moving a little meanwhile) values as its default collectors."""
    from prometheus_client import REGISTRY, generate_latest

    from agent.procself import render_process

    def families(text: str) -> dict[tuple[str, str, tuple[tuple[str, str], ...]], float]:
        return {
            (f.name, f.type, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
        }

    theirs = families(generate_latest(REGISTRY).decode())
    ours = families(render_process())
    defaults = {k: v for k, v in theirs.items() if k[0].startswith(("process_", "python_"))}
    assert ours.keys() == defaults.keys() and any(k[0] == "process_resident_memory_bytes" for k in ours)
    for key in ("process_start_time_seconds", "process_max_fds", "python_info"):
        (ours_value,) = (v for k, v in ours.items() if k[0] == key)
        (theirs_value,) = (v for k, v in defaults.items() if k[0] == key)
        assert abs(ours_value - theirs_value) <= 0.01 * abs(theirs_value), key


def test_open_fds_counts_every_descriptor_the_process_holds(tmp_path: Path) -> None:
    """process_open_fds comes from one stat of /proc/self/fd (its size is the count since Linux 6.2): the same
    count as listing it, less the fd the listing itself opens, and it follows fds opened and closed."""
    from agent.procself import render_process

    def open_fds() -> float:
        (value,) = (
            s.value for f in text_string_to_metric_families(render_process()) for s in f.samples
            if f.name == "process_open_fds"
        )  # fmt: skip
        return value

    before = open_fds()
    assert before == len(os.listdir("/proc/self/fd")) - 1
    held = [os.open(tmp_path, os.O_RDONLY) for _ in range(25)]
    try:
        assert open_fds() == before + 25
    finally:
        for fd in held:
            os.close(fd)
    assert open_fds() == before


def test_window_text_renders_again_only_the_windows_that_changed(monkeypatch: Any) -> None:
    """A `WindowText` renders a window again only when its statistics, the row map or the pods changed, and says
    what a fresh render says."""
    from agent import exporter

    _, inp = sampled(collector=Varying())
    agg = inp.aggregates
    assert agg is not None
    rendered: list[float] = []
    render_window = exporter._render_window

    def counting(plan: Any, stats: Any) -> Any:
        rendered.append(stats.duration)
        return render_window(plan, stats)

    monkeypatch.setattr(exporter, "_render_window", counting)
    text = WindowText()

    def lines(parts: Sequence[bytes]) -> list[str]:
        return sorted(b"".join(parts).decode().splitlines())

    fresh = sorted(render_windows([inp]).decode().splitlines())
    rendered.clear()
    assert lines(text.render([inp])) == fresh
    assert sorted(rendered) == [4.0, 10.0]
    rendered.clear()
    assert lines(text.render([inp])) == lines(text.render([inp])) and rendered == []  # nothing changed
    # a new aggregation of the short window only (the long one carried: the same statistics and row map)
    carried = replace(agg, windows={4.0: replace(agg.windows[4.0]), 10.0: agg.windows[10.0]})
    text.render([replace(inp, aggregates=carried)])
    assert rendered == [4.0]
    rendered.clear()
    renamed = {UID: PodIdentity(UID, "shop", "web-2", "koord-prod", "LS")}
    body = b"".join(text.render([replace(inp, aggregates=carried, pods=renamed)])).decode()
    assert sorted(rendered) == [4.0, 10.0] and 'pod="web-2"' in body and 'pod="web-1"' not in body
    rendered.clear()
    # the pod's series forgotten: a new row map, so no window keeps their lines even with the same statistics
    rows = {key: row for key, row in agg.rows.items() if not (isinstance(key, SeriesKey) and key.pod)}
    body = b"".join(text.render([replace(inp, aggregates=replace(carried, rows=rows), pods=renamed)])).decode()
    assert sorted(rendered) == [4.0, 10.0] and "web-2" not in body and "loadline_node_memory_usage_window" in body
    assert families(body)  # still valid exposition text
