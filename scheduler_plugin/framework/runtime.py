"""The framework runtime: one profile's plugins, run extension point by extension point.

As kube-scheduler's frameworkImpl: each `run_*` method runs the plugins of one extension
point in their configured order and answers with a Status; what one pod's cycle does
with those answers (sampling, rollback, binding) lives in `schedule_one`. The extender
calls the same methods.

Every plugin call goes through one instrumented invocation (`invocation.PluginCall`):
timed for the observer, an exception turned into an Error status naming the plugin.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

import numpy as np

from scheduler_plugin.framework.clock import Clock, RealClock
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.diagnosis import Diagnosis
from scheduler_plugin.framework.interfaces import (
    EXTENSION_POINTS,
    MAX_NODE_SCORE,
    MAX_PERMIT_TIMEOUT_SECONDS,
    MIN_NODE_SCORE,
    Binder,
    BindPlugin,
    FilterPlugin,
    NormalizeScorePlugin,
    ObjectAPI,
    PermitPlugin,
    Plugin,
    PostBindPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterExtensions,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    QueuedPodInfo,
    QueueSortKeyPlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
    SnapshotSyncPlugin,
)
from scheduler_plugin.framework.invocation import (
    FrameworkObserver,
    PluginCall,
    PluginFailed,
    code_of,
    failed_status,
)
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import IndexArray, IntArray, Snapshot
from scheduler_plugin.framework.status import SUCCESS, Code, Status
from scheduler_plugin.framework.waiting_pods import WaitingPod, WaitingPodsMap

log = logging.getLogger(__name__)

T = TypeVar("T")
Params = ParamSpec("Params")


@dataclass(slots=True)
class NodeScores:
    """Per-plugin scores of the scored nodes; `weights` holds the plugins that ran."""

    rows: IndexArray
    raw: dict[str, IntArray] = field(default_factory=dict)
    normalized: dict[str, IntArray] = field(default_factory=dict)
    weights: dict[str, int] = field(default_factory=dict)
    totals: IntArray | None = None


@dataclass(frozen=True, slots=True)
class PermitOutcome:
    """Reported to listeners when a pod waiting in Permit is allowed or rejected."""

    pod: PodInfo
    node_name: str
    status: Status
    waiting: WaitingPod


PermitListener = Callable[[PermitOutcome], None]


def narrow_to_pre_filter_result(
    snap: Snapshot, candidates: IndexArray, allowed: PreFilterResult, narrowing: list[str], diagnosis: Diagnosis
) -> IndexArray:
    """The candidates a merged PreFilterResult allows; the others are recorded in the diagnosis
    as kube-scheduler words it ("didn't satisfy plugin(s) [...]")."""
    if allowed.node_names is None:
        return candidates
    rows = [info.index for name in allowed.node_names if (info := snap.node_by_name(name)) is not None]
    keep = np.isin(candidates, np.asarray(rows, dtype=np.intp))
    diagnosis.add_rows("", f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(narrowing))}]",
                       Code.UNSCHEDULABLE_AND_UNRESOLVABLE, candidates[~keep])
    diagnosis.unschedulable_plugins.update(narrowing)
    kept: IndexArray = candidates[keep]
    return kept


class Framework:
    """One scheduling profile. Also the `FrameworkHandle` its plugins receive."""

    def __init__(
        self,
        profile_name: str,
        *,
        snapshot: Snapshot | None = None,
        clock: Clock | None = None,
        binder: Binder | None = None,
        percentage_of_nodes_to_score: int | None = None,
        rng: random.Random | None = None,
        api: ObjectAPI | None = None,
    ) -> None:
        self._profile_name = profile_name
        self._api = api
        self._snapshot = snapshot if snapshot is not None else Snapshot()
        self._clock: Clock = clock if clock is not None else RealClock()
        self._binder = binder
        self.percentage_of_nodes_to_score = percentage_of_nodes_to_score
        # `schedule_one`'s state that outlives a cycle: where the next feasible-node search starts,
        # and the random source that picks among equally good nodes (seeded for tests and benchmarks).
        self.next_start_node_index = 0
        self.rng = rng if rng is not None else random.Random()
        self._waiting = WaitingPodsMap()
        self.permit_listeners: list[PermitListener] = []
        self.observer: FrameworkObserver | None = None
        self.plugins: dict[str, Plugin] = {}
        self.queue_sort_plugin: QueueSortPlugin | None = None
        self.pre_enqueue_plugins: list[PreEnqueuePlugin] = []
        self.pre_filter_plugins: list[PreFilterPlugin] = []
        self.pre_filter_extensions: list[PreFilterExtensions] = []  # the PreFilter plugins with AddPod/RemovePod
        self.filter_plugins: list[FilterPlugin] = []
        self.post_filter_plugins: list[PostFilterPlugin] = []
        self.pre_score_plugins: list[PreScorePlugin] = []
        self.score_plugins: list[tuple[ScorePlugin, int, NormalizeScorePlugin | None]] = []
        self.reserve_plugins: list[ReservePlugin] = []
        self.permit_plugins: list[PermitPlugin] = []
        self.pre_bind_plugins: list[PreBindPlugin] = []
        self.bind_plugins: list[BindPlugin] = []
        self.post_bind_plugins: list[PostBindPlugin] = []

    # ------------------------------------------------------------------ wiring
    def set_plugins(self, points: dict[str, list[Plugin]], score_weights: dict[str, int]) -> None:
        """Install plugin instances per extension point (names as in KubeSchedulerConfiguration)."""
        unknown = set(points) - set(EXTENSION_POINTS)
        if unknown:
            raise ValueError(f"unknown extension points: {sorted(unknown)}")

        def typed(point: str) -> list[Any]:
            kind: Any = EXTENSION_POINTS[point]  # a runtime-checkable Protocol
            out: list[Any] = []
            for plugin in points.get(point, []):
                if not isinstance(plugin, kind):
                    raise TypeError(f"plugin {plugin.name} does not implement {point}")
                out.append(plugin)
                self.plugins[plugin.name] = plugin
            return out

        sorts = typed("queueSort")
        if len(sorts) > 1:
            raise ValueError("only one queueSort plugin may be enabled")
        self.queue_sort_plugin = sorts[0] if sorts else None
        self.pre_enqueue_plugins = typed("preEnqueue")
        self.pre_filter_plugins = typed("preFilter")
        # Checked once here: a runtime Protocol isinstance costs microseconds, and simulations call these often.
        self.pre_filter_extensions = [p for p in self.pre_filter_plugins if isinstance(p, PreFilterExtensions)]
        self.filter_plugins = typed("filter")
        self.post_filter_plugins = typed("postFilter")
        self.pre_score_plugins = typed("preScore")
        # An unset (0) weight means 1, as in kube-scheduler.
        self.score_plugins = [
            (p, score_weights.get(p.name) or 1, p if isinstance(p, NormalizeScorePlugin) else None)
            for p in typed("score")
        ]
        self.reserve_plugins = typed("reserve")
        self.permit_plugins = typed("permit")
        self.pre_bind_plugins = typed("preBind")
        self.bind_plugins = typed("bind")
        self.post_bind_plugins = typed("postBind")

    def add_permit_listener(self, listener: PermitListener) -> None:
        self.permit_listeners.append(listener)

    def warm_up(self, snapshot: Snapshot | None = None) -> None:
        """Let plugins build their caches from the snapshot now rather than in the first cycle
        (the scheduler calls this after its informers' initial list, like WaitForCacheSync)."""
        snap = snapshot if snapshot is not None else self._snapshot
        for plugin in self.plugins.values():
            if isinstance(plugin, SnapshotSyncPlugin):
                plugin.sync_snapshot(snap)

    # ------------------------------------------------------------------ handle
    @property
    def profile_name(self) -> str:
        return self._profile_name

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @snapshot.setter
    def snapshot(self, value: Snapshot) -> None:
        self._snapshot = value

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def waiting_pods(self) -> WaitingPodsMap:
        return self._waiting

    @property
    def binder(self) -> Binder:
        if self._binder is None:
            raise RuntimeError("no binder configured for this framework")
        return self._binder

    @property
    def api(self) -> ObjectAPI | None:
        return self._api

    # ------------------------------------------------------------------ instrumentation
    def _invoke(self, point: str, plugin: Plugin, fn: Callable[Params, T], *args: Params.args,
                **kwargs: Params.kwargs) -> T:
        call = PluginCall(self.observer, point, plugin.name)
        with call:
            result = fn(*args, **kwargs)
            call.code = code_of(result)
        return result

    async def _invoke_async(self, point: str, plugin: Plugin, fn: Callable[Params, Awaitable[T]],
                            *args: Params.args, **kwargs: Params.kwargs) -> T:
        call = PluginCall(self.observer, point, plugin.name)
        with call:
            result = await fn(*args, **kwargs)
            call.code = code_of(result)
        return result

    def point_done(self, point: str, code: Code, started: float) -> None:
        """Observe one extension point's duration (`started` from time.perf_counter())."""
        if self.observer is not None:
            self.observer.point_done(point, code, time.perf_counter() - started)

    # ------------------------------------------------------------------ queue-side points
    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        if self.queue_sort_plugin is None:
            # PrioritySort's rule, so a profile without a queue sort still orders sensibly.
            return a.pod.priority > b.pod.priority or (a.pod.priority == b.pod.priority and a.timestamp < b.timestamp)
        return self.queue_sort_plugin.less(a, b)

    def queue_sort_key(self) -> Callable[[QueuedPodInfo], tuple[Any, ...]] | None:
        """The QueueSort plugin's tuple key when it offers one (faster than `less` in a heap)."""
        if self.queue_sort_plugin is None:
            return lambda q: (-q.pod.priority, q.timestamp)
        if isinstance(self.queue_sort_plugin, QueueSortKeyPlugin):
            return self.queue_sort_plugin.sort_key
        return None

    def run_pre_enqueue(self, pod: PodInfo) -> Status:
        try:
            for plugin in self.pre_enqueue_plugins:
                status = self._invoke("PreEnqueue", plugin, plugin.pre_enqueue, pod)
                if not status.is_success():
                    return failed_status("PreEnqueue", plugin, status)
        except PluginFailed as failed:
            return failed.status
        return SUCCESS

    # ------------------------------------------------------------------ scheduling-cycle points
    def run_pre_filter(
        self, state: CycleState, pod: PodInfo, snap: Snapshot
    ) -> tuple[PreFilterResult, Status, list[str]]:
        """PreFilter in order: the merged node set the plugins allow (None: every node), the
        status (a rejection or Error stops at that plugin; results that do not intersect reject
        the pod), and the plugins that narrowed the nodes. A Skip drops that plugin's Filter."""
        started = time.perf_counter()
        allowed = PreFilterResult()
        narrowing: list[str] = []
        status = SUCCESS
        try:
            for plugin in self.pre_filter_plugins:
                narrowed, answer = self._invoke("PreFilter", plugin, plugin.pre_filter, state, pod, snap)
                if answer.is_skip():
                    state.skip_filter_plugins.add(plugin.name)
                    continue
                if not answer.is_success():
                    status = failed_status("PreFilter", plugin, answer)
                    break
                if narrowed is None or narrowed.node_names is None:
                    continue
                narrowing.append(plugin.name)
                allowed = allowed.merge(narrowed)
                if not allowed.node_names:
                    message = (
                        f"node(s) didn't satisfy plugin {narrowing[0]}"
                        if len(narrowing) == 1
                        else f"node(s) didn't satisfy plugin(s) [{' '.join(narrowing)}] simultaneously"
                    )
                    status = Status.unresolvable(message, plugin=plugin.name)
                    break
        except PluginFailed as failed:
            status = failed.status
        self.point_done("PreFilter", status.code, started)
        return allowed, status, narrowing

    def run_pre_filter_extension_add_pods(
        self, state: CycleState, pod: PodInfo, snap: Snapshot, rows: IndexArray, pods: Sequence[PodInfo]
    ) -> Status:
        """Tell the PreFilter plugins' cycle state that `pods[i]` runs on node row `rows[i]` (a
        simulation: preemption reprieving victims, nominated pods); their Filters then account for it."""
        return self._run_pre_filter_extensions("AddPod", state, pod, snap, rows=rows, pods=pods)

    def run_pre_filter_extension_remove_pods(
        self, state: CycleState, pod: PodInfo, snap: Snapshot, rows: IndexArray, pods: Sequence[PodInfo]
    ) -> Status:
        """The reverse of `run_pre_filter_extension_add_pods` (preemption removing victims)."""
        return self._run_pre_filter_extensions("RemovePod", state, pod, snap, rows=rows, pods=pods)

    def _run_pre_filter_extensions(
        self, point: str, state: CycleState, pod: PodInfo, snap: Snapshot, *, rows: IndexArray, pods: Sequence[PodInfo]
    ) -> Status:
        try:
            for plugin in self.pre_filter_extensions:
                if plugin.name in state.skip_filter_plugins:
                    continue
                method = plugin.add_pods if point == "AddPod" else plugin.remove_pods
                status = self._invoke(point, plugin, method, state, pod, snap, rows, pods)
                if not status.is_success():
                    return failed_status(point, plugin, status)
        except PluginFailed as failed:
            return failed.status
        return SUCCESS

    def run_filters(
        self,
        state: CycleState,
        pod: PodInfo,
        snap: Snapshot,
        candidates: IndexArray,
        diagnosis: Diagnosis | None = None,
        *,
        excluding: str = "",
    ) -> tuple[IndexArray, Status]:
        """Every Filter plugin in order over the candidates, each over the survivors of the previous
        ones, so a node's recorded reasons come from the first plugin that rejected it. Answers the
        feasible rows and Success, or an Error status (a plugin failed: the rows mean nothing)."""
        feasible = candidates
        try:
            for plugin in self.filter_plugins:
                if feasible.size == 0:
                    break
                if plugin.name in state.skip_filter_plugins or plugin.name == excluding:
                    continue
                verdict = self._invoke("Filter", plugin, plugin.filter, state, pod, snap, feasible)
                if not verdict.status.is_success():
                    return feasible, failed_status("Filter", plugin, verdict.status)
                if verdict.feasible is not None:
                    if diagnosis is not None:
                        diagnosis.add_filter_result(plugin.name, feasible, verdict)
                    feasible = feasible[verdict.feasible]
        except PluginFailed as failed:
            return feasible, failed.status
        return feasible, SUCCESS

    def run_filter_plugins_except(
        self, plugin_name: str, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray
    ) -> IndexArray:
        """For a plugin deciding for a whole gang: the candidates every other Filter passes. A
        failure of another plugin fails the calling plugin's call with that plugin's Error."""
        feasible, status = self.run_filters(state, pod, snapshot, candidates, excluding=plugin_name)
        if not status.is_success():
            raise PluginFailed(status)
        return feasible

    def run_post_filter(
        self, state: CycleState, pod: PodInfo, snap: Snapshot, diagnosis: Diagnosis
    ) -> tuple[PostFilterResult | None, Status]:
        """PostFilter (preemption) after no node fit: the first plugin that succeeds (or says it
        cannot help anywhere) decides; otherwise Unschedulable with every plugin's reasons."""
        if not self.post_filter_plugins:
            return None, Status.unschedulable()
        started = time.perf_counter()
        reasons: list[str] = []
        result: PostFilterResult | None = None
        kept: PostFilterResult | None = None  # a rejecting plugin's result (an empty nomination clears one)
        status = Status.unschedulable()
        try:
            for plugin in self.post_filter_plugins:
                result, answer = self._invoke("PostFilter", plugin, plugin.post_filter, state, pod, snap, diagnosis)
                if answer.is_success() or answer.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                    status = answer.with_plugin(plugin.name)
                    break
                if not answer.is_rejected():  # (its own words, as RunPostFilterPlugins keeps them)
                    result, status = None, Status.error(answer.message, plugin.name)
                    break
                kept = result if result is not None else kept
                reasons.extend(answer.reasons)
            else:
                result, status = kept, Status.unschedulable(*reasons)
        except PluginFailed as failed:
            result, status = None, failed.status
        self.point_done("PostFilter", status.code, started)
        return result, status

    def run_pre_score(self, state: CycleState, pod: PodInfo, snap: Snapshot, rows: IndexArray) -> Status:
        """PreScore over the feasible nodes; a Skip drops that plugin's Score."""
        started = time.perf_counter()
        status = SUCCESS
        try:
            for plugin in self.pre_score_plugins:
                answer = self._invoke("PreScore", plugin, plugin.pre_score, state, pod, snap, rows)
                if answer.is_skip():
                    state.skip_score_plugins.add(plugin.name)
                elif not answer.is_success():
                    status = failed_status("PreScore", plugin, answer)
                    break
        except PluginFailed as failed:
            status = failed.status
        self.point_done("PreScore", status.code, started)
        return status

    def run_score(
        self, state: CycleState, pod: PodInfo, snap: Snapshot, rows: IndexArray
    ) -> tuple[NodeScores, Status]:
        """Score and NormalizeScore per plugin, weighted and summed into `totals`. A score outside
        0..100 after normalizing is an Error, as in kube-scheduler."""
        started = time.perf_counter()
        scores = NodeScores(rows)
        totals = np.zeros(rows.size, np.int64)
        status = SUCCESS
        try:
            for plugin, weight, normalizer in self.score_plugins:
                if plugin.name in state.skip_score_plugins:
                    continue
                raw = np.asarray(self._invoke("Score", plugin, plugin.score, state, pod, snap, rows), dtype=np.int64)
                if raw.shape != rows.shape:
                    message = f"plugin {plugin.name} returned {raw.shape} scores for {rows.size} nodes"
                    status = Status.error(message, plugin.name)
                    break
                normalized = raw
                if normalizer is not None:
                    normalized = np.asarray(
                        self._invoke("NormalizeScore", plugin, normalizer.normalize_score, state, pod, raw),
                        dtype=np.int64,
                    )
                if normalized.size and (normalized.min() < MIN_NODE_SCORE or normalized.max() > MAX_NODE_SCORE):
                    bad = int(normalized[(normalized < MIN_NODE_SCORE) | (normalized > MAX_NODE_SCORE)][0])
                    status = Status.error(
                        f"plugin {plugin.name!r} returns an invalid score {bad}, it should in the range of "
                        f"[{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing", plugin.name)
                    break
                totals += normalized * weight
                scores.raw[plugin.name] = raw
                scores.normalized[plugin.name] = normalized
                scores.weights[plugin.name] = weight
        except PluginFailed as failed:
            status = failed.status
        scores.totals = totals
        self.point_done("Score", status.code, started)
        return scores, status

    def run_reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Reserve in order, stopping at the first failure (the caller then runs `run_unreserve`)."""
        started = time.perf_counter()
        status = SUCCESS
        try:
            for plugin in self.reserve_plugins:
                answer = self._invoke("Reserve", plugin, plugin.reserve, state, pod, node_name)
                if not answer.is_success():
                    status = failed_status("Reserve", plugin, answer)
                    break
        except PluginFailed as failed:
            status = failed.status
        self.point_done("Reserve", status.code, started)
        return status

    def run_unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """Unreserve on every Reserve plugin in reverse order; a failing one is logged and the
        others still run (Unreserve must be idempotent and cannot fail the pod further)."""
        for plugin in reversed(self.reserve_plugins):
            with contextlib.suppress(PluginFailed):  # logged by the invocation
                self._invoke("Unreserve", plugin, plugin.unreserve, state, pod, node_name)

    def run_permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, WaitingPod | None]:
        """Permit in order. A rejection or Error stops there; when some plugins answered Wait and none
        rejected, the pod is parked in `waiting_pods` (with each plugin's timeout, capped at 15 min)
        and Wait is returned with its WaitingPod."""
        started = time.perf_counter()
        waits: dict[str, float] = {}
        try:
            for plugin in self.permit_plugins:
                answer, timeout = self._invoke("Permit", plugin, plugin.permit, state, pod, node_name)
                if answer.is_success():
                    continue
                if answer.is_wait():
                    waits[plugin.name] = min(max(timeout, 0.0), MAX_PERMIT_TIMEOUT_SECONDS)
                    continue
                status = failed_status("Permit", plugin, answer)
                self.point_done("Permit", status.code, started)
                return status, None
        except PluginFailed as failed:
            self.point_done("Permit", failed.status.code, started)
            return failed.status, None
        self.point_done("Permit", Code.WAIT if waits else Code.SUCCESS, started)
        if not waits:
            return SUCCESS, None
        try:
            waiting = WaitingPod(pod, node_name, state, waits, self._clock)
        except RuntimeError as exc:  # e.g. the real clock's timers need a running event loop
            return Status.error(f"cannot start Permit timers: {exc}"), None
        self._waiting.add(waiting)
        waiting.add_done_callback(lambda done, _status: self._waiting.remove(done.key))
        return Status.wait(f'one or more plugins asked to wait and no plugin rejected pod "{pod.name}"'), waiting

    # ------------------------------------------------------------------ binding-cycle points
    async def run_pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        if not self.pre_bind_plugins:
            return SUCCESS
        started = time.perf_counter()
        status = SUCCESS
        try:
            for plugin in self.pre_bind_plugins:
                answer = _status_of(await self._invoke_async("PreBind", plugin, plugin.pre_bind, state, pod, node_name))
                if not answer.is_success():
                    status = failed_status("PreBind", plugin, answer)
                    break
        except PluginFailed as failed:
            status = failed.status
        self.point_done("PreBind", status.code, started)
        return status

    async def run_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """The first Bind plugin that does not Skip binds; Skip when every one skipped."""
        started = time.perf_counter()
        status = Status.skip()
        try:
            for plugin in self.bind_plugins:
                answer = _status_of(await self._invoke_async("Bind", plugin, plugin.bind, state, pod, node_name))
                if answer.is_skip():
                    continue
                status = failed_status("Bind", plugin, answer)
                break
        except PluginFailed as failed:
            status = failed.status
        self.point_done("Bind", status.code, started)
        return status

    def run_post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """PostBind is informational: a failing plugin is logged, the pod stays bound."""
        if not self.post_bind_plugins:
            return
        started = time.perf_counter()
        for plugin in self.post_bind_plugins:
            with contextlib.suppress(PluginFailed):  # logged by the invocation
                self._invoke("PostBind", plugin, plugin.post_bind, state, pod, node_name)
        self.point_done("PostBind", Code.SUCCESS, started)


def _status_of(answer: object) -> Status:
    """A coroutine plugin's answer, which must be a Status (worded as the plugin's Error otherwise)."""
    if isinstance(answer, Status):
        return answer
    return Status.error(f"returned {type(answer).__name__}, not a Status")
