"""NodeMetric status from the store: windows, cold start, units, memory policy, pods, devices, spec policy."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from agent.report import (
    NodeReporter,
    PodIdentity,
    ReportPolicy,
    aggregate,
    build_status,
    cpu_quantity,
    current_devices,
    effective_policy,
    memory_quantity,
    wants_window_quantiles,
)
from agent.series import (
    CPU_USAGE_CORES,
    MEMORY_ANON_USAGE_BYTES,
    NODE_CPU_USAGE_CORES,
    NODE_MEMORY_USAGE_BYTES,
    NODE_MEMORY_USAGE_WITH_PAGE_CACHE_BYTES,
    SYSTEM_CPU_USAGE_CORES,
    SYSTEM_MEMORY_USAGE_BYTES,
    SeriesKey,
)
from agent.store.aggregate import nearest_rank_index
from agent.store.ring import SampleRing
from common.api.nodemetric import NodeMemoryCollectPolicy, NodeMetric, NodeMetricCollectPolicy
from common.api.nodemetric_digest import digest_node_metric
from common.api.quantity import Quantity
from tests import objects

GiB = 1024**3
START = 1000.0


def ring_of(series: Mapping[SeriesKey, Sequence[float]], interval: float = 1.0) -> tuple[SampleRing, float]:
    """One column per index; NaN means "no sample this cycle". Returns the ring and the last column's time."""
    n = max(len(v) for v in series.values())
    ring = SampleRing(n + 8)
    for i in range(n):
        keys, values = [], []
        for key, vals in series.items():
            if i < len(vals) and not math.isnan(vals[i]):
                keys.append(key)
                values.append(vals[i])
        ring.append_column(START + i * interval, keys, values)
    return ring, START + (n - 1) * interval


def node_series(n: int, cpu: Sequence[float] | None = None, memory: float = 4 * GiB) -> dict[SeriesKey, list[float]]:
    return {
        SeriesKey(NODE_CPU_USAGE_CORES): list(cpu if cpu is not None else [2.0] * n),
        SeriesKey(NODE_MEMORY_USAGE_BYTES): [memory] * n,
        SeriesKey(NODE_MEMORY_USAGE_WITH_PAGE_CACHE_BYTES): [memory + GiB] * n,
        SeriesKey(SYSTEM_CPU_USAGE_CORES): [0.5] * n,
        SeriesKey(SYSTEM_MEMORY_USAGE_BYTES): [GiB] * n,
    }


def status_of(series: Mapping[SeriesKey, Sequence[float]], policy: ReportPolicy, **kwargs: Any) -> dict[str, Any]:
    ring, now = ring_of(series)
    agg = aggregate(ring, now, policy)
    pods = kwargs.pop("pods", {})
    status = build_status(agg, pods, update_time=datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=UTC), **kwargs)
    return status.to_wire()


def q(text: str) -> Quantity:
    return Quantity.parse(text)


def test_node_usage_is_the_average_over_the_aggregate_duration() -> None:
    cpu = [float(i) for i in range(1, 21)]  # 1..20 cores, one per second
    policy = ReportPolicy(aggregate_duration_seconds=5, windows=(10,))
    status = status_of(node_series(20, cpu), policy)
    usage = status["nodeMetric"]["nodeUsage"]["resources"]
    # [now-5, now] holds the last 6 samples: 15..20
    assert q(usage["cpu"]) == Quantity.from_milli(17500)
    assert q(usage["memory"]) == Quantity.from_int(4 * GiB)
    assert status["updateTime"] == "2026-01-02T03:04:05Z"


