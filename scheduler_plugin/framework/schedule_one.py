"""One pod through one profile: the scheduling cycle and the binding cycle (kube-scheduler's
`schedule_one.go`), over the extension points the `Framework` runs.

Scheduling cycle (serial): PreFilter → Filter over a rotating sample of the nodes →
PostFilter when nothing fits → PreScore → Score → the best node (one picked at random
among those with the highest total, as kube-scheduler's selectHost; the framework's `rng`
is seeded for reproducible runs) → assume in the snapshot → Reserve → Permit. Every
failure after the pod was assumed runs Unreserve on all Reserve plugins in reverse order
and forgets the assumption.

Binding cycle (a coroutine per pod): wait on Permit → PreBind → Bind → PostBind. A pod
rejected while waiting in Permit is rolled back at the moment of rejection, so a whole gang
releases its reservations together.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.diagnosis import NO_NODES_IN_CLUSTER, Diagnosis
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.runtime import Framework, NodeScores, PermitOutcome, narrow_to_pre_filter_result
from scheduler_plugin.framework.snapshot import IndexArray, Snapshot
from scheduler_plugin.framework.status import SUCCESS, Code, Status
from scheduler_plugin.framework.waiting_pods import WaitingPod

log = logging.getLogger(__name__)

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5


def num_feasible_nodes_to_find(percentage: int | None, num_all_nodes: int) -> int:
    """How many feasible nodes to find and score (kube-scheduler's numFeasibleNodesToFind,
    pkg/scheduler/schedule_one.go).

    None or 0 (kube-scheduler's default) is adaptive: all nodes below 100, else
    max(5, 50 − N/125) percent but at least 100 nodes. 100 means every node.
    """
    if (percentage is not None and percentage >= 100) or num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    if not percentage:
        percentage = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    return max(num_all_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


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
    tied_nodes: int = 0  # nodes that shared the best total with the chosen one (itself included)
    clear_nomination: bool = False  # PostFilter found preemption cannot help: drop the pod's nomination

    @property
    def is_assumed(self) -> bool:
        """The pod holds a node (allowed, or waiting in Permit)."""
        return self.node_name is not None and (self.status.is_success() or self.status.is_wait())


# ---------------------------------------------------------------------------- scheduling cycle
def scheduling_cycle(
    framework: Framework, pod: PodInfo, snapshot: Snapshot | None = None, *, record: bool = False
) -> ScheduleResult:
    """Find a node for `pod`, assume it there and run Reserve and Permit.

    Success: the pod may be bound. Wait: it is parked in Permit (see `waiting_pods`).
    Unschedulable: `status.message` is kube-scheduler's FitError text. Error: internal failure.
    With `record`, per-plugin scores are kept for `explain`.
    """
    if snapshot is not None:
        framework.snapshot = snapshot
    snap = framework.snapshot
    state = CycleState()
    num_all = snap.num_nodes
    if num_all == 0:
        return ScheduleResult(pod, Status.error(NO_NODES_IN_CLUSTER), state=state)
    if pod.key in snap.records:
        message = f"pod {pod.key} is already assumed or bound to {snap.node_of(pod.key)}"
        return ScheduleResult(pod, Status.error(message), state=state)
    diagnosis = Diagnosis(num_all)

    allowed, status, narrowing = framework.run_pre_filter(state, pod, snap)
    if status.is_rejected():
        diagnosis.prefilter_msg = status.message
        diagnosis.add_rows(status.plugin, status.message, status.code, snap.node_indices())
        return _unschedulable(framework, state, pod, snap, diagnosis, evaluated=0)
    if not status.is_success():
        return ScheduleResult(pod, status, state=state)
    status = _add_nominated_pods(framework, state, pod, snap)
    if not status.is_success():
        return ScheduleResult(pod, status, state=state)
    candidates = narrow_to_pre_filter_result(snap, snap.node_indices(), allowed, narrowing, diagnosis)

    started = time.perf_counter()
    feasible, evaluated, status = _find_feasible(framework, state, pod, snap, candidates, diagnosis=diagnosis)
    if not status.is_success():
        return ScheduleResult(pod, status, state=state)
    framework.point_done("Filter", Code.SUCCESS if feasible.size else Code.UNSCHEDULABLE, started)
    if feasible.size == 0:
        return _unschedulable(framework, state, pod, snap, diagnosis, evaluated=evaluated)

    status = framework.run_pre_score(state, pod, snap, feasible)
    if not status.is_success():
        return ScheduleResult(pod, status, state=state)
    # A single feasible node is taken without scoring, as kube-scheduler does.
    scores: NodeScores | None = None
    if feasible.size == 1:
        chosen, tied = int(feasible[0]), 1
    else:
        scores, status = framework.run_score(state, pod, snap, feasible)
        if not status.is_success():
            return ScheduleResult(pod, status, state=state)
        chosen, tied = select_host(scores, framework.rng)
    outcome = _reserve_and_permit(framework, state, pod, snap, snap.node_name(chosen))
    outcome.evaluated_nodes = evaluated
    outcome.feasible_nodes = int(feasible.size)
    if outcome.node_name is not None:
        outcome.tied_nodes = tied
    if record:
        outcome.scores = scores
        if outcome.diagnosis is None:
            outcome.diagnosis = diagnosis  # why the other nodes were left out
    return outcome


def _add_nominated_pods(framework: Framework, state: CycleState, pod: PodInfo, snap: Snapshot) -> Status:
    """Pods nominated to a node (preemption made room for them there) of at least this pod's
    priority count as running there for this cycle, so a lower-priority pod cannot take the
    room while the victims terminate (kube-scheduler's RunFilterPluginsWithNominatedPods)."""
    if not snap.nominations:
        return SUCCESS
    rows, pods = snap.nominated_pods(pod.priority, excluding=pod.key)
    if not pods:
        return SUCCESS
    return framework.run_pre_filter_extension_add_pods(state, pod, snap, rows, pods)


def _find_feasible(
    framework: Framework, state: CycleState, pod: PodInfo, snap: Snapshot, candidates: IndexArray, *,
    diagnosis: Diagnosis,
) -> tuple[IndexArray, int, Status]:
    """Feasible nodes (at most numFeasibleNodesToFind of them) and how many nodes were examined.

    Like kube-scheduler, the search starts at a rotating position and stops once enough
    feasible nodes are found; here it goes in chunks so each chunk is still one
    vectorised pass per Filter plugin. A pod that fits nowhere has every node examined,
    so the FitError counts are complete.
    """
    wanted = num_feasible_nodes_to_find(framework.percentage_of_nodes_to_score, snap.num_nodes)
    total = int(candidates.size)
    if wanted >= total:
        feasible, status = framework.run_filters(state, pod, snap, candidates, diagnosis)
        return feasible, total, status
    start = framework.next_start_node_index % total
    ordered = np.concatenate([candidates[start:], candidates[:start]])
    found: list[IndexArray] = []
    count = examined = 0
    # A window a little larger than needed absorbs the usual share of infeasible nodes
    # in one pass; later windows are sized from the feasibility seen so far.
    chunk = wanted + wanted // 4
    while examined < total and count < wanted:
        window = ordered[examined : examined + chunk]
        feasible, status = framework.run_filters(state, pod, snap, window, diagnosis)
        if not status.is_success():
            return feasible, examined, status
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
    framework.next_start_node_index = (start + examined) % total
    return (np.sort(np.concatenate(found)) if found else candidates[:0]), examined, SUCCESS


def select_host(scores: NodeScores, rng: random.Random) -> tuple[int, int]:
    """The snapshot row of the best-scored node, and how many nodes had that best total.

    kube-scheduler's selectHost: among the nodes with the highest total one is taken at
    random, each with the same chance (its reservoir sampling over the score list; here one
    uniform draw over the ties, which is the same distribution). Identical pods on identical
    nodes therefore spread instead of piling onto the alphabetically first node. Without any
    Score plugin every node scores 1, so all tie."""
    totals = scores.totals
    assert totals is not None
    if not scores.weights:
        totals[:] = 1
    ties = np.flatnonzero(totals == totals.max())
    pick = ties[0] if ties.size == 1 else ties[rng.randrange(ties.size)]
    return int(scores.rows[pick]), int(ties.size)


def _unschedulable(
    framework: Framework, state: CycleState, pod: PodInfo, snap: Snapshot, diagnosis: Diagnosis, *, evaluated: int
) -> ScheduleResult:
    """No node fits: PostFilter may nominate one (after preemption); the result is the FitError. An Error of
    PostFilter (e.g. a Filter failing in preemption's simulation) is logged and said in the FitError: the pod
    stays unschedulable, as with kube-scheduler (schedule_one.go schedulingCycle)."""
    nominated, status = framework.run_post_filter(state, pod, snap, diagnosis)
    if status.code is Code.ERROR:
        log.error("PostFilter failed for %s: %s", pod.key, status.message)
        nominated = None
    diagnosis.postfilter_msg = status.message
    return ScheduleResult(
        pod,
        Status.unschedulable(diagnosis.message()),
        evaluated_nodes=evaluated,
        diagnosis=diagnosis,
        state=state,
        nominated_node_name=nominated.nominated_node_name if nominated is not None and status.is_success() else "",
        clear_nomination=nominated is not None and not nominated.nominated_node_name,
    )


def _reserve_and_permit(
    framework: Framework, state: CycleState, pod: PodInfo, snap: Snapshot, node_name: str
) -> ScheduleResult:
    snap.assume_pod(pod, node_name, framework.clock.now())
    status = framework.run_reserve(state, pod, node_name)
    if not status.is_success():
        rollback(framework, state, pod, node_name, snap)
        return _after_reserve_failure(state, pod, status)
    status, waiting = framework.run_permit(state, pod, node_name)
    if waiting is not None:
        waiting.add_done_callback(_on_permit_done(framework, snap))
        return ScheduleResult(pod, status, node_name, state=state, waiting=waiting)
    if not status.is_success():
        rollback(framework, state, pod, node_name, snap)
        return _after_reserve_failure(state, pod, status)
    return ScheduleResult(pod, SUCCESS, node_name, state=state)


def _after_reserve_failure(state: CycleState, pod: PodInfo, status: Status) -> ScheduleResult:
    if status.is_rejected():
        # kube-scheduler reports a Reserve/Permit rejection as a FitError over that one node.
        diagnosis = Diagnosis(1)
        diagnosis.add_rows(status.plugin, status.message, status.code, np.zeros(1, np.intp))
        return ScheduleResult(pod, Status(Code.UNSCHEDULABLE, (diagnosis.message(),), status.plugin),
                              diagnosis=diagnosis, state=state)
    return ScheduleResult(pod, status, state=state)


def _on_permit_done(framework: Framework, snap: Snapshot) -> Callable[[WaitingPod, Status], None]:
    """A pod waiting in Permit was allowed or rejected: roll a rejected one back at once, then
    tell the listeners (the simulator; the scheduler awaits the waiting pod instead)."""

    def done(waiting: WaitingPod, status: Status) -> None:
        if not status.is_success():
            rollback(framework, waiting.state, waiting.pod, waiting.node_name, snap)
            message = f'pod "{waiting.pod.name}" rejected while waiting on permit: {status.message}'
            status = Status(status.code, (message,), status.plugin)
        outcome = PermitOutcome(waiting.pod, waiting.node_name, status, waiting)
        for listener in list(framework.permit_listeners):
            listener(outcome)

    return done


def rollback(framework: Framework, state: CycleState, pod: PodInfo, node_name: str,
             snap: Snapshot | None = None) -> None:
    """Unreserve on every Reserve plugin (reverse order), then forget the assumed pod."""
    framework.run_unreserve(state, pod, node_name)
    (snap or framework.snapshot).forget_pod(pod.key)


# ---------------------------------------------------------------------------- binding cycle
async def binding_cycle(framework: Framework, result: ScheduleResult) -> Status:
    """Wait on Permit if needed, then PreBind, Bind, PostBind. Failures roll the pod back."""
    if result.node_name is None or result.state is None:
        raise ValueError("binding needs a scheduled result")
    pod, node_name, state = result.pod, result.node_name, result.state
    if result.waiting is not None:
        status = await result.waiting.wait()
        if not status.is_success():
            return status  # rolled back when it was rejected
    snap = framework.snapshot
    status = await framework.run_pre_bind(state, pod, node_name)
    if not status.is_success():
        rollback(framework, state, pod, node_name, snap)
        return status
    bound = await framework.run_bind(state, pod, node_name)
    if not bound.is_success():
        rollback(framework, state, pod, node_name, snap)
        return bound if not bound.is_skip() else Status.error("no bind plugin bound the pod")
    snap.finish_binding(pod.key)
    framework.run_post_bind(state, pod, node_name)
    return SUCCESS
