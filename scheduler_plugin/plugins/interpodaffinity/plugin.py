"""InterPodAffinity: required pod affinity and anti-affinity filter, preferred ones score, with kube-scheduler's
semantics (pkg/scheduler/framework/plugins/interpodaffinity: filtering.go, scoring.go), vectorised.

Filter, for a node (the first rule it breaks is its reason):
1. required affinity (UnschedulableAndUnresolvable, "node(s) didn't match pod affinity rules"): the node has
   every term's topology key, and in the node's domain of each key there is a pod matching *all* the terms;
   unless no such pod exists anywhere and the pod matches all its own terms (the first pod of a group);
2. required anti-affinity (Unschedulable, "... pod anti-affinity rules"): for each term whose key the node
   has, no pod in the node's domain matches it;
3. existing pods' required anti-affinity (Unschedulable, "node(s) didn't satisfy existing pods anti-affinity
   rules"): no pod in the node's domain of one of its terms' keys has a term the incoming pod matches.
Score: per topology domain, the weights of the incoming pod's preferred terms its pods match (anti: minus),
plus, for the existing pods' terms the incoming pod matches, `hardPodAffinityWeight` per required affinity
term and the weight of each preferred one (anti: minus); a node scores the sum over the domains it is in,
min-max normalised to 0..100.

The counts come from the snapshot's `pod_matches` (per node row, kept as pods come and go), folded into
domains with a bincount per topology key. Simulations (preemption, nominated pods) add and remove pods
through AddPod/RemovePod: each change counts only for the node it was made on, as kube-scheduler evaluates
every node on its own copy of the cycle state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel

from common.api.scheduling import PodAffinityTerm
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.events import (
    ASSIGNED_POD_ADD,
    ASSIGNED_POD_CHANGES,
    ASSIGNED_POD_DELETE,
    ASSIGNED_POD_UPDATE,
    NAMESPACE_CHANGE,
    NODE_CHANGES,
)
from scheduler_plugin.framework.filterresult import ALL_PASS, FilterResult, Rejection
from scheduler_plugin.framework.interfaces import MAX_NODE_SCORE, FrameworkHandle, PreFilterResult, WatchedResource
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.podmatch import Domains, TermKind, domains_of, fit
from scheduler_plugin.framework.registry import plugin_args
from scheduler_plugin.framework.snapshot import BoolArray, IndexArray, IntArray, Snapshot
from scheduler_plugin.framework.status import SUCCESS, Code, Status
from scheduler_plugin.plugins.interpodaffinity.args import InterPodAffinityArgs
from scheduler_plugin.plugins.interpodaffinity.namespaces import NAMESPACES, Namespaces
from scheduler_plugin.plugins.interpodaffinity.terms import (
    MAX_POD_AFFINITY_TERMS,
    NO_TERMS,
    TOO_MANY_TERMS,
    IncomingTerm,
    IncomingTerms,
    incoming_terms,
    term_matches,
)

NAME = "InterPodAffinity"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
REASON_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
FILTER_STATE = "PreFilterInterPodAffinity"
SCORED_CARRIED_KINDS: tuple[TermKind, ...] = ("required_affinity", "preferred_affinity", "preferred_anti_affinity")
SCORE_STATE = "PreScoreInterPodAffinity"


@dataclass(slots=True)
class DomainCounts:
    """Pods per domain of one topology key, and each row's own simulated change (None: none)."""

    domains: Domains
    per_domain: IntArray
    simulated: IntArray | None = None

    def at(self, rows: IndexArray) -> tuple[BoolArray, IntArray]:
        """Per row: whether the node has the key, and the count in its domain (with its own simulated change)."""
        codes = self.domains.codes.take(rows)
        has = codes >= 0
        count = np.where(has, self.per_domain.take(np.maximum(codes, 0)), 0)
        if self.simulated is not None:
            count = count + self.simulated.take(rows)
        return has, count

    def simulate(self, rows: IndexArray, signs: IntArray, slots: int) -> None:
        if self.simulated is None:
            self.simulated = np.zeros(slots, np.int64)
        np.add.at(self.simulated, rows, signs)

    def clone(self) -> DomainCounts:
        return DomainCounts(self.domains, self.per_domain, None if self.simulated is None else self.simulated.copy())


