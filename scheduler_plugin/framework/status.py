"""Status codes of the scheduling framework (kube-scheduler `framework/interface.go`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace


class Code(enum.IntEnum):
    SUCCESS = 0
    ERROR = 1  # internal error: the pod is requeued through backoff
    UNSCHEDULABLE = 2  # PostFilter (preemption) may help
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3  # PostFilter cannot help on that node
    WAIT = 4  # Permit only
    SKIP = 5  # PreFilter/PreScore: skip the paired Filter/Score; Bind: let the next binder try
    PENDING = 6  # succeeded but waits for an external actor; requeued without backoff

    def __str__(self) -> str:
        return _CODE_NAMES[self]


_CODE_NAMES = {
    Code.SUCCESS: "Success",
    Code.ERROR: "Error",
    Code.UNSCHEDULABLE: "Unschedulable",
    Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable",
    Code.WAIT: "Wait",
    Code.SKIP: "Skip",
    Code.PENDING: "Pending",
}


@dataclass(frozen=True, slots=True)
class Status:
    """The outcome of one plugin call. `reasons` are the human-readable parts of the message."""

    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""

    @classmethod
    def unschedulable(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.UNSCHEDULABLE, reasons, plugin)

    @classmethod
    def unresolvable(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons, plugin)

    @classmethod
    def error(cls, message: str, plugin: str = "") -> Status:
        return cls(Code.ERROR, (message,), plugin)

    @classmethod
    def wait(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(Code.WAIT, reasons, plugin)

    @classmethod
    def skip(cls, plugin: str = "") -> Status:
        return cls(Code.SKIP, (), plugin)

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)

    def is_success(self) -> bool:
        return self.code is Code.SUCCESS

    def is_rejected(self) -> bool:
        """Unschedulable or UnschedulableAndUnresolvable: a scheduling verdict, not a failure."""
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    def is_wait(self) -> bool:
        return self.code is Code.WAIT

    def is_skip(self) -> bool:
        return self.code is Code.SKIP

    def with_plugin(self, plugin: str) -> Status:
        return self if self.plugin == plugin else replace(self, plugin=plugin)

    def __str__(self) -> str:
        where = f" [{self.plugin}]" if self.plugin else ""
        return f"{self.code}{where}: {self.message}" if self.reasons else f"{self.code}{where}"


SUCCESS = Status()
