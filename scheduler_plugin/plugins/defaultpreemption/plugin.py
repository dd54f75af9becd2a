"""DefaultPreemption (PostFilter): when a pod fits nowhere, find the node where evicting the
fewest, least important lower-priority pods lets it fit (kube-scheduler's `Evaluator.Preempt`).

The plugin decides; it does not evict. The decision (the ranked candidates with their
victims) goes into the cycle state under `DECISION` and the PostFilter result nominates the
best node; the scheduler then evicts the victims through the Eviction API and, when the API
server refuses (a budget), tries the next candidate.

Steps as in kube-scheduler: the pod must be eligible (`preemptionPolicy: Never` is not, nor
a pod whose nominated node still has a lower-priority pod terminating); nodes a Filter
rejected as UnschedulableAndUnresolvable are skipped; the dry run starts at a random node
and stops once it has `num_candidates` candidates (at least one without budget violations);
the best is chosen by `ordering.rank`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel

from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.diagnosis import Diagnosis
from scheduler_plugin.framework.interfaces import FrameworkHandle, PostFilterResult
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.registry import plugin_args
from scheduler_plugin.framework.snapshot import IndexArray, Snapshot
from scheduler_plugin.framework.status import Code, Status
from scheduler_plugin.plugins.coscheduling.gangs import assigned_members, member_keys, resolve
from scheduler_plugin.plugins.defaultpreemption.args import DefaultPreemptionArgs
from scheduler_plugin.plugins.defaultpreemption.dryrun import (
    Candidate,
    SimulationError,
    check_status,
    select_victims,
)
from scheduler_plugin.plugins.defaultpreemption.ordering import VictimSummary, num_candidates, rank

NAME = "DefaultPreemption"
DECISION = "DefaultPreemption/decision"  # cycle state: the PreemptionDecision of a successful PostFilter
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NOT_ELIGIBLE_NEVER = "not eligible due to preemptionPolicy=Never."
NOT_ELIGIBLE_TERMINATING = "not eligible due to a terminating pod on the nominated node."


@dataclass(frozen=True, slots=True)
class PreemptionDecision:
    """What preemption found for one pod (also what `explain` shows)."""

    preemptor: PodInfo
    candidates: tuple[Candidate, ...]  # best first; the rest in the same order are the fallbacks
    potential_nodes: int  # nodes where preemption might help
    examined_nodes: int  # of those, how many the dry run simulated
    # pod key -> node: where room is made for each pod (for a gang, its missing members; else the preemptor)
    nominations: dict[str, str] = field(default_factory=dict)

    @property
    def best(self) -> Candidate:
        return self.candidates[0]


class DefaultPreemption:
    name = NAME

    def __init__(self, args: DefaultPreemptionArgs, handle: FrameworkHandle) -> None:
        self.args = args
        self.handle = handle
        self.rng = random.Random()

    @classmethod
    def new(cls, args: BaseModel | None, handle: FrameworkHandle) -> DefaultPreemption:
        return cls(plugin_args(NAME, args, DefaultPreemptionArgs), handle)

    # ------------------------------------------------------------------ PostFilter
    def post_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, diagnosis: Diagnosis
    ) -> tuple[PostFilterResult | None, Status]:
        eligible, why = self.eligible(pod, snapshot, diagnosis)
        if not eligible:
            return None, Status.unschedulable(f"preemption: {why}")
        try:
            decision, failures = self.find(state, pod, snapshot, diagnosis)
        except SimulationError as exc:
            return None, Status.error(f"preemption: {exc.status.message}")
        if decision is None:
            # A FitError over the nodes; the empty nomination clears the pod's old one.
            return PostFilterResult(""), Status.unschedulable(f"preemption: {failures.message()}")
        if pod.gang is not None:
            try:
                decision, why = self.for_gang(state, pod, snapshot, diagnosis, decision)
            except SimulationError as exc:
                return None, Status.error(f"preemption: {exc.status.message}")
            if decision is None:
                return PostFilterResult(""), Status.unschedulable(f"preemption: {why}")
        state.write(DECISION, decision)
        best = decision.best
        # kube-scheduler says nothing here on success; the outcome in the FailedScheduling note tells users why
        # the pod waits (and the Preempted events on the victims name it).
        outcome = (f"preemption: nominated node {best.node_name}, evicting {len(best.victims)} lower-priority "
                   f"pod(s): {', '.join(v.key for v in best.victims)}.")
        return PostFilterResult(best.node_name), Status(Code.SUCCESS, (outcome,))

    def eligible(self, pod: PodInfo, snapshot: Snapshot, diagnosis: Diagnosis) -> tuple[bool, str]:
        """PodEligibleToPreemptOthers."""
        if pod.preempt_never:
            return False, NOT_ELIGIBLE_NEVER
        # The scheduler's own nomination counts at once; the pod's status follows a moment later.
        nominated_name = snapshot.nominations.get(pod.key) or pod.nominated_node_name
        nominated = snapshot.node_by_name(nominated_name) if nominated_name else None
        if nominated is not None:
            unresolvable = diagnosis.rows_rejected_with(Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
            if nominated.index in unresolvable:
                return True, ""
            for key, record in nominated.pods.items():
                terminating = record.pod.deleting or key in snapshot.evicting
                if record.pod.priority < pod.priority and terminating:
                    return False, NOT_ELIGIBLE_TERMINATING
        return True, ""

    def for_gang(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, diagnosis: Diagnosis, first: PreemptionDecision
    ) -> tuple[PreemptionDecision | None, str]:
        """All or none for a gang: simulate placing every member the gang still needs (each like this pod)
        after this pod's victims are gone, preempting more where a member fits nowhere; the decision then
        evicts the victims of all of them at once and nominates a node for each. None (and why) when the
        gang cannot be completed even so: then nothing is evicted."""
        assert pod.gang is not None
        gang = resolve(pod.gang, snapshot, pod.creation_timestamp)
        members = member_keys(snapshot, gang.key)
        pending = sorted(k for k in members if k not in snapshot.records and k != pod.key and k in snapshot.pods)
        missing = max(gang.min_member - assigned_members(snapshot, members), 1)  # this pod included
        sim = state.clone()
        best = first.best
        chosen: set[str] = {v.key for v in best.victims}
        victims = list(best.victims)
        nominations = {pod.key: best.node_name}
        self._apply(sim, pod, snapshot, best.row, best.victims)
        all_rows = snapshot.node_indices()
        for member in pending[: missing - 1]:
            fits, status = self.handle.run_filters(sim, pod, snapshot, all_rows)
            if not status.is_success():
                raise SimulationError(status)
            if fits.size:
                row = int(fits[0])
                self._apply(sim, pod, snapshot, row, ())
            else:
                found, _ = self.find(sim, pod, snapshot, diagnosis, exclude=frozenset(chosen))
                if found is None:
                    placed = len(nominations)
                    return None, (f"pod group {gang.key} needs {missing} more member(s) placed, only {placed} fit "
                                  f"even after preemption; nothing preempted")
                row = found.best.row
                victims += found.best.victims
                chosen.update(v.key for v in found.best.victims)
                self._apply(sim, pod, snapshot, row, found.best.victims)
            nominations[member] = snapshot.node_name(row)
        whole = Candidate(best.row, best.node_name, tuple(victims), best.num_pdb_violations,
                          VictimSummary.of(victims, best.num_pdb_violations, self.handle.clock.now()))
        return PreemptionDecision(pod, (whole,), first.potential_nodes, first.examined_nodes, nominations), ""

    def _apply(self, sim: CycleState, pod: PodInfo, snapshot: Snapshot, row: int, victims: Sequence[PodInfo]) -> None:
        """In the simulation: the victims leave node `row` and a pod like `pod` takes their place."""
        if victims:
            rows = np.full(len(victims), row, np.intp)
            check_status(self.handle.run_pre_filter_extension_remove_pods(sim, pod, snapshot, rows, list(victims)))
        at = np.asarray([row], np.intp)
        check_status(self.handle.run_pre_filter_extension_add_pods(sim, pod, snapshot, at, [pod]))

    def find(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, diagnosis: Diagnosis, *,
        exclude: frozenset[str] = frozenset(),
    ) -> tuple[PreemptionDecision | None, Diagnosis]:
        """The ranked candidates, or None and why no node is one (as a FitError over all nodes)."""
        all_rows = snapshot.node_indices()
        failures = Diagnosis(int(all_rows.size))
        unresolvable = diagnosis.rows_rejected_with(Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
        potential = np.setdiff1d(all_rows, unresolvable, assume_unique=True).astype(np.intp)
        examined = 0
        found: list[Candidate] = []
        if potential.size:
            wanted = num_candidates(int(potential.size), self.args.min_candidate_nodes_percentage,
                                    self.args.min_candidate_nodes_absolute)
            offset = self.rng.randrange(int(potential.size))
            ordered = np.concatenate([potential[offset:], potential[:offset]])
            found, examined = self._dry_run(state, pod, snapshot, ordered, wanted=wanted, failures=failures,
                                            exclude=exclude)
        if not found:
            seen = np.unique(np.concatenate([r.rows for r in failures.rejections] or [np.zeros(0, np.intp)]))
            absent = np.setdiff1d(all_rows, seen, assume_unique=True).astype(np.intp)
            failures.add_rows("", NOT_HELPFUL, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, absent)
            return None, failures
        order = rank([c.summary for c in found])
        ranked = tuple(found[i] for i in order)
        return PreemptionDecision(pod, ranked, int(potential.size), examined, {pod.key: ranked[0].node_name}), failures

    def _dry_run(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, ordered: IndexArray, *, wanted: int,
        failures: Diagnosis, exclude: frozenset[str],
    ) -> tuple[list[Candidate], int]:
        """Simulate nodes in `ordered` in windows until `wanted` candidates (one without violations)."""
        now = self.handle.clock.now()
        budgets = list(snapshot.disruption_budgets.values())
        may_evict = _MayEvict(pod, exclude)
        found: list[Candidate] = []
        examined = 0
        window = wanted
        while examined < ordered.size:
            rows = ordered[examined : examined + window]
            result = select_victims(self.handle, state, pod, snapshot, rows, budgets=budgets, may_evict=may_evict,
                                    now=now)
            failures.rejections.extend(result.failures.rejections)
            for candidate in result.candidates:
                found.append(candidate)
                clean = sum(1 for c in found if c.num_pdb_violations == 0)
                if clean and len(found) >= wanted:
                    # Stop where a node-by-node search would have stopped.
                    stop = int(np.flatnonzero(rows == candidate.row)[0]) + 1
                    return found, examined + stop
            examined += int(rows.size)
            window *= 2
        return found, examined


class _MayEvict:
    """Whether a pod may be a victim of `preemptor`: lower priority, and never a gang sibling."""

    __slots__ = ("exclude", "gang", "priority")

    def __init__(self, preemptor: PodInfo, exclude: frozenset[str] = frozenset()) -> None:
        self.priority = preemptor.priority
        self.gang = preemptor.gang.key if preemptor.gang is not None else None
        self.exclude = exclude  # already chosen for another member of the gang

    def __call__(self, victim: PodInfo) -> bool:
        if victim.priority >= self.priority or victim.key in self.exclude:
            return False
        return self.gang is None or victim.gang is None or victim.gang.key != self.gang
