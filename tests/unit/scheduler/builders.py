"""Scheduler test helpers on top of `tests/objects.py`'s builders: gang labels, pod metrics, a framework."""

from __future__ import annotations

from typing import Any

from scheduler_plugin.framework.binder import InMemoryBinder
from scheduler_plugin.framework.clock import FakeClock
from scheduler_plugin.framework.runtime import Framework
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.registry import frameworks_from_config
from tests.objects import pod_usage

GANG_NAME = "pod-group.scheduling.sigs.k8s.io/name"
GANG_MIN = "pod-group.scheduling.sigs.k8s.io/min-available"


def gang_labels(group: str, min_available: int) -> dict[str, str]:
    return {GANG_NAME: group, GANG_MIN: str(min_available)}


def pod_metric(name: str, cpu: str, memory: str = "0", namespace: str = "default", priority: str = "") -> dict[str, Any]:
    return pod_usage(namespace, name, cpu, memory, priority=priority)


def default_framework(
    snapshot: Snapshot, config: str | dict[str, Any] | None = None, clock: FakeClock | None = None
) -> tuple[Framework, FakeClock, InMemoryBinder]:
    clock = clock or FakeClock()
    binder = InMemoryBinder()
    frameworks = frameworks_from_config(config, snapshot=snapshot, clock=clock, binder=binder)
    return next(iter(frameworks.values())), clock, binder
