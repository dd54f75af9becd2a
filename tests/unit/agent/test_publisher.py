"""NodeMetric publishing against a scripted API server: create, status subresource, conflicts, outages, logs."""

from __future__ import annotations

import asyncio
import copy
import logging
import random
from collections.abc import Callable
from typing import Any

import pytest

from agent.publisher import PUBLISH_ERROR_REASONS, NodeMetricPublisher, error_reason, spec_listener
from common.kube.http import KubeError
from common.ratelimit import TokenBucket
from tests.objects import MakeNodeMetric

PATH = "/apis/slo.koordinator.sh/v1alpha1/nodemetrics"


class FakeAPI:
    """Just enough of KubeHTTP.request for the publisher, with failure injection."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.rv = 100
        self.down = False
        self.conflicts = 0  # the next N status writes answer 409
        self.reject: int | None = None

    async def request(self, method: str, path: str, *, body: Any = None, timeout_seconds: float = 30, **_: Any) -> Any:
        self.calls.append((method, path))
        if self.down:
            raise KubeError(0, "ClientConnectorError: connection refused")
        if path.startswith("/api/v1/nodes/"):
            raise KubeError(404, "Not Found")
        name = path.removeprefix(PATH + "/").removesuffix("/status")
        if method == "GET":
            if name not in self.objects:
                raise KubeError(404, "Not Found", {"message": f'nodemetrics "{name}" not found'})
            return copy.deepcopy(self.objects[name])
        if method == "POST":
            name = body["metadata"]["name"]
            if name in self.objects:
                raise KubeError(409, "Conflict", {"reason": "AlreadyExists"})
            self.rv += 1
            obj = copy.deepcopy(body)
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self.objects[name] = obj
            return copy.deepcopy(obj)
        if method == "PUT" and path.endswith("/status"):
            if self.reject is not None:
                raise KubeError(self.reject, "Unprocessable Entity", {"message": "status.nodeMetric: Invalid value"})
            current = self.objects.get(name)
            if current is None:
                raise KubeError(404, "Not Found")
            if self.conflicts:
                self.conflicts -= 1
                self.bump(name)
                raise KubeError(409, "Conflict", {"message": "the object has been modified"})
            if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
                raise KubeError(409, "Conflict")
            self.rv += 1
            current = {**current, "status": copy.deepcopy(body["status"])}
            current["metadata"] = {**current["metadata"], "resourceVersion": str(self.rv)}
            self.objects[name] = current
            return copy.deepcopy(current)
        raise AssertionError(f"unexpected {method} {path}")

    def bump(self, name: str) -> None:
        self.rv += 1
        self.objects[name]["metadata"]["resourceVersion"] = str(self.rv)


def publisher(
    api: FakeAPI, *, create: bool = True, status: Callable[[], dict[str, Any]] | None = None
) -> NodeMetricPublisher:
    counter = iter(range(1, 10**6))

    def build() -> dict[str, Any]:
        return MakeNodeMetric("node-a").updated("2026-01-01T00:00:00Z").node_usage(f"{next(counter)}m").status()

    return NodeMetricPublisher(
        api,  # type: ignore[arg-type]
        "node-a",
        status or build,
        interval=lambda: 0.05,
        limiter=TokenBucket(1000, 10),
        create=create,
        retry_initial_seconds=0.01,
        retry_max_seconds=0.04,
        rng=random.Random(1),
    )


def test_creates_the_object_then_writes_the_status_subresource() -> None:
    api = FakeAPI()
    pub = publisher(api)
    assert asyncio.run(pub.publish())
    assert api.calls[:3] == [("GET", f"{PATH}/node-a"), ("GET", "/api/v1/nodes/node-a"), ("POST", PATH)]
    assert api.calls[-1] == ("PUT", f"{PATH}/node-a/status")
    stored = api.objects["node-a"]
    assert stored["spec"] == {} and stored["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == "1m"
    assert pub.stats.created == 1 and pub.stats.successes == 1 and pub.state == "healthy"


def test_keeps_status_fields_it_does_not_own() -> None:
    api = FakeAPI()
    api.objects["node-a"] = {
        "metadata": {"name": "node-a", "resourceVersion": "7"},
        "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 60}},
        "status": {"prodReclaimableMetric": {"resource": {"resources": {"cpu": "2"}}}, "podsMetric": [{"name": "old"}]},
    }
    pub = publisher(api)
    assert asyncio.run(pub.publish())
    status = api.objects["node-a"]["status"]
    assert status["prodReclaimableMetric"] == {"resource": {"resources": {"cpu": "2"}}}
    assert "podsMetric" not in status  # ours: replaced (no pods now)
    assert api.objects["node-a"]["spec"] == {"metricCollectPolicy": {"reportIntervalSeconds": 60}}
    assert ("POST", PATH) not in api.calls


def test_conflicts_reread_and_retry() -> None:
    api = FakeAPI()
    api.objects["node-a"] = {"metadata": {"name": "node-a", "resourceVersion": "7"}}
    api.conflicts = 2
    pub = publisher(api)
    assert asyncio.run(pub.publish())
    assert pub.stats.errors == {"conflict": 2} and pub.stats.successes == 1
    # the status is rebuilt for every attempt: the write that lands carries the newest aggregates
    assert api.objects["node-a"]["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"] == "3m"


def test_missing_object_with_creation_off_waits_without_writing(caplog: pytest.LogCaptureFixture) -> None:
    api = FakeAPI()
    pub = publisher(api, create=False)
    with caplog.at_level(logging.INFO, "loadline.agent.publisher"):
        assert not asyncio.run(pub.publish())
        assert not asyncio.run(pub.publish())
    assert pub.state == "missing" and all(m == "GET" for m, _ in api.calls)
    assert sum("creation is off" in r.message for r in caplog.records) == 1
    api.objects["node-a"] = {"metadata": {"name": "node-a", "resourceVersion": "1"}}
    pub.on_object(api.objects["node-a"])  # the manager created it: the watch tells us
    assert asyncio.run(pub.publish()) and pub.state == "healthy"


def test_outage_backs_off_logs_once_per_state_change_and_recovers(caplog: pytest.LogCaptureFixture) -> None:
    api = FakeAPI()
    pub = publisher(api)

    async def run() -> None:
        task = asyncio.create_task(pub.run())
        await asyncio.wait_for(pub.published.wait(), 5)
        api.down = True
        await asyncio.sleep(0.5)
        assert pub.state == "failing" and pub.stats.errors["unreachable"] >= 3
        api.down = False
        pub.published.clear()
        await asyncio.wait_for(pub.published.wait(), 5)
        task.cancel()

    with caplog.at_level(logging.INFO, "loadline.agent.publisher"):
        asyncio.run(run())
    messages = [r.getMessage() for r in caplog.records if r.name == "loadline.agent.publisher"]
    assert sum("failing" in m for m in messages) == 1
    assert sum("recovered" in m for m in messages) == 1
    assert pub.stats.healthy and pub.stats.last_error is None


def test_rejected_status_is_a_failure_with_its_reason() -> None:
    api = FakeAPI()
    api.objects["node-a"] = {"metadata": {"name": "node-a", "resourceVersion": "1"}}
    api.reject = 422
    pub = publisher(api)
    assert not asyncio.run(pub.publish())
    assert pub.stats.errors == {"rejected": 1} and "Invalid value" in (pub.stats.last_error or "")


def test_retry_delay_is_exponential_capped_and_jittered() -> None:
    api = FakeAPI()
    pub = publisher(api)
    pub.retry_initial_seconds, pub.retry_max_seconds = 1.0, 8.0
    delays = []
    for failures in range(1, 8):
        pub._failed_attempts = failures
        delays.append(pub.retry_delay())
    bases = [1, 2, 4, 8, 8, 8, 8]
    assert all(0.5 * b <= d <= b for d, b in zip(delays, bases, strict=True))
    assert len(set(delays[3:])) == 4  # jittered even at the cap


def test_error_reasons() -> None:
    reasons = [error_reason(KubeError(s, "")) for s in (0, 409, 404, 403, 429, 422, 503, 418)]
    assert reasons == list(PUBLISH_ERROR_REASONS)  # every reason is reachable, and exported at 0 from the start


def test_spec_listener_only_fires_on_spec_changes() -> None:
    seen: list[Any] = []
    listener = spec_listener(seen.append)
    obj = {"spec": {"metricCollectPolicy": {"reportIntervalSeconds": 30}}, "status": {"updateTime": "a"}}
    listener(obj)
    listener({**obj, "status": {"updateTime": "b"}})  # our own status write: no policy change
    listener(None)
    assert seen == [obj["spec"], None]


def test_publish_error_counters_exist_at_zero_from_the_start() -> None:
    """A dashboard panel of publish errors shows 0 before the first error, not "No data"."""
    from types import SimpleNamespace

    from agent.exporter import AgentTimings, NodeSelfState, render_self
    from agent.publisher import PublishStats
    from agent.store.ring import SampleRing

    stats = PublishStats("n1")
    stats.errors["conflict"] = 2
    sampler = SimpleNamespace(stats={}, ring=SampleRing(4), cycles=0, last_cycle_seconds=None)
    text = render_self(
        [NodeSelfState("n1", sampler, SimpleNamespace(stats=stats))], AgentTimings(), "node", per_node=True
    )
    lines = [line for line in text.splitlines() if line.startswith("loadline_agent_publish_errors_total{")]
    assert len(lines) == len(PUBLISH_ERROR_REASONS)
    assert 'loadline_agent_publish_errors_total{node="n1",reason="unreachable"} 0.0' in lines
    assert 'loadline_agent_publish_errors_total{node="n1",reason="conflict"} 2.0' in lines
