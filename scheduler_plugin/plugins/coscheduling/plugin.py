"""Coscheduling (gang scheduling), after scheduler-plugins and seeds 000/001.

* QueueSort: priority, then the gang's creation time (a lone pod: its first attempt),
  then the gang's key — so a gang's pods leave the queue together.
* PreFilter: reject while the gang is backing off, when fewer than minMember pods exist
  (or would, counting gated ones), and when the cluster cannot hold the rest of the gang
  (minResources, or implicitly room for its remaining members).
* Permit: wait until minMember members hold a node, then allow them all at once.
* Unreserve (any failure after Reserve, including a Permit timeout): reject every
  waiting sibling, so the whole gang releases its reservations.
* PostFilter: when a member fits nowhere, reject the waiting siblings too.
This is what prevents the seed's deadlock: two gangs of 4 on room for 6 end as one gang
placed and the other holding nothing, never 3 + 3.
"""

from __future__ import annotations

from pydantic import BaseModel

from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.diagnosis import Diagnosis
from scheduler_plugin.framework.events import POD_GROUP, RESOURCE_CHANGES
from scheduler_plugin.framework.interfaces import (
    FrameworkHandle,
    PostFilterResult,
    PreFilterResult,
    QueuedPodInfo,
    WatchedResource,
)
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.registry import plugin_args
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.framework.status import SUCCESS, Status
from scheduler_plugin.plugins.coscheduling.args import CoschedulingArgs
from scheduler_plugin.plugins.coscheduling.gangs import (
    GANG_INDEX,
    POD_GROUP_RESOURCES,
    Gang,
    assigned_members,
    gang_key_of,
    member_keys,
    preemptible_requests,
    resolve,
    resource_gap,
    room_for,
    room_per_node,
    smallest_shape,
)
from scheduler_plugin.plugins.coscheduling.state import GONE_GRACE_SECONDS, PRUNE_INTERVAL_SECONDS, GangState

NAME = "Coscheduling"


