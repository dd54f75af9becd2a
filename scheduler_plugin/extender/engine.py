"""The extender's decisions: a profile's PreFilter/Filter and PreScore/Score plugins over the
nodes kube-scheduler sends, answered in extender terms.

Synchronous and free of I/O (the server and the caches feed it), so unit tests drive it with
plain dicts. The snapshot is the extender's own cache of nodes, assigned pods and NodeMetrics;
in full-Node mode the Node objects of the request are echoed back, never written into it (a request is
not trusted: see `candidates`). After
prioritize, the pod is provisionally counted on the node kube-scheduler will most likely choose
(see `assume`).

Failure policy:
* a node kube-scheduler knows but our cache does not (cache lag, or a Node our parser rejects) passes
  the filter and scores 0 — the same fail-open stance
  LoadAwareScheduling takes for a node without a NodeMetric; counted in
  `loadline_extender_unknown_nodes_total`;
* a plugin that errors or raises makes the whole answer an error (the filter's `Error` field;
  the server answers prioritize with a 500, which kube-scheduler ignores), never a guess.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from common.api.malformed import MalformedObjectError
from scheduler_plugin.extender import metrics
from scheduler_plugin.extender.assume import DEFAULT_TTL_SECONDS, ProvisionalPlacements
from scheduler_plugin.extender.wire import (
    JSON,
    ExtenderArgs,
    NodeVictims,
    PreemptionArgs,
    ScoreScaling,
    filter_result,
    node_name,
    scale_scores,
)
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.diagnosis import Diagnosis
from scheduler_plugin.framework.interfaces import MAX_NODE_SCORE
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.runtime import Framework, narrow_to_pre_filter_result
from scheduler_plugin.framework.snapshot import CPU, MEMORY, IndexArray, IntArray, Snapshot
from scheduler_plugin.framework.status import Code
from scheduler_plugin.plugins.noderesources.formulas import least_requested_score

log = logging.getLogger("loadline.extender")


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
    def parse_pod(args: ExtenderArgs | PreemptionArgs) -> PodInfo:
        try:
            return PodInfo.from_dict(args.pod)
        except MalformedObjectError as exc:
            # The request is about this one pod: its field and what is wrong with it say enough.
            raise InvalidPod(f"Pod: {exc.field}: {exc.detail}" if exc.field else f"Pod: {exc.detail}") from None

    def candidates(self, args: ExtenderArgs) -> Candidates:
        """Resolve the request's nodes to snapshot rows.

        The request is not trusted (anyone who reaches the port can send one): its Node objects are only echoed
        back, never written into the shared snapshot. A node is judged on the watched copy; one the watch does not
        know passes unchecked (see the failure policy above) and is not added, so a request can neither grow the
        cache nor overwrite the node every other request is judged on."""
        snap = self.snapshot
        names = args.candidate_names()
        objects: dict[str, Mapping[str, Any]] = {}
        if args.nodes is not None:
            for node in args.nodes:
                objects.setdefault(node_name(node), node)
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
        """PreFilter then the Filter plugins over the request's known nodes, through the framework's
        own `run_*` methods (so the verdicts are our scheduler's), collecting each rejected node's
        reasons."""
        snap = self.snapshot
        state = CycleState()
        verdicts = Verdicts()
        allowed, status, narrowing = framework.run_pre_filter(state, pod, snap)
        if status.is_rejected():
            # A PreFilter rejection fails the pod everywhere, with that plugin's message.
            for name in cand.known:
                verdicts.reject(name, status.message, status.code)
            return verdicts
        if not status.is_success():
            raise PluginError(status.message)
        diagnosis = Diagnosis(len(cand.known))
        rows = narrow_to_pre_filter_result(snap, cand.rows, allowed, narrowing, diagnosis)
        _, status = framework.run_filters(state, pod, snap, rows, diagnosis)
        if not status.is_success():
            raise PluginError(status.message)
        for rejection in diagnosis.rejections:
            for row in rejection.rows.tolist():
                verdicts.reject(snap.node_name(row), rejection.reason, rejection.code)
            if rejection.plugin:
                metrics.REJECTIONS.labels(rejection.plugin).inc(int(rejection.rows.size))
        return verdicts

    # ------------------------------------------------------------------ preempt
    def preempt(self, args: PreemptionArgs) -> dict[str, NodeVictims]:
        """The candidates of kube-scheduler's preemption on which our own Filter plugins, with that
        candidate's victims removed (PreFilter RemovePod, as our DefaultPreemption simulates), let the
        pod fit; the others are dropped, so kube-scheduler evicts only what Loadline accepts.
        Victims are resolved by UID in our cache (or from the Pods sent); a node or victim we do not
        know drops the candidate. Raises PluginError."""
        pod = self.parse_pod(args)
        framework = self.framework_for(pod)
        self._begin(pod)
        snap = self.snapshot
        by_uid = snap.pod_index("uid", lambda p: p.uid)
        state = CycleState()
        _, status, _ = framework.run_pre_filter(state, pod, snap)
        if status.is_rejected():
            return {}
        if not status.is_success():
            raise PluginError(status.message)
        rows: list[int] = []
        victims: list[PodInfo] = []
        nodes: dict[int, str] = {}
        for name, entry in args.victims.items():
            info = snap.node_by_name(name)
            found = [snap.pods[k] for uid in entry.uids for k in by_uid.get(uid, ()) if k in snap.pods]
            if entry.pods is not None and len(found) < len(entry.uids):
                try:
                    found = [PodInfo.from_dict(p) for p in entry.pods]  # full Pods sent: use them as they are
                except MalformedObjectError as exc:
                    raise InvalidPod(f"NodeNameToVictims.{name}: {exc}") from None
            if info is None or len(found) != len(entry.uids):
                metrics.PREEMPT_CANDIDATES.labels("unknown").inc()
                continue
            nodes[info.index] = name
            rows += [info.index] * len(found)
            victims += found
        if not nodes:
            return {}
        status = framework.run_pre_filter_extension_remove_pods(state, pod, snap, np.asarray(rows, np.intp), victims)
        if not status.is_success():
            raise PluginError(status.message)
        fitting, status = framework.run_filters(state, pod, snap, np.asarray(sorted(nodes), np.intp))
        if not status.is_success():
            raise PluginError(status.message)
        kept = {nodes[row]: args.victims[nodes[row]] for row in fitting.tolist()}
        metrics.PREEMPT_CANDIDATES.labels("kept").inc(len(kept))
        metrics.PREEMPT_CANDIDATES.labels("dropped").inc(len(nodes) - len(kept))
        return kept

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
        """Σ normalised score × weight over the profile's Score plugins (the framework's `run_score`),
        and the highest total possible (100 × Σ weights of the plugins that ran)."""
        snap = self.snapshot
        state = CycleState()
        if rows.size == 0:
            return np.zeros(0, np.int64), 0
        status = framework.run_pre_score(state, pod, snap, rows)
        if not status.is_success():
            raise PluginError(status.message)
        scores, status = framework.run_score(state, pod, snap, rows)
        if not status.is_success() or scores.totals is None:
            raise PluginError(status.message)
        return scores.totals, MAX_NODE_SCORE * sum(scores.weights.values())
