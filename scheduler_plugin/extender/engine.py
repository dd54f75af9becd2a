"""The extender's decisions: a profile's PreFilter/Filter and PreScore/Score plugins over the
nodes kube-scheduler sends, answered in extender terms.

Synchronous and free of I/O (the server and the caches feed it), so unit tests drive it with
plain dicts. The snapshot is the extender's own cache of nodes, assigned pods and NodeMetrics;
in full-Node mode the Node objects of the request are written into it first, so the decision is
made on the same node state kube-scheduler used, with our pods and NodeMetrics. After
prioritize, the pod is provisionally counted on the node kube-scheduler will most likely choose
(see `assume`).

Failure policy:
* a node kube-scheduler knows but our cache does not (cache lag in nodeCacheCapable mode, or a
  Node our parser rejects) passes the filter and scores 0 — the same fail-open stance
  LoadAwareScheduling takes for a node without a NodeMetric; counted in
  `loadline_extender_unknown_nodes_total`;
* a plugin that errors or raises makes the whole answer an error (the filter's `Error` field;
  the server answers prioritize with a 500, which kube-scheduler ignores), never a guess.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

import numpy as np

from scheduler_plugin.extender import metrics
from scheduler_plugin.extender.assume import DEFAULT_TTL_SECONDS, ProvisionalPlacements
from scheduler_plugin.extender.wire import JSON, ExtenderArgs, ScoreScaling, filter_result, node_name, scale_scores
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.interfaces import MAX_NODE_SCORE, MIN_NODE_SCORE, PreFilterResult
from scheduler_plugin.framework.k8s_types import InvalidObjectError
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.runtime import Framework
from scheduler_plugin.framework.snapshot import CPU, MEMORY, IndexArray, IntArray, Snapshot
from scheduler_plugin.framework.status import Code, Status
from scheduler_plugin.plugins.noderesources.formulas import least_requested_score

log = logging.getLogger("loadline.extender")

T = TypeVar("T")
P = ParamSpec("P")


class PluginError(Exception):
    """A plugin returned Error or raised: the request cannot be answered."""


class InvalidPod(ValueError):
    """The request's Pod cannot be parsed (a bad request, answered with 400)."""


@dataclass(slots=True)
class Candidates:
    names: list[str]  # request order
    rows: IndexArray  # snapshot rows of the known ones, in the same order
    known: list[str]  # names of those rows
    unknown: list[str] = field(default_factory=list)
    objects: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # full-Node mode: name -> request's Node


@dataclass(slots=True)
class Verdicts:
    """Per node name: the reasons it failed, and whether any of them is unresolvable."""

    failed: dict[str, list[str]] = field(default_factory=dict)
    unresolvable: set[str] = field(default_factory=set)

    def reject(self, name: str, reason: str, code: Code) -> None:
        reasons = self.failed.setdefault(name, [])
        if reason not in reasons:
            reasons.append(reason)
        if code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            self.unresolvable.add(name)


