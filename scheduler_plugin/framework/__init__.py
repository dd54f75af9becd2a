"""The scheduling framework: extension points, cycle state, snapshot, runtime, profiles.

No API-server I/O here: the framework schedules over an in-memory `Snapshot` and binds
through a `Binder`.
"""

from common.api.malformed import MalformedObjectError
from scheduler_plugin.framework.clock import Clock, FakeClock, RealClock
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.diagnosis import Diagnosis
from scheduler_plugin.framework.filterresult import FilterResult, Rejection
from scheduler_plugin.framework.interfaces import (
    Binder,
    BindPlugin,
    FilterPlugin,
    FrameworkHandle,
    NormalizeScorePlugin,
    PermitPlugin,
    Plugin,
    PostBindPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    QueuedPodInfo,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
)
from scheduler_plugin.framework.invocation import FrameworkObserver
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.runtime import Framework, PermitOutcome
from scheduler_plugin.framework.schedule_one import ScheduleResult
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.framework.status import SUCCESS, Code, Status
from scheduler_plugin.framework.waiting_pods import WaitingPod

__all__ = [
    "SUCCESS",
    "BindPlugin",
    "Binder",
    "Clock",
    "Code",
    "CycleState",
    "Diagnosis",
    "FakeClock",
    "FilterPlugin",
    "FilterResult",
    "Framework",
    "FrameworkHandle",
    "FrameworkObserver",
    "MalformedObjectError",
    "NormalizeScorePlugin",
    "PermitOutcome",
    "PermitPlugin",
    "Plugin",
    "PodInfo",
    "PostBindPlugin",
    "PostFilterPlugin",
    "PostFilterResult",
    "PreBindPlugin",
    "PreEnqueuePlugin",
    "PreFilterPlugin",
    "PreFilterResult",
    "PreScorePlugin",
    "QueueSortPlugin",
    "QueuedPodInfo",
    "RealClock",
    "Rejection",
    "ReservePlugin",
    "ScheduleResult",
    "ScorePlugin",
    "Snapshot",
    "Status",
    "WaitingPod",
]
