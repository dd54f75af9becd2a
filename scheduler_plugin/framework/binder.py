"""Binders. The scheduler process binds through the API server's pods/binding
(`scheduler_plugin.server.binder.APIBinder`); in process (tests, benchmarks) the binding
is just recorded."""

from __future__ import annotations

from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.status import SUCCESS, Status


class InMemoryBinder:
    def __init__(self) -> None:
        self.bindings: dict[str, str] = {}  # pod key -> node name
        self.fail_next: dict[str, Status] = {}  # pod key -> status to answer once (tests)

    async def bind(self, pod: PodInfo, node_name: str) -> Status:
        failure = self.fail_next.pop(pod.key, None)
        if failure is not None:
            return failure
        self.bindings[pod.key] = node_name
        return SUCCESS
