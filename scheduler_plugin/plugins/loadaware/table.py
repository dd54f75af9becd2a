"""Per-node LoadAware state as numpy arrays, refreshed lazily from the snapshot.

Arrays are resource-major, `(resources, rows)`, like the snapshot's. Everything here
depends only on the node, its pods and its NodeMetric — not on the pod being
scheduled nor on the current time — so a row is refreshed only when the snapshot's
generation counter for it changed (a pod placed or removed there, a new NodeMetric, a
node update), and the refresh itself is incremental: the node's static part is
recomputed only when the Node object changed, and per-pod contributions only for pods
that came or went since the last refresh (all of them when the NodeMetric changed).

This is Koordinator's assign cache: pods placed since the last NodeMetric report add
their estimate (`delta`) on top of the measured usage. The `base_*` arrays hold, per
filter/score path, "usage + delta, or the sum of estimates when that usage is missing".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from common.api import constants as c
from common.api.nodedigest import allocatable_with_raw
from common.api.nodemetric_digest import NodeMetricDigest
from common.api.pod import PriorityClass
from common.api.quantity import MAX_CONSUMER_UNITS
from common.api.wire import GoDuration
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import NodeInfo, PodRecord, Snapshot
from scheduler_plugin.plugins.loadaware.args import LoadAwareSchedulingArgs
from scheduler_plugin.plugins.loadaware.formulas import estimate_pod, not_yet_reflected, threshold_limits
from scheduler_plugin.plugins.loadaware.nodeload import NodeLoads

ANNOTATION_ESTIMATED_SCALING_FACTORS = "scheduling.koordinator.sh/load-estimated-scaling-factors"
ANNOTATION_SECONDS_AFTER_SCHEDULED = "scheduling.koordinator.sh/load-estimated-seconds-after-pod-scheduled"
ANNOTATION_SECONDS_AFTER_INITIALIZED = "scheduling.koordinator.sh/load-estimated-seconds-after-initialized"

IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class NodeThresholds:
    """The usage-threshold profile of one node: args, overridden group by group by the node annotation."""

    usage: Mapping[str, int]
    prod: Mapping[str, int]
    aggregated: Mapping[str, int]
    aggregation_type: str
    aggregated_window: float | None  # seconds; None/0 = longest window with data

    @property
    def aggregated_enabled(self) -> bool:
        return bool(self.aggregated) and bool(self.aggregation_type)


def node_thresholds(annotations: Mapping[str, str], args: LoadAwareSchedulingArgs) -> NodeThresholds:
    """generateUsageThresholdsFilterProfile: each non-empty group of the annotation replaces the args' group."""
    agg = args.aggregated
    base = NodeThresholds(
        usage=args.usage_thresholds,
        prod=args.prod_usage_thresholds,
        aggregated=agg.usage_thresholds if agg is not None and agg.filter_enabled else {},
        aggregation_type=agg.usage_aggregation_type if agg is not None and agg.filter_enabled else "",
        aggregated_window=(agg.usage_aggregated_duration.seconds if agg and agg.usage_aggregated_duration else None),
    )
    raw = annotations.get(c.ANNOTATION_USAGE_THRESHOLDS)
    if not raw:
        return base
    try:
        custom = json.loads(raw)
        usage = _int_map(custom.get("usageThresholds"))
        prod = _int_map(custom.get("prodUsageThresholds"))
        agg_raw = custom.get("aggregatedUsage") or {}
        agg_thresholds = _int_map(agg_raw.get("usageThresholds"))
        agg_type = str(agg_raw.get("usageAggregationType") or "")
        window_raw = agg_raw.get("usageAggregatedDuration")
        window = GoDuration.parse(window_raw).seconds if window_raw else None
    except (ValueError, TypeError, AttributeError, OverflowError, RecursionError):
        return base  # Koordinator falls back to the args when the annotation does not parse
    use_custom_agg = bool(agg_thresholds) and bool(agg_type)
    return NodeThresholds(
        usage=usage or base.usage,
        prod=prod or base.prod,
        aggregated=agg_thresholds if use_custom_agg else base.aggregated,
        aggregation_type=agg_type if use_custom_agg else base.aggregation_type,
        aggregated_window=window if use_custom_agg else base.aggregated_window,
    )


