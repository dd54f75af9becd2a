"""kube-scheduler's `SelectVictimsOnNode`, run for many nodes at once.

Per node: remove every pod the preemptor may evict (PreFilter RemovePod on the cycle
state, never on the snapshot), check the preemptor fits with all Filter plugins, then
reprieve the potential victims one by one, PodDisruptionBudget-violating ones first and
within each group from the most important down: add it back (AddPod) and keep it when the
preemptor still fits, else it is a victim. Step k adds back the k-th potential victim of
every node still in play, so each step is one vectorised Filter pass over those nodes.

That all nodes share one simulated cycle state is sound because every simulated change counts
only for the node it was made on: most Filters judge a node by its own pods (requests,
estimated load), and InterPodAffinity and PodTopologySpread, which count pods across a
topology domain, add a pod's simulated change to the counts only when they judge the node it
was added to or removed from — as kube-scheduler, which gives each node its own copy of the
cycle state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.diagnosis import Diagnosis
from scheduler_plugin.framework.disruption import DisruptionBudget, split_by_violation
from scheduler_plugin.framework.interfaces import FrameworkHandle
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import IndexArray, Snapshot
from scheduler_plugin.framework.status import Code, Status
from scheduler_plugin.plugins.defaultpreemption.ordering import VictimSummary, importance_key

NO_VICTIMS = "No preemption victims found for incoming pod"


class SimulationError(Exception):
    """A PreFilter extension or a Filter failed: the preemption attempt ends with an Error."""

    def __init__(self, status: Status) -> None:
        super().__init__(status.message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node where evicting `victims` (most important first) lets the preemptor fit."""

    row: int
    node_name: str
    victims: tuple[PodInfo, ...]
    num_pdb_violations: int
    summary: VictimSummary


@dataclass(slots=True)
class DryRun:
    candidates: list[Candidate] = field(default_factory=list)  # in the order the nodes were given
    failures: Diagnosis = field(default_factory=lambda: Diagnosis(0))  # why the other nodes are not candidates


def select_victims(
    handle: FrameworkHandle,
    state: CycleState,
    pod: PodInfo,
    snapshot: Snapshot,
    rows: IndexArray,
    *,
    budgets: Sequence[DisruptionBudget],
    may_evict: Callable[[PodInfo], bool],
    now: float,
) -> DryRun:
    """The candidates among `rows`; `state` is left untouched (the simulation works on a clone)."""
    out = DryRun()
    potential: list[list[PodInfo]] = []
    with_victims: list[int] = []
    without: list[int] = []
    for row in rows.tolist():
        pods = [record.pod for record in snapshot.node(row).pods.values() if may_evict(record.pod)]
        if pods:
            pods.sort(key=lambda p: importance_key(p, now))
            potential.append(pods)
            with_victims.append(row)
        else:
            without.append(row)
    out.failures.add_rows("", NO_VICTIMS, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, np.asarray(without, np.intp))
    if not with_victims:
        return out

    sim = state.clone()
    node_rows = np.asarray(with_victims, np.intp)
    counts = np.fromiter((len(p) for p in potential), np.intp, len(potential))
    check_status(handle.run_pre_filter_extension_remove_pods(
        sim, pod, snapshot, np.repeat(node_rows, counts), [p for pods in potential for p in pods]))
    fitting = _feasible(handle.run_filters(sim, pod, snapshot, node_rows, out.failures))
    if fitting.size == 0:
        return out
    # Nodes where even removing every potential victim does not help keep those victims removed
    # in `sim`; no later step looks at those rows.
    keep = np.isin(node_rows, fitting)
    rows_in_play = node_rows[keep]
    orders: list[list[PodInfo]] = []
    violating_counts: list[int] = []
    for pods in (p for p, k in zip(potential, keep.tolist(), strict=True) if k):
        violating, fine = split_by_violation(pods, budgets)
        orders.append(violating + fine)
        violating_counts.append(len(violating))

    victims: list[list[PodInfo]] = [[] for _ in orders]
    violations = [0] * len(orders)
    longest = max(len(o) for o in orders)
    lengths = np.fromiter((len(o) for o in orders), np.intp, len(orders))
    for step in range(longest):
        active = np.flatnonzero(lengths > step)
        step_rows = rows_in_play[active]
        step_pods = [orders[i][step] for i in active.tolist()]
        check_status(handle.run_pre_filter_extension_add_pods(sim, pod, snapshot, step_rows, step_pods))
        fits = np.isin(step_rows, _feasible(handle.run_filters(sim, pod, snapshot, step_rows)))
        if fits.all():
            continue
        lost = np.flatnonzero(~fits)
        lost_pods = [step_pods[i] for i in lost.tolist()]
        check_status(handle.run_pre_filter_extension_remove_pods(sim, pod, snapshot, step_rows[lost], lost_pods))
        for i, victim in zip(active[lost].tolist(), lost_pods, strict=True):
            victims[i].append(victim)
            if step < violating_counts[i]:
                violations[i] += 1

    for i, row in enumerate(rows_in_play.tolist()):
        chosen = victims[i]
        name = snapshot.node_name(row)
        if not chosen:
            # The pod fits with every victim back: the node was not full for it after all.
            out.failures.add_rows("", f"expected at least one victim pod on node {name}", Code.ERROR,
                                  np.asarray([row], np.intp))
            continue
        if violating_counts[i] and violating_counts[i] < len(orders[i]):
            chosen.sort(key=lambda p: importance_key(p, now))
        out.candidates.append(Candidate(row, name, tuple(chosen), violations[i],
                                        VictimSummary.of(chosen, violations[i], now)))
    return out


def _feasible(answer: tuple[IndexArray, Status]) -> IndexArray:
    rows, status = answer
    check_status(status)
    return rows


def check_status(status: Status) -> None:
    if not status.is_success():
        raise SimulationError(status)
