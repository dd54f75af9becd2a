"""Evictions through the Eviction API: answers, events, dry run, refusal backoff, the rate limit."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from common.kube.eviction import eviction_body
from common.kube.http import KubeError
from common.ratelimit import TokenBucket
from scheduler_plugin.descheduler.evictor import Evictor
from scheduler_plugin.descheduler.metrics import EVICTIONS
from scheduler_plugin.descheduler.model import PlannedEviction
from tests.fakeclock import FakeClock
from tests.unit.descheduler.builders import rs_pod
from tests.unit.descheduler.objects import pod_obj

REASON = "node is overutilized, node cpu usage(82.35%)>threshold(75.00%)"


class FakeAPI:
    def __init__(self, answers: list[KubeError | None] | None = None) -> None:
        self.answers = list(answers or [])
        self.calls: list[tuple[str, Any]] = []

    async def create(self, path: str, body: Any) -> dict[str, Any]:
        self.calls.append((path, body))
        answer = self.answers.pop(0) if self.answers else None
        if answer is not None:
            raise answer
        return {}


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    async def record(self, regarding: Any, **kw: Any) -> bool:
        self.events.append({"name": regarding["metadata"]["name"], **kw})
        return True


def planned(name: str = "p", prod: bool = False) -> PlannedEviction:
    return PlannedEviction(pod=rs_pod(name, "n1"), node_name="n1", reason=REASON, pool="pool", prod=prod,
                           target_node="n2")  # fmt: skip


def make(answers: list[KubeError | None] | None = None) -> tuple[Evictor, FakeAPI, FakeRecorder, FakeClock]:
    clock = FakeClock()
    api, recorder = FakeAPI(answers), FakeRecorder()
    bucket = TokenBucket(1000, 100, clock=clock, sleep=clock.sleep)
    return Evictor(api, recorder, bucket, refused_backoff=50.0, clock=clock), api, recorder, clock


def counted(result: str, reason: str) -> float:
    return EVICTIONS.labels(result, reason)._value.get()


PDB_429 = KubeError(429, "Too Many Requests", {"message": "Cannot evict pod as it would violate the pod's disruption budget."})


def test_eviction_posts_a_policy_v1_eviction_with_the_uid_and_records_koordinators_event() -> None:
    evictor, api, recorder, _ = make()
    before = counted("evicted", "node overutilized")
    outcome = asyncio.run(evictor.execute(planned(), pod_obj("p", "n1"), dry_run=False))
    assert outcome.result == "evicted"
    assert api.calls == [
        (
            "/api/v1/namespaces/default/pods/p/eviction",
            {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": "p", "namespace": "default"},
                "deleteOptions": {"preconditions": {"uid": "uid-default-p"}},
            },
        )
    ]
    assert recorder.events == [
        {
            "name": "p",
            "reason": "Descheduled",
            "action": "Migrating",
            "note": f'Pod evicted from node "n1" by the reason "{REASON}"',
            "type": "Normal",
        }
    ]
    assert counted("evicted", "node overutilized") == before + 1


def test_dry_run_calls_nothing(caplog: pytest.LogCaptureFixture) -> None:
    evictor, api, recorder, _ = make()
    before = counted("dry_run", "prod overutilized")
    with caplog.at_level("INFO"):
        outcome = asyncio.run(evictor.execute(planned(prod=True), pod_obj("p", "n1"), dry_run=True))
    assert outcome.result == "dry_run" and api.calls == [] and recorder.events == []
    assert counted("dry_run", "prod overutilized") == before + 1
    assert "dry run: would evict pod" in caplog.text


def test_a_429_is_not_now_logged_once_and_kept_out_of_planning_for_the_backoff(caplog: pytest.LogCaptureFixture) -> None:
    evictor, _, recorder, clock = make([PDB_429, PDB_429])
    before = counted("refused", "disruption budget")
    with caplog.at_level("INFO"):
        first = asyncio.run(evictor.execute(planned(), pod_obj("p", "n1"), dry_run=False))
        assert evictor.refused_pods() == {("default", "p")}
        second = asyncio.run(evictor.execute(planned(), pod_obj("p", "n1"), dry_run=False))
    assert first.result == second.result == "refused" and first.reason == "disruption budget"
    assert counted("refused", "disruption budget") == before + 2
    assert recorder.events == []
    assert caplog.text.count("eviction refused") == 1  # said once; counted every time
    clock.now += 49.0
    assert evictor.refused_pods() == {("default", "p")}
    clock.now += 2.0
    assert evictor.refused_pods() == frozenset()


@pytest.mark.parametrize(
    ("error", "result", "reason"),
    [
        (KubeError(429, "Too Many Requests", {"message": "slow down"}), "refused", "too many requests"),
        (KubeError(404, "Not Found"), "gone", "not found"),
        (KubeError(409, "Conflict", {"message": "Precondition failed: UID in precondition"}), "gone", "pod replaced"),
        (KubeError(0, "ClientConnectorError"), "failed", "unreachable"),
        (KubeError(500, "Internal Server Error", {"message": "multiple PDBs"}), "failed", "http 500"),
        (KubeError(403, "Forbidden"), "failed", "http 403"),
    ],
)
def test_answers(error: KubeError, result: str, reason: str) -> None:
    evictor, _, recorder, _ = make([error])
    outcome = asyncio.run(evictor.execute(planned(), pod_obj("p", "n1"), dry_run=False))
    assert (outcome.result, outcome.reason) == (result, reason)
    assert recorder.events == []
    assert outcome.unreachable == (reason == "unreachable")


def test_unreachable_is_logged_once_per_outage(caplog: pytest.LogCaptureFixture) -> None:
    down = KubeError(0, "ClientConnectorError")
    evictor, _, _, _ = make([down, down, None, down])

    async def run() -> None:
        for _ in range(4):
            await evictor.execute(planned(), pod_obj("p", "n1"), dry_run=False)

    with caplog.at_level("INFO"):
        asyncio.run(run())
    assert caplog.text.count("API server unreachable") == 2  # two outages
    assert caplog.text.count("API server answers again") == 1


def test_eviction_body_without_uid_has_no_precondition() -> None:
    obj = pod_obj("p", "n1")
    del obj["metadata"]["uid"]
    assert "deleteOptions" not in eviction_body(obj)


def test_a_repeating_failure_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    forbidden = KubeError(403, "Forbidden", {"message": "cannot create resource pods/eviction"})
    evictor, _, _, _ = make([forbidden, forbidden, forbidden])

    async def run() -> None:
        for _ in range(3):
            await evictor.execute(planned(), pod_obj("p", "n1"), dry_run=False)

    with caplog.at_level("INFO"):
        asyncio.run(run())
    assert caplog.text.count("eviction failed") == 1