def _int_map(value: object) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError("expected an object")
    out = {str(k): int(v) for k, v in value.items()}
    if any(not 0 <= v <= MAX_CONSUMER_UNITS for v in out.values()):
        raise ValueError("threshold out of range")
    return out


@dataclass(slots=True, eq=False)
class _PodShare:
    """What one assigned pod adds to its node's sums (valid while pod, record and NodeMetric stay the same)."""

    record: PodRecord
    pod: PodInfo
    estimate: IntArray
    usage: IntArray | None  # measured in the NodeMetric's podsMetric
    delta: IntArray
    prod_usage: IntArray | None
    prod_delta: IntArray | None
    contribution: IntArray | None = None  # LoadTable.contribution, computed on first use


@dataclass(slots=True, eq=False)
class _Row:
    node_raw: object = None  # identity of the Node JSON the static part was computed from
    load: NodeMetricDigest | None = None
    prod: bool = False  # prod usage is needed on this node (prod thresholds or prod scoring)
    thresholds: NodeThresholds | None = None
    pods: dict[str, _PodShare] = field(default_factory=dict)
    node_usage: IntArray | None = None
    agg_filter: IntArray | None = None
    agg_score: IntArray | None = None
    system: IntArray | None = None
    estimated: IntArray | None = None
    delta: IntArray | None = None
    prod_usage: IntArray | None = None
    prod_delta: IntArray | None = None