def test_windows_shortest_first_with_koordinators_nearest_rank() -> None:
    cpu = [float(i) for i in range(1, 41)]
    policy = ReportPolicy(aggregate_duration_seconds=5, windows=(30, 10))
    status = status_of(node_series(40, cpu), policy)
    windows = status["nodeMetric"]["aggregatedNodeUsages"]
    assert [w["duration"] for w in windows] == ["10s", "30s"]
    for entry, width in zip(windows, (11, 31), strict=True):
        values = sorted(cpu[-width:])
        assert set(entry["usage"]) == {"avg", "p50", "p90", "p95", "p99"}
        assert q(entry["usage"]["avg"]["resources"]["cpu"]) == cpu_quantity(sum(values) / width)
        for name, quantile in (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99)):
            expected = values[int(nearest_rank_index(width, quantile))]
            assert q(entry["usage"][name]["resources"]["cpu"]) == cpu_quantity(expected), name
            assert q(entry["usage"][name]["resources"]["memory"]) == Quantity.from_int(4 * GiB)
    system = status["nodeMetric"]["aggregatedSystemUsages"]
    assert [w["duration"] for w in system] == ["10s", "30s"]
    assert q(system[0]["usage"]["p95"]["resources"]["cpu"]) == q("500m")
    assert q(status["nodeMetric"]["systemUsage"]["resources"]["memory"]) == Quantity.from_int(GiB)


def test_a_window_less_than_half_covered_is_cold_and_empty() -> None:
    policy = ReportPolicy(aggregate_duration_seconds=60, windows=(4, 100))
    status = status_of(node_series(10), policy)
    warm, cold = status["nodeMetric"]["aggregatedNodeUsages"]
    assert warm["duration"] == "4s" and warm["usage"]["p99"]["resources"]["cpu"] == "2"
    assert cold == {"duration": "1m40s", "usage": {k: {} for k in ("avg", "p50", "p90", "p95", "p99")}}
    # nodeUsage has no cold-start rule: whatever samples there are, averaged
    assert status["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == "2"


def test_a_window_is_cold_when_cpu_or_memory_is() -> None:
    series = node_series(10)
    series[SeriesKey(NODE_CPU_USAGE_CORES)] = [math.nan] * 8 + [1.0, 1.0]  # CPU only for the last 2 s
    status = status_of(series, ReportPolicy(aggregate_duration_seconds=10, windows=(4, 10)))
    four, ten = status["nodeMetric"]["aggregatedNodeUsages"]
    assert four["usage"]["avg"] == {}  # CPU spans 1 s < 2 s, memory would be warm: still all empty
    assert ten["usage"]["p50"] == {}


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (NodeMemoryCollectPolicy.USAGE_WITHOUT_PAGE_CACHE, 4 * GiB),
        (NodeMemoryCollectPolicy.USAGE_WITH_PAGE_CACHE, 5 * GiB),
        (NodeMemoryCollectPolicy.USAGE_WITH_HOT_PAGE_CACHE, 4 * GiB),  # no kidled: as koordlet without it
    ],
)
def test_node_memory_follows_the_collect_policy(policy: NodeMemoryCollectPolicy, expected: int) -> None:
    status = status_of(
        node_series(10), ReportPolicy(aggregate_duration_seconds=5, windows=(4,), node_memory_collect_policy=policy)
    )
    assert q(status["nodeMetric"]["nodeUsage"]["resources"]["memory"]) == Quantity.from_int(expected)
    assert q(
        status["nodeMetric"]["aggregatedNodeUsages"][0]["usage"]["p90"]["resources"]["memory"]
    ) == Quantity.from_int(expected)


def test_units_cpu_truncated_milli_memory_whole_bytes_binary() -> None:
    assert cpu_quantity(1.23456) == Quantity.from_milli(1234)
    assert str(cpu_quantity(1.5)) == "1500m"
    assert str(cpu_quantity(2.0)) == "2"
    assert cpu_quantity(-0.001) == Quantity.from_milli(0)  # never negative on the wire
    assert cpu_quantity(math.nan) is None
    assert str(memory_quantity(100 * 1024 * 1024 + 0.9)) == "100Mi"
    assert str(memory_quantity(20498764 * 1024)) == "20498764Ki"
    assert memory_quantity(math.inf) is None


def pod_json(
    uid: str, namespace: str, name: str, *, qos_label: str | None = None, guaranteed: bool = False
) -> dict[str, Any]:
    cpu, memory = ("1", "1Gi") if guaranteed else (None, None)
    return objects.pod(name, cpu, memory, namespace=namespace, uid=uid, koord_qos=qos_label,
                       limits={"cpu": "1", "memory": "1Gi"} if guaranteed else None)  # fmt: skip


