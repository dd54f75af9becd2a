"""A NodeMetric digested once into plain numbers: what the scheduler, descheduler and manager read.

Built from the pydantic model (`nodemetric.py`), so every component validates the object the same
way and agrees on what is wrong with it. Values are in Koordinator's vector unit: `cpu` in
milli-cores, every other resource by value (bytes, count). A digest is always returned; an object
that cannot be used carries its `problem` (a `MalformedObjectError` naming the field), and then
only `node_name` is meaningful.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from common.api.malformed import MalformedObjectError, MalformedReason, from_validation_error
from common.api.nodemetric import DEFAULT_REPORT_INTERVAL_SECONDS, NodeMetric, NodeMetricStatus, ResourceMap
from common.api.pod import scalar

KIND = "NodeMetric"

Usage = dict[str, int]


@dataclass(frozen=True, slots=True)
class PodUsage:
    """One `status.podsMetric[]` entry: the pod's usage and the classes koordlet reported for it."""

    namespace: str
    name: str
    usage: Usage  # empty when the entry has no podUsage
    priority: str = ""  # e.g. "koord-prod"
    qos: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class HostAppUsage:
    """One `status.hostApplicationMetric[]` entry."""

    name: str
    usage: Usage
    priority: str = ""


@dataclass(slots=True)
class NodeMetricDigest:
    node_name: str
    update_time: float | None = None  # status.updateTime, epoch seconds
    report_interval: float = float(DEFAULT_REPORT_INTERVAL_SECONDS)  # spec's reportIntervalSeconds
    has_status: bool = False  # the agent wrote a status at all
    has_node_metric: bool = False  # status.nodeMetric present
    node_usage: Usage | None = None  # None without status.nodeMetric; {} when it has no nodeUsage
    system_usage: Usage | None = None
    # (window seconds, {aggregation type: usage}) in the order koordlet wrote them; cold types left out
    aggregated: tuple[tuple[float, dict[str, Usage]], ...] = ()
    pod_usages: dict[str, PodUsage] = field(default_factory=dict)  # by "namespace/name"
    host_apps: tuple[HostAppUsage, ...] = ()
    # Predicted by the agent (koordlet's peak predictor): what of the Prod pods' requests the node can lend
    # (`prodReclaimableMetric`, read by mid resources) and the Prod tier's peak with the system's
    # (`prodPeakMetric`, read by the `prediction` batch policy). None when absent or empty.
    prod_reclaimable: Usage | None = None
    prod_peak: Usage | None = None
    problem: MalformedObjectError | None = None  # set: the object is unusable, nothing else is filled

    def aggregated_usage(self, aggregation: str, window_seconds: float | None) -> Usage | None:
        """Koordinator's getTargetAggregatedUsage.

        No aggregated windows at all: None (the caller falls back to estimates).
        No window asked (None or 0): the longest window with data for that type, else nodeUsage.
        A given window: that window's data, else None.
        """
        if not self.aggregated:
            return None
        if not window_seconds:
            best: tuple[float, Usage] | None = None
            for seconds, by_type in self.aggregated:
                usage = by_type.get(aggregation)
                if usage and (best is None or seconds > best[0]):
                    best = (seconds, usage)
            return best[1] if best else self.node_usage
        for seconds, by_type in self.aggregated:
            if seconds == window_seconds and by_type.get(aggregation):
                return by_type[aggregation]
        return None


def _usage(resource_map: ResourceMap | None) -> Usage | None:
    """None when the map is absent or empty (a cold aggregation window is `{}`)."""
    if resource_map is None or not resource_map.resources:
        return None
    return {name: scalar(name, q) for name, q in resource_map.resources.items()}


def _node_name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""


def _fill_status(digest: NodeMetricDigest, status: NodeMetricStatus) -> None:
    digest.has_status = bool(status.model_fields_set)
    digest.update_time = status.update_time.timestamp() if status.update_time else None
    info = status.node_metric
    if info is not None:
        digest.has_node_metric = True
        # An empty nodeUsage is a usage of zero (Koordinator vectorises it to zeros), not a missing
        # one: the node is then estimated from the pods not yet reflected only, not from all pods.
        digest.node_usage = _usage(info.node_usage) or {}
        digest.system_usage = _usage(info.system_usage)
        windows = []
        for entry in info.aggregated_node_usages or []:
            if entry.duration is None:
                continue
            by_type = {t: u for t, rm in (entry.usage or {}).items() if (u := _usage(rm)) is not None}
            windows.append((entry.duration.seconds, by_type))
        digest.aggregated = tuple(windows)
    for i, pm in enumerate(status.pods_metric or []):
        if not pm.name or not pm.namespace:
            raise MalformedObjectError(
                "needs a namespace and a name",
                kind=KIND,
                name=digest.node_name,
                field=f"status.podsMetric[{i}]",
                reason=MalformedReason.MISSING_FIELD,
            )
        pod = PodUsage(pm.namespace, pm.name, _usage(pm.pod_usage) or {}, pm.priority or "", pm.qos or "")
        digest.pod_usages[pod.key] = pod
    if status.prod_reclaimable_metric is not None:
        digest.prod_reclaimable = _usage(status.prod_reclaimable_metric.resource)
    if status.prod_peak_metric is not None:
        digest.prod_peak = _usage(status.prod_peak_metric.resource)
    digest.host_apps = tuple(
        HostAppUsage(app.name or "", _usage(app.usage) or {}, app.priority or "")
        for app in status.host_application_metric or []
    )


def digest_node_metric(obj: Mapping[str, Any]) -> NodeMetricDigest:
    """The digest of a NodeMetric as a watch delivers it; never raises on what the cluster holds."""
    name = _node_name(obj)
    try:
        metric = NodeMetric.model_validate(obj)
    except ValidationError as exc:
        return NodeMetricDigest(name, problem=from_validation_error(KIND, name, exc))
    if not name:
        nameless = MalformedObjectError(
            "required", kind=KIND, field="metadata.name", reason=MalformedReason.MISSING_FIELD
        )
        return NodeMetricDigest(name, problem=nameless)
    digest = NodeMetricDigest(name)
    policy = metric.spec.metric_collect_policy if metric.spec else None
    if policy is not None and policy.report_interval_seconds:
        digest.report_interval = float(policy.report_interval_seconds)
    if metric.status is not None:
        try:
            _fill_status(digest, metric.status)
        except MalformedObjectError as exc:
            return NodeMetricDigest(name, problem=exc)
    return digest
