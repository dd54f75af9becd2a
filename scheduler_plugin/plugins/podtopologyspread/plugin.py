"""PodTopologySpread: topologySpreadConstraints with kube-scheduler's semantics
(pkg/scheduler/framework/plugins/podtopologyspread: common.go, filtering.go, scoring.go), vectorised.

Constraints: the pod's own (matchLabelKeys merged into the selector from the pod's labels), else the
default constraints (the system's: hostname maxSkew 3 and zone maxSkew 5, ScheduleAnyway) with the selector
of the pod's Services and controller (`workloads.default_selector`); none when that selector is empty.

Filter (DoNotSchedule constraints), per constraint in order, the first failing one is the node's reason:
the node must have the topology key (else UnschedulableAndUnresolvable, "... (missing required label)"),
and matching pods in its domain + 1 if the pod matches its own selector − the global minimum ≤ maxSkew
(else Unschedulable). Pods are counted on the nodes that have every constraint's key and pass the
constraint's inclusion policies (nodeAffinityPolicy Honor: the pod's nodeSelector and required node
affinity; nodeTaintsPolicy Honor: no untolerated NoSchedule/NoExecute taint), in the pod's namespace, not
terminating. The global minimum is over those nodes' domains, 0 while there are fewer than minDomains.

Score (ScheduleAnyway constraints): per node, Σ count·log(domains + 2) + maxSkew − 1, rounded, over the
constraints whose key the node has (count: the node's own pods for kubernetes.io/hostname, else its
domain's among the feasible nodes' domains); nodes missing a key score 0; the rest are mapped so the fewest
matching pods score 100.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel

from common.api import constants as c
from common.api.scheduling import LabelSelector, Requirement, TopologySpreadConstraint, first_untolerated
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.events import (
    ASSIGNED_POD_ADD,
    ASSIGNED_POD_CHANGES,
    ASSIGNED_POD_DELETE,
    ASSIGNED_POD_UPDATE,
    NODE_CHANGES,
    NODE_DELETE,
)
from scheduler_plugin.framework.filterresult import ALL_PASS, FilterResult, Rejection
from scheduler_plugin.framework.interfaces import MAX_NODE_SCORE, FrameworkHandle, PreFilterResult, WatchedResource
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.podmatch import Domains, PodFilter, domains_of, selector_matcher
from scheduler_plugin.framework.registry import plugin_args
from scheduler_plugin.framework.snapshot import BoolArray, IndexArray, IntArray, Snapshot
from scheduler_plugin.framework.status import SUCCESS, Code, Status
from scheduler_plugin.plugins.nodeaffinity import required_mask
from scheduler_plugin.plugins.podtopologyspread.args import DefaultConstraint, PodTopologySpreadArgs
from scheduler_plugin.plugins.podtopologyspread.workloads import WORKLOADS, default_selector

NAME = "PodTopologySpread"
REASON_CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
REASON_NODE_LABEL_NOT_MATCH = REASON_CONSTRAINTS_NOT_MATCH + " (missing required label)"
FILTER_STATE = "PreFilterPodTopologySpread"
SCORE_STATE = "PreScorePodTopologySpread"
SCORE_IGNORED = "PodTopologySpread/ignored"  # the scored nodes missing a key, for NormalizeScore
DO_NOT_SCHEDULE, SCHEDULE_ANYWAY = "DoNotSchedule", "ScheduleAnyway"
MAX_INT32 = 2**31 - 1  # an empty critical path's match number
# kube-scheduler takes any number (the API server allows one per topology key and action). Each costs a pass
# over the nodes per cycle; a pod over this many is refused with this reason.
MAX_SPREAD_CONSTRAINTS = 64
TOO_MANY_CONSTRAINTS = (
    "pod has {count} topologySpreadConstraints; Loadline evaluates at most {limit} per pod: use fewer or another "
    "scheduler"
)


@dataclass(frozen=True, slots=True)
class Constraint:
    """kube-scheduler's internal topologySpreadConstraint: the selector parsed and merged, policies defaulted."""

    max_skew: int
    topology_key: str
    selector: LabelSelector | None  # None: matches no pod
    min_domains: int
    honor_node_affinity: bool
    honor_node_taints: bool

    def counted(self, namespace: str) -> PodFilter | None:
        """The pods counted (countPodsMatchSelector: none for an empty selector or none at all)."""
        if self.selector is None or self.selector.is_empty:
            return None
        return PodFilter(((frozenset({namespace}), self.selector),), skip_deleting=True)

    def selects(self, pod: PodInfo) -> bool:
        return self.selector is not None and selector_matcher(self.selector)(pod.labels)


