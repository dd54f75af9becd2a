"""The round loop over reflector stores, with the API stubbed at the HTTP boundary."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from common.kube.http import KubeError
from scheduler_plugin.descheduler import controller as controller_module
from scheduler_plugin.descheduler.controller import Descheduler, skip_category
from scheduler_plugin.descheduler.metrics import NODES_SKIPPED, ROUNDS
from tests.unit.descheduler.builders import make_args
from tests.unit.descheduler.objects import NOW, node_obj, nodemetric_obj, pod_obj, replicaset_obj, store


class FakeHTTP:
    """Answers evictions (201 unless told otherwise) and event writes."""

    def __init__(self) -> None:
        self.evictions: list[str] = []
        self.events: list[dict[str, Any]] = []
        self.answers: dict[str, KubeError] = {}  # pod name -> error for its eviction

    async def create(self, path: str, body: Any) -> dict[str, Any]:
        if path.endswith("/eviction"):
            name = body["metadata"]["name"]
            self.evictions.append(name)
            if name in self.answers:
                raise self.answers[name]
        else:
            self.events.append(body)
        return {}


USAGE = {"a": 300, "b": 2000, "c": 1000, "d": 1500}  # system 500m: 5300m of 6000m → 88 % (threshold 4500m)


def cluster(d: Descheduler, *, hot_metric: dict[str, Any] | None = None, synced: bool = True) -> None:
    """hot: 6 cores at 88 %; idle: 10 cores at 5 %. Pods of one ReplicaSet of 20 (2 may be unavailable)."""
    d.nodes.store = store(node_obj("hot", cpu="6"), node_obj("idle"))
    d.pods.store = store(*(pod_obj(n, "hot", cpu=f"{u}m") for n, u in USAGE.items()))
    d.replicasets.store = store(replicaset_obj("web", 20))
    metric = hot_metric or nodemetric_obj("hot", [("default", n, f"{u}m", "1Gi") for n, u in USAGE.items()])
    d.node_metrics.store = store(metric, nodemetric_obj("idle"))
    if synced:
        for r in d.required_reflectors:
            r.synced.set()


def make(**args: Any) -> tuple[Descheduler, FakeHTTP]:
    http = FakeHTTP()
    d = Descheduler(make_args(**args), http, identity="test-0", wall_clock=lambda: NOW)  # type: ignore[arg-type]
    return d, http


def test_a_round_evicts_in_plan_order_and_writes_events() -> None:
    # Excess 800m over 75 % of 6000m. Fit: a 300/800 = .375, b 2000/800 → 1.4, c 1000/800 → 1.8, d 1500/800 → 1.53.
    # Order c, d, b, a: c takes it to 4300m ≤ 4500m, done.
    d, http = make()
    cluster(d)
    report = asyncio.run(d.run_round())
    assert report.result == "ok"
    assert http.evictions == ["c"]
    assert [o.result for o in report.outcomes] == ["evicted"]
    (event,) = http.events
    assert event["reason"] == "Descheduled" and event["regarding"]["name"] == "c"
    assert event["note"] == 'Pod evicted from node "hot" by the reason "node is overutilized, node cpu usage(88.33%)>threshold(75.00%)"'
    assert event["reportingController"] == "loadline-descheduler"


def test_malformed_node_metric_is_skipped_logged_once_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    d, http = make()
    bad = nodemetric_obj("hot", [("default", "a", "300m", "1Gi"), ("default", "b", "-1", "1Gi")])
    cluster(d, hot_metric=bad)
    before = ROUNDS.labels("error")._value.get()
    with caplog.at_level("INFO"):
        reports = [asyncio.run(d.run_round()) for _ in range(3)]
    assert all(r.result == "ok" for r in reports)
    assert reports[0].skipped == {
        "hot": "NodeMetric malformed: status.podsMetric[1].podUsage.resources.cpu: '-1' is not a valid usage quantity"
    }
    assert http.evictions == []
    assert caplog.text.count("node skipped") == 1
    assert NODES_SKIPPED.labels("malformed")._value.get() == 1
    assert ROUNDS.labels("error")._value.get() == before
    # Fixed by the next report: measurable again, said once, and drained.
    d.node_metrics.store = store(
        nodemetric_obj("hot", [("default", n, f"{u}m", "1Gi") for n, u in USAGE.items()], rv="2"),
        nodemetric_obj("idle"),
    )
    with caplog.at_level("INFO"):
        asyncio.run(d.run_round())
    assert "node measurable again" in caplog.text and http.evictions == ["c"]


def test_a_round_that_raises_is_logged_counted_and_the_next_one_runs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    d, http = make()
    cluster(d)

    def broken(*_: Any, **__: Any) -> None:
        raise RuntimeError("boom")

    before = ROUNDS.labels("error")._value.get()
    monkeypatch.setattr(controller_module, "plan_round", broken)
    with caplog.at_level("INFO"):
        first, second = asyncio.run(d.run_round()), asyncio.run(d.run_round())
    assert first.result == second.result == "error" and first.error == "RuntimeError: boom"
    assert caplog.text.count("round failed") == 1 and "Traceback" in caplog.text
    assert ROUNDS.labels("error")._value.get() == before + 2
    monkeypatch.undo()
    with caplog.at_level("INFO"):
        assert asyncio.run(d.run_round()).result == "ok"
    assert "rounds succeed again" in caplog.text and http.evictions == ["c"]


def test_no_round_before_the_caches_are_synced_nor_while_paused() -> None:
    d, http = make()
    cluster(d, synced=False)
    assert asyncio.run(d.run_round()).result == "not_synced"
    assert d.ready() == (False, "caches not synced: nodes, pods, nodemetrics")
    d, http = make(paused=True)
    cluster(d)
    assert asyncio.run(d.run_round()).result == "paused"
    assert http.evictions == []


def test_unreachable_api_stops_the_rounds_evictions() -> None:
    d, http = make(maxMigratingPerNode=5, highThresholds={"cpu": 40, "memory": 80}, lowThresholds={"cpu": 10})
    cluster(d)
    http.answers = {n: KubeError(0, "ClientConnectorError") for n in USAGE}
    report = asyncio.run(d.run_round())
    assert len(report.plan.evictions) > 1 if report.plan else False
    assert len(http.evictions) == 1 and report.outcomes[0].unreachable


def test_a_refused_pod_is_left_out_and_the_next_best_relieves_the_node() -> None:
    d, http = make()
    cluster(d)
    http.answers = {"c": KubeError(429, "Too Many Requests", {"message": "would violate the pod's disruption budget"})}
    first = asyncio.run(d.run_round())
    assert [o.result for o in first.outcomes] == ["refused"]
    second = asyncio.run(d.run_round())
    assert http.evictions == ["c", "d"]  # d: 5300 - 1500 = 3800m ≤ 4500m
    assert [o.result for o in second.outcomes] == ["evicted"]
    assert second.plan is not None and second.plan.pod_skips.get("eviction recently refused") == 1


def test_lead_runs_rounds_every_interval_and_reports_health() -> None:
    interval = 0.05
    d, _ = make(deschedulingInterval=f"{interval}s")
    cluster(d)
    wanted = 8  # about 0.4 s of rounds on an idle machine

    async def run() -> float:
        started = time.monotonic()
        task = asyncio.create_task(d.lead())
        # Wait for the rounds, not for a fixed time: under load (~20 on 2 cores) a round can take longer than the
        # interval, and 0.4 s once held only 3. A wrong interval (the 60 s default, a unit slip) misses the deadline.
        deadline = started + 60
        while d.rounds < wanted:
            assert time.monotonic() < deadline, f"{d.rounds} rounds in 60 s at a {interval} s interval"
            await asyncio.sleep(0.01)
        assert d.leading and d.healthy() == (True, "ok")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - started

    elapsed = asyncio.run(run())
    # Never faster than the interval, however slow the machine: round starts at least `interval` apart within
    # `elapsed` are at most elapsed / interval + 1 (a loop that skipped the sleep would run thousands).
    assert wanted <= d.rounds <= elapsed / interval + 1, (d.rounds, elapsed)
    assert not d.leading


@pytest.mark.parametrize(
    ("reason", "category"),
    [
        ("NodeMetric not found", "missing"),
        ("NodeMetric has no status.nodeMetric", "not reported"),
        ("NodeMetric has no valid status.updateTime", "no update time"),
        ("NodeMetric expired (200s old, nodeMetricExpirationSeconds=180)", "expired"),
        ("NodeMetric systemUsage cpu is not a valid quantity (nan)", "malformed"),
        ("NodeMetric malformed: status.updateTime: 'x' is not an RFC 3339 time", "malformed"),
        ("allocatable cpu is not a valid quantity (nan)", "malformed"),
    ],
)
def test_skip_categories(reason: str, category: str) -> None:
    assert skip_category(reason) == category
