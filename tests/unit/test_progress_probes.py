"""/readyz and /healthz tell the truth: a watch failing without progress, a loop gone (issue 29).

Readiness fails after `STALL_SECONDS` of no progress, liveness after `LIVENESS_STALL_SECONDS`; each component
reads its own loops: the manager's work queue and workers, the scheduler's loop, the descheduler's rounds.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from common.kube.events import EventRecorder
from common.kube.reflector import LIVENESS_STALL_SECONDS, STALL_SECONDS, Reflector
from manager.controller import Controller
from scheduler_plugin.descheduler.controller import Descheduler
from scheduler_plugin.extender.server import ExtenderServer
from scheduler_plugin.server.http_api import build_app
from tests.unit.descheduler.builders import make_args
from tests.unit.descheduler.test_controller import FakeHTTP as DeschedulerHTTP
from tests.unit.manager.fakes import FakeHTTP as ManagerHTTP
from tests.unit.scheduler.test_extender_server import make_engine


def failing_for(reflector: Reflector, seconds: float) -> None:
    """As if the reflector's lists had failed for `seconds` (call inside the running loop)."""
    reflector._failing_since = asyncio.get_running_loop().time() - seconds
    reflector._last_error = "0 ClientConnectorError: connection refused"


def test_a_reflector_is_stalled_only_past_the_threshold() -> None:
    async def body() -> tuple[str | None, str | None]:
        reflector = Reflector(None, "/api/v1/nodes", name="t-stall")  # type: ignore[arg-type]
        failing_for(reflector, STALL_SECONDS - 5)
        early = reflector.stalled()
        failing_for(reflector, STALL_SECONDS + 5)
        return early, reflector.stalled()

    early, late = asyncio.run(body())
    assert early is None
    assert late is not None and late.startswith("watch of t-stall failing for 65s") and "refused" in late


async def probe(app: Any) -> tuple[int, int]:
    async with TestClient(TestServer(app)) as client:
        return (await client.get("/readyz")).status, (await client.get("/healthz")).status


def test_extender_and_scheduler_probes_fail_on_a_stalled_watch() -> None:
    stalled = {"seconds": 0.0}

    def not_progressing(after: float) -> str | None:
        return "watch of nodes failing" if stalled["seconds"] >= after else None

    def apps() -> list[Any]:
        extender = ExtenderServer(make_engine(), not_progressing=not_progressing).app()
        scheduler = build_app(
            ready=lambda: True, is_leader=lambda: True, explain=lambda n, p: (404, {}), not_progressing=not_progressing
        )
        return [extender, scheduler]

    async def body() -> list[tuple[int, int]]:
        results = []
        for seconds in (0.0, STALL_SECONDS + 1, LIVENESS_STALL_SECONDS + 1):
            stalled["seconds"] = seconds
            for app in apps():
                results.append(await probe(app))
        return results

    assert asyncio.run(body()) == [(200, 200)] * 2 + [(503, 200)] * 2 + [(503, 503)] * 2


def test_descheduler_probes_read_its_watches() -> None:
    async def body() -> list[tuple[bool, bool]]:
        d = Descheduler(make_args(), DeschedulerHTTP(), identity="t", wall_clock=lambda: 0.0)  # type: ignore[arg-type]
        for r in d.required_reflectors:
            r.synced.set()
        seen = [(d.ready()[0], d.healthy()[0])]
        failing_for(d.statefulsets, STALL_SECONDS + 1)
        seen.append((d.ready()[0], d.healthy()[0]))
        failing_for(d.statefulsets, LIVENESS_STALL_SECONDS + 1)
        seen.append((d.ready()[0], d.healthy()[0]))
        return seen

    assert asyncio.run(body()) == [(True, True), (False, True), (False, False)]


def test_manager_reports_a_stalled_watch_a_restarting_worker_and_queued_nodes_nobody_takes() -> None:
    async def body() -> list[str | None]:
        http = ManagerHTTP()
        controller = Controller(
            http.as_kube(),
            namespace="loadline-system",
            config_map="slo-controller-config",
            recorder=EventRecorder(http.as_kube(), "loadline-manager", "test"),
        )
        seen = [controller.not_progressing(STALL_SECONDS)]
        failing_for(controller.nodemetrics, STALL_SECONDS + 1)
        seen.append(controller.not_progressing(STALL_SECONDS))
        controller.nodemetrics._failing_since = None
        controller.loops._down.add("reconcile-2")
        seen.append(controller.not_progressing(STALL_SECONDS))
        controller.loops._down.clear()
        controller.leading = True
        controller.queue.add("node-a")  # no worker takes it
        controller.queue._moved_at -= STALL_SECONDS + 1  # type: ignore[operator]
        seen.append(controller.not_progressing(STALL_SECONDS))
        return seen

    seen = asyncio.run(body())
    assert seen[0] is None
    assert seen[1] is not None and "watch of nodemetrics failing" in seen[1]
    assert seen[2] == "restarting: reconcile-2"
    assert seen[3] is not None and seen[3].startswith("no reconcile taken or finished for 61s with 1 nodes queued")


def test_agent_probes_read_its_watches(tmp_path: Any) -> None:
    """The agent's pod, NodeMetric, Node and NodeSLO watches feed its /readyz and /healthz as the manager's do: a
    watch failing without progress fails readiness after STALL_SECONDS, liveness after LIVENESS_STALL_SECONDS."""
    from agent.config import AgentSettings
    from agent.main import NodeAgent
    from agent.podwatch import PodWatch
    from agent.publisher import NodeMetricCache
    from agent.qos.enforcer import QoSEnforcer

    async def body() -> list[tuple[bool, str, bool, str]]:
        agent = NodeAgent(AgentSettings(node_name="n1"))
        agent.timings.renders = 1  # one aggregation rendered: ready but for the watches
        agent.podwatch = PodWatch(None, "n1")  # type: ignore[arg-type]
        agent.cache = NodeMetricCache(None, name="n1")  # type: ignore[arg-type]
        agent.qos = QoSEnforcer("n1", None, tmp_path, lambda: None, pods=lambda: [])  # type: ignore[arg-type]
        assert [w.name for w in agent.watches()] == [agent.podwatch.reflector.name, "nodemetrics", "qos-node",
                                                     "qos-nodeslo"]  # fmt: skip
        seen = [(*agent.ready(), *agent.healthy())]
        for watch in (agent.qos.slo_watch, agent.podwatch.reflector):
            failing_for(watch, STALL_SECONDS + 1)
            seen.append((*agent.ready(), *agent.healthy()))
            failing_for(watch, LIVENESS_STALL_SECONDS + 1)
            seen.append((*agent.ready(), *agent.healthy()))
            watch._failing_since = None
        return seen

    seen = asyncio.run(body())
    assert [(ready, healthy) for ready, _, healthy, _ in seen] == [(True, True)] + [(False, True), (False, False)] * 2
    assert "watch of qos-nodeslo failing for 61s" in seen[1][1] and "watch of qos-nodeslo" in seen[2][3]