def test_pods_metric_average_usage_with_defaulted_priority_and_qos_sorted() -> None:
    series = node_series(10)
    series[SeriesKey(CPU_USAGE_CORES, "u-web")] = [0.25] * 10
    series[SeriesKey(MEMORY_ANON_USAGE_BYTES, "u-web")] = [100 * 1024 * 1024] * 10
    series[SeriesKey(CPU_USAGE_CORES, "u-batch")] = [1.0] * 10
    series[SeriesKey(MEMORY_ANON_USAGE_BYTES, "u-batch")] = [GiB] * 10
    series[SeriesKey(CPU_USAGE_CORES, "u-batch", "main")] = [0.9] * 10  # containers do not make pods
    pods = {
        "u-web": PodIdentity.from_pod(pod_json("u-web", "b-ns", "web", guaranteed=True)),
        "u-batch": PodIdentity.from_pod(pod_json("u-batch", "a-ns", "job", qos_label="BE")),
        "u-none": PodIdentity.from_pod(pod_json("u-none", "a-ns", "starting")),  # no samples yet: left out
    }
    status = status_of(series, ReportPolicy(aggregate_duration_seconds=5, windows=(4,)), pods=pods)
    assert status["podsMetric"] == [
        {
            "name": "job",
            "namespace": "a-ns",
            "podUsage": {"resources": {"cpu": "1", "memory": "1Gi"}},
            "priority": "koord-batch",
            "qos": "BE",
        },
        {
            "name": "web",
            "namespace": "b-ns",
            "podUsage": {"resources": {"cpu": "250m", "memory": "100Mi"}},
            "priority": "koord-prod",
            "qos": "LSR",
        },
    ]


def test_a_pod_with_memory_but_no_cpu_rate_yet_is_left_out_as_koordlet_does() -> None:
    """koordlet's collectPodMetric returns an error when either query fails: no podUsage without a cpu key."""
    series = node_series(10)
    series[SeriesKey(MEMORY_ANON_USAGE_BYTES, "u-new")] = [GiB] * 10  # first sample: no CPU rate yet
    series[SeriesKey(CPU_USAGE_CORES, "u-cpu-only")] = [0.5] * 10
    series[SeriesKey(CPU_USAGE_CORES, "u-idle")] = [0.0] * 10  # idle, not unknown: reported as 0
    series[SeriesKey(MEMORY_ANON_USAGE_BYTES, "u-idle")] = [GiB] * 10
    pods = {
        uid: PodIdentity.from_pod(pod_json(uid, "ns", uid.removeprefix("u-")))
        for uid in ("u-new", "u-cpu-only", "u-idle")
    }
    status = status_of(series, ReportPolicy(aggregate_duration_seconds=5, windows=(4,)), pods=pods)
    assert [(p["name"], p["podUsage"]["resources"]) for p in status["podsMetric"]] == [
        ("idle", {"cpu": "0", "memory": "1Gi"})
    ]


def test_no_pods_means_no_pods_metric_field() -> None:
    status = status_of(node_series(5), ReportPolicy(aggregate_duration_seconds=5, windows=(4,)))
    assert "podsMetric" not in status


def test_status_round_trips_through_the_nodemetric_model() -> None:
    status = status_of(node_series(10), ReportPolicy(aggregate_duration_seconds=5, windows=(4, 8)))
    wire = {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": "n1"},
        "status": status,
    }
    model = NodeMetric.from_wire(wire)
    assert model.to_wire() == wire
    assert (digest_node_metric(wire).aggregated_usage("p95", None) or {}).get("cpu") == 2000


# ------------------------------------------------------------------------------------------------ devices
class NoDevices:
    name = "node"
    devices: Sequence[Any] = ()


class FakeGpuCollector:
    """A collector with devices, as the GPU collector is: `devices` lists what its series are about."""

    name = "gpu"

    def __init__(self, devices: Sequence[Any]) -> None:
        self._devices = list(devices)

    @property
    def devices(self) -> Sequence[Any]:
        return self._devices


class BrokenSource:
    name = "broken"

    @property
    def devices(self) -> Sequence[Any]:
        raise RuntimeError("inventory failed")


