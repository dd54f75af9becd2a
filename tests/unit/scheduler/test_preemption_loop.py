"""Preemption carried out by the scheduler loop against a fake API server: evictions, `Preempted`
events, the nomination (status and in the cache) that keeps lower-priority pods off the room,
the next candidate after a 429, and the binding once the victims are gone."""

from __future__ import annotations

import asyncio
from typing import Any

from common.kube.http import KubeError
from scheduler_plugin.framework.events import ASSIGNED_POD_DELETE
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.registry import frameworks_from_config
from scheduler_plugin.server import metrics as m
from scheduler_plugin.server.binder import APIBinder
from scheduler_plugin.server.reporter import Reporter
from scheduler_plugin.server.scheduler import Scheduler
from tests.objects import T0, node, pod
from tests.unit.scheduler.test_server_loop import FakeHTTP, add, leading, until

Obj = dict[str, Any]


class EvictingHTTP(FakeHTTP):
    def __init__(self, refuse: set[str]) -> None:
        super().__init__()
        self.evicted: list[str] = []
        self.refuse = refuse

    async def create(self, path: str, body: Any) -> Obj:
        if path.endswith("/eviction"):
            key = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
            if key in self.refuse:
                raise KubeError(429, "Too Many Requests",
                                {"message": "Cannot evict pod as it would violate the pod's disruption budget."})
            self.evicted.append(key)
            return {"kind": "Status", "status": "Success"}
        return await super().create(path, body)


def batch(name: str, node_name: str, cpu: str, priority: int = 5000) -> Obj:
    return pod(name, cpu, "1Gi", node_name=node_name, priority=priority, scheduled_at=T0 - 100)


def setup(refuse: set[str]) -> tuple[Scheduler, EvictingHTTP, Snapshot]:
    # n1: one 4-cpu pod of priority 3000 (cheapest); n2: two 2-cpu batch pods.
    snap = Snapshot.from_objects(nodes=[node("n1"), node("n2")],
                                 pods=[batch("free", "n1", "4", 3000), batch("b-0", "n2", "2"), batch("b-1", "n2", "2")])
    http = EvictingHTTP(refuse)
    reporter = Reporter(http, "test-instance")  # type: ignore[arg-type]
    binder = APIBinder(http, before_bind=reporter.settle)  # type: ignore[arg-type]
    frameworks = frameworks_from_config(None, snapshot=snap, binder=binder)
    scheduler = Scheduler(frameworks, snap, binder, reporter, initial_backoff_seconds=0.05, max_backoff_seconds=0.1)
    return scheduler, http, snap


def remove_victims(scheduler: Scheduler, keys: list[str]) -> None:
    for key in keys:
        previous = scheduler.snapshot.pods.get(key)
        scheduler.snapshot.remove_pod(key)
        scheduler.pod_deleted(key, previous)
    scheduler.cluster_event(ASSIGNED_POD_DELETE)


def test_victims_are_evicted_the_pod_is_nominated_and_binds_there() -> None:
    async def run() -> None:
        scheduler, http, snap = setup(refuse=set())
        before = m.PREEMPTION_ATTEMPTS._value.get()
        async with leading(scheduler):
            add(scheduler, pod("prod", "2", "1Gi", priority=9000))
            await until(lambda: http.evicted == ["default/free"])
            assert snap.nominations == {"default/prod": "n1"}
            await until(lambda: any(e["reason"] == "Preempted" for e in http.events))
            preempted = next(e for e in http.events if e["reason"] == "Preempted")
            assert preempted["note"] == "Preempted by default/prod on node n1"
            assert preempted["regarding"]["name"] == "free"
            await until(lambda: ("/api/v1/namespaces/default/pods/prod/status",
                                 {"status": {"nominatedNodeName": "n1"}}) in http.patches)
            failed = next(e for e in http.events if e["reason"] == "FailedScheduling")
            assert failed["note"] == ("0/2 nodes are available: 2 Insufficient cpu. preemption: nominated node n1, "
                                      "evicting 1 lower-priority pod(s): default/free.")
            # A lower-priority pod arriving now must not take the room being made for prod.
            add(scheduler, pod("late", "3", "1Gi", priority=4000))
            remove_victims(scheduler, ["default/free"])
            await until(lambda: http.bindings.get("default/prod") == "n1")
            await asyncio.sleep(0.2)
            assert "default/late" not in http.bindings
            assert set(http.evicted) == {"default/free"}
            assert "default/prod" not in snap.nominations
        assert m.PREEMPTION_ATTEMPTS._value.get() > before

    asyncio.run(run())


def test_a_refused_eviction_moves_on_to_the_next_candidate() -> None:
    async def run() -> None:
        scheduler, http, snap = setup(refuse={"default/free"})
        async with leading(scheduler):
            add(scheduler, pod("prod", "2", "1Gi", priority=9000))
            await until(lambda: http.evicted == ["default/b-1"])
            await until(lambda: snap.nominations.get("default/prod") == "n2")
            attempt = scheduler.attempts.get("default/prod")
            assert attempt is not None and attempt.preemption is not None
            await until(lambda: attempt.preemption is not None and attempt.preemption.done)
            assert (attempt.preemption.node_name, attempt.preemption.refused) == ("n2", ("n1",))

    asyncio.run(run())
