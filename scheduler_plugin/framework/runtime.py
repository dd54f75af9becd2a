"""The framework runtime: one profile's plugins run through a scheduling and a binding cycle.

Scheduling cycle (serial): PreFilter → Filter (vectorised, shrinking candidate set) →
PostFilter when nothing fits → PreScore → Score/NormalizeScore × weight → best node
(ties go to the lexicographically smallest node name, so runs are reproducible) →
assume in the snapshot → Reserve → Permit. Every failure after the pod was assumed runs
Unreserve on all Reserve plugins in reverse order and forgets the assumption.

Binding cycle (a coroutine per pod): wait on Permit → PreBind → Bind → PostBind.
A pod rejected while waiting in Permit is rolled back at the moment of rejection, so a
whole gang releases its reservations together.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, Protocol, TypeVar

import numpy as np

from scheduler_plugin.framework.clock import Clock, RealClock
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.diagnosis import NO_NODES_IN_CLUSTER, Diagnosis
from scheduler_plugin.framework.interfaces import (
    EXTENSION_POINTS,
    MAX_NODE_SCORE,
    MAX_PERMIT_TIMEOUT_SECONDS,
    MIN_NODE_SCORE,
    Binder,
    BindPlugin,
    FilterPlugin,
    FilterResult,
    NormalizeScorePlugin,
    PermitPlugin,
    Plugin,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreEnqueuePlugin,
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
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import IndexArray, IntArray, Snapshot
from scheduler_plugin.framework.status import SUCCESS, Code, Status
from scheduler_plugin.framework.waiting_pods import WaitingPod, WaitingPodsMap

log = logging.getLogger(__name__)

T = TypeVar("T")
Params = ParamSpec("Params")

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5


def num_feasible_nodes_to_find(percentage: int | None, num_all_nodes: int) -> int:
    """How many feasible nodes to find and score (kube-scheduler §B.4).

    None or 0 (kube-scheduler's default) is adaptive: all nodes below 100, else
    max(5, 50 − N/125) percent but at least 100 nodes. 100 means every node.
    """
    if (percentage is not None and percentage >= 100) or num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    if not percentage:
        percentage = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    return max(num_all_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


class _CycleAbort(Exception):
    """An Error status from a plugin: the cycle stops, the pod goes to backoff."""

    def __init__(self, status: Status) -> None:
        super().__init__(status.message)
        self.status = status


@dataclass(slots=True)
class NodeScores:
    """Per-plugin scores of the nodes that were scored (kept when a cycle is recorded for `explain`)."""

    rows: IndexArray
    raw: dict[str, IntArray] = field(default_factory=dict)
    normalized: dict[str, IntArray] = field(default_factory=dict)
    weights: dict[str, int] = field(default_factory=dict)
    totals: IntArray | None = None


@dataclass(slots=True)
class ScheduleResult:
    pod: PodInfo
    status: Status
    node_name: str | None = None
    evaluated_nodes: int = 0
    feasible_nodes: int = 0
    diagnosis: Diagnosis | None = None
    scores: NodeScores | None = None
    state: CycleState | None = None
    waiting: WaitingPod | None = None
    nominated_node_name: str = ""

    @property
    def is_assumed(self) -> bool:
        """The pod holds a node (allowed, or waiting in Permit)."""
        return self.node_name is not None and (self.status.is_success() or self.status.is_wait())


@dataclass(frozen=True, slots=True)
class PermitOutcome:
    """Reported to listeners when a pod waiting in Permit is allowed or rejected."""

    pod: PodInfo
    node_name: str
    status: Status
    waiting: WaitingPod


PermitListener = Callable[[PermitOutcome], None]


class FrameworkObserver(Protocol):
    """Receives how long each extension point and each plugin call took (the process's metrics).

    Only consulted when set, so the in-process simulator and benchmarks pay nothing for it."""

    def plugin_done(self, point: str, plugin: str, code: Code, seconds: float) -> None: ...

    def point_done(self, point: str, code: Code, seconds: float) -> None: ...


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
    ) -> None:
        self._profile_name = profile_name
        self._snapshot = snapshot if snapshot is not None else Snapshot()
        self._clock: Clock = clock if clock is not None else RealClock()
        self._binder = binder
        self.percentage_of_nodes_to_score = percentage_of_nodes_to_score
        self._waiting = WaitingPodsMap()
        self._permit_listeners: list[PermitListener] = []
        self._next_start_node_index = 0
        self.observer: FrameworkObserver | None = None
        self.plugins: dict[str, Plugin] = {}
        self.queue_sort_plugin: QueueSortPlugin | None = None
        self.pre_enqueue_plugins: list[PreEnqueuePlugin] = []
        self.pre_filter_plugins: list[PreFilterPlugin] = []
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
        self._permit_listeners.append(listener)

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

    def run_filter_plugins_except(
        self, plugin_name: str, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray
    ) -> IndexArray:
        survivors = candidates
        for plugin in self.filter_plugins:
            if survivors.size == 0:
                break
            if plugin.name == plugin_name or plugin.name in state.skip_filter_plugins:
                continue
            result = self._call(plugin, "Filter", plugin.filter, state, pod, snapshot, survivors)
            if not result.status.is_success():
                raise _CycleAbort(result.status.with_plugin(plugin.name))
            if result.feasible is not None:
                survivors = survivors[result.feasible]
        return survivors

    def warm_up(self, snapshot: Snapshot | None = None) -> None:
        """Let plugins build their caches from the snapshot now rather than in the first cycle
        (the scheduler calls this after its informers' initial list, like WaitForCacheSync)."""
        snap = snapshot if snapshot is not None else self._snapshot
        for plugin in self.plugins.values():
            if isinstance(plugin, SnapshotSyncPlugin):
                plugin.sync_snapshot(snap)

    # ------------------------------------------------------------------ observation
    def _call(self, plugin: Plugin, point: str, fn: Callable[Params, T], *args: Params.args,
              **kwargs: Params.kwargs) -> T:
        observer = self.observer
        if observer is None:
            return _call(plugin, point, fn, *args, **kwargs)
        started = time.perf_counter()
        code = Code.ERROR
        try:
            result = _call(plugin, point, fn, *args, **kwargs)
            code = _code_of(result)
            return result
        finally:
            observer.plugin_done(point, plugin.name, code, time.perf_counter() - started)

    def _timed_guarded(self, plugin: Plugin, point: str, fn: Callable[Params, Status], *args: Params.args,
                       **kwargs: Params.kwargs) -> Status:
        started = time.perf_counter()
        status = _guarded(plugin, point, fn, *args, **kwargs)
        if self.observer is not None:
            self.observer.plugin_done(point, plugin.name, status.code, time.perf_counter() - started)
        return status

    async def _timed_async(self, call: Awaitable[Status], name: str, point: str) -> Status:
        started = time.perf_counter()
        status = await _guarded_async(call, name, point)
        if self.observer is not None:
            self.observer.plugin_done(point, name, status.code, time.perf_counter() - started)
        return status

    def _point_done(self, point: str, code: Code, started: float) -> None:
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

    def run_pre_enqueue_plugins(self, pod: PodInfo) -> Status:
        for plugin in self.pre_enqueue_plugins:
            status = self._call(plugin, "PreEnqueue", plugin.pre_enqueue, pod)
            if not status.is_success():
                return status.with_plugin(plugin.name)
        return SUCCESS

    # ------------------------------------------------------------------ scheduling cycle
    def run_scheduling_cycle(
        self, pod: PodInfo, snapshot: Snapshot | None = None, *, record: bool = False
    ) -> ScheduleResult:
        """Find a node for `pod`, assume it there and run Reserve and Permit.

        Success: the pod may be bound. Wait: it is parked in Permit (see `waiting_pods`).
        Unschedulable: `status.message` is kube-scheduler's FitError text. Error: internal failure.
        With `record`, per-plugin scores are kept for `explain`.
        """
        if snapshot is not None:
            self._snapshot = snapshot
        snap = self._snapshot
        state = CycleState()
        try:
            return self._schedule(state, pod, snap, record)
        except _CycleAbort as abort:
            return ScheduleResult(pod, abort.status, state=state)

    def _schedule(self, state: CycleState, pod: PodInfo, snap: Snapshot, record: bool) -> ScheduleResult:
        num_all = snap.num_nodes
        if num_all == 0:
            return ScheduleResult(pod, Status.error(NO_NODES_IN_CLUSTER), state=state)
        if pod.key in snap.records:
            message = f"pod {pod.key} is already assumed or bound to {snap.node_of(pod.key)}"
            return ScheduleResult(pod, Status.error(message), state=state)
        diagnosis = Diagnosis(num_all)

        # PreFilter
        started = time.perf_counter()
        allowed = PreFilterResult()
        narrowing: list[str] = []
        for pre_filter in self.pre_filter_plugins:
            narrowed, status = self._call(pre_filter, "PreFilter", pre_filter.pre_filter, state, pod, snap)
            if status.is_skip():
                state.skip_filter_plugins.add(pre_filter.name)
                continue
            if not status.is_success():
                status = status.with_plugin(pre_filter.name)
                if not status.is_rejected():
                    raise _CycleAbort(status)
                self._point_done("PreFilter", status.code, started)
                return self._prefilter_rejected(state, pod, snap, diagnosis, status)
            if narrowed is not None and narrowed.node_names is not None:
                narrowing.append(pre_filter.name)
                allowed = allowed.merge(narrowed)
                if not allowed.node_names:
                    message = (
                        f"node(s) didn't satisfy plugin {narrowing[0]}"
                        if len(narrowing) == 1
                        else f"node(s) didn't satisfy plugin(s) [{' '.join(narrowing)}] simultaneously"
                    )
                    rejected = Status.unresolvable(message, plugin=pre_filter.name)
                    self._point_done("PreFilter", rejected.code, started)
                    return self._prefilter_rejected(state, pod, snap, diagnosis, rejected)
        self._point_done("PreFilter", Code.SUCCESS, started)

        candidates = snap.node_indices()
        if allowed.node_names is not None:
            rows = sorted(info.index for name in allowed.node_names if (info := snap.node_by_name(name)) is not None)
            kept = np.asarray(rows, dtype=np.intp)
            absent = np.setdiff1d(candidates, kept, assume_unique=True).astype(np.intp)
            diagnosis.add_rows("", f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(narrowing))}]",
                               Code.UNSCHEDULABLE_AND_UNRESOLVABLE, absent)
            diagnosis.unschedulable_plugins.update(narrowing)
            candidates = kept

        started = time.perf_counter()
        feasible, evaluated = self._find_feasible(state, pod, snap, candidates, diagnosis)
        self._point_done("Filter", Code.SUCCESS if feasible.size else Code.UNSCHEDULABLE, started)
        if feasible.size == 0:
            return self._unschedulable(state, pod, snap, diagnosis, evaluated)

        # PreScore
        started = time.perf_counter()
        for pre_score in self.pre_score_plugins:
            status = self._call(pre_score, "PreScore", pre_score.pre_score, state, pod, snap, feasible)
            if status.is_skip():
                state.skip_score_plugins.add(pre_score.name)
            elif not status.is_success():
                raise _CycleAbort(status.with_plugin(pre_score.name))
        self._point_done("PreScore", Code.SUCCESS, started)

        # Score: a single feasible node is taken without scoring, as kube-scheduler does.
        scores: NodeScores | None = None
        if feasible.size == 1:
            chosen = int(feasible[0])
        else:
            started = time.perf_counter()
            totals, scores = self._score(state, pod, snap, feasible, record)
            self._point_done("Score", Code.SUCCESS, started)
            best = totals.max()
            ties = np.flatnonzero(totals == best)
            pick = ties[0] if ties.size == 1 else ties[np.argmin(snap.name_rank()[feasible[ties]])]
            chosen = int(feasible[pick])
        node_name = snap.node_name(chosen)
        outcome = self._reserve_and_permit(state, pod, snap, node_name)
        outcome.evaluated_nodes = evaluated
        outcome.feasible_nodes = int(feasible.size)
        outcome.scores = scores
        if record and outcome.diagnosis is None:
            outcome.diagnosis = diagnosis  # why the other nodes were left out
        return outcome

    def _find_feasible(
        self, state: CycleState, pod: PodInfo, snap: Snapshot, candidates: IndexArray, diagnosis: Diagnosis
    ) -> tuple[IndexArray, int]:
        """Feasible nodes (at most numFeasibleNodesToFind of them) and how many nodes were examined.

        Like kube-scheduler, the search starts at a rotating position and stops once enough
        feasible nodes are found; here it goes in chunks so each chunk is still one
        vectorised pass per Filter plugin. A pod that fits nowhere has every node examined,
        so the FitError counts are complete.
        """
        wanted = num_feasible_nodes_to_find(self.percentage_of_nodes_to_score, snap.num_nodes)
        total = int(candidates.size)
        if wanted >= total:
            return self._run_filters(state, pod, snap, candidates, diagnosis), total
        start = self._next_start_node_index % total
        ordered = np.concatenate([candidates[start:], candidates[:start]])
        found: list[IndexArray] = []
        count = examined = 0
        # A window a little larger than needed absorbs the usual share of infeasible nodes
        # in one pass; later windows are sized from the feasibility seen so far.
        chunk = wanted + wanted // 4
        while examined < total and count < wanted:
            window = ordered[examined : examined + chunk]
            feasible = self._run_filters(state, pod, snap, window, diagnosis)
            if count + feasible.size > wanted:
                # Stop at the wanted-th feasible node, as kube-scheduler does.
                feasible = feasible[: wanted - count]
                last = int(np.flatnonzero(window == feasible[-1])[0])
                examined += last + 1
            else:
                examined += window.size
            found.append(feasible)
            count += int(feasible.size)
            rate = count / examined
            chunk = int((wanted - count) / rate * 1.25) + 1 if rate > 0 else 2 * chunk
        self._next_start_node_index = (start + examined) % total
        return (np.sort(np.concatenate(found)) if found else candidates[:0]), examined

    def _run_filters(
        self, state: CycleState, pod: PodInfo, snap: Snapshot, candidates: IndexArray, diagnosis: Diagnosis
    ) -> IndexArray:
        """Every Filter plugin in order over the candidates; each sees only the survivors of the
        previous ones, so a node's recorded reasons come from the first plugin that rejected it."""
        feasible = candidates
        for node_filter in self.filter_plugins:
            if feasible.size == 0:
                break
            if node_filter.name in state.skip_filter_plugins:
                continue
            verdict = self._call(node_filter, "Filter", node_filter.filter, state, pod, snap, feasible)
            if not verdict.status.is_success():
                raise _CycleAbort(verdict.status.with_plugin(node_filter.name))
            if verdict.feasible is not None:
                diagnosis.add_filter_result(node_filter.name, feasible, verdict)
                feasible = feasible[verdict.feasible]
        return feasible

    def _score(
        self, state: CycleState, pod: PodInfo, snap: Snapshot, rows: IndexArray, record: bool
    ) -> tuple[IntArray, NodeScores | None]:
        totals = np.zeros(rows.size, np.int64)
        scored = NodeScores(rows) if record else None
        ran = False
        for plugin, weight, normalizer in self.score_plugins:
            if plugin.name in state.skip_score_plugins:
                continue
            ran = True
            raw = np.asarray(self._call(plugin, "Score", plugin.score, state, pod, snap, rows), dtype=np.int64)
            if raw.shape != rows.shape:
                message = f"plugin {plugin.name} returned {raw.shape} scores for {rows.size} nodes"
                raise _CycleAbort(Status.error(message, plugin.name))
            normalized = raw
            if normalizer is not None:
                normalized = np.asarray(
                    self._call(plugin, "NormalizeScore", normalizer.normalize_score, state, pod, raw), dtype=np.int64
                )
            if normalized.size and (normalized.min() < MIN_NODE_SCORE or normalized.max() > MAX_NODE_SCORE):
                bad = int(normalized[(normalized < MIN_NODE_SCORE) | (normalized > MAX_NODE_SCORE)][0])
                raise _CycleAbort(Status.error(
                    f"plugin {plugin.name!r} returns an invalid score {bad}, it should in the range of "
                    f"[{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing", plugin.name))
            totals += normalized * weight
            if scored is not None:
                scored.raw[plugin.name] = raw
                scored.normalized[plugin.name] = normalized
                scored.weights[plugin.name] = weight
        if not ran:
            totals[:] = 1
        if scored is not None:
            scored.totals = totals
        return totals, scored

    # ------------------------------------------------------------------ failures before Reserve
    def _prefilter_rejected(
        self, state: CycleState, pod: PodInfo, snap: Snapshot, diagnosis: Diagnosis, status: Status
    ) -> ScheduleResult:
        diagnosis.prefilter_msg = status.message
        diagnosis.add_rows(status.plugin, status.message, status.code, snap.node_indices())
        return self._unschedulable(state, pod, snap, diagnosis, 0)

    def _unschedulable(
        self, state: CycleState, pod: PodInfo, snap: Snapshot, diagnosis: Diagnosis, evaluated: int
    ) -> ScheduleResult:
        nominated = ""
        reasons: list[str] = []
        started = time.perf_counter()
        for plugin in self.post_filter_plugins:
            result, status = self._call(plugin, "PostFilter", plugin.post_filter, state, pod, snap, diagnosis)
            if status.is_success():
                nominated = result.nominated_node_name if result is not None else ""
                reasons = list(status.reasons)
                break
            if status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                reasons = list(status.reasons)
                break
            if not status.is_rejected():
                raise _CycleAbort(status.with_plugin(plugin.name))
            reasons.extend(status.reasons)
        if self.post_filter_plugins:
            self._point_done("PostFilter", Code.SUCCESS if nominated else Code.UNSCHEDULABLE, started)
        diagnosis.postfilter_msg = ", ".join(reasons)
        return ScheduleResult(
            pod,
            Status.unschedulable(diagnosis.message()),
            evaluated_nodes=evaluated,
            diagnosis=diagnosis,
            state=state,
            nominated_node_name=nominated,
        )

    # ------------------------------------------------------------------ Reserve / Permit
    def _reserve_and_permit(self, state: CycleState, pod: PodInfo, snap: Snapshot, node_name: str) -> ScheduleResult:
        snap.assume_pod(pod, node_name, self._clock.now())
        started = time.perf_counter()
        for plugin in self.reserve_plugins:
            status = self._timed_guarded(plugin, "Reserve", plugin.reserve, state, pod, node_name)
            if not status.is_success():
                self.rollback(state, pod, node_name, snap)
                self._point_done("Reserve", status.code, started)
                return self._after_reserve_failure(state, pod, node_name, status.with_plugin(plugin.name))
        self._point_done("Reserve", Code.SUCCESS, started)

        waits: dict[str, float] = {}
        started = time.perf_counter()
        for permit in self.permit_plugins:
            called = time.perf_counter()
            try:
                status, timeout = permit.permit(state, pod, node_name)
            except Exception as exc:  # a broken plugin must not leave the pod assumed
                log.exception("Permit plugin %s failed", permit.name)
                status, timeout = Status.error(f"running Permit plugin {permit.name}: {exc}"), 0.0
            if self.observer is not None:
                self.observer.plugin_done("Permit", permit.name, status.code, time.perf_counter() - called)
            if status.is_success():
                continue
            if status.is_wait():
                waits[permit.name] = min(max(timeout, 0.0), MAX_PERMIT_TIMEOUT_SECONDS)
                continue
            self.rollback(state, pod, node_name, snap)
            self._point_done("Permit", status.code, started)
            return self._after_reserve_failure(state, pod, node_name, status.with_plugin(permit.name))
        self._point_done("Permit", Code.WAIT if waits else Code.SUCCESS, started)

        if waits:
            try:
                waiting = WaitingPod(pod, node_name, state, waits, self._clock)
            except RuntimeError as exc:  # e.g. the real clock's timers need a running event loop
                self.rollback(state, pod, node_name, snap)
                return ScheduleResult(pod, Status.error(f"cannot start Permit timers: {exc}"), state=state)
            self._waiting.add(waiting)
            waiting.add_done_callback(self._waiting_done_handler(snap))
            message = f'one or more plugins asked to wait and no plugin rejected pod "{pod.name}"'
            return ScheduleResult(pod, Status.wait(message), node_name, state=state, waiting=waiting)
        return ScheduleResult(pod, SUCCESS, node_name, state=state)

    def _after_reserve_failure(self, state: CycleState, pod: PodInfo, node_name: str, status: Status) -> ScheduleResult:
        if status.is_rejected():
            # kube-scheduler reports a Reserve/Permit rejection as a FitError over that one node.
            diagnosis = Diagnosis(1)
            diagnosis.add_rows(status.plugin, status.message, status.code, np.zeros(1, np.intp))
            return ScheduleResult(pod, Status(Code.UNSCHEDULABLE, (diagnosis.message(),), status.plugin),
                                  diagnosis=diagnosis, state=state)
        return ScheduleResult(pod, status, state=state)

    def rollback(self, state: CycleState, pod: PodInfo, node_name: str, snap: Snapshot | None = None) -> None:
        """Unreserve on every Reserve plugin (reverse order), then forget the assumed pod."""
        for plugin in reversed(self.reserve_plugins):
            try:
                plugin.unreserve(state, pod, node_name)
            except Exception:
                log.exception("Unreserve of plugin %s failed for %s", plugin.name, pod.key)
        (snap or self._snapshot).forget_pod(pod.key)

    def _waiting_done_handler(self, snap: Snapshot) -> Callable[[WaitingPod, Status], None]:
        def done(waiting: WaitingPod, status: Status) -> None:
            self._waiting.remove(waiting.key)
            if not status.is_success():
                self.rollback(waiting.state, waiting.pod, waiting.node_name, snap)
                message = f'pod "{waiting.pod.name}" rejected while waiting on permit: {status.message}'
                status = Status(status.code, (message,), status.plugin)
            outcome = PermitOutcome(waiting.pod, waiting.node_name, status, waiting)
            for listener in list(self._permit_listeners):
                listener(outcome)

        return done

    # ------------------------------------------------------------------ binding cycle
    async def run_binding_cycle(self, result: ScheduleResult) -> Status:
        """Wait on Permit if needed, then PreBind, Bind, PostBind. Failures roll the pod back."""
        if result.node_name is None or result.state is None:
            raise ValueError("binding needs a scheduled result")
        pod, node_name, state = result.pod, result.node_name, result.state
        if result.waiting is not None:
            status = await result.waiting.wait()
            if not status.is_success():
                return status  # rolled back when it was rejected
        snap = self._snapshot
        started = time.perf_counter()
        for plugin in self.pre_bind_plugins:
            status = await self._timed_async(plugin.pre_bind(state, pod, node_name), plugin.name, "PreBind")
            if not status.is_success():
                self.rollback(state, pod, node_name, snap)
                self._point_done("PreBind", status.code, started)
                return status.with_plugin(plugin.name)
        if self.pre_bind_plugins:
            self._point_done("PreBind", Code.SUCCESS, started)
        started = time.perf_counter()
        bound = Status(Code.SKIP)
        for binder in self.bind_plugins:
            bound = await self._timed_async(binder.bind(state, pod, node_name), binder.name, "Bind")
            if bound.is_skip():
                continue
            bound = bound.with_plugin(binder.name)
            break
        self._point_done("Bind", bound.code, started)
        if not bound.is_success():
            self.rollback(state, pod, node_name, snap)
            return bound if not bound.is_skip() else Status.error("no bind plugin bound the pod")
        snap.finish_binding(pod.key)
        started = time.perf_counter()
        for post in self.post_bind_plugins:
            try:
                post.post_bind(state, pod, node_name)
            except Exception:
                log.exception("PostBind plugin %s failed for %s", post.name, pod.key)
        if self.post_bind_plugins:
            self._point_done("PostBind", Code.SUCCESS, started)
        return SUCCESS


def _code_of(result: object) -> Code:
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


def _call(plugin: Plugin, point: str, fn: Callable[Params, T], *args: Params.args, **kwargs: Params.kwargs) -> T:
    """Run a plugin call; an exception becomes an Error status that aborts the cycle."""
    try:
        return fn(*args, **kwargs)
    except _CycleAbort:
        raise
    except Exception as exc:
        log.exception("%s plugin %s failed", point, plugin.name)
        raise _CycleAbort(Status.error(f"running {point} plugin {plugin.name}: {exc}", plugin.name)) from exc


def _guarded(
    plugin: Plugin, point: str, fn: Callable[Params, Status], *args: Params.args, **kwargs: Params.kwargs
) -> Status:
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        log.exception("%s plugin %s failed", point, plugin.name)
        return Status.error(f"running {point} plugin {plugin.name}: {exc}", plugin.name)


async def _guarded_async(call: Awaitable[Status], name: str, point: str) -> Status:
    try:
        status = await call
    except Exception as exc:
        log.exception("%s plugin %s failed", point, name)
        return Status.error(f"running {point} plugin {name}: {exc}", name)
    if not isinstance(status, Status):
        return Status.error(f"{point} plugin {name} returned {type(status).__name__}, not a Status", name)
    return status
