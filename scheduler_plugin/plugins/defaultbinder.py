"""DefaultBinder: hands the pod to the framework's Binder (pods/binding in the scheduler process)."""

from __future__ import annotations

from pydantic import BaseModel

from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.interfaces import FrameworkHandle
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.status import Status

NAME = "DefaultBinder"


class DefaultBinder:
    name = NAME

    def __init__(self, handle: FrameworkHandle) -> None:
        self._handle = handle

    @classmethod
    def new(cls, _args: BaseModel | None, handle: FrameworkHandle) -> DefaultBinder:
        return cls(handle)

    async def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        return await self._handle.binder.bind(pod, node_name)