class ExtenderEngine:
    def __init__(
        self,
        frameworks: Mapping[str, Framework],
        snapshot: Snapshot,
        *,
        default_profile: str,
        assume_seconds: float = DEFAULT_TTL_SECONDS,
        score_scaling: ScoreScaling = "relative",
    ) -> None:
        if default_profile not in frameworks:
            raise ValueError(f"default profile {default_profile!r} not among {sorted(frameworks)}")
        self.frameworks = dict(frameworks)
        self.snapshot = snapshot
        self.default_profile = default_profile
        self.score_scaling = score_scaling
        for framework in self.frameworks.values():
            framework.snapshot = snapshot
        clock = self.frameworks[default_profile].clock
        self.provisional = ProvisionalPlacements(snapshot, clock, assume_seconds) if assume_seconds > 0 else None

    def _begin(self, pod: PodInfo) -> None:
        """Before deciding for a pod: retire settled stand-ins and drop the pod's own (it is being
        scheduled again, so it must not weigh on the node it was provisionally counted on)."""
        if self.provisional is not None:
            self.provisional.settle()
            self.provisional.release(pod.key)

    def framework_for(self, pod: PodInfo) -> Framework:
        """The profile named like the pod's schedulerName, else the default (first) profile."""
        return self.frameworks.get(pod.scheduler_name) or self.frameworks[self.default_profile]

    # ------------------------------------------------------------------ inputs
    @staticmethod
    def parse_pod(args: ExtenderArgs) -> PodInfo:
        try:
            return PodInfo.from_dict(args.pod)
        except InvalidObjectError as exc:
            raise InvalidPod(f"Pod: {exc}") from None

    def candidates(self, args: ExtenderArgs) -> Candidates:
        """Resolve the request's nodes to snapshot rows (full-Node mode: upserting the request's Nodes)."""
        snap = self.snapshot
        names = args.candidate_names()
        objects: dict[str, Mapping[str, Any]] = {}
        if args.nodes is not None:
            for node in args.nodes:
                name = node_name(node)
                objects.setdefault(name, node)
            for name, node in objects.items():
                self._adopt_node(name, node)
        rows: list[int] = []
        known: list[str] = []
        unknown: list[str] = []
        for name in names:
            info = snap.node_by_name(name)
            if info is None:
                unknown.append(name)
            else:
                rows.append(info.index)
                known.append(name)
        if unknown:
            metrics.UNKNOWN_NODES.inc(len(unknown))
            log.debug("nodes not in the extender's cache pass unchecked: %s", unknown[:10])
        return Candidates(names, np.asarray(rows, dtype=np.intp), known, unknown, objects)

    def _adopt_node(self, name: str, node: Mapping[str, Any]) -> None:
        """Use kube-scheduler's copy of a Node when ours is missing or a different version."""
        info = self.snapshot.node_by_name(name)
        if info is not None and _resource_version(info.raw) == _resource_version(node) != "":
            return
        try:
            self.snapshot.upsert_node(node)
        except InvalidObjectError as exc:
            metrics.INVALID_OBJECTS.labels("request-node").inc()
            log.warning("cannot use node %s from the request (%s); %s", name, exc,
                        "keeping the cached copy" if info is not None else "it passes unchecked")

    # ------------------------------------------------------------------ filter
    def filter(self, args: ExtenderArgs) -> JSON:
        pod = self.parse_pod(args)
        framework = self.framework_for(pod)
        self._begin(pod)
        cand = self.candidates(args)
        try:
            verdicts = self._run_filters(framework, pod, cand)
        except PluginError as exc:
            metrics.PLUGIN_ERRORS.labels("filter").inc()
            return filter_result(passed=[], failed={}, unresolvable={}, cache_mode=args.cache_mode, error=str(exc))
        passed = [n for n in cand.names if n not in verdicts.failed]
        failed = {n: ", ".join(r) for n, r in verdicts.failed.items() if n not in verdicts.unresolvable}
        unresolvable = {n: ", ".join(verdicts.failed[n]) for n in verdicts.unresolvable}
        metrics.FILTERED_NODES.labels("passed").inc(len(passed))
        metrics.FILTERED_NODES.labels("failed").inc(len(verdicts.failed))
        return filter_result(
            passed=passed, failed=failed, unresolvable=unresolvable, cache_mode=args.cache_mode,
            nodes_by_name=cand.objects,
        )

    def _run_filters(self, framework: Framework, pod: PodInfo, cand: Candidates) -> Verdicts:
        """PreFilter then every Filter plugin in order, each over the survivors of the previous ones
        (as kube-scheduler and our own scheduler do), collecting each rejected node's reasons."""
        snap = self.snapshot
        state = CycleState()
        verdicts = Verdicts()
        allowed = PreFilterResult()
        narrowing: list[str] = []
        for pre_filter in framework.pre_filter_plugins:
            narrowed, status = _guard(pre_filter.name, "PreFilter", pre_filter.pre_filter, state, pod, snap)
            if status.is_skip():
                state.skip_filter_plugins.add(pre_filter.name)
                continue
            if not status.is_success():
                _raise_unless_rejected(status, pre_filter.name, "PreFilter")
                # A PreFilter rejection fails the pod everywhere, with that plugin's message.
                for name in cand.known:
                    verdicts.reject(name, status.message, status.code)
                return verdicts
            if narrowed is not None and narrowed.node_names is not None:
                narrowing.append(pre_filter.name)
                allowed = allowed.merge(narrowed)

        rows, names = cand.rows, cand.known
        if allowed.node_names is not None:
            keep = np.fromiter((n in allowed.node_names for n in names), np.bool_, len(names))
            reason = f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(narrowing))}]"
            for name in (n for n, k in zip(names, keep, strict=True) if not k):
                verdicts.reject(name, reason, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
            rows, names = rows[keep], [n for n, k in zip(names, keep, strict=True) if k]

        for plugin in framework.filter_plugins:
            if rows.size == 0:
                break
            if plugin.name in state.skip_filter_plugins:
                continue
            result = _guard(plugin.name, "Filter", plugin.filter, state, pod, snap, rows)
            if not result.status.is_success():
                _raise_unless_rejected(result.status, plugin.name, "Filter")
            if result.feasible is None:
                continue
            for rejection in result.rejections:
                for i in np.flatnonzero(rejection.mask):
                    verdicts.reject(names[i], rejection.reason, rejection.code)
                metrics.REJECTIONS.labels(plugin.name).inc(int(rejection.mask.sum()))
            keep = np.asarray(result.feasible, dtype=np.bool_)
            rows, names = rows[keep], [n for n, k in zip(names, keep, strict=True) if k]
        return verdicts

    # ------------------------------------------------------------------ prioritize
    def prioritize(self, args: ExtenderArgs) -> dict[str, int]:
        """Extender scores (0..10) per requested node, in request order. Raises PluginError."""
        pod = self.parse_pod(args)
        framework = self.framework_for(pod)
        self._begin(pod)
        cand = self.candidates(args)
        totals, max_total = self.weighted_scores(framework, pod, cand.rows)
        scores = dict.fromkeys(cand.names, 0)
        for name, score in zip(cand.known, scale_scores(totals, max_total, self.score_scaling), strict=True):
            scores[name] = score
        if self.provisional is not None and totals.size and max_total > 0:
            self.provisional.assume(pod, self._likely_choice(pod, cand, scores, totals))
        return scores

    def _likely_choice(self, pod: PodInfo, cand: Candidates, scores: Mapping[str, int], totals: IntArray) -> str:
        """The node kube-scheduler will most likely bind the pod to: the highest extender score; among
        those, kube-scheduler decides with its own plugins — chiefly NodeResourcesFit's LeastAllocated,
        computed here from our cache's requests — and only then would our finer total matter."""
        snap = self.snapshot
        rows = cand.rows
        cpu = least_requested_score(snap.nonzero_requested[0].take(rows) + pod.nonzero_requests[0],
                                    snap.allocatable[CPU].take(rows))
        memory = least_requested_score(snap.nonzero_requested[1].take(rows) + pod.nonzero_requests[1],
                                       snap.allocatable[MEMORY].take(rows))
        requests_score = (cpu + memory) // 2
        best = max(range(rows.size),
                   key=lambda i: (scores[cand.known[i]], int(requests_score[i]), int(totals[i]), -i))
        return cand.known[best]

    def weighted_scores(self, framework: Framework, pod: PodInfo, rows: IndexArray) -> tuple[IntArray, int]:
        """Σ normalised score × weight over the profile's Score plugins (as the framework adds them),
        and the highest total possible (100 × Σ weights of the plugins that ran)."""
        snap = self.snapshot
        state = CycleState()
        totals = np.zeros(rows.size, np.int64)
        if rows.size == 0:
            return totals, 0
        for pre_score in framework.pre_score_plugins:
            status = _guard(pre_score.name, "PreScore", pre_score.pre_score, state, pod, snap, rows)
            if status.is_skip():
                state.skip_score_plugins.add(pre_score.name)
            elif not status.is_success():
                raise PluginError(_describe(status, pre_score.name, "PreScore"))
        max_total = 0
        for plugin, weight, normalizer in framework.score_plugins:
            if plugin.name in state.skip_score_plugins:
                continue
            raw = np.asarray(_guard(plugin.name, "Score", plugin.score, state, pod, snap, rows), dtype=np.int64)
            if raw.shape != rows.shape:
                raise PluginError(f"plugin {plugin.name} returned {raw.shape} scores for {rows.size} nodes")
            scores = raw
            if normalizer is not None:
                scores = np.asarray(
                    _guard(plugin.name, "NormalizeScore", normalizer.normalize_score, state, pod, raw), dtype=np.int64
                )
            if scores.size and (scores.min() < MIN_NODE_SCORE or scores.max() > MAX_NODE_SCORE):
                raise PluginError(f"plugin {plugin.name} returned a score outside [0, 100] after normalizing")
            totals += scores * weight
            max_total += MAX_NODE_SCORE * weight
        return totals, max_total


def _resource_version(node: Mapping[str, Any]) -> str:
    meta = node.get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""


def _describe(status: Status, plugin: str, point: str) -> str:
    return f"running {point} plugin {plugin}: {status.message or status.code}"


def _raise_unless_rejected(status: Status, plugin: str, point: str) -> None:
    if not status.is_rejected():
        raise PluginError(_describe(status, plugin, point))


def _guard(plugin: str, point: str, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Call a plugin; an exception becomes a PluginError (logged with its traceback once here)."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        log.exception("%s plugin %s failed", point, plugin)
        raise PluginError(f"running {point} plugin {plugin}: {exc}") from exc