def _from_pod(spec: TopologySpreadConstraint, labels: dict[str, str]) -> Constraint:
    selector = spec.selector
    if selector is not None and spec.match_label_keys:
        # mergeLabelSetWithSelector: the pod's values of matchLabelKeys join the selector (a nil one stays nil).
        pairs = tuple(Requirement(k, "In", (labels[k],)) for k in spec.match_label_keys if k in labels)
        if pairs:
            selector = LabelSelector(selector.match_labels, pairs + selector.match_expressions)
    return Constraint(spec.max_skew, spec.topology_key, selector, spec.min_domains or 1,
                      spec.node_affinity_policy == "Honor", spec.node_taints_policy == "Honor")


def _from_default(spec: DefaultConstraint, selector: LabelSelector) -> Constraint:
    honor_affinity = (spec.node_affinity_policy or "Honor") == "Honor"
    honor_taints = (spec.node_taints_policy or "Ignore") == "Honor"
    return Constraint(spec.max_skew, spec.topology_key, selector, spec.min_domains or 1, honor_affinity, honor_taints)


class NodeInclusion:
    """Per node row (num_slots), the inclusion policies' verdicts for one pod, computed on first use."""

    def __init__(self, snapshot: Snapshot, pod: PodInfo) -> None:
        self.snapshot, self.pod = snapshot, pod
        self._affinity: BoolArray | None = None
        self._taints: BoolArray | None = None

    def allowed(self, constraint: Constraint) -> BoolArray:
        rows = self.snapshot.num_slots
        mask = np.ones(rows, np.bool_)
        if constraint.honor_node_affinity:
            if self._affinity is None:
                self._affinity = np.zeros(rows, np.bool_)
                nodes = self.snapshot.node_indices()
                self._affinity[nodes] = required_mask(self.snapshot, nodes, self.pod)
            mask &= self._affinity
        if constraint.honor_node_taints:
            if self._taints is None:
                sets = self.snapshot.taint_sets
                tolerated = np.fromiter((first_untolerated(t, self.pod.tolerations) is None for t in sets),
                                        np.bool_, len(sets))
                self._taints = tolerated.take(self.snapshot.taint_set_ids)
            mask &= self._taints
        return mask


@dataclass(slots=True)
class SpreadCounts:
    """One DoNotSchedule constraint's PreFilter counts (TpValueToMatchNum and the critical paths)."""

    constraint: Constraint
    domains: Domains | None  # None: no node has the key
    per_domain: IntArray
    eligible: BoolArray  # rows whose pods count (and whose simulated changes count)
    domain_count: int
    first: int  # the smallest count over the domains, its domain code, and the next smallest
    first_code: int
    second: int
    simulated: IntArray | None = None  # each eligible row's own simulated change

    def clone(self) -> SpreadCounts:
        return SpreadCounts(self.constraint, self.domains, self.per_domain, self.eligible, self.domain_count,
                            self.first, self.first_code, self.second,
                            None if self.simulated is None else self.simulated.copy())


@dataclass(slots=True)
class FilterState:
    counts: list[SpreadCounts]

    def clone(self) -> FilterState:
        return FilterState([s.clone() for s in self.counts])


@dataclass(slots=True)
class ScoreState:
    constraints: list[Constraint]
    domains: list[Domains | None]
    per_domain: list[IntArray | None]  # None for hostname constraints: the node's own count
    own_counts: list[IntArray | None]  # per row, for hostname constraints
    weights: list[float]
    require_all: bool

    def clone(self) -> ScoreState:
        return self