class LoadTable:
    """Arrays over (the plugin's resource vector) × (snapshot rows)."""

    def __init__(self, args: LoadAwareSchedulingArgs) -> None:
        self.args = args
        self.resources = args.resource_vector()
        self.position = {name: i for i, name in enumerate(self.resources)}
        self._prod_in_args = bool(args.prod_usage_thresholds) or args.score_according_prod_usage
        self._snapshot_uid = -1
        self._state: list[_Row] = []
        self._estimates: dict[str, tuple[PodInfo, IntArray]] = {}
        self._allocate(0)

    def _allocate(self, rows: int) -> None:
        r = len(self.resources)

        def ints() -> IntArray:
            return np.zeros((r, rows), np.int64)

        def flags() -> BoolArray:
            return np.zeros(rows, np.bool_)

        self.generation = np.full(rows, -1, np.int64)
        self.allocatable = ints()
        self.has_metric = flags()  # a NodeMetric object exists for the node
        self.has_status = flags()  # ... and its status.nodeMetric is set
        self.base_usage = ints()  # nodeUsage (empty = 0) + delta
        self.base_agg_filter = ints()  # the node's aggregated filter usage + delta, or Σ estimates
        self.base_agg_score = ints()  # the args' aggregated score usage + delta, or Σ estimates
        self.base_prod = ints()  # prod pods' usage (+ system usage) + prod delta
        # Precomputed for the filter: allocatable as float (+inf when 0) and thresholds as
        # usage-% limits (threshold + 0.5, +inf when off), so a cycle does one divide and one compare.
        self.allocatable_f = np.full((r, rows), np.inf)
        self.limit_usage = np.full((r, rows), np.inf)
        self.limit_prod = np.full((r, rows), np.inf)
        self.limit_aggregated = np.full((r, rows), np.inf)
        self.update_time = np.full(rows, -np.inf)  # status.updateTime (epoch seconds); −inf: none
        self.has_prod_thr = flags()  # some prod threshold is not 0
        self.agg_filter_enabled = flags()
        self.usage_thr_on = flags()  # some usage threshold is not 0 (all 0: the filter is off)
        self.agg_thr_on = flags()  # some aggregated threshold is not 0
        self._state = [_Row() for _ in range(rows)]

    # ------------------------------------------------------------------ per pod
    def vector(self, amounts: Mapping[str, int]) -> IntArray:
        vec = np.zeros(len(self.resources), np.int64)
        for name, amount in amounts.items():
            pos = self.position.get(name)
            if pos is not None:
                vec[pos] = amount
        return vec

    def estimate(self, pod: PodInfo) -> IntArray:
        """The default estimator's vector for a pod, cached per PodInfo."""
        cached = self._estimates.get(pod.key)
        if cached is not None and cached[0] is pod:
            return cached[1]
        factors = dict(self.args.estimated_scaling_factors)
        if self.args.allow_customize_estimation:
            factors.update(_custom_factors(pod))
        vec = self.vector(estimate_pod(pod.requests, pod.limits, factors, pod.koord_priority_class))
        self._estimates[pod.key] = (pod, vec)
        return vec

    def _deadline(self, pod: PodInfo, assigned_at: float) -> float | None:
        """Until when a pod is estimated regardless of its measured usage (estimatedSeconds* args/annotations)."""
        after_scheduled = self.args.estimated_seconds_after_pod_scheduled
        after_initialized = self.args.estimated_seconds_after_initialized
        if self.args.allow_customize_estimation:
            after_scheduled = _int_annotation(pod, ANNOTATION_SECONDS_AFTER_SCHEDULED, after_scheduled)
            after_initialized = _int_annotation(pod, ANNOTATION_SECONDS_AFTER_INITIALIZED, after_initialized)
        if pod.initialized_at is not None and after_initialized is not None:
            return pod.initialized_at + after_initialized
        if after_scheduled is not None:
            return assigned_at + after_scheduled
        return None

    def _share(self, record: PodRecord, load: NodeMetricDigest, prod: bool) -> _PodShare:
        pod = record.pod
        estimate = self.estimate(pod)
        entry = load.pod_usages.get(pod.key)
        measured = entry if entry is not None and entry.usage else None  # an empty podUsage is no measurement
        usage = self.vector(measured.usage) if measured is not None else None
        deadline = self._deadline(pod, record.assigned_at)
        reflected = not not_yet_reflected(
            measured is not None, record.assigned_at, load.update_time, load.report_interval, deadline
        )
        delta = np.zeros_like(estimate) if reflected else np.maximum(estimate - (usage if usage is not None else 0), 0)
        prod_usage = prod_delta = None
        if prod and pod.koord_priority_class is PriorityClass.PROD:
            # Prod usage counts only pods koordlet also reported as prod.
            prod_measured = usage if measured is not None and measured.priority == PriorityClass.PROD.value else None
            prod_usage = prod_measured if prod_measured is not None else np.zeros_like(estimate)
            prod_reflected = not not_yet_reflected(
                prod_measured is not None, record.assigned_at, load.update_time, load.report_interval, deadline
            )
            prod_delta = np.zeros_like(estimate) if prod_reflected else np.maximum(estimate - prod_usage, 0)
        return _PodShare(record, pod, estimate, usage, delta, prod_usage, prod_delta)

    def contribution(self, i: int, pod: PodInfo) -> IntArray:
        """What `pod` adds to row i's (base_usage, base_agg_filter, base_prod), concatenated.

        For a pod accounted on the node: its measured usage plus its not-yet-reflected estimate
        (or its estimate where the node's usage is missing), and its prod share. For a pod that
        is not there (a nominated pod): its estimate, as for a pod just placed. Zeros for a node
        without a NodeMetric (the filter does not check it). Call `sync` first."""
        r = len(self.resources)
        row = self._state[i] if i < len(self._state) else None
        if row is None or row.load is None:
            return np.zeros(3 * r, np.int64)
        share = row.pods.get(pod.key)
        if share is not None and share.contribution is not None:
            return share.contribution
        out = np.zeros(3 * r, np.int64)
        if share is None:
            estimate = self.estimate(pod)
            out[: 2 * r] = np.tile(estimate, 2)
            if row.prod and pod.koord_priority_class is PriorityClass.PROD:
                out[2 * r :] = estimate
            return out
        measured_and_delta = share.delta + (share.usage if share.usage is not None else 0)
        out[:r] = measured_and_delta if row.node_usage is not None else share.estimate
        out[r : 2 * r] = measured_and_delta if row.agg_filter is not None else share.estimate
        if share.prod_usage is not None and share.prod_delta is not None:
            out[2 * r :] = share.prod_usage + share.prod_delta
        share.contribution = out  # valid as long as the share: a new NodeMetric makes new shares
        return out

    # ------------------------------------------------------------------ sync
    def sync(self, snapshot: Snapshot) -> None:
        """Bring every row up to date with the snapshot (only changed rows are touched)."""
        slots = snapshot.num_slots
        if snapshot.uid != self._snapshot_uid:
            self._estimates.clear()
            self._allocate(max(slots, 16))
            self._snapshot_uid = snapshot.uid
        elif len(self.generation) < slots:
            self._grow(max(slots, 2 * len(self.generation)))
        dirty = np.flatnonzero(self.generation[:slots] != snapshot.generation)
        loads = snapshot.store(NodeLoads)
        for i in dirty:
            self._refresh(snapshot, loads, int(i))
        self.generation[:slots] = snapshot.generation
        if len(self._estimates) > 4 * max(len(snapshot.pods), 1024):
            self._estimates = {k: v for k, v in self._estimates.items() if k in snapshot.pods}

    def _grow(self, rows: int) -> None:
        keep = len(self.generation)
        old = {name: value for name, value in vars(self).items() if isinstance(value, np.ndarray)}
        state = self._state
        self._allocate(rows)
        for name, arr in old.items():
            getattr(self, name)[..., :keep] = arr[..., :keep]
        self._state[:keep] = state

    def _refresh(self, snapshot: Snapshot, loads: NodeLoads, i: int) -> None:
        row = self._state[i]
        try:
            node = snapshot.node(i)
        except KeyError:
            self._state[i] = _Row()  # a removed node: an empty row, never a candidate
            self._clear_load(i)
            self.allocatable[:, i] = 0
            self.allocatable_f[:, i] = np.inf
            return
        static_changed = node.raw is not row.node_raw
        if static_changed:
            row.node_raw = node.raw
            row.thresholds = thresholds = node_thresholds(node.annotations, self.args)
            self.allocatable[:, i] = self.vector(allocatable_with_raw(node.allocatable, node.raw_allocatable))
            self.allocatable_f[:, i] = np.where(self.allocatable[:, i] == 0, np.inf, self.allocatable[:, i])
            usage_thr, prod_thr = self.vector(thresholds.usage), self.vector(thresholds.prod)
            agg_thr = self.vector(thresholds.aggregated)
            self.limit_usage[:, i] = threshold_limits(usage_thr)
            self.limit_prod[:, i] = threshold_limits(prod_thr)
            self.limit_aggregated[:, i] = threshold_limits(agg_thr)
            self.has_prod_thr[i] = bool(prod_thr.any())
            self.agg_filter_enabled[i] = thresholds.aggregated_enabled
            self.usage_thr_on[i] = bool(usage_thr.any())
            self.agg_thr_on[i] = bool(agg_thr.any())
        load = loads.get(node.name)
        if load is None:
            row.load, row.pods = None, {}
            self._clear_load(i)
            return
        prod = self._prod_in_args or bool(self.has_prod_thr[i])
        if static_changed or load is not row.load or prod != row.prod:
            self._reset_load(row, load, prod)
        self._update_pods(row, node, load)
        self._write(i, row, load)

    def _clear_load(self, i: int) -> None:
        self.has_metric[i] = self.has_status[i] = False
        self.update_time[i] = -np.inf
        for arr in (self.base_usage, self.base_agg_filter, self.base_agg_score, self.base_prod):
            arr[:, i] = 0

    def _reset_load(self, row: _Row, load: NodeMetricDigest, prod: bool) -> None:
        """The NodeMetric (or how it is read) changed: recompute its vectors and every pod's share."""
        assert row.thresholds is not None
        row.load, row.prod, row.pods = load, prod, {}
        zero = np.zeros(len(self.resources), np.int64)
        row.estimated, row.delta, row.prod_usage, row.prod_delta = zero.copy(), zero.copy(), zero.copy(), zero.copy()
        row.node_usage = self.vector(load.node_usage) if load.node_usage is not None else None
        row.agg_filter = row.agg_score = None
        if row.thresholds.aggregated_enabled:
            usage = load.aggregated_usage(row.thresholds.aggregation_type, row.thresholds.aggregated_window)
            row.agg_filter = self.vector(usage) if usage is not None else None
        agg = self.args.aggregated
        if agg is not None and agg.score_enabled:
            window = agg.score_aggregated_duration.seconds if agg.score_aggregated_duration else None
            usage = load.aggregated_usage(agg.score_aggregation_type, window)
            row.agg_score = self.vector(usage) if usage is not None else None
        include_system = self.args.prod_usage_include_sys and load.system_usage
        row.system = self.vector(load.system_usage) if include_system and load.system_usage else None

    def _update_pods(self, row: _Row, node: NodeInfo, load: NodeMetricDigest) -> None:
        assert row.estimated is not None and row.delta is not None
        assert row.prod_usage is not None and row.prod_delta is not None
        current = node.pods
        for key in [k for k, share in row.pods.items()
                    if (rec := current.get(k)) is None or rec is not share.record or rec.pod is not share.pod]:
            share = row.pods.pop(key)
            row.estimated -= share.estimate
            row.delta -= share.delta
            if share.prod_usage is not None and share.prod_delta is not None:
                row.prod_usage -= share.prod_usage
                row.prod_delta -= share.prod_delta
        for key, record in current.items():
            if key in row.pods:
                continue
            share = self._share(record, load, row.prod)
            row.pods[key] = share
            row.estimated += share.estimate
            row.delta += share.delta
            if share.prod_usage is not None and share.prod_delta is not None:
                row.prod_usage += share.prod_usage
                row.prod_delta += share.prod_delta

    def _write(self, i: int, row: _Row, load: NodeMetricDigest) -> None:
        assert row.estimated is not None and row.delta is not None
        assert row.prod_usage is not None and row.prod_delta is not None
        self.has_metric[i] = True
        self.has_status[i] = load.has_node_metric
        self.update_time[i] = -np.inf if load.update_time is None else load.update_time
        self.base_usage[:, i] = row.node_usage + row.delta if row.node_usage is not None else row.estimated
        self.base_agg_filter[:, i] = row.agg_filter + row.delta if row.agg_filter is not None else row.estimated
        self.base_agg_score[:, i] = row.agg_score + row.delta if row.agg_score is not None else row.estimated
        prod = row.prod_usage + row.prod_delta
        self.base_prod[:, i] = prod + row.system if row.system is not None else prod


def _custom_factors(pod: PodInfo) -> dict[str, int]:
    raw = pod.annotations.get(ANNOTATION_ESTIMATED_SCALING_FACTORS)
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
        return {str(k): int(v) for k, v in parsed.items() if 0 < int(v) <= 100}
    except (ValueError, TypeError, AttributeError, OverflowError, RecursionError):
        return {}


def _int_annotation(pod: PodInfo, key: str, default: int | None) -> int | None:
    raw = pod.annotations.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        return default
    return value if 0 <= value <= MAX_CONSUMER_UNITS else default
