"""`loadline top`: rows from Nodes, NodeMetrics and pods; classes, sorting, table and JSON."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from common.api.wire import GoDuration
from common.cli.top import NodeRow, build_rows, main, render_table, sort_rows
from scheduler_plugin.descheduler.args import LowNodeLoadArgs
from tests import objects

GiB = 1024**3


def node(name: str, cpu: str = "8", memory: str = "32Gi", batch_cpu: str | None = None) -> dict[str, Any]:
    batch = {"kubernetes.io/batch-cpu": batch_cpu, "kubernetes.io/batch-memory": "8Gi"} if batch_cpu is not None else {}
    return objects.node(name, cpu=cpu, memory=memory, pods=None, extra=batch)


def metric(
    name: str, cpu: str, memory: str, p95_cpu: str = "1", windows: tuple[str, ...] = ("5m0s",), *,
    system_cpu: str | None = None, updated: float | None = None,
) -> dict[str, Any]:  # fmt: skip
    """A report with node usage, system usage and a p95 per window (`p95_cpu` in the first, 7 cores after)."""
    aggregated = [
        {"duration": w, "usage": {"p95": objects.resources(p95_cpu if i == 0 else "7", memory)}}
        for i, w in enumerate(windows)
    ]
    built = objects.MakeNodeMetric(name).updated(objects.rfc3339(updated)).node_usage(cpu, memory)
    return built.aggregated(aggregated).system(system_cpu or cpu, memory).obj()


def batch_pod(node_name: str, cpu_milli: int, phase: str = "Running") -> dict[str, Any]:
    requests = {"kubernetes.io/batch-cpu": str(cpu_milli), "kubernetes.io/batch-memory": "1Gi"}
    return objects.pod(f"b-{cpu_milli}", None, None, namespace="x", requests=requests, node_name=node_name, phase=phase)


def rows() -> list[NodeRow]:
    return build_rows(
        [node("cold", batch_cpu="4000"), node("warm"), node("hot"), node("new")],
        [
            metric("cold", "1", "4Gi", windows=("5m0s", "30m0s")),
            metric("warm", "4", "16Gi"),
            metric("hot", "7", "8Gi", p95_cpu="8"),
        ],
        [batch_pod("cold", 1500), batch_pod("cold", 500), batch_pod("cold", 9000, phase="Succeeded")],
        window=GoDuration.parse("5m"),
    )


def test_rows_classes_and_batch() -> None:
    by = {r.name: r for r in rows()}
    assert by["cold"].cpu_cores == 1 and by["cold"].percent("cpu") == pytest.approx(12.5)
    assert by["cold"].p95_cpu_cores == 1  # the chosen 5m window, not the longest (30m: 7)
    assert by["cold"].batch_cpu_allocatable_cores == 4 and by["cold"].batch_cpu_used_cores == 2.0  # finished: left out
    assert by["cold"].batch_memory_used_bytes == 2 * GiB and by["cold"].pods == 2
    assert {r.name: r.load_class for r in by.values()} == {
        "cold": "low",
        "warm": "normal",
        "hot": "hot",
        "new": "unknown",
    }
    assert by["new"].cpu_cores is None and by["new"].batch_cpu_allocatable_cores is None


def test_the_class_is_the_descheduler_s() -> None:
    """Classified by the descheduler's classification: its usage (systemUsage + pods), deviation thresholds and
    NodeMetric expiry, not a copy of it."""
    nodes = [node("cold"), node("warm"), node("hot"), node("busy"), node("stale")]
    metrics = [
        metric("cold", "1", "4Gi"),
        metric("warm", "4", "16Gi"),
        metric("hot", "7", "8Gi"),
        metric("busy", "1", "4Gi", system_cpu="7"),  # nodeUsage says idle; the descheduler reads system + pods
        metric("stale", "1", "4Gi", updated=time.time() - 3600),  # expired: the descheduler skips the node
    ]
    malformed = {"metadata": {"name": "m", "namespace": "x", "creationTimestamp": "yesterday"}, "spec": {"nodeName": "cold"}}
    classes = {r.name: r.load_class for r in build_rows(nodes, metrics, [malformed], window=None)}
    assert classes == {"cold": "low", "warm": "normal", "hot": "hot", "busy": "hot", "stale": "unknown"}
    # deviation thresholds: distances from the pool's mean usage (cpu 50 %, memory 29 % without busy and stale)
    deviation = LowNodeLoadArgs(
        use_deviation_thresholds=True, low_thresholds={"cpu": 10, "memory": 10}, high_thresholds={"cpu": 10, "memory": 10}
    )
    rows = build_rows(nodes[:3], metrics[:3], [], window=None, args=deviation)
    assert {r.name: r.load_class for r in rows} == {"cold": "low", "warm": "hot", "hot": "hot"}


def test_sorting_and_output() -> None:
    assert [r.name for r in sort_rows(rows(), "cpu")] == ["hot", "warm", "cold", "new"]  # largest first, unknown last
    assert [r.name for r in sort_rows(rows(), "class")] == ["hot", "warm", "cold", "new"]
    text = render_table(sort_rows(rows(), "name"), window="5m0s", wide=False)
    header, *lines = text.splitlines()
    assert header.split() == [
        "NAME",
        "CPU(cores)",
        "CPU%",
        "MEMORY",
        "MEMORY%",
        "P95-CPU(5m0s)",
        "BATCH-CPU(used/alloc)",
        "BATCH-MEMORY(used/alloc)",
        "CLASS",
    ]
    assert lines[0].split() == ["cold", "1.00", "12%", "4.0GiB", "12%", "1.00", "2.00/4.00", "2.0GiB/8.0GiB", "low"]
    wide = render_table(rows(), window="5m0s", wide=True).splitlines()[0].split()
    assert "P95-MEMORY(5m0s)" in wide and wide[-2:] == ["PODS", "UPDATED"]


def test_bad_thresholds_and_window_are_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="--low"):
        main(["--low", "disk=3"])
    assert main(["--window", "soon"]) == 2
    assert "--window" in capsys.readouterr().err


def test_json_rows_are_plain_numbers() -> None:
    from dataclasses import asdict

    data = json.loads(json.dumps([asdict(r) for r in rows()]))
    cold = next(r for r in data if r["name"] == "cold")
    assert cold["cpu_cores"] == 1.0 and cold["memory_bytes"] == 4 * GiB and cold["load_class"] == "low"
