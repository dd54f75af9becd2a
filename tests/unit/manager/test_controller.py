"""The manager's per-node reconcile against an in-memory API: what it writes, when, and what it leaves alone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import REGISTRY

from common.api.constants import BATCH_CPU, BATCH_MEMORY, LABEL_PRIORITY_CLASS, MID_CPU, MID_MEMORY
from common.api.nodemetric_digest import digest_node_metric
from common.kube.events import EventRecorder
from common.kube.reflector import Reflector
from manager.adapters import NODE_RESOURCES
from manager.batch import BatchWriter, status_patch
from manager.controller import Controller
from manager.main import main
from manager.noderesource.model import BatchStrategy, BatchVerdict
from manager.objects import NODE_METRIC, SpecWriter
from tests import objects
from tests.objects import MakeNodeMetric
from tests.unit.manager.fakes import FakeHTTP

GI = 1024**3
NOW = datetime(2026, 7, 24, 6, 0, 0, tzinfo=UTC)
NM = "/apis/slo.koordinator.sh/v1alpha1/nodemetrics"
SLO = "/apis/slo.koordinator.sh/v1alpha1/nodeslos"


def feed(reflector: Reflector, kind: str, obj: dict[str, Any]) -> None:
    """What the reflector does for a watch event: update the store, call the handlers."""
    key = (
        obj["metadata"]["name"]
        if "namespace" not in obj["metadata"]
        else f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
    )
    old = reflector.store.get(key)
    if kind == "DELETED":
        reflector.store.pop(key, None)
        reflector._emit("DELETED", obj, None)
    else:
        reflector.store[key] = obj
        reflector._emit("MODIFIED" if old is not None else "ADDED", obj, old)  # type: ignore[arg-type]


def add_node(controller: Controller, http: FakeHTTP, obj: dict[str, Any]) -> None:
    """The Node exists on the (fake) server, which answers status patches with the whole object, and in the watch."""
    http.objects[f"/api/v1/nodes/{obj['metadata']['name']}"] = json.loads(json.dumps(obj))
    feed(controller.nodes, "ADDED", obj)


def node(name: str, **extra_status: str) -> dict[str, Any]:
    """A node of pool `a` with 10 cores / 20 GiB (plus the extended resources given)."""
    return objects.node(name, cpu="10", memory="20Gi", pods=None, extra=extra_status, labels={"pool": "a"}, rv="1")


def nodemetric(name: str, *, updated: datetime, web_cpu: str = "1", system_cpu: str = "500m") -> dict[str, Any]:
    """The report of a node running ns/web (koord-prod)."""
    built = MakeNodeMetric(name).resource_version("5").report_interval(None).updated(updated)
    return built.system(system_cpu, "1Gi").pod("ns", "web", web_cpu, "2Gi", priority="koord-prod").obj()


def web_pod(node_name: str = "n1") -> dict[str, Any]:
    return objects.pod("web", "2", "4Gi", namespace="ns", labels={LABEL_PRIORITY_CLASS: "koord-prod"}, node_name=node_name)


@pytest.fixture
def setup() -> tuple[Controller, FakeHTTP, Callable[[datetime], None]]:
    http = FakeHTTP()
    clock = {"now": NOW}
    controller = Controller(
        http.as_kube(),
        namespace="loadline-system",
        config_map="slo-controller-config",
        recorder=EventRecorder(http.as_kube(), "loadline-manager", "test"),
        now=lambda: clock["now"],
    )
    config = {
        "colocation-config": json.dumps({"enable": True}),
        "resource-threshold-config": json.dumps(
            {"clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 55}}
        ),
    }
    feed(
        controller.configmap,
        "ADDED",
        {"metadata": {"name": "slo-controller-config", "namespace": "loadline-system"}, "data": config},
    )

    def set_now(value: datetime) -> None:
        clock["now"] = value

    return controller, http, set_now


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def status_patches(http: FakeHTTP) -> list[Any]:
    return [body for method, path, body in http.calls if method == "PATCH" and path == "/api/v1/nodes/n1/status"]


def test_a_new_node_gets_its_nodemetric_and_nodeslo_and_no_batch_resources_yet(setup: Any) -> None:
    controller, http, _ = setup
    feed(controller.nodes, "ADDED", node("n1"))
    run(controller.reconcile("n1"))
    created = {path: body for method, path, body in http.calls if method == "POST"}
    assert created[NM]["spec"] == {
        "metricCollectPolicy": {
            "aggregateDurationSeconds": 300, "reportIntervalSeconds": 60,
            "nodeAggregatePolicy": {"durations": ["5m0s", "10m0s", "30m0s"]}, "nodeMemoryCollectPolicy": "usageWithoutPageCache",
        }
    }  # fmt: skip
    assert created[SLO]["metadata"] == {"name": "n1"}
    assert created[SLO]["spec"]["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 55
    assert status_patches(http) == []  # no NodeMetric status: nothing to add, nothing to remove
    assert controller.batch.verdicts["n1"] is BatchVerdict.NODE_METRIC_MISSING

    http.calls.clear()
    run(controller.reconcile("n1"))  # everything in sync: no writes at all
    assert http.writes() == []


def test_batch_resources_written_then_throttled_by_the_diff_threshold(setup: Any) -> None:
    controller, http, set_now = setup
    add_node(controller, http, node("n1"))
    feed(controller.pods, "ADDED", web_pod())
    feed(controller.nodemetrics, "ADDED", nodemetric("n1", updated=NOW - timedelta(minutes=1)))
    run(controller.reconcile("n1"))
    # cpu 10000 - 40% 4000 - system 500 - web 1000 = 4500; memory 20Gi - int(20Gi*0.35) - 1Gi - 2Gi
    memory = 20 * GI - int(20 * GI * 0.35) - GI - 2 * GI
    # mid resources in the same write, as Koordinator's midresource plugin: no prodReclaimableMetric lends 0
    written = {BATCH_CPU: 4500, BATCH_MEMORY: memory, MID_CPU: 0, MID_MEMORY: 0}
    assert status_patches(http) == [status_patch(written, NODE_RESOURCES)]
    assert status_patches(http)[0]["status"]["capacity"] == {k: str(v) for k, v in written.items()}
    assert controller.nodes.store["n1"]["status"]["allocatable"][BATCH_CPU] == "4500"  # our write, seen at once

    skipped = REGISTRY.get_sample_value("loadline_manager_batch_skipped_writes_total") or 0
    http.calls.clear()
    feed(controller.nodemetrics, "MODIFIED", nodemetric("n1", updated=NOW, web_cpu="1200m"))  # 4300: -4.4 %
    run(controller.reconcile("n1"))
    assert status_patches(http) == []
    assert REGISTRY.get_sample_value("loadline_manager_batch_skipped_writes_total") == skipped + 1

    set_now(NOW + timedelta(seconds=301))  # ... unless updateTimeThresholdSeconds passed since our last write
    run(controller.reconcile("n1"))
    assert [p["status"]["allocatable"][BATCH_CPU] for p in status_patches(http)] == ["4300"]

    http.calls.clear()
    feed(controller.nodemetrics, "MODIFIED", nodemetric("n1", updated=NOW + timedelta(seconds=300), web_cpu="3"))
    run(controller.reconcile("n1"))  # web uses 3 cores (above its request): 10000-4000-500-3000 = 2500, beyond 10 %
    assert [p["status"]["allocatable"][BATCH_CPU] for p in status_patches(http)] == ["2500"]


def test_stale_nodemetric_or_colocation_off_removes_the_batch_resources(setup: Any) -> None:
    controller, http, _ = setup
    add_node(controller, http, node("n1", **{BATCH_CPU: "4500", BATCH_MEMORY: "1Gi"}))
    feed(controller.nodemetrics, "ADDED", nodemetric("n1", updated=NOW - timedelta(minutes=16)))
    run(controller.reconcile("n1"))
    assert status_patches(http) == [status_patch({}, NODE_RESOURCES)]
    assert status_patches(http)[0]["status"]["allocatable"] == {n: None for n in NODE_RESOURCES}
    assert controller.batch.verdicts["n1"] is BatchVerdict.NODE_METRIC_EXPIRED

    # fresh again, then the node's own annotation turns colocation off
    http.calls.clear()
    feed(controller.nodemetrics, "MODIFIED", nodemetric("n1", updated=NOW))
    run(controller.reconcile("n1"))
    assert len(status_patches(http)) == 1
    disabled = json.loads(json.dumps(controller.nodes.store["n1"]))
    disabled["metadata"]["annotations"]["node.koordinator.sh/colocation-strategy"] = '{"enable": false}'
    feed(controller.nodes, "MODIFIED", disabled)
    run(controller.reconcile("n1"))
    assert status_patches(http)[-1] == status_patch({}, NODE_RESOURCES)
    assert controller.batch.verdicts["n1"] is BatchVerdict.COLOCATION_DISABLED


def test_the_moment_a_nodemetric_goes_stale_is_scheduled() -> None:
    writer = BatchWriter(FakeHTTP().as_kube())
    metric = digest_node_metric(MakeNodeMetric("n1").updated(NOW - timedelta(minutes=10)).system("0", "0").valid())
    current = node("n1", **{BATCH_CPU: "6000", BATCH_MEMORY: str(20 * GI - int(20 * GI * 0.35))})
    result = run(writer.sync(current, [], metric, BatchStrategy(enable=True), NOW))
    assert not result.decision.write
    assert result.recheck_after == pytest.approx(5 * 60 + 1)  # 15 min after the update, plus a second


@pytest.mark.parametrize(
    "when", ["9999-12-31T23:59:59Z", "9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00", "0001-01-01T00:00:00Z"]
)
def test_an_update_time_at_the_ends_of_the_calendar_is_expired_not_an_error(when: str) -> None:
    """Issue 29: `updateTime + minutes` raised OverflowError (or ValueError: year 0) in every reconcile of the node;
    Go reads these times, and both ends are stale (the future one by the clock-skew rule)."""
    writer = BatchWriter(FakeHTTP().as_kube())
    obj = MakeNodeMetric("n1").updated(NOW).system("0", "0").valid()
    obj["status"]["updateTime"] = when
    metric = digest_node_metric(obj)
    assert metric.problem is None  # a valid time: the object is fine, the arithmetic must be too
    current = node("n1", **{BATCH_CPU: "6000", BATCH_MEMORY: "1Gi"})
    result = run(writer.sync(current, [], metric, BatchStrategy(enable=True), NOW))
    assert result.outcome.verdict is BatchVerdict.NODE_METRIC_EXPIRED
    assert result.decision.write and result.recheck_after is None  # the batch resources go; nothing to wait for


def test_a_node_that_goes_takes_its_nodemetric_and_nodeslo_and_orphans_are_found(setup: Any) -> None:
    controller, http, _ = setup
    feed(controller.nodes, "ADDED", node("n1"))
    run(controller.reconcile("n1"))
    feed(controller.nodemetrics, "ADDED", http.objects[f"{NM}/n1"])
    feed(controller.nodeslos, "ADDED", http.objects[f"{SLO}/n1"])
    feed(controller.nodemetrics, "ADDED", {"metadata": {"name": "ghost"}, "spec": {}})  # no node of that name
    feed(controller.nodes, "DELETED", node("n1"))
    controller._enqueue_all()
    assert {"n1", "ghost"} <= set(controller.queue._queue)
    run(controller.reconcile("n1"))
    run(controller.reconcile("ghost"))
    deleted = [path for method, path, _ in http.calls if method == "DELETE"]
    assert deleted == [f"{NM}/n1", f"{SLO}/n1", f"{NM}/ghost"]
    assert "n1" not in controller.batch.verdicts


def test_pod_events_keep_the_per_node_index_and_enqueue_the_nodes_they_touch(setup: Any) -> None:
    controller, _, _ = setup
    feed(controller.pods, "ADDED", web_pod("n1"))
    assert set(controller.pods_by_node["n1"]) == {"ns/web"}
    assert list(controller.queue._queue) == ["n1"]
    controller.queue = type(controller.queue)()
    status_only = web_pod("n1")
    status_only["status"]["podIP"] = "10.0.0.9"  # nothing the batch formula reads
    feed(controller.pods, "MODIFIED", status_only)
    assert len(controller.queue) == 0
    feed(controller.pods, "MODIFIED", web_pod("n2"))  # rebound (as after a re-creation)
    assert set(controller.queue._queue) == {"n1", "n2"}
    assert controller.pods_by_node["n1"] == {} and set(controller.pods_by_node["n2"]) == {"ns/web"}
    feed(controller.pods, "DELETED", web_pod("n2"))
    assert controller.pods_by_node["n2"] == {}


def test_node_heartbeats_do_not_enqueue_but_label_changes_do(setup: Any) -> None:
    controller, _, _ = setup
    feed(controller.nodes, "ADDED", node("n1"))
    controller.queue = type(controller.queue)()
    beat = node("n1")
    beat["status"]["conditions"] = [{"type": "Ready", "lastHeartbeatTime": "now"}]
    feed(controller.nodes, "MODIFIED", beat)
    assert len(controller.queue) == 0
    relabelled = node("n1")
    relabelled["metadata"]["labels"]["pool"] = "b"
    feed(controller.nodes, "MODIFIED", relabelled)
    assert list(controller.queue._queue) == ["n1"]


def test_a_spec_the_server_normalises_is_not_written_again_and_again() -> None:
    http = FakeHTTP()
    writer = SpecWriter(http.as_kube(), NODE_METRIC)
    desired = {"aggregateDurationSeconds": 300, "reportIntervalSeconds": 60}
    stored = run(writer.ensure("n1", None, desired))
    # the server answers with a form that differs from what we sent (defaulting, number forms, pruning)
    stored["spec"]["metricCollectPolicy"]["reportIntervalSeconds"] = 60.0
    stored["spec"]["metricCollectPolicy"]["extra"] = "defaulted"
    writer._stored_as["n1"] = (
        writer._stored_as["n1"][0],
        json.dumps(stored["spec"]["metricCollectPolicy"], sort_keys=True, separators=(",", ":")),
    )
    assert writer.in_sync("n1", stored, desired)
    assert run(writer.ensure("n1", stored, desired)) is None
    assert not writer.in_sync("n1", stored, {**desired, "reportIntervalSeconds": 30})  # a real change still writes


def test_start_up_configuration_errors_name_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--lease-duration=5", "--renew-deadline=10"]) == 2
    err = capsys.readouterr().err
    assert "lease_duration_seconds > renew_deadline_seconds" in err
    assert main(["--workers=0"]) == 2
    assert "workers" in capsys.readouterr().err


def test_leading_workers_retry_through_an_api_outage_and_log_it_once(
    setup: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from common.kube.http import KubeError

    controller, http, _ = setup
    for name in ("n1", "n2"):
        add_node(controller, http, node(name))
    for reflector in controller.reflectors:
        reflector.synced.set()
    # the first NodeMetric create finds the API server away
    http.fail[("POST", NM)] = KubeError(0, "ClientConnectorError: connection refused")

    async def body() -> None:
        task = asyncio.create_task(controller.lead())
        try:
            for _ in range(100):
                if f"{SLO}/n1" in http.objects and f"{SLO}/n2" in http.objects:
                    break
                await asyncio.sleep(0.05)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    with caplog.at_level("INFO", logger="loadline.manager"):
        run(body())
    assert ("POST", NM) not in http.fail  # the failure happened
    assert f"{NM}/n1" in http.objects and f"{NM}/n2" in http.objects  # and was retried after the backoff
    messages = [r.getMessage() for r in caplog.records]
    assert sum("unreachable" in m for m in messages) == 1
    assert sum("reachable again" in m for m in messages) == 1
    assert not controller.leading  # not leading any more


def allocatable(node_name: str, resource: str) -> float | None:
    """loadline_manager_node_batch_allocatable of one node, None when the series is absent."""
    labels = {"node": node_name, "resource": resource, "unit": {"cpu": "core", "memory": "byte"}[resource]}
    return REGISTRY.get_sample_value("loadline_manager_node_batch_allocatable", labels)


def test_per_node_batch_allocatable_is_the_computed_value_in_base_units_and_goes_with_it(setup: Any) -> None:
    controller, http, _ = setup
    add_node(controller, http, node("gauge-a"))
    add_node(controller, http, node("gauge-b"))
    feed(controller.pods, "ADDED", web_pod("gauge-a"))
    feed(controller.nodemetrics, "ADDED", nodemetric("gauge-a", updated=NOW - timedelta(minutes=1)))
    # gauge-b: web (no pod listed, charged its measured usage) takes 8 of the 6 - 0.5 cores left: clamped at 0
    feed(controller.nodemetrics, "ADDED", nodemetric("gauge-b", updated=NOW - timedelta(minutes=1), web_cpu="8"))
    for name in ("gauge-a", "gauge-b"):
        run(controller.reconcile(name))

    # cpu 10000m - 40% 4000m - system 500m - web 1000m = 4500m: 4.5 cores; memory in bytes
    memory = 20 * GI - int(20 * GI * 0.35) - GI - 2 * GI
    assert allocatable("gauge-a", "cpu") == 4.5
    assert allocatable("gauge-a", "memory") == memory
    written = http.objects["/api/v1/nodes/gauge-a"]["status"]["allocatable"]
    assert (int(written[BATCH_CPU]), int(written[BATCH_MEMORY])) == (4500, memory)  # the same numbers
    assert allocatable("gauge-b", "cpu") == 0.0  # computed as zero: present, unlike a node without batch resources
    assert allocatable("gauge-b", "memory") == memory
    assert controller.batch.exported == {"gauge-a", "gauge-b"}

    # Within resourceDiffThreshold: the Node keeps 4500m, the gauge shows what was computed.
    feed(controller.nodemetrics, "MODIFIED", nodemetric("gauge-a", updated=NOW, web_cpu="1200m"))
    run(controller.reconcile("gauge-a"))
    assert http.objects["/api/v1/nodes/gauge-a"]["status"]["allocatable"][BATCH_CPU] == "4500"
    assert allocatable("gauge-a", "cpu") == 4.3

    # A stale NodeMetric removes the node's batch resources and both of its series; the other node keeps its own.
    feed(controller.nodemetrics, "MODIFIED", nodemetric("gauge-a", updated=NOW - timedelta(minutes=16)))
    run(controller.reconcile("gauge-a"))
    assert controller.batch.verdicts["gauge-a"] is BatchVerdict.NODE_METRIC_EXPIRED
    assert BATCH_CPU not in http.objects["/api/v1/nodes/gauge-a"]["status"]["allocatable"]
    assert (allocatable("gauge-a", "cpu"), allocatable("gauge-a", "memory")) == (None, None)
    assert allocatable("gauge-b", "cpu") == 0.0 and allocatable("gauge-b", "memory") == memory

    # Fresh again: back. The node deleted: gone.
    feed(controller.nodemetrics, "MODIFIED", nodemetric("gauge-a", updated=NOW))
    run(controller.reconcile("gauge-a"))
    assert allocatable("gauge-a", "cpu") == 4.5
    feed(controller.nodes, "DELETED", node("gauge-b"))
    run(controller.reconcile("gauge-b"))
    assert (allocatable("gauge-b", "cpu"), allocatable("gauge-b", "memory")) == (None, None)
    assert controller.batch.exported == {"gauge-a"}


def test_losing_the_lease_drops_the_per_node_series(setup: Any) -> None:
    controller, http, _ = setup
    add_node(controller, http, node("gauge-lead"))
    feed(controller.nodemetrics, "ADDED", nodemetric("gauge-lead", updated=NOW - timedelta(minutes=1)))
    for reflector in controller.reflectors:
        reflector.synced.set()
    seen: list[float | None] = []

    async def body() -> None:
        task = asyncio.create_task(controller.lead())  # the elector cancels lead() when the Lease is lost
        try:
            for _ in range(100):
                if allocatable("gauge-lead", "cpu") is not None:
                    break
                await asyncio.sleep(0.05)
            seen.append(allocatable("gauge-lead", "cpu"))
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    run(body())
    assert seen == [4.5]  # 10000m - 4000m - 500m - web's 1000m (measured, no pod listed)
    assert (allocatable("gauge-lead", "cpu"), allocatable("gauge-lead", "memory")) == (None, None)
    assert controller.batch.exported == set()
    assert controller.batch.verdicts["gauge-lead"] is BatchVerdict.CALCULATED  # the rest of its state stays


def test_an_unusable_reservation_annotation_is_ignored_and_counted_once_per_version(setup: Any) -> None:
    # Issue 29, example 1 in the manager: `reservedCPUs: 0-4294967295` expanded 4·10⁹ CPU ids. Now it is ignored,
    # as Koordinator ignores an annotation it cannot use, and counted; batch resources are still computed.
    controller, http, _ = setup

    def counted() -> float:
        labels = {"kind": "Node", "reason": "invalid_value"}
        return REGISTRY.get_sample_value("loadline_malformed_objects_total", labels) or 0.0

    before = counted()
    reserved = node("n1")
    reserved["metadata"]["annotations"] = {"node.koordinator.sh/reservation": '{"reservedCPUs": "0-4294967295"}'}
    add_node(controller, http, reserved)
    feed(controller.pods, "ADDED", web_pod())
    feed(controller.nodemetrics, "ADDED", nodemetric("n1", updated=NOW - timedelta(minutes=1)))
    run(controller.reconcile("n1"))
    assert counted() == before + 1
    assert [p["status"]["allocatable"][BATCH_CPU] for p in status_patches(http)] == ["4500"]  # as without it
    run(controller.reconcile("n1"))  # the Node as our write stored it: a new version, reported once more
    after = counted()
    run(controller.reconcile("n1"))  # the same version: not again
    assert counted() == after


def test_a_pod_requesting_past_the_range_rule_stays_on_its_node_counted_once_per_version(setup: Any) -> None:
    # Issue 29, "a bad part never hides the rest": a `memory: 8Ei` request made the whole pod malformed and the
    # manager dropped it from its node's sums (its usage vanished: the permissive direction). Now the pod stays,
    # its request held at the range rule (the node full of memory), and the part is counted once per version.
    controller, _, _ = setup

    def counted() -> float:
        labels = {"kind": "Pod", "reason": "out_of_range"}
        return REGISTRY.get_sample_value("loadline_malformed_objects_total", labels) or 0.0

    before = counted()
    huge = web_pod()
    huge["spec"]["containers"][0]["resources"]["requests"]["memory"] = "8Ei"
    feed(controller.pods, "ADDED", huge)
    assert controller.pods_by_node["n1"]["ns/web"].request.memory_bytes == 2**53
    assert controller.pods_by_node["n1"]["ns/web"].request.cpu_milli == 2000
    assert counted() == before + 1
    feed(controller.pods, "MODIFIED", huge)  # the same version again (a relist): not counted again
    assert counted() == before + 1
