"""Per-cycle scratch space plugins share between extension points (kube-scheduler `CycleState`).

Valid for one scheduling attempt of one pod (and its binding cycle); plugins must not
keep references to it after that.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, runtime_checkable

from scheduler_plugin.framework.podinfo import PodInfo

T = TypeVar("T")


@runtime_checkable
class StateData(Protocol):
    """Cycle-state data that `CycleState.clone` copies (kube-scheduler's StateData.Clone):
    what a plugin changes in AddPod/RemovePod must be copied, the rest may be shared."""

    def clone(self) -> StateData: ...


class CycleState:
    __slots__ = ("_data", "pods_to_activate", "skip_filter_plugins", "skip_score_plugins")

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        # Plugins whose PreFilter/PreScore returned Skip: their Filter/Score are not called this cycle.
        self.skip_filter_plugins: set[str] = set()
        self.skip_score_plugins: set[str] = set()
        # Pods the scheduler should move to the active queue after this cycle (gang siblings).
        self.pods_to_activate: dict[str, PodInfo] = {}

    def write(self, key: str, value: object) -> None:
        self._data[key] = value

    def read(self, key: str, kind: type[T]) -> T:
        """The value under `key`, checked to be a `kind`; KeyError when a plugin's PreFilter did not run."""
        value = self._data[key]
        if not isinstance(value, kind):
            raise TypeError(f"cycle state {key!r} holds {type(value).__name__}, not {kind.__name__}")
        return value

    def get(self, key: str, kind: type[T]) -> T | None:
        value = self._data.get(key)
        return value if isinstance(value, kind) else None

    def delete(self, key: str) -> None:
        self._data.pop(key, None)

    def clone(self) -> CycleState:
        """A copy for a simulation (preemption's dry run): `StateData` values are cloned, others shared."""
        copy = CycleState()
        copy._data = {k: v.clone() if isinstance(v, StateData) else v for k, v in self._data.items()}
        copy.skip_filter_plugins = set(self.skip_filter_plugins)
        copy.skip_score_plugins = set(self.skip_score_plugins)
        copy.pods_to_activate = dict(self.pods_to_activate)
        return copy