def test_devices_are_read_from_every_collector() -> None:
    from agent.collectors.devices import DEVICE_TYPE_GPU, Device, DeviceResource

    gpu = Device(
        type=DEVICE_TYPE_GPU,
        id="GPU-0000",
        minor=0,
        bus_id="0000:3b:00.0",  # a topology with only busID: the CRD would reject it, so it is left out
        node_resources=(
            DeviceResource("koordinator.sh/gpu-core", "gpu_utilization_ratio", scale=100),
            DeviceResource("koordinator.sh/gpu-memory", "gpu_memory_used_bytes", binary=True),
        ),
        pod_resources=(DeviceResource("koordinator.sh/gpu-memory", "gpu_memory_used_bytes", binary=True),),
    )
    series = node_series(10)
    series[SeriesKey("gpu_utilization_ratio", "", "", "GPU-0000")] = [0.35] * 10
    series[SeriesKey("gpu_memory_used_bytes", "", "", "GPU-0000")] = [4 * GiB] * 10
    series[SeriesKey(CPU_USAGE_CORES, "u1")] = [0.5] * 10
    series[SeriesKey(MEMORY_ANON_USAGE_BYTES, "u1")] = [GiB] * 10
    series[SeriesKey("gpu_memory_used_bytes", "u1", "", "GPU-0000")] = [GiB] * 10
    devices = current_devices([NoDevices(), FakeGpuCollector([gpu]), BrokenSource()])  # type: ignore[list-item]
    assert devices == [gpu]
    pods = {"u1": PodIdentity("u1", "ns", "trainer", "koord-prod", "LS")}
    status = status_of(series, ReportPolicy(aggregate_duration_seconds=5, windows=(4,)), pods=pods, devices=devices)
    node_devices = status["nodeMetric"]["nodeUsage"]["devices"]
    assert node_devices == [
        {
            "type": "gpu",
            "id": "GPU-0000",
            "minor": 0,
            "health": False,
            "resources": {"koordinator.sh/gpu-core": "35", "koordinator.sh/gpu-memory": "4Gi"},
        }
    ]
    assert status["nodeMetric"]["aggregatedNodeUsages"][0]["usage"]["p95"]["devices"][0]["resources"] == {
        "koordinator.sh/gpu-core": "35",
        "koordinator.sh/gpu-memory": "4Gi",
    }
    assert status["podsMetric"][0]["podUsage"]["devices"][0]["resources"] == {"koordinator.sh/gpu-memory": "1Gi"}
    assert "devices" not in status["nodeMetric"]["systemUsage"]


# ------------------------------------------------------------------------------------------------ policy
def test_quantiles_are_computed_for_reported_series_only() -> None:
    assert wants_window_quantiles(SeriesKey(NODE_CPU_USAGE_CORES))
    assert wants_window_quantiles(SeriesKey(CPU_USAGE_CORES, "uid"))
    assert not wants_window_quantiles(SeriesKey(CPU_USAGE_CORES, "uid", "c"))
    assert not wants_window_quantiles(SeriesKey("pressure_cpu_some_avg10_ratio", "uid"))
    assert wants_window_quantiles(SeriesKey("gpu_utilization_ratio", "", "", "GPU-1"))


def test_spec_overrides_configuration_with_koordlets_clamps() -> None:
    base = ReportPolicy(aggregate_duration_seconds=2, report_interval_seconds=1, windows=(2, 4))
    assert effective_policy(base, None) is base
    spec = NodeMetricCollectPolicy.from_wire(
        {
            "aggregateDurationSeconds": 10,
            "reportIntervalSeconds": 5,
            "nodeAggregatePolicy": {"durations": ["1m", "5m0s"]},
            "nodeMemoryCollectPolicy": "usageWithPageCache",
        }
    )
    policy = effective_policy(base, spec)
    assert policy == ReportPolicy(60, 30, (60, 300), NodeMemoryCollectPolicy.USAGE_WITH_PAGE_CACHE)
    relaxed = effective_policy(base, spec, min_aggregate_seconds=0, min_report_seconds=0)
    assert (relaxed.aggregate_duration_seconds, relaxed.report_interval_seconds) == (10, 5)
    only_windows = effective_policy(base, {"nodeAggregatePolicy": {"durations": ["3s"]}})
    assert only_windows == ReportPolicy(2, 1, (3,))
    assert only_windows.retention_seconds == 3


