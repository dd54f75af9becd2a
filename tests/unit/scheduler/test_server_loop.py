"""The scheduler process's loop (scheduler_plugin.server) against a fake API server: binding and
its Status answer, 409 handling, events and the PodScheduled condition, retries on cluster
events, and what happens to waiting and binding pods when leadership is lost."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from common.kube.http import KubeError
from scheduler_plugin.framework.events import NODE_ADD, NODE_METRIC
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.schedule_one import ScheduleResult, scheduling_cycle
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.framework.status import Status
from scheduler_plugin.plugins.registry import frameworks_from_config
from scheduler_plugin.server import scheduler as scheduler_module
from scheduler_plugin.server.attempts import BIND_FAILED, AttemptLog, BindFailure
from scheduler_plugin.server.binder import APIBinder
from scheduler_plugin.server.cache import node_changed_for_scheduling, pod_spec_changed, same_scheduling_fields
from scheduler_plugin.server.explain_view import explain_pod
from scheduler_plugin.server.queueing import EventInterests
from scheduler_plugin.server.reporter import Reporter, condition_patch
from scheduler_plugin.server.scheduler import Scheduler
from tests.objects import node, pod
from tests.unit.scheduler.builders import gang_labels

Obj = dict[str, Any]


class FakeHTTP:
    """Answers like the API server for bindings, events and pod status patches."""

    def __init__(self) -> None:
        self.bindings: dict[str, str] = {}  # "ns/name" -> node
        self.events: list[Obj] = []
        self.patches: list[tuple[str, Obj]] = []
        self.pods: dict[str, Obj] = {}  # what GET returns, by path
        self.fail_binding: dict[str, KubeError] = {}
        self.hold_bindings: asyncio.Event | None = None
        self.events_unreachable = 0  # the next N event writes get no answer (an API server outage)

    async def create(self, path: str, body: Any) -> Obj:
        if path.endswith("/binding"):
            key = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
            if self.hold_bindings is not None:
                await self.hold_bindings.wait()
            if key in self.fail_binding:
                raise self.fail_binding.pop(key)
            self.bindings[key] = body["target"]["name"]
            return {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}
        if self.events_unreachable:
            self.events_unreachable -= 1
            raise KubeError(0, "ConnectionRefusedError")
        self.events.append(body)
        return body

    async def strategic_patch(self, path: str, patch: Obj) -> Obj:
        self.patches.append((path, patch))
        return {}

    async def get(self, path: str, **_: Any) -> Obj:
        if path not in self.pods:
            raise KubeError(404, "Not Found", {"message": "not found"})
        return self.pods[path]


def make(snapshot: Snapshot, config: Obj | None = None) -> tuple[Scheduler, FakeHTTP]:
    http = FakeHTTP()
    reporter = Reporter(http, "test-instance")  # type: ignore[arg-type]
    binder = APIBinder(http, before_bind=reporter.settle)  # type: ignore[arg-type]
    frameworks = frameworks_from_config(config, snapshot=snapshot, binder=binder)
    return Scheduler(frameworks, snapshot, binder, reporter, initial_backoff_seconds=0.05,
                     max_backoff_seconds=0.1), http


def elsewhere(obj: Obj) -> Obj:
    """The pod belongs to another scheduler (still a gang member for Coscheduling's counting)."""
    obj["spec"]["schedulerName"] = "other-scheduler"
    return obj


def add(scheduler: Scheduler, obj: Obj) -> None:
    info = scheduler.snapshot.upsert_pod(obj)
    scheduler.pod_changed(info, is_new=True, spec_changed=True)


@contextlib.asynccontextmanager
async def leading(scheduler: Scheduler) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(scheduler.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.05)  # let cancelled binding tasks roll back


async def until(check: Callable[[], bool], within: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def test_pods_are_bound_and_get_a_scheduled_event() -> None:
    async def run() -> None:
        snap = Snapshot.from_objects(nodes=[node("n1"), node("n2")])
        scheduler, http = make(snap)
        async with leading(scheduler):
            for i in range(3):
                add(scheduler, pod(f"p{i}", cpu="1"))
            await until(lambda: len(http.bindings) == 3 and len(http.events) == 3)
        assert {e["reason"] for e in http.events} == {"Scheduled"}
        notes = sorted(e["note"] for e in http.events)
        assert notes == sorted(f"Successfully assigned default/p{i} to {http.bindings[f'default/p{i}']}" for i in range(3))
        assert all(e["reportingController"] == "loadline-scheduler" and e["action"] == "Binding" for e in http.events)
        assert all(not r.assumed for r in snap.records.values()) and len(snap.records) == 3

    asyncio.run(run())


def test_a_pod_bound_as_the_api_server_went_away_still_gets_its_scheduled_event() -> None:
    async def run() -> None:
        snap = Snapshot.from_objects(nodes=[node("n1")])
        scheduler, http = make(snap)
        scheduler.reporter.scheduled_event_retry_seconds = (0.01, 0.01, 0.01)
        http.events_unreachable = 2  # bound, then the server is gone for the event and its first retry
        async with leading(scheduler):
            add(scheduler, pod("p", cpu="1"))
            await until(lambda: len(http.events) == 1)
        assert http.events[0]["reason"] == "Scheduled" and http.bindings == {"default/p": "n1"}

    asyncio.run(run())


def test_unschedulable_pod_is_reported_then_retried_on_node_add() -> None:
    async def run() -> None:
        snap = Snapshot.from_objects(nodes=[node("small", cpu="1")])
        scheduler, http = make(snap)
        async with leading(scheduler):
            add(scheduler, pod("big", cpu="2"))
            await until(lambda: bool(http.patches))
            message = ("0/1 nodes are available: 1 Insufficient cpu. "
                       "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")
            assert [e["note"] for e in http.events] == [message]
            assert http.events[0]["type"] == "Warning" and http.events[0]["reason"] == "FailedScheduling"
            path, patch = http.patches[0]
            assert path == "/api/v1/namespaces/default/pods/big/status"
            condition = patch["status"]["conditions"][0]
            assert (condition["type"], condition["status"], condition["reason"], condition["message"]) == (
                "PodScheduled", "False", "Unschedulable", message)
            assert scheduler.queue.where("default/big") == "unschedulable"
            await asyncio.sleep(0.3)  # parked: no retry without an event (the pool's timeout is 5 min)
            assert len(http.events) == 1

            snap.upsert_node(node("large", cpu="4"))
            scheduler.cluster_event(NODE_ADD)
            await until(lambda: http.bindings.get("default/big") == "large")

    asyncio.run(run())


def test_bind_conflicts_are_resolved_by_reading_the_pod_back() -> None:
    async def run() -> None:
        snap = Snapshot.from_objects(nodes=[node("n1")])
        scheduler, http = make(snap)
        conflict = KubeError(409, "Conflict", {"message": "pod mine is already assigned to node n1"})
        http.fail_binding["default/mine"] = conflict
        http.pods["/api/v1/namespaces/default/pods/mine"] = pod("mine", node_name="n1")
        http.fail_binding["default/theirs"] = conflict
        http.pods["/api/v1/namespaces/default/pods/theirs"] = pod("theirs", node_name="elsewhere")
        http.fail_binding["default/gone"] = KubeError(404, "Not Found")
        async with leading(scheduler):
            for name in ("mine", "theirs", "gone"):
                add(scheduler, pod(name, cpu="100m"))
            await until(lambda: len([e for e in http.events if e["reason"] == "Scheduled"]) == 1)
            await asyncio.sleep(0.2)
        # An earlier binding of ours went through: success. Bound elsewhere or deleted: dropped, not retried.
        assert [e["regarding"]["name"] for e in http.events] == ["mine"]
        assert snap.node_of("default/mine") == "n1"
        assert snap.node_of("default/theirs") is None and snap.node_of("default/gone") is None
        assert scheduler.queue.where("default/theirs") is None and scheduler.queue.where("default/gone") is None

    asyncio.run(run())


def test_failed_binding_releases_the_node_and_retries_with_backoff() -> None:
    async def run() -> None:
        snap = Snapshot.from_objects(nodes=[node("n1")])
        scheduler, http = make(snap)
        http.fail_binding["default/p"] = KubeError(0, "ClientConnectorError: connection refused")
        async with leading(scheduler):
            add(scheduler, pod("p", cpu="1"))
            await until(lambda: http.bindings.get("default/p") == "n1")
        assert scheduler.binder.health.unreachable is False  # the later success cleared it

    asyncio.run(run())


def test_a_binding_that_fails_after_the_loop_went_idle_is_retried_after_its_backoff() -> None:
    """A slow failure (a PreBind waiting for the PV controller) while nothing else is queued: the idle loop must
    wake for the pod's backoff, not sleep on until its next unschedulable-pool flush (30 s)."""
    async def run() -> None:
        snap = Snapshot.from_objects(nodes=[node("n1")])
        scheduler, http = make(snap)
        http.hold_bindings = asyncio.Event()
        http.fail_binding["default/p"] = KubeError(0, "ClientConnectorError: connection refused")
        async with leading(scheduler):
            add(scheduler, pod("p", cpu="1"))
            await until(lambda: "default/p" in scheduler.in_flight)
            await asyncio.sleep(0.3)  # the loop has nothing else to do: it idles
            http.hold_bindings.set()  # the binding fails now, and the next attempt succeeds
            await until(lambda: http.bindings.get("default/p") == "n1", within=3.0)
            # explain keeps where the failed attempt went and how it ended, beside the last one
            status, doc = explain_pod(scheduler, "default", "p", is_leader=True)
            assert status == 200 and doc["attempt"]["outcome"] == "bound" and doc["attempt"]["attempts"] == 2
            failure = doc["lastBindFailure"]
            assert (failure["attempts"], failure["node"], failure["tiedNodes"]) == (1, "n1", 1)
            assert "connection refused" in failure["message"]

    asyncio.run(run())


def test_the_attempt_log_keeps_the_last_binding_failure_through_later_attempts() -> None:
    log, raw = AttemptLog(), pod("p")
    p = PodInfo.from_dict(raw)
    prebind = 'running PreBind plugin "VolumeBinding": binding volumes: pv "v" node affinity doesn\'t match node "n2"'
    log.record("default/p", ScheduleResult(p, Status(), node_name="n2", tied_nodes=2), profile="x", at=1.0,
               attempts=1, outcome="binding")
    log.mark("default/p", BIND_FAILED, prebind)
    for attempt in (2, 3):  # the claim it bound keeps it off every node now
        log.record("default/p", ScheduleResult(p, Status.unschedulable("no")), profile="x", at=float(attempt),
                   attempts=attempt, outcome="unschedulable")
    entry = log.get("default/p")
    assert entry is not None and entry.attempts == 3
    assert entry.bind_failure == BindFailure(1.0, 1, prebind, "n2", 2)
    # a new pod of the same name starts afresh
    again = PodInfo.from_dict({**raw, "metadata": {**raw["metadata"], "uid": "another"}})
    log.record("default/p", ScheduleResult(again, Status()), profile="x", at=4.0, attempts=1, outcome="binding")
    latest = log.get("default/p")
    assert latest is not None and latest.bind_failure is None


def test_losing_leadership_rolls_back_waiting_and_binding_pods() -> None:
    async def run() -> None:
        snap = Snapshot.from_objects(nodes=[node("n1"), node("n2")])
        scheduler, http = make(snap)
        # A gang of two whose second member is another scheduler's: the first waits in Permit for it.
        snap.upsert_pod(elsewhere(pod("g-1", cpu="1", labels=gang_labels("g", 2))))
        http.hold_bindings = asyncio.Event()  # bindings hang: the lone pod stays "binding"
        async with leading(scheduler):
            add(scheduler, pod("g-0", cpu="1", labels=gang_labels("g", 2)))
            add(scheduler, pod("lone", cpu="1"))
            await until(lambda: len(scheduler.in_flight) == 2)
            assert {k: scheduler.snapshot.records[k].assumed for k in snap.records} == {
                "default/g-0": True, "default/lone": True}
        assert not snap.records  # both reservations released
        assert not scheduler.in_flight and not scheduler.leading
        assert http.bindings == {}

        # Leading again: the pods are queued again and placed (the gang once its member is ours).
        http.hold_bindings.set()
        async with leading(scheduler):
            add(scheduler, pod("g-1", cpu="1", labels=gang_labels("g", 2)))
            await until(lambda: len(http.bindings) == 3)

    asyncio.run(run())


def test_a_pod_deleted_while_waiting_in_permit_is_dropped() -> None:
    async def run() -> None:
        snap = Snapshot.from_objects(nodes=[node("n1")])
        scheduler, http = make(snap)
        snap.upsert_pod(elsewhere(pod("g-1", cpu="1", labels=gang_labels("g", 2))))
        async with leading(scheduler):
            add(scheduler, pod("g-0", cpu="1", labels=gang_labels("g", 2)))
            await until(lambda: "default/g-0" in scheduler.in_flight)
            snap.remove_pod("default/g-0")
            scheduler.pod_deleted("default/g-0", None)
            await until(lambda: not scheduler.in_flight)
            await asyncio.sleep(0.2)
        assert not snap.records and scheduler.queue.where("default/g-0") is None and not http.bindings

    asyncio.run(run())


# --------------------------------------------------------------------------- small parts
def test_condition_patch_is_skipped_when_nothing_changed_and_keeps_the_transition_time() -> None:
    fresh = pod("p")
    patch = condition_patch(fresh, "Unschedulable", "0/3 nodes are available: 3 Insufficient cpu.")
    assert patch is not None
    condition = patch["status"]["conditions"][0]
    fresh["status"]["conditions"] = [condition]
    assert condition_patch(fresh, "Unschedulable", condition["message"]) is None
    changed = condition_patch(fresh, "Unschedulable", "0/3 nodes are available: 3 Insufficient memory.")
    assert changed is not None
    assert changed["status"]["conditions"][0]["lastTransitionTime"] == condition["lastTransitionTime"]


@pytest.mark.parametrize(("plugins", "event", "moves"), [
    (set(), NODE_METRIC, True),  # no plugin named: every event
    ({"NodeResourcesFit"}, NODE_METRIC, False),
    ({"LoadAwareScheduling"}, NODE_METRIC, True),
    ({"NodeAffinity", "NodeResourcesFit"}, NODE_ADD, True),
    ({"SomeOutOfTreePlugin"}, NODE_METRIC, True),
])  # fmt: skip
def test_events_move_only_the_pods_they_can_help(plugins: set[str], event: str, moves: bool) -> None:
    from scheduler_plugin.framework.interfaces import QueuedPodInfo
    from scheduler_plugin.framework.podinfo import PodInfo

    info = QueuedPodInfo(PodInfo.from_dict(pod("p")), 0.0, unschedulable_plugins=plugins)
    framework = frameworks_from_config(None, snapshot=Snapshot())["loadline-scheduler"]
    assert EventInterests(framework.plugins.values()).helps(event)(info) is moves


def test_an_out_of_tree_plugin_declares_its_own_events() -> None:
    from scheduler_plugin.framework.interfaces import QueuedPodInfo
    from scheduler_plugin.framework.podinfo import PodInfo

    class OutOfTree:
        name = "OutOfTree"

        def events_to_register(self) -> frozenset[str]:
            return frozenset({"GPUDriverReady"})

    interests = EventInterests([OutOfTree()])
    info = QueuedPodInfo(PodInfo.from_dict(pod("p")), 0.0, unschedulable_plugins={"OutOfTree"})
    assert interests.helps("GPUDriverReady")(info)
    assert not interests.helps(NODE_METRIC)(info)


def test_heartbeats_and_status_writes_are_not_scheduling_changes() -> None:
    old = node("n1")
    heartbeat = {**old, "status": {**old["status"], "conditions": [{"type": "Ready", "status": "True"}]}}
    assert not node_changed_for_scheduling(old, heartbeat)
    relabelled = {**old, "metadata": {**old["metadata"], "labels": {"zone": "b"}}}
    assert node_changed_for_scheduling(old, relabelled)
    p = pod("p")
    assert not pod_spec_changed(p, {**p, "status": {"conditions": [{"type": "PodScheduled", "status": "False"}]}})
    assert pod_spec_changed(p, {**p, "spec": {**p["spec"], "schedulingGates": []}})


def test_a_crash_in_one_cycle_costs_one_attempt_not_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    crashes = []

    def crash_once(framework: Any, pod: Any, snapshot: Any = None, *, record: bool = False) -> Any:
        if not crashes:
            crashes.append(pod.key)
            raise RuntimeError("boom")
        return scheduling_cycle(framework, pod, snapshot, record=record)

    monkeypatch.setattr(scheduler_module, "scheduling_cycle", crash_once)

    async def run() -> None:
        snap = Snapshot.from_objects(nodes=[node("n1")])
        scheduler, http = make(snap)
        async with leading(scheduler) as task:
            add(scheduler, pod("p", cpu="1"))
            await until(lambda: http.bindings.get("default/p") == "n1")
            assert not task.done()
        assert crashes == ["default/p"]

    asyncio.run(run())


def test_a_binding_event_reuses_the_parsed_pod_with_its_new_node() -> None:
    pending = pod("p", cpu="1", tolerations=[{"key": "k", "operator": "Exists"}])
    info = PodInfo.from_dict(pending)
    bound = {**pending, "spec": {**pending["spec"], "nodeName": "n1"},
             "status": {"conditions": [{"type": "PodScheduled", "status": "True",
                                        "lastTransitionTime": "2026-01-01T00:00:10Z"}]}}  # fmt: skip
    assert same_scheduling_fields(pending, bound)
    again = info.with_status_of(bound)
    assert (again.node_name, again.tolerations, again.requests) == ("n1", info.tolerations, info.requests)
    assert again.scheduled_at is not None and info.node_name == ""
    # Any other spec change (also together with the node name) is parsed anew.
    moved = {**bound, "spec": {**bound["spec"], "priority": 7}}
    assert not same_scheduling_fields(pending, moved)
    assert not same_scheduling_fields(bound, {**bound, "spec": {**bound["spec"], "tolerations": []}})
    assert same_scheduling_fields(bound, {**bound, "status": {"phase": "Running"}})
