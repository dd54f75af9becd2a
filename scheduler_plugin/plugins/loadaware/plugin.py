"""LoadAwareScheduling: filter nodes whose estimated usage would cross the thresholds,
score by estimated free load (Koordinator's pkg/scheduler/plugins/loadaware/load_aware.go), vectorised over nodes.

estimated usage = base + delta + incoming pod's estimate, where per node
  base  = prod usage (prod pod with prod thresholds), else aggregated usage (when
          aggregated thresholds are configured), else nodeUsage (an empty nodeUsage
          is zero) — or the sum of all assigned pods' estimates when the aggregated
          window asked for is missing;
  delta = estimates of pods placed since the NodeMetric last saw them (the assign cache).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel

from common.api import constants as c
from common.api.nodemetric_digest import stale_reports
from common.api.pod import PriorityClass
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.events import NODE_METRIC, RESOURCE_CHANGES
from scheduler_plugin.framework.filterresult import ALL_PASS, FilterResult, Rejection
from scheduler_plugin.framework.interfaces import FrameworkHandle, PreFilterResult, WatchedResource
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.registry import plugin_args
from scheduler_plugin.framework.row_delta import RowDelta, row_delta
from scheduler_plugin.framework.snapshot import BoolArray, IndexArray, IntArray, Snapshot
from scheduler_plugin.framework.status import SUCCESS, Status
from scheduler_plugin.plugins.loadaware.args import LoadAwareSchedulingArgs
from scheduler_plugin.plugins.loadaware.formulas import (
    combine_scores,
    exceeds_limits,
    least_used_score,
    most_used_score,
)
from scheduler_plugin.plugins.loadaware.nodeload import NodeLoads
from scheduler_plugin.plugins.loadaware.table import LoadTable

NAME = "LoadAwareScheduling"
NODE_METRICS = WatchedResource("NodeMetric", c.SLO_GROUP, c.SLO_VERSION, c.NODEMETRIC_PLURAL, NODE_METRIC, NodeLoads)
REASON_NODE_METRIC_EXPIRED = "node(s) nodeMetric expired"
REASON_USAGE_EXCEED_THRESHOLD = "node(s) {} usage exceed threshold"
REASON_AGGREGATED_USAGE_EXCEED_THRESHOLD = "node(s) {} aggregated usage exceed threshold"
# cycle state: RowDelta over (base_usage | base_agg_filter | base_prod) of pods a simulation added/removed
SIMULATED = "LoadAwareScheduling/simulated"


class LoadAwareScheduling:
    name = NAME

    def __init__(self, args: LoadAwareSchedulingArgs, handle: FrameworkHandle) -> None:
        self.args = args
        self.handle = handle
        self.table = LoadTable(args)
        self._weights = self.table.vector(args.resource_weights)
        self._most_used = args.scoring_strategy.type == "MostUsed"

    @classmethod
    def new(cls, args: BaseModel | None, handle: FrameworkHandle) -> LoadAwareScheduling:
        return cls(plugin_args(NAME, args, LoadAwareSchedulingArgs), handle)

    def watched_resources(self) -> tuple[WatchedResource, ...]:
        return (NODE_METRICS,)  # Koordinator's LoadAware starts a NodeMetric informer

    def events_to_register(self) -> frozenset[str]:
        return RESOURCE_CHANGES | {NODE_METRIC}  # a NodeMetric report (load went down), or room appeared

    def _expired(self, rows: IndexArray) -> BoolArray:
        """The NodeMetrics of these rows too old for nodeMetricExpirationSeconds (`report_staleness`)."""
        now = self.handle.clock.now()
        return stale_reports(self.table.update_time.take(rows), now, self.args.node_metric_expiration_seconds)

    def sync_snapshot(self, snapshot: Snapshot) -> None:
        self.table.sync(snapshot)

    # ------------------------------------------------------------------ PreFilter extensions
    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        return None, SUCCESS  # present so AddPod/RemovePod run in simulations (preemption, nominated pods)

    def add_pods(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: IndexArray,
                 pods: Sequence[PodInfo]) -> Status:
        return self._simulate(state, snapshot, rows, pods, 1)

    def remove_pods(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: IndexArray,
                    pods: Sequence[PodInfo]) -> Status:
        """A removed victim takes its measured usage and its not-yet-reflected estimate with it."""
        return self._simulate(state, snapshot, rows, pods, -1)

    def _simulate(self, state: CycleState, snapshot: Snapshot, rows: IndexArray, pods: Sequence[PodInfo],
                  sign: int) -> Status:
        if not pods:
            return SUCCESS
        t = self.table
        t.sync(snapshot)
        contribution = t.contribution
        shares = np.stack([contribution(i, p) for i, p in zip(rows.tolist(), pods, strict=True)])
        row_delta(state, SIMULATED, snapshot.num_slots, shares.shape[1]).add(rows, shares, sign)
        return SUCCESS

    # ------------------------------------------------------------------ Filter
    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> FilterResult:
        if pod.is_daemonset:
            return ALL_PASS
        t = self.table
        t.sync(snapshot)
        rows = candidates
        # The threshold set Koordinator picks per node: prod (prod pod, prod thresholds set), else
        # aggregated (configured), else plain usage. A set that is all 0 turns the filter off for
        # that node before anything else is looked at, also before the expiry check.
        prod_pod = pod.koord_priority_class is PriorityClass.PROD
        use_prod = t.has_prod_thr.take(rows) if prod_pod else np.zeros(rows.size, np.bool_)
        use_agg = ~use_prod & t.agg_filter_enabled.take(rows)
        enabled = np.where(use_prod, True, np.where(use_agg, t.agg_thr_on.take(rows), t.usage_thr_on.take(rows)))
        checked = enabled & t.has_metric.take(rows)  # nodes without a NodeMetric (no koordlet) are not filtered
        if not checked.any():
            return ALL_PASS
        rejections: list[Rejection] = []
        if self.args.filter_expired_node_metrics:
            expired = checked & self._expired(rows)
            if expired.any() and not self.args.enable_schedule_when_node_metrics_expired:
                rejections.append(Rejection(REASON_NODE_METRIC_EXPIRED, expired))
            checked &= ~expired
        checked &= t.has_status.take(rows)
        if checked.any():
            rejections += self._threshold_rejections(
                state, pod, rows, checked, use_prod=use_prod & checked, use_agg=use_agg & checked)
        if not rejections:
            return ALL_PASS
        return FilterResult.from_rejections(rows.size, rejections)

    def _threshold_rejections(
        self, state: CycleState, pod: PodInfo, rows: IndexArray, checked: BoolArray, *, use_prod: BoolArray,
        use_agg: BoolArray,
    ) -> list[Rejection]:
        t = self.table
        # Per node, the path Koordinator takes: prod usage, else aggregated usage, else nodeUsage.
        r = len(t.resources)
        simulated = state.get(SIMULATED, RowDelta)
        change = None if simulated is None else simulated.take(rows, 3 * r)

        def base(path: int, values: IntArray) -> IntArray:
            taken: IntArray = values.take(rows, axis=1)
            return taken if change is None else taken + change[path * r : (path + 1) * r]

        estimated = base(0, t.base_usage)
        limits = t.limit_usage.take(rows, axis=1)
        if use_agg.any():
            estimated = np.where(use_agg, base(1, t.base_agg_filter), estimated)
            limits = np.where(use_agg, t.limit_aggregated.take(rows, axis=1), limits)
        if use_prod.any():
            estimated = np.where(use_prod, base(2, t.base_prod), estimated)
            limits = np.where(use_prod, t.limit_prod.take(rows, axis=1), limits)
        estimated = estimated + t.estimate(pod)[:, None]
        over = exceeds_limits(estimated, t.allocatable_f.take(rows, axis=1), limits) & checked
        # One reason per node: the first resource (in vector order) over its threshold.
        rejections = []
        seen = np.zeros(rows.size, np.bool_)
        for j, resource in enumerate(t.resources):
            hit = over[j] & ~seen
            if not hit.any():
                continue
            seen |= hit
            plain, aggregated_hit = hit & ~use_agg, hit & use_agg
            if plain.any():
                rejections.append(Rejection(REASON_USAGE_EXCEED_THRESHOLD.format(resource), plain))
            if aggregated_hit.any():
                rejections.append(Rejection(REASON_AGGREGATED_USAGE_EXCEED_THRESHOLD.format(resource), aggregated_hit))
        return rejections

    # ------------------------------------------------------------------ Score
    def score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> IntArray:
        t = self.table
        t.sync(snapshot)
        rows = candidates
        scorable = t.has_metric.take(rows) & t.has_status.take(rows)
        if not scorable.any():
            return np.zeros(rows.size, np.int64)
        scorable &= ~self._expired(rows)
        agg = self.args.aggregated
        if self.args.score_according_prod_usage and pod.koord_priority_class is PriorityClass.PROD:
            used = t.base_prod.take(rows, axis=1)
        elif agg is not None and agg.score_enabled:
            used = t.base_agg_score.take(rows, axis=1)
        else:
            used = t.base_usage.take(rows, axis=1)
        used = used + t.estimate(pod)[:, None]
        allocatable = t.allocatable.take(rows, axis=1)
        per_resource = most_used_score(used, allocatable) if self._most_used else least_used_score(used, allocatable)
        scores = combine_scores(per_resource, self._weights, self.args.dominant_resource_weight, self._most_used)
        return np.where(scorable, scores, 0)
