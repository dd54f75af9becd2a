"""The last scheduling attempt of recent pods, kept for `explain`.

Cycles run with `record=True`, so a result carries the FitError diagnosis and the
per-plugin score arrays it computed anyway; keeping them costs no extra work, only
memory, hence the bound (least recently attempted pods are dropped first). The cycle
state and the Permit handle are not kept: they belong to the binding cycle.

Of the pod's last attempt whose binding failed (e.g. in PreBind) a summary is kept beside the
last attempt (`BindFailure`): such a pod is retried in a cluster the failed attempt changed (a PV
it bound, a claim's selected node), so its later attempts alone would not say where, among how
many equally good nodes, the failure happened.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass

from scheduler_plugin.framework.schedule_one import ScheduleResult
from scheduler_plugin.plugins.defaultpreemption import DECISION, PreemptionDecision


@dataclass(slots=True)
class PreemptionRecord:
    """What preemption decided for the attempt, and (once the evictions ran) what it did."""

    decision: PreemptionDecision
    done: bool = False
    node_name: str = ""  # where victims were evicted ("" when no candidate worked)
    victims: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()  # candidates given up because the API server refused an eviction


BIND_FAILED = "bind-failed"  # the outcome of an attempt whose binding cycle failed (PreBind, Bind, the API server)


@dataclass(frozen=True, slots=True)
class BindFailure:
    """An attempt whose binding failed, in brief."""

    at: float
    attempts: int  # which attempt of the pod it was
    message: str
    node_name: str | None
    tied_nodes: int


@dataclass(slots=True)
class Attempt:
    result: ScheduleResult
    profile: str
    at: float  # epoch seconds
    attempts: int  # how many attempts the pod has had, this one included
    outcome: str  # "waiting" | "binding" | "bound" | "unschedulable" | "error" | "rejected-in-permit" | "bind-failed"
    message: str = ""
    uid: str = ""
    preemption: PreemptionRecord | None = None
    bind_failure: BindFailure | None = None  # the last earlier attempt of the pod (uid) whose binding failed


class AttemptLog:
    def __init__(self, capacity: int = 1000) -> None:
        self.capacity = max(capacity, 0)
        self._entries: OrderedDict[str, Attempt] = OrderedDict()

    def record(
        self, key: str, result: ScheduleResult, *, profile: str, at: float, attempts: int, outcome: str
    ) -> None:
        if self.capacity == 0:
            return
        slim = dataclasses.replace(result, state=None, waiting=None)
        uid = str((result.pod.raw.get("metadata") or {}).get("uid") or "")
        decision = result.state.get(DECISION, PreemptionDecision) if result.state is not None else None
        preemption = PreemptionRecord(decision) if decision is not None else None
        previous = self._entries.get(key)
        if preemption is None and previous is not None:
            preemption = previous.preemption  # the preemption that made room stays visible once the pod is placed
        bind_failure = None
        if previous is not None and previous.uid == uid:
            bind_failure = previous.bind_failure
            if previous.outcome == BIND_FAILED:
                bind_failure = BindFailure(previous.at, previous.attempts, previous.message, previous.result.node_name,
                                           previous.result.tied_nodes)
        self._entries[key] = Attempt(slim, profile, at, attempts, outcome, result.status.message, uid, preemption,
                                     bind_failure)
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def mark(self, key: str, outcome: str, message: str = "") -> None:
        """The binding cycle's verdict on the pod's last attempt."""
        entry = self._entries.get(key)
        if entry is not None:
            entry.outcome = outcome
            if message:
                entry.message = message

    def mark_preemption(self, key: str, node_name: str, victims: list[str], refused: list[str]) -> None:
        """What the evictions for the attempt's preemption decision did."""
        entry = self._entries.get(key)
        if entry is not None and entry.preemption is not None:
            record = entry.preemption
            record.done, record.node_name = True, node_name
            record.victims, record.refused = tuple(victims), tuple(refused)

    def get(self, key: str) -> Attempt | None:
        return self._entries.get(key)

    def forget(self, key: str) -> None:
        self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)
