"""PrioritySort: higher priority first, then earlier queue time (kube-scheduler's default QueueSort)."""

from __future__ import annotations

from pydantic import BaseModel

from scheduler_plugin.framework.interfaces import FrameworkHandle, QueuedPodInfo

NAME = "PrioritySort"


class PrioritySort:
    name = NAME

    @classmethod
    def new(cls, _args: BaseModel | None, _handle: FrameworkHandle) -> PrioritySort:
        return cls()

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        return self.sort_key(a) < self.sort_key(b)

    def sort_key(self, queued: QueuedPodInfo) -> tuple[int, float]:
        return (-queued.pod.priority, queued.timestamp)