class Coscheduling:
    name = NAME

    def __init__(self, args: CoschedulingArgs, handle: FrameworkHandle) -> None:
        self.args = args
        self.handle = handle
        self.state = GangState()  # per-gang times, pruned by `maybe_prune`
        self.prune_interval_seconds = PRUNE_INTERVAL_SECONDS
        self.gone_grace_seconds = GONE_GRACE_SECONDS
        self._next_prune = 0.0  # clock time of the next sweep (the first call sweeps)

    @classmethod
    def new(cls, args: BaseModel | None, handle: FrameworkHandle) -> Coscheduling:
        return cls(plugin_args(NAME, args, CoschedulingArgs), handle)

    def watched_resources(self) -> tuple[WatchedResource, ...]:
        return POD_GROUP_RESOURCES

    def events_to_register(self) -> frozenset[str]:
        return RESOURCE_CHANGES | {POD_GROUP}  # the PodGroup changed, or room appeared for the gang

    # ------------------------------------------------------------------ helpers
    def gang_of(self, pod: PodInfo, snapshot: Snapshot | None = None) -> Gang | None:
        if pod.gang is None:
            return None
        self.maybe_prune()
        snap = snapshot if snapshot is not None else self.handle.snapshot
        created = self.state.first_seen.get(pod.gang.key)
        if created is None:
            stamps = [snap.pods[k].creation_timestamp for k in member_keys(snap, pod.gang.key) if k in snap.pods]
            created = min((s for s in stamps if s), default=0.0) or pod.creation_timestamp or self.handle.clock.now()
            self.state.first_seen[pod.gang.key] = created
        return resolve(pod.gang, snap, created)

    def maybe_prune(self) -> int:
        """Forget the bookkeeping of expired and departed gangs, at most once per interval.

        Called from `gang_of`, which every hook that adds an entry goes through, so the
        state cannot grow for long without a sweep; between sweeps it costs a clock read.
        A sweep looks up each gang with an entry in the snapshot's gang index (kept
        current by the snapshot), never scanning the pods. Returns how many entries went."""
        now = self.handle.clock.now()
        if now < self._next_prune:
            return 0
        self._next_prune = now + self.prune_interval_seconds
        members = self.handle.snapshot.pod_index(GANG_INDEX, gang_key_of)
        waiting = {w.pod.gang.key for w in self.handle.waiting_pods if w.pod.gang is not None}
        return self.state.prune(now, lambda key: key in members or key in waiting, self.gone_grace_seconds)

    def _timeout(self, gang: Gang) -> float:
        return gang.timeout_seconds if gang.timeout_seconds else float(self.args.permit_waiting_time_seconds)

    def _reject_waiting_siblings(self, gang_key: str, except_key: str, message: str) -> None:
        for waiting in self.handle.waiting_pods:
            pod = waiting.pod
            if pod.key != except_key and pod.gang is not None and pod.gang.key == gang_key:
                waiting.reject(self.name, message)

    def _mark_failed(self, gang_key: str) -> None:
        self.state.permitted_until.pop(gang_key, None)
        self.state.last_failure[gang_key] = self.handle.clock.now()

    # ------------------------------------------------------------------ QueueSort
    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        return self.sort_key(a) < self.sort_key(b)

    def sort_key(self, queued: QueuedPodInfo) -> tuple[int, float, str, str]:
        """(−priority, since, group id, pod): a gang's pods share everything but the last part."""
        pod = queued.pod
        if pod.gang is None:
            return (-pod.priority, queued.initial_attempt_timestamp or queued.timestamp, pod.key, "")
        gang = self.gang_of(pod)
        assert gang is not None
        # A gang that failed recently queues by its failure time (scheduler-plugins v0.34.7),
        # so a gang that cannot be placed does not keep the head of the queue.
        since = max(gang.created, self.state.last_failure.get(gang.key, 0.0))
        return (-pod.priority, since, "~gang/" + gang.key, pod.key)

    # ------------------------------------------------------------------ PreFilter
    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        if pod.gang_error is not None:
            return None, Status.unresolvable(f"pod {pod.key} has an invalid gang spec: {pod.gang_error}")
        gang = self.gang_of(pod, snapshot)
        if gang is None:
            return None, SUCCESS
        if not gang.has_object:
            return None, Status.unresolvable(f"PodGroup {gang.key} not found")
        now = self.handle.clock.now()
        if self.state.backoff_until.get(gang.key, 0.0) > now:
            return None, Status.unresolvable(f"podGroup {gang.key} failed recently")
        members = member_keys(snapshot, gang.key)
        if len(members) < gang.min_member:
            return None, Status.unresolvable(
                f"pre-filter pod {pod.name} cannot find enough sibling pods, current pods number: {len(members)}, "
                f"minMember of group: {gang.min_member}"
            )
        gated = sum(1 for k in members if k in snapshot.pods and snapshot.pods[k].scheduling_gates)
        if len(members) - gated < gang.min_member:
            return None, Status.unresolvable(
                f"pre-filter pod {pod.name}: {gated} sibling pods are gated, "
                f"fewer than minMember {gang.min_member} can run"
            )
        if self.state.permitted_until.get(gang.key, 0.0) > now:
            return None, SUCCESS
        status = self._capacity_check(snapshot, gang, members, pod)
        if status.is_success():
            self.state.permitted_until[gang.key] = now + self._timeout(gang)
        return None, status

    def _capacity_check(self, snapshot: Snapshot, gang: Gang, members: set[str], pod: PodInfo) -> Status:
        if gang.min_resources:
            gap = resource_gap(snapshot, gang, members)
            if gap:
                return Status.unresolvable(f"PodGroup {gang.key}: resource gap: {gap}")
            return SUCCESS
        if not self.args.implicit_min_resources:
            return SUCCESS
        remaining = gang.min_member - assigned_members(snapshot, members, exclude=pod.key)
        if remaining <= 0:
            return SUCCESS
        pending = [snapshot.pods[k] for k in members if k not in snapshot.records and k in snapshot.pods]
        shape = smallest_shape(snapshot, pending or [pod])
        room = room_for(snapshot, shape) if shape is not None else 0
        if room < remaining and shape is not None:
            # Preemption may take room back from lower-priority pods: then Filter and PostFilter decide
            # (DefaultPreemption places the whole gang or evicts nothing); only when even that cannot make
            # room is the gang unresolvable.
            freed = preemptible_requests(snapshot, pod.priority, gang.key)
            if int(room_per_node(snapshot, snapshot.node_indices(), shape, freed).sum()) >= remaining:
                return SUCCESS
        if room < remaining:
            return Status.unresolvable(
                f"PodGroup {gang.key} needs room for {remaining} more pod(s), the cluster has room for {room}"
            )
        return SUCCESS

    # ------------------------------------------------------------------ PostFilter
    def post_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, diagnosis: Diagnosis
    ) -> tuple[PostFilterResult | None, Status]:
        gang = self.gang_of(pod, snapshot)
        if gang is None:
            return None, Status.unschedulable()  # nothing to add to the FitError for a lone pod
        members = member_keys(snapshot, gang.key)
        assigned = assigned_members(snapshot, members, exclude=pod.key)
        if assigned >= gang.min_member:
            return None, Status.unschedulable()
        missing_share = (gang.min_member - assigned) / gang.min_member
        if missing_share <= self.args.pod_group_reject_percentage / 100:
            # Nearly complete: keep the siblings waiting, this pod may fit after a retry.
            return None, Status.unschedulable(f"PodGroup {gang.key} keeps waiting: {assigned}/{gang.min_member} placed")
        self._reject_waiting_siblings(gang.key, pod.key, "optimistic rejection in PostFilter")
        if self.args.pod_group_backoff_seconds > 0 and len(members) >= gang.min_member:
            self.state.backoff_until[gang.key] = self.handle.clock.now() + self.args.pod_group_backoff_seconds
        self._mark_failed(gang.key)
        return None, Status.unschedulable(
            f"PodGroup {gang.key} gets rejected due to Pod {pod.name} is unschedulable even after PostFilter"
        )

    # ------------------------------------------------------------------ Reserve / Permit
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        if pod.gang is None:
            return
        self._reject_waiting_siblings(pod.gang.key, pod.key, "rejection in Unreserve")
        self._mark_failed(pod.gang.key)

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        snapshot = self.handle.snapshot
        gang = self.gang_of(pod, snapshot)
        if gang is None:
            return SUCCESS, 0.0
        if not gang.has_object:
            return Status.unschedulable(f"PodGroup {gang.key} not found"), 0.0
        members = member_keys(snapshot, gang.key)
        assigned = assigned_members(snapshot, members, exclude=pod.key) + 1  # this pod is placed too
        if assigned >= gang.min_member:
            for waiting in self.handle.waiting_pods:
                if waiting.pod.gang is not None and waiting.pod.gang.key == gang.key:
                    waiting.allow(self.name)
            return SUCCESS, 0.0
        # Bring the siblings forward so the gang fills up before its timeout.
        for key in members:
            if key != pod.key and key not in snapshot.records and key in snapshot.pods:
                state.pods_to_activate[key] = snapshot.pods[key]
        message = f"waiting for {gang.min_member - assigned} more pod(s) of PodGroup {gang.key}"
        return Status.wait(message), self._timeout(gang)
