"""The last scheduling attempt of recent pods, kept for `explain`.

Cycles run with `record=True`, so a result carries the FitError diagnosis and the
per-plugin score arrays it computed anyway; keeping them costs no extra work, only
memory, hence the bound (least recently attempted pods are dropped first). The cycle
state and the Permit handle are not kept: they belong to the binding cycle.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass

from scheduler_plugin.framework.schedule_one import ScheduleResult


@dataclass(slots=True)
class Attempt:
    result: ScheduleResult
    profile: str
    at: float  # epoch seconds
    attempts: int  # how many attempts the pod has had, this one included
    outcome: str  # "waiting" | "binding" | "bound" | "unschedulable" | "error" | "rejected-in-permit" | "bind-failed"
    message: str = ""
    uid: str = ""


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
        self._entries[key] = Attempt(slim, profile, at, attempts, outcome, result.status.message, uid)
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

    def get(self, key: str) -> Attempt | None:
        return self._entries.get(key)

    def forget(self, key: str) -> None:
        self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)
