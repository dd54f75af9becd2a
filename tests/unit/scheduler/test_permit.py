"""Permit: wait with a timeout, allow/reject by other plugins through the waiting-pods map."""

from __future__ import annotations

import asyncio

from scheduler_plugin.framework.binder import InMemoryBinder
from scheduler_plugin.framework.clock import FakeClock
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.runtime import Framework, PermitOutcome
from scheduler_plugin.framework.schedule_one import ScheduleResult, binding_cycle, scheduling_cycle
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.framework.status import SUCCESS, Code, Status
from scheduler_plugin.plugins.defaultbinder import DefaultBinder
from tests.objects import node, pod


class Waiter:
    """Reserve + Permit plugin that asks every pod to wait `timeout` seconds."""

    def __init__(self, name: str, timeout: float, log: list[str]) -> None:
        self.name = name
        self.timeout = timeout
        self.log = log

    def reserve(self, state: CycleState, p: PodInfo, node_name: str) -> Status:
        return SUCCESS

    def unreserve(self, state: CycleState, p: PodInfo, node_name: str) -> None:
        self.log.append(f"{self.name}.Unreserve({p.name})")

    def permit(self, state: CycleState, p: PodInfo, node_name: str) -> tuple[Status, float]:
        return Status.wait("hold on"), self.timeout


async def _bind(fw: Framework, result: ScheduleResult) -> Status:
    return await binding_cycle(fw, result)


def setup(*waiters: Waiter) -> tuple[Framework, Snapshot, FakeClock, list[PermitOutcome]]:
    snap = Snapshot.from_objects(nodes=[node("n0")])
    clock = FakeClock()
    fw = Framework("t", snapshot=snap, clock=clock, binder=InMemoryBinder())
    fw.set_plugins({"reserve": list(waiters), "permit": list(waiters), "bind": [DefaultBinder(fw)]}, {})
    outcomes: list[PermitOutcome] = []
    fw.add_permit_listener(outcomes.append)
    return fw, snap, clock, outcomes


def test_wait_then_allow_by_name() -> None:
    log: list[str] = []
    fw, snap, clock, outcomes = setup(Waiter("W", 30, log))
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    assert result.status.code is Code.WAIT
    assert result.status.message == 'one or more plugins asked to wait and no plugin rejected pod "p"'
    assert snap.node_of("default/p") == "n0"  # the pod holds its node while waiting
    waiting = fw.waiting_pods.get("default/p")
    assert waiting is not None and waiting.pending_plugins == ["W"]
    waiting.allow("W")
    assert outcomes[-1].status.is_success()
    assert fw.waiting_pods.get("default/p") is None
    clock.advance(3600)  # the cancelled timer must not fire
    assert log == []
    assert asyncio.run(_bind(fw, result)).is_success()


def test_every_waiting_plugin_must_allow() -> None:
    log: list[str] = []
    fw, _, _, outcomes = setup(Waiter("W1", 30, log), Waiter("W2", 30, log))
    scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    waiting = fw.waiting_pods.get("default/p")
    assert waiting is not None and waiting.pending_plugins == ["W1", "W2"]
    waiting.allow("W1")
    assert not waiting.done and outcomes == []
    waiting.allow("W2")
    assert waiting.done and outcomes[-1].status.is_success()


def test_reject_by_another_plugin_rolls_back() -> None:
    log: list[str] = []
    fw, snap, _, outcomes = setup(Waiter("W", 30, log))
    scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    waiting = fw.waiting_pods.get("default/p")
    assert waiting is not None
    waiting.reject("Other", "not today")
    assert log == ["W.Unreserve(p)"]
    assert snap.records == {}
    assert outcomes[-1].status.code is Code.UNSCHEDULABLE
    assert outcomes[-1].status.message == 'pod "p" rejected while waiting on permit: not today'


def test_timeout_rejects_with_kube_scheduler_message_and_rolls_back() -> None:
    log: list[str] = []
    fw, snap, clock, outcomes = setup(Waiter("W", 60, log))
    scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    clock.advance(59.9)
    assert outcomes == [] and snap.node_of("default/p") == "n0"
    clock.advance(0.2)
    assert log == ["W.Unreserve(p)"]
    assert snap.records == {}
    assert outcomes[-1].status.message == (
        'pod "p" rejected while waiting on permit: rejected due to timeout after waiting 1m0s at plugin W'
    )
    assert outcomes[-1].status.plugin == "W"


def test_timeout_is_capped_at_fifteen_minutes() -> None:
    fw, _, clock, outcomes = setup(Waiter("W", 10_000, []))
    scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    clock.advance(15 * 60 + 0.001)
    assert outcomes and "after waiting 15m0s" in outcomes[-1].status.message


def test_binding_cycle_blocks_until_allowed() -> None:
    fw, snap, _, _ = setup(Waiter("W", 30, []))
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))

    async def scenario() -> Status:
        task = asyncio.create_task(binding_cycle(fw, result))
        await asyncio.sleep(0)
        assert not task.done()
        waiting = fw.waiting_pods.get("default/p")
        assert waiting is not None
        waiting.allow("W")
        return await task

    assert asyncio.run(scenario()).is_success()
    assert not snap.records["default/p"].assumed


def test_binding_cycle_returns_the_rejection() -> None:
    fw, snap, _, _ = setup(Waiter("W", 30, []))
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))

    async def scenario() -> Status:
        task = asyncio.create_task(binding_cycle(fw, result))
        await asyncio.sleep(0)
        waiting = fw.waiting_pods.get("default/p")
        assert waiting is not None
        waiting.reject("X", "gone")
        return await task

    status = asyncio.run(scenario())
    assert status.code is Code.UNSCHEDULABLE and snap.records == {}


def test_waiting_needs_timers_and_leaves_nothing_assumed_without_them() -> None:
    from scheduler_plugin.framework.clock import RealClock

    snap = Snapshot.from_objects(nodes=[node("n0")])
    waiter = Waiter("W", 30, [])
    fw = Framework("t", snapshot=snap, clock=RealClock())
    fw.set_plugins({"reserve": [waiter], "permit": [waiter]}, {})
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))  # no event loop running
    assert result.status.code is Code.ERROR and "Permit timers" in result.status.message
    assert snap.records == {} and len(fw.waiting_pods) == 0


def test_a_pod_already_placed_is_not_scheduled_twice() -> None:
    fw, _, _, _ = setup()
    info = PodInfo.from_dict(pod("p"))
    assert scheduling_cycle(fw, info).status.is_success()
    again = scheduling_cycle(fw, info)
    assert again.status.code is Code.ERROR and "already assumed or bound to n0" in again.status.message


def test_waiting_pods_are_reached_by_name() -> None:
    fw, snap, _, outcomes = setup(Waiter("W", 30, []))
    scheduling_cycle(fw, PodInfo.from_dict(pod("a")))
    scheduling_cycle(fw, PodInfo.from_dict(pod("b")))
    assert sorted(w.key for w in fw.waiting_pods) == ["default/a", "default/b"]
    assert fw.waiting_pods.allow("default/a", "W")
    assert fw.waiting_pods.reject("default/b", "Other", "no")
    assert not fw.waiting_pods.allow("default/missing", "W")
    assert [(o.pod.name, o.status.is_success()) for o in outcomes] == [("a", True), ("b", False)]
    assert set(snap.records) == {"default/a"}
