"""SchedulingGates: a pod with `spec.schedulingGates` is held out of the active queue."""

from __future__ import annotations

from pydantic import BaseModel

from scheduler_plugin.framework.interfaces import FrameworkHandle
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.status import SUCCESS, Status

NAME = "SchedulingGates"


class SchedulingGates:
    name = NAME

    @classmethod
    def new(cls, _args: BaseModel | None, _handle: FrameworkHandle) -> SchedulingGates:
        return cls()

    def pre_enqueue(self, pod: PodInfo) -> Status:
        if not pod.scheduling_gates:
            return SUCCESS
        return Status.unresolvable(f"waiting for scheduling gates: [{' '.join(pod.scheduling_gates)}]")
