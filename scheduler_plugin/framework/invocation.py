"""The one instrumented invocation of a plugin, shared by every extension point.

Each call is timed for the observer (the process's metrics) and an exception becomes an
Error status naming the extension point and the plugin; an Error a plugin answers with is
worded the same way (`failed_status`), so the scheduler, the extender and the logs say which
plugin failed, as kube-scheduler does.
"""

from __future__ import annotations

import logging
import time
from types import TracebackType
from typing import Protocol

from scheduler_plugin.framework.filterresult import FilterResult
from scheduler_plugin.framework.interfaces import Plugin
from scheduler_plugin.framework.status import Code, Status

log = logging.getLogger(__name__)


class FrameworkObserver(Protocol):
    """Receives how long each extension point and each plugin call took (the process's metrics).

    Only consulted when set, so the in-process simulator and benchmarks pay nothing for it."""

    def plugin_done(self, point: str, plugin: str, code: Code, seconds: float) -> None: ...

    def point_done(self, point: str, code: Code, seconds: float) -> None: ...


class PluginFailed(Exception):
    """A plugin raised, or a run nested inside a plugin call failed: carries the Error status.

    Raised by `PluginCall` and caught by the `run_*` method that made the call, so it
    crosses a plugin only when the plugin itself called back into the framework (e.g.
    `Framework.run_filter_plugins_except`): the Error then names the inner plugin."""

    def __init__(self, status: Status) -> None:
        super().__init__(status.message)
        self.status = status


class PluginCall:
    """The one instrumented invocation of a plugin: `with PluginCall(...) as call: call.code = ...`.

    A context manager rather than a wrapper function so that synchronous calls and awaited
    coroutines (PreBind, Bind) are timed and guarded by the same code."""

    __slots__ = ("_observer", "_plugin", "_point", "_started", "code")

    def __init__(self, observer: FrameworkObserver | None, point: str, plugin: str) -> None:
        self._observer = observer
        self._point = point
        self._plugin = plugin
        self._started = time.perf_counter() if observer is not None else 0.0
        self.code = Code.ERROR

    def __enter__(self) -> PluginCall:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._observer is not None:
            self._observer.plugin_done(self._point, self._plugin, self.code, time.perf_counter() - self._started)
        if exc is None or isinstance(exc, PluginFailed) or not isinstance(exc, Exception):
            return
        log.error("%s plugin %s failed", self._point, self._plugin, exc_info=exc)
        raise PluginFailed(Status.error(f"{error_context(self._point, self._plugin)}: {exc}", self._plugin)) from exc


def error_context(point: str, plugin: str) -> str:
    """Where an Error happened, in kube-scheduler's words (pkg/scheduler/framework/runtime/framework.go), so that a
    FailedScheduling event reads the same from either scheduler."""
    if point == "Filter":
        return f'running "{plugin}" filter plugin'
    if point in ("AddPod", "RemovePod"):
        return f'running {point} on PreFilter plugin "{plugin}"'
    if point == "Score":
        return f'running Score plugins: plugin "{plugin}" failed with'
    return f'running {point} plugin "{plugin}"'


def code_of(result: object) -> Code:
    """The status code a plugin call answered with, for metrics (arrays and None count as Success)."""
    if isinstance(result, Status):
        return result.code
    if isinstance(result, FilterResult):
        return result.status.code
    if isinstance(result, tuple):
        for part in result:
            if isinstance(part, Status):
                return part.code
    return Code.SUCCESS


def failed_status(point: str, plugin: Plugin, status: Status) -> Status:
    """A plugin's non-success answer, attributed to it; an Error also says where it happened."""
    if status.code is Code.ERROR:
        return Status.error(f"{error_context(point, plugin.name)}: {status.message}", plugin.name)
    return status.with_plugin(plugin.name)