def test_reporter_follows_spec_changes_once_each() -> None:
    ring, now = ring_of(node_series(10))
    changes: list[ReportPolicy] = []
    problems: list[Any] = []
    reporter = NodeReporter(
        "n1",
        ring=lambda: ring,
        base_policy=ReportPolicy(2, 1, (2, 4)),
        pods=dict,
        on_policy_change=changes.append,
        on_spec_problem=problems.append,
        min_aggregate_seconds=0,
        min_report_seconds=0,
    )
    spec = {"metricCollectPolicy": {"nodeAggregatePolicy": {"durations": ["3s", "1s"]}}}
    assert reporter.apply_spec(spec)
    assert not reporter.apply_spec(spec)
    assert reporter.policy.windows == (1, 3) and len(changes) == 1
    assert not reporter.apply_spec({"metricCollectPolicy": {"nodeAggregatePolicy": {"durations": ["soon"]}}})
    assert reporter.policy.windows == (1, 3)  # an invalid spec is ignored (logged, and counted by the caller)
    (problem,) = [p for p in problems if p is not None]
    assert problem.kind == "NodeMetric" and problem.field.startswith("spec.metricCollectPolicy.nodeAggregatePolicy")
    assert reporter.apply_spec(None)  # the object or its policy went away: back to the configuration
    assert reporter.policy == reporter.base_policy and len(changes) == 2
    status = reporter.status(now=now).to_wire()
    assert [w["duration"] for w in status["nodeMetric"]["aggregatedNodeUsages"]] == ["2s", "4s"]


def test_aggregates_are_detached_from_the_ring() -> None:
    ring, now = ring_of(node_series(10))
    agg = aggregate(ring, now, ReportPolicy(5, 1, (4,)))
    before = agg.window(SeriesKey(NODE_CPU_USAGE_CORES), 4)
    ring.values[:] = np.float32(99.0)  # sampling goes on after the aggregation
    assert agg.window(SeriesKey(NODE_CPU_USAGE_CORES), 4) == before
    assert agg.avg(SeriesKey(NODE_CPU_USAGE_CORES)) == 2.0
    assert agg.avg(SeriesKey("unknown")) is None


# ------------------------------------------------------------------------------------------------ window cadence
def test_a_window_is_due_once_a_twentieth_of_it_is_new() -> None:
    from agent.report import window_due

    # 5m every aggregation (15 s, or a little early), 10m every 30 s, 30m every 90 s
    assert window_due(300, 0.0, 15.0) and window_due(300, 0.0, 14.2)
    assert not window_due(600, 0.0, 15.0) and window_due(600, 0.0, 30.0)
    assert not window_due(1800, 0.0, 75.0) and window_due(1800, 0.0, 90.0)
    assert window_due(1800, 100.0, 99.0)  # asked for an earlier instant: computed for it


def cadence_ring(columns: int, keys: Sequence[SeriesKey]) -> SampleRing:
    ring = SampleRing(columns + 8)
    for i in range(columns):
        ring.append_column(START + i, list(keys), [float(i % 7) + r for r in range(len(keys))])
    return ring


def test_windows_not_due_keep_their_statistics_and_due_ones_follow_the_ring() -> None:
    keys = [SeriesKey(NODE_CPU_USAGE_CORES), SeriesKey(CPU_USAGE_CORES, pod="p1")]
    policy = ReportPolicy(aggregate_duration_seconds=20, windows=(20.0, 200.0))
    ring = cadence_ring(400, keys)
    first = aggregate(ring, START + 399, policy)
    for i in range(400, 405):
        ring.append_column(START + i, keys, [100.0, 100.0])  # a burst the long window does not show yet
    later = aggregate(ring, START + 404, policy, previous=first)
    assert later.windows[200.0] is first.windows[200.0] and later.computed_at[200.0] == START + 399
    assert later.windows[20.0] is not first.windows[20.0] and later.computed_at[20.0] == START + 404
    assert later.window(keys[0], 20.0) == aggregate(ring, START + 404, policy).window(keys[0], 20.0)
    for i in range(405, 410):
        ring.append_column(START + i, keys, [100.0, 100.0])
    due = aggregate(ring, START + 409, policy, previous=later)  # 10 s = 1/20 of 200 s
    assert due.computed_at[200.0] == START + 409
    assert due.window(keys[1], 200.0) == aggregate(ring, START + 409, policy).window(keys[1], 200.0)
    assert due.window(keys[1], 200.0) != first.window(keys[1], 200.0)