@dataclass(slots=True)
class FilterState:
    """PreFilter's counts for one pod (kube-scheduler's preFilterState), cloned for simulations."""

    terms: IncomingTerms
    namespace_labels: dict[str, str]
    self_match: bool  # the pod matches all its own required affinity terms
    affinity: list[DomainCounts | None]  # per distinct key of the required affinity terms (None: no node has it)
    affinity_totals: list[int]  # per such key: pods counted on nodes that have the key
    anti: list[DomainCounts | None]  # per required anti-affinity term
    existing: dict[str, DomainCounts] = field(default_factory=dict)  # per key of existing pods' matching terms

    def clone(self) -> FilterState:
        return FilterState(
            self.terms, self.namespace_labels, self.self_match,
            [None if d is None else d.clone() for d in self.affinity], list(self.affinity_totals),
            [None if d is None else d.clone() for d in self.anti],
            {key: d.clone() for key, d in self.existing.items()},
        )  # fmt: skip


@dataclass(slots=True)
class ScoreState:
    """Per topology key, the summed weights per domain (kube-scheduler's topologyScore)."""

    by_key: list[tuple[Domains, IntArray]]

    def clone(self) -> ScoreState:
        return self  # not changed by simulations


class InterPodAffinity:
    name = NAME

    def __init__(self, args: InterPodAffinityArgs, handle: FrameworkHandle | None = None) -> None:
        self.args = args
        self.handle = handle

    @classmethod
    def new(cls, args: BaseModel | None, handle: FrameworkHandle) -> InterPodAffinity:
        return cls(plugin_args(NAME, args, InterPodAffinityArgs), handle)

    def watched_resources(self) -> tuple[WatchedResource, ...]:
        return (NAMESPACES,)  # kube-scheduler's namespace lister (namespaceSelector)

    def events_to_register(self) -> frozenset[str]:
        # A pod bound, relabelled or deleted; a node added or relabelled (kube-scheduler's); a namespace
        # relabelled (a namespaceSelector may select it now: kube-scheduler waits for its periodic flush).
        return ASSIGNED_POD_CHANGES | NODE_CHANGES | {NAMESPACE_CHANGE}

    def queueing_hint(self, event: str, pending: PodInfo, changed: PodInfo | None, old: PodInfo | None) -> bool:
        """kube-scheduler's isSchedulableAfterPodChange: a pod bound that matches all the pending pod's required
        affinity terms; relabelled into them, or out of all its anti-affinity terms; deleted while matching all
        its anti-affinity terms, or carrying anti-affinity terms that all match the pending pod. (Namespace
        selectors are matched against the namespaces' labels, where kube-scheduler's hint passes none.)"""
        if event not in ASSIGNED_POD_CHANGES or self.handle is None:
            return True
        namespaces = self.handle.snapshot.store(Namespaces)
        affinity = pending.pod_affinity
        required = affinity.required_affinity if affinity is not None else ()
        anti = affinity.required_anti_affinity if affinity is not None else ()

        def all_match(terms: Sequence[PodAffinityTerm], pod: PodInfo | None) -> bool:
            return (pod is not None and bool(terms)
                    and all(term_matches(t, pod, namespaces.labels(pod.namespace)) for t in terms))

        if event == ASSIGNED_POD_ADD:
            return all_match(required, changed)
        if event == ASSIGNED_POD_UPDATE:
            return ((not all_match(required, old) and all_match(required, changed))
                    or (all_match(anti, old) and not all_match(anti, changed)))
        if event == ASSIGNED_POD_DELETE and old is not None:
            theirs = old.pod_affinity.required_anti_affinity if old.pod_affinity is not None else ()
            return all_match(anti, old) or all_match(theirs, pending)
        return True

    # ------------------------------------------------------------------ PreFilter (+ extensions)
    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        affinity = pod.pod_affinity
        if affinity is None and not snapshot.pod_matches.has_carried("required_anti_affinity"):
            return None, Status.skip()  # (most pods: no rule either way)
        if affinity is not None and affinity.term_count > MAX_POD_AFFINITY_TERMS:
            message = TOO_MANY_TERMS.format(count=affinity.term_count, limit=MAX_POD_AFFINITY_TERMS)
            return None, Status.unresolvable(message)
        namespaces = snapshot.store(Namespaces)
        namespace_labels = dict(namespaces.labels(pod.namespace))
        existing = self._existing_anti_affinity(snapshot, pod, namespace_labels)
        required = affinity is not None and bool(affinity.required_affinity or affinity.required_anti_affinity)
        if not existing and not required:
            return None, Status.skip()
        terms = incoming_terms(pod, namespaces) if required else NO_TERMS
        index = snapshot.pod_matches
        slots = snapshot.num_slots
        keys = list(dict.fromkeys(t.topology_key for t in terms.required_affinity))
        affinity_filter = terms.affinity_filter()
        row_counts = None if affinity_filter is None else index.counts(affinity_filter)
        per_key: list[DomainCounts | None] = []
        totals: list[int] = []
        for key in keys:
            domains = domains_of(snapshot, key)
            if domains is None:
                per_key.append(None)
                totals.append(0)
                continue
            per_domain = domains.totals(row_counts) if row_counts is not None else np.zeros(domains.size, np.int64)
            per_key.append(DomainCounts(domains, per_domain))
            totals.append(int(per_domain.sum()))
        anti: list[DomainCounts | None] = []
        for term in terms.required_anti_affinity:
            domains = domains_of(snapshot, term.topology_key)
            flt = term.filter()
            if domains is None:
                anti.append(None)
                continue
            counts = index.counts(flt) if flt is not None else np.zeros(slots, np.int64)
            anti.append(DomainCounts(domains, domains.totals(counts)))
        state.write(FILTER_STATE, FilterState(terms, namespace_labels, terms.matches_all_required(pod), per_key,
                                              totals, anti, existing))
        return None, SUCCESS

    def _existing_anti_affinity(
        self, snapshot: Snapshot, pod: PodInfo, namespace_labels: dict[str, str]
    ) -> dict[str, DomainCounts]:
        """Per topology key, the existing pods whose required anti-affinity terms the pod matches, by domain
        (only keys where some node with the key holds one: kube-scheduler's existingAntiAffinityCounts)."""
        index = snapshot.pod_matches
        if not index.has_carried("required_anti_affinity"):
            return {}
        by_key: dict[str, IntArray] = {}
        slots = snapshot.num_slots
        for carried in index.carried("required_anti_affinity"):
            if term_matches(carried.term, pod, namespace_labels):
                key = carried.term.topology_key
                counts = fit(carried.counts, slots)
                by_key[key] = counts if key not in by_key else by_key[key] + counts
        out = {}
        for key, counts in by_key.items():
            domains = domains_of(snapshot, key)
            if domains is None:
                continue
            per_domain = domains.totals(counts)
            if per_domain.any():
                out[key] = DomainCounts(domains, per_domain)
        return out

    def add_pods(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: IndexArray,
                 pods: Sequence[PodInfo]) -> Status:
        return self._simulate(state, pod, snapshot, rows, pods, sign=1)

    def remove_pods(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: IndexArray,
                    pods: Sequence[PodInfo]) -> Status:
        return self._simulate(state, pod, snapshot, rows, pods, sign=-1)

    def _simulate(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: IndexArray,
                  pods: Sequence[PodInfo], *, sign: int) -> Status:
        """kube-scheduler's preFilterState.updateWithPod, for `pods[i]` on row `rows[i]`."""
        st = state.get(FILTER_STATE, FilterState)
        if st is None or not pods:
            return SUCCESS
        slots = snapshot.num_slots
        signs = np.full(len(pods), sign, np.int64)
        terms = st.terms
        if terms.required_affinity:
            hits = np.fromiter((terms.matches_all_required(p) for p in pods), np.bool_, len(pods))
            if hits.any():
                for counts in st.affinity:
                    if counts is not None:
                        counts.simulate(rows[hits], signs[hits], slots)
        for term, counts in zip(terms.required_anti_affinity, st.anti, strict=True):
            if counts is None:
                continue
            hits = np.fromiter((term.matches(p) for p in pods), np.bool_, len(pods))
            if hits.any():
                counts.simulate(rows[hits], signs[hits], slots)
        for i, other in enumerate(pods):
            affinity = other.pod_affinity
            if affinity is None:
                continue
            for carried in affinity.required_anti_affinity:
                if not term_matches(carried, pod, st.namespace_labels):
                    continue
                key = carried.topology_key
                counts = st.existing.get(key)
                if counts is None:
                    domains = domains_of(snapshot, key)
                    if domains is None:
                        continue
                    counts = st.existing[key] = DomainCounts(domains, np.zeros(domains.size, np.int64))
                counts.simulate(rows[i : i + 1], signs[i : i + 1], slots)
        return SUCCESS

    # ------------------------------------------------------------------ Filter
    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> FilterResult:
        st = state.read(FILTER_STATE, FilterState)
        size = candidates.size
        affinity_fails = np.zeros(size, np.bool_)
        if st.terms.required_affinity:
            missing = np.zeros(size, np.bool_)
            exists = np.ones(size, np.bool_)
            nothing_anywhere = np.ones(size, np.bool_)
            for counts, total in zip(st.affinity, st.affinity_totals, strict=True):
                if counts is None:
                    missing[:] = True
                    continue
                has, count = counts.at(candidates)
                missing |= ~has
                exists &= count > 0
                own = counts.simulated.take(candidates) if counts.simulated is not None else 0
                nothing_anywhere &= (total + np.where(has, own, 0)) == 0
            first_of_group = nothing_anywhere if st.self_match else np.zeros(size, np.bool_)
            affinity_fails = missing | ~(exists | first_of_group)
        anti_fails = np.zeros(size, np.bool_)
        for anti in st.anti:
            if anti is not None:
                has, count = anti.at(candidates)
                anti_fails |= has & (count > 0)
        existing_fails = np.zeros(size, np.bool_)
        for existing in st.existing.values():
            has, count = existing.at(candidates)
            existing_fails |= has & (count > 0)
        if not (affinity_fails.any() or anti_fails.any() or existing_fails.any()):
            return ALL_PASS
        anti_fails &= ~affinity_fails
        existing_fails &= ~(affinity_fails | anti_fails)
        return FilterResult.from_rejections(size, [
            Rejection(REASON_AFFINITY, affinity_fails, Code.UNSCHEDULABLE_AND_UNRESOLVABLE),
            Rejection(REASON_ANTI_AFFINITY, anti_fails),
            Rejection(REASON_EXISTING_ANTI_AFFINITY, existing_fails),
        ])  # fmt: skip

    # ------------------------------------------------------------------ PreScore / Score
    def pre_score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> Status:
        affinity = pod.pod_affinity
        has_preferences = affinity is not None and bool(affinity.preferred_affinity or affinity.preferred_anti_affinity)
        if self.args.ignore_preferred_terms_of_existing_pods and not has_preferences:
            return Status.skip()
        index = snapshot.pod_matches
        if not has_preferences and not any(index.has_carried(k) for k in SCORED_CARRIED_KINDS):
            return Status.skip()  # (nothing can match: no entry, kube-scheduler's Skip)
        namespaces = snapshot.store(Namespaces)
        slots = snapshot.num_slots
        weighted: dict[str, IntArray] = {}
        found = False

        def add(key: str, weight: int, counts: IntArray) -> None:
            nonlocal found
            domains = domains_of(snapshot, key)
            if domains is None or not counts[domains.codes >= 0].any():
                return  # no matching pod on a node with the key: no entry (kube-scheduler's processTerm)
            found = True
            part = counts * weight
            weighted[key] = part if key not in weighted else weighted[key] + part

        if has_preferences:
            terms = incoming_terms(pod, namespaces)
            for term, sign in _preferred(terms):
                flt = term.filter()
                if flt is not None:
                    add(term.topology_key, sign * term.weight, index.counts(flt))
        namespace_labels = namespaces.labels(pod.namespace)
        hard = self.args.hard_pod_affinity_weight
        if hard > 0:
            for carried in index.carried("required_affinity"):
                if term_matches(carried.term, pod, namespace_labels):
                    add(carried.term.topology_key, hard, fit(carried.counts, slots))
        for kind, sign in (("preferred_affinity", 1), ("preferred_anti_affinity", -1)):
            for carried in index.carried(kind):  # type: ignore[arg-type]  # (the two literal kinds)
                if term_matches(carried.term, pod, namespace_labels):
                    add(carried.term.topology_key, sign * carried.weight, fit(carried.counts, slots))
        if not found:
            return Status.skip()
        by_key = []
        for key, counts in weighted.items():
            domains = domains_of(snapshot, key)
            assert domains is not None  # (add() kept only keys some node has)
            by_key.append((domains, domains.totals(counts)))
        state.write(SCORE_STATE, ScoreState(by_key))
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> IntArray:
        st = state.read(SCORE_STATE, ScoreState)
        total = np.zeros(candidates.size, np.int64)
        for domains, per_domain in st.by_key:
            total += domains.at(per_domain, candidates)
        return total

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: IntArray) -> IntArray:
        """Min-max to 0..100, truncated (kube-scheduler's NormalizeScore, float64 as there)."""
        if scores.size == 0:
            return scores
        low, high = int(scores.min()), int(scores.max())
        if high == low:
            return np.zeros_like(scores)
        scaled = float(MAX_NODE_SCORE) * ((scores - low).astype(np.float64) / float(high - low))
        return scaled.astype(np.int64)


def _preferred(terms: IncomingTerms) -> list[tuple[IncomingTerm, int]]:
    return [(t, 1) for t in terms.preferred_affinity] + [(t, -1) for t in terms.preferred_anti_affinity]