class PodTopologySpread:
    name = NAME

    def __init__(self, args: PodTopologySpreadArgs, handle: FrameworkHandle | None = None) -> None:
        self.args = args
        self.handle = handle
        self.system_defaulted = args.defaulting_type == "System"
        self.default_constraints = args.constraints
        self._defaults_by_action = {action: [d for d in self.default_constraints if d.when_unsatisfiable == action]
                                    for action in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY)}

    @classmethod
    def new(cls, args: BaseModel | None, handle: FrameworkHandle) -> PodTopologySpread:
        return cls(plugin_args(NAME, args, PodTopologySpreadArgs), handle)

    def watched_resources(self) -> tuple[WatchedResource, ...]:
        # kube-scheduler sets these listers only when there are default constraints.
        return WORKLOADS if self.default_constraints else ()

    def events_to_register(self) -> frozenset[str]:
        return ASSIGNED_POD_CHANGES | NODE_CHANGES | {NODE_DELETE}

    def queueing_hint(self, event: str, pending: PodInfo, changed: PodInfo | None, old: PodInfo | None) -> bool:
        """kube-scheduler's isSchedulableAfterPodChange: a pod of the pending pod's namespace bound, relabelled or
        deleted whose labels a DoNotSchedule constraint selects (before or after, differently when relabelled)."""
        if event not in ASSIGNED_POD_CHANGES or self.handle is None:
            return True
        if any(p is not None and p.namespace != pending.namespace for p in (changed, old)):
            return False
        constraints = self.constraints(pending, DO_NOT_SCHEDULE, self.handle.snapshot)
        if event == ASSIGNED_POD_ADD and changed is not None:
            return any(c.selects(changed) for c in constraints)
        if event == ASSIGNED_POD_UPDATE and changed is not None and old is not None:
            return old.labels != changed.labels and any(c.selects(old) != c.selects(changed) for c in constraints)
        if event == ASSIGNED_POD_DELETE and old is not None:
            return any(c.selects(old) for c in constraints)
        return True

    def constraints(self, pod: PodInfo, action: str, snapshot: Snapshot) -> list[Constraint]:
        """The pod's constraints of that action (kube-scheduler's getConstraints / initPreScoreState)."""
        if pod.topology_spread:
            return [_from_pod(s, pod.labels) for s in pod.topology_spread if s.when_unsatisfiable == action]
        defaults = self._defaults_by_action[action]
        if not defaults:
            return []
        selector = default_selector(pod, snapshot)
        return [] if selector is None else [_from_default(d, selector) for d in defaults]

    # ------------------------------------------------------------------ PreFilter (+ extensions)
    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        if len(pod.topology_spread) > MAX_SPREAD_CONSTRAINTS:
            message = TOO_MANY_CONSTRAINTS.format(count=len(pod.topology_spread), limit=MAX_SPREAD_CONSTRAINTS)
            return None, Status.unresolvable(message)
        constraints = self.constraints(pod, DO_NOT_SCHEDULE, snapshot)
        if not constraints:
            return None, Status.skip()
        domains = [domains_of(snapshot, con.topology_key) for con in constraints]
        has_all = self._has_all(snapshot, domains)
        inclusion = NodeInclusion(snapshot, pod)
        counts = []
        for con, dom in zip(constraints, domains, strict=True):
            eligible = has_all & inclusion.allowed(con)
            counts.append(self._spread_counts(snapshot, pod, con, dom, eligible=eligible))
        state.write(FILTER_STATE, FilterState(counts))
        return None, SUCCESS

    @staticmethod
    def _has_all(snapshot: Snapshot, domains: Sequence[Domains | None]) -> BoolArray:
        """Rows of nodes that have every constraint's key (nodeLabelsMatchSpreadConstraints)."""
        mask = np.zeros(snapshot.num_slots, np.bool_)
        mask[snapshot.node_indices()] = True
        for dom in domains:
            if dom is None:
                return np.zeros_like(mask)
            mask &= dom.codes >= 0
        return mask

    @staticmethod
    def _spread_counts(snapshot: Snapshot, pod: PodInfo, con: Constraint, dom: Domains | None, *,
                       eligible: BoolArray) -> SpreadCounts:
        slots = snapshot.num_slots
        if dom is None:
            return SpreadCounts(con, None, np.zeros(1, np.int64), eligible, 0, MAX_INT32, -1, MAX_INT32)
        counted = con.counted(pod.namespace)
        row_counts = snapshot.pod_matches.counts(counted) if counted is not None else np.zeros(slots, np.int64)
        per_domain = dom.totals(row_counts, eligible)
        present = np.bincount(dom.codes[eligible & (dom.codes >= 0)], minlength=dom.size) > 0
        present_codes = np.flatnonzero(present)
        if present_codes.size == 0:
            return SpreadCounts(con, dom, per_domain, eligible, 0, MAX_INT32, -1, MAX_INT32)
        values = per_domain[present_codes]
        order = np.argsort(values, kind="stable")
        first_code = int(present_codes[order[0]])
        second = int(values[order[1]]) if values.size > 1 else MAX_INT32
        return SpreadCounts(con, dom, per_domain, eligible, int(present_codes.size), int(values[order[0]]),
                            first_code, second)

    def add_pods(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: IndexArray,
                 pods: Sequence[PodInfo]) -> Status:
        return self._simulate(state, pod, snapshot, rows, pods, sign=1)

    def remove_pods(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: IndexArray,
                    pods: Sequence[PodInfo]) -> Status:
        return self._simulate(state, pod, snapshot, rows, pods, sign=-1)

    @staticmethod
    def _simulate(state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: IndexArray, pods: Sequence[PodInfo], *,
                  sign: int) -> Status:
        """kube-scheduler's updateWithPod: a pod of the same namespace the constraint's selector matches counts on
        an eligible node (terminating or not)."""
        st = state.get(FILTER_STATE, FilterState)
        if st is None or not pods:
            return SUCCESS
        same_namespace = [i for i, p in enumerate(pods) if p.namespace == pod.namespace]
        for spread in st.counts:
            hits = [i for i in same_namespace if spread.constraint.selects(pods[i]) and spread.eligible[rows[i]]]
            if hits:
                if spread.simulated is None:
                    spread.simulated = np.zeros(snapshot.num_slots, np.int64)
                np.add.at(spread.simulated, rows[hits], sign)
        return SUCCESS

    # ------------------------------------------------------------------ Filter
    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> FilterResult:
        st = state.read(FILTER_STATE, FilterState)
        size = candidates.size
        undecided = np.ones(size, np.bool_)
        missing_label = np.zeros(size, np.bool_)
        too_skewed = np.zeros(size, np.bool_)
        for spread in st.counts:
            con = spread.constraint
            if spread.domains is None:
                missing_label |= undecided
                break
            codes = spread.domains.codes.take(candidates)
            missing = undecided & (codes < 0)
            missing_label |= missing
            undecided &= ~missing
            base = spread.per_domain.take(np.maximum(codes, 0))
            match = base
            minimum: IntArray | int = spread.first
            if spread.simulated is not None:
                change = spread.simulated.take(candidates)
                match = base + change
                others = np.where(codes == spread.first_code, spread.second, spread.first)
                minimum = np.where(change != 0, np.minimum(others, match), spread.first)
            if spread.domain_count < con.min_domains:
                minimum = 0
            skew = match + int(con.selects(pod)) - minimum
            failed = undecided & (skew > con.max_skew)
            too_skewed |= failed
            undecided &= ~failed
        if not (missing_label.any() or too_skewed.any()):
            return ALL_PASS
        return FilterResult.from_rejections(size, [
            Rejection(REASON_NODE_LABEL_NOT_MATCH, missing_label, Code.UNSCHEDULABLE_AND_UNRESOLVABLE),
            Rejection(REASON_CONSTRAINTS_NOT_MATCH, too_skewed),
        ])  # fmt: skip

    # ------------------------------------------------------------------ PreScore / Score
    def pre_score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> Status:
        if snapshot.num_nodes == 0:
            return Status.skip()
        constraints = self.constraints(pod, SCHEDULE_ANYWAY, snapshot)
        if not constraints:
            return Status.skip()
        # Only the pod's own constraints require every key: system defaults also spread nodes without a zone.
        require_all = bool(pod.topology_spread) or not self.system_defaulted
        slots = snapshot.num_slots
        domains = [domains_of(snapshot, con.topology_key) for con in constraints]
        has_all = self._has_all(snapshot, domains)
        ignored = ~has_all.take(candidates) if require_all else np.zeros(candidates.size, np.bool_)
        scored = candidates[~ignored]
        counting = has_all if require_all else self._valid(snapshot)
        inclusion = NodeInclusion(snapshot, pod)
        per_domain: list[IntArray | None] = []
        own: list[IntArray | None] = []
        weights: list[float] = []
        for con, dom in zip(constraints, domains, strict=True):
            counted = con.counted(pod.namespace)
            row_counts = snapshot.pod_matches.counts(counted) if counted is not None else np.zeros(slots, np.int64)
            if con.topology_key == c.LABEL_HOSTNAME:
                per_domain.append(None)
                own.append(row_counts)
                weights.append(float(np.log(scored.size + 2)))
                continue
            own.append(None)
            if dom is None:  # no node has the key: no node scores for it
                per_domain.append(None)
                weights.append(0.0)
                continue
            buckets = _buckets(dom)
            present = np.zeros(dom.size + 1, np.bool_)
            present[buckets.take(scored)] = True
            include = counting & inclusion.allowed(con)
            sums = np.bincount(buckets[include], weights=row_counts[include], minlength=dom.size + 1)
            per_domain.append(np.where(present, sums, 0).astype(np.int64))
            weights.append(float(np.log(int(present.sum()) + 2)))
        state.write(SCORE_STATE, ScoreState(constraints, domains, per_domain, own, weights, require_all))
        return SUCCESS

    @staticmethod
    def _valid(snapshot: Snapshot) -> BoolArray:
        mask = np.zeros(snapshot.num_slots, np.bool_)
        mask[snapshot.node_indices()] = True
        return mask

    def score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> IntArray:
        st = state.read(SCORE_STATE, ScoreState)
        total = np.zeros(candidates.size, np.float64)
        ignored = np.zeros(candidates.size, np.bool_)
        for con, dom, per_domain, own, weight in zip(st.constraints, st.domains, st.per_domain, st.own_counts,
                                                     st.weights, strict=True):
            codes = dom.codes.take(candidates) if dom is not None else np.full(candidates.size, -1, np.int32)
            has = codes >= 0
            if st.require_all:
                ignored |= ~has
            if own is not None:
                count = own.take(candidates)
            elif per_domain is not None and dom is not None:
                count = per_domain.take(np.maximum(codes, 0))
            else:
                continue
            total = np.where(has, total + (count * weight + float(con.max_skew - 1)), total)
        state.write(SCORE_IGNORED, _Ignored(ignored))
        return np.where(ignored, 0, _round_half_away(total))

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: IntArray) -> IntArray:
        """Fewest matching pods → 100: 100·(max + min − score) / max over the nodes not ignored; ignored → 0."""
        marked = state.get(SCORE_IGNORED, _Ignored)
        ignored = marked.mask if marked is not None else np.zeros(scores.size, np.bool_)
        out = np.zeros_like(scores)
        kept = ~ignored
        if not kept.any():
            return out
        low, high = int(scores[kept].min()), max(int(scores[kept].max()), 0)
        if high == 0:
            out[kept] = MAX_NODE_SCORE
        else:
            out[kept] = MAX_NODE_SCORE * (high + low - scores[kept]) // high
        return out


@dataclass(frozen=True, slots=True)
class _Ignored:
    mask: BoolArray

    def clone(self) -> _Ignored:
        return self


def _buckets(dom: Domains) -> IntArray:
    """Per row, its domain code; a node without the label is in the domain of the value "" (a Go map lookup of
    a missing label gives ""): that value's code, or the extra code `size` when no node has it."""
    out: IntArray = np.where(dom.codes >= 0, dom.codes, dom.blank if dom.blank >= 0 else dom.size).astype(np.int64)
    return out


def _round_half_away(values: np.ndarray) -> IntArray:
    """math.Round for non-negative values: halves go up (numpy rounds them to even)."""
    floor = np.floor(values)
    out: IntArray = (floor + ((values - floor) >= 0.5)).astype(np.int64)
    return out