def test_a_row_taken_by_another_series_is_not_reported_until_its_window_is_computed_again() -> None:
    gone, kept, new = SeriesKey(CPU_USAGE_CORES, pod="gone"), SeriesKey(CPU_USAGE_CORES, pod="kept"), None
    policy = ReportPolicy(aggregate_duration_seconds=20, windows=(20.0, 200.0))
    ring = cadence_ring(400, [gone, kept])
    first = aggregate(ring, START + 399, policy)
    row = ring.row_of(gone)
    ring.forget([gone])
    new = SeriesKey(CPU_USAGE_CORES, pod="new")
    ring.append_column(START + 400, [kept, new], [1.0, 2.0])
    assert ring.row_of(new) == row  # the freed row, reused
    later = aggregate(ring, START + 400, policy, previous=first)
    assert later.computed_at[200.0] == START + 399  # carried
    assert later.window(new, 200.0) is None  # not the statistics of the series that held its row
    assert later.window(kept, 200.0) == first.window(kept, 200.0)
    assert first.window(gone, 200.0) is not None  # what the row held


def test_a_changed_policy_computes_every_window() -> None:
    keys = [SeriesKey(NODE_CPU_USAGE_CORES)]
    ring = cadence_ring(400, keys)
    first = aggregate(ring, START + 399, ReportPolicy(aggregate_duration_seconds=20, windows=(20.0, 200.0)))
    other = ReportPolicy(aggregate_duration_seconds=20, windows=(20.0, 100.0, 200.0))
    later = aggregate(ring, START + 400, other, previous=first)
    assert set(later.computed_at.values()) == {START + 400}


def test_pod_percentiles_only_with_pod_windows_and_computed_at_once_when_turned_on() -> None:
    node, pod = SeriesKey(NODE_CPU_USAGE_CORES), SeriesKey(CPU_USAGE_CORES, pod="p1")
    ring = cadence_ring(400, [node, pod])
    off = ReportPolicy(aggregate_duration_seconds=20, windows=(20.0, 200.0))
    first = aggregate(ring, START + 399, off)
    assert set(first.window(pod, 200.0) or {}) == {"avg"} and "p95" in (first.window(node, 200.0) or {})
    on = ReportPolicy(aggregate_duration_seconds=20, windows=(20.0, 200.0), pod_windows=True)
    later = aggregate(ring, START + 400, on, previous=first)  # 200 s is not due: computed anyway, not carried
    assert set(later.computed_at.values()) == {START + 400}
    assert set(later.window(pod, 200.0) or {}) == {"avg", "p50", "p90", "p95", "p99"}


def test_the_reporter_carries_its_last_aggregation() -> None:
    keys = [SeriesKey(NODE_CPU_USAGE_CORES)]
    ring = cadence_ring(400, keys)
    reporter = NodeReporter("n", ring=lambda: ring, base_policy=ReportPolicy(windows=(20.0, 200.0)), pods=dict)
    first = reporter.aggregate(START + 399)
    assert reporter.aggregate(START + 400).windows[200.0] is first.windows[200.0]


@pytest.mark.parametrize(
    "policy",
    [
        {"nodeAggregatePolicy": {"durations": ["5m0s", "168h0m0s"]}},  # issue 29, example 2: ~605,000 samples/series
        {"nodeAggregatePolicy": {"durations": [f"{m}m" for m in range(1, 10)]}},
        {"aggregateDurationSeconds": 604800},
    ],
)
def test_a_spec_window_past_the_bound_is_ignored_and_the_ring_keeps_its_size(policy: dict[str, Any]) -> None:
    ring, _ = ring_of(node_series(10))
    problems: list[Any] = []
    base = ReportPolicy(300, 60, (300, 600))
    reporter = NodeReporter("n1", ring=lambda: ring, base_policy=base, pods=dict, on_spec_problem=problems.append)
    assert not reporter.apply_spec({"metricCollectPolicy": policy})
    assert reporter.policy == base and reporter.policy.retention_seconds == 600
    (problem,) = problems
    assert problem is not None and ("3600s" in problem.detail or "at most 8" in problem.detail)
