"""A NodeMetric digested into plain numbers for LoadAwareScheduling and the snapshot.

Values use Koordinator's vector unit (cpu milli-cores, others by value). Only what the
scheduler reads is kept: update time, report interval, node/system usage, aggregated
usages by (type, window) and per-pod usage with the priority class koordlet reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from common.api.nodemetric import DEFAULT_REPORT_INTERVAL_SECONDS, NodeMetric, ResourceMap
from common.api.pod import scalar
from scheduler_plugin.framework.k8s_types import InvalidObjectError

Usage = dict[str, int]


def _usage(resource_map: ResourceMap | None) -> Usage | None:
    """None when the map is absent or empty (a cold aggregation window is `{}`)."""
    if resource_map is None or not resource_map.resources:
        return None
    return {name: scalar(name, q) for name, q in resource_map.resources.items()}


@dataclass(slots=True)
class NodeLoad:
    node_name: str
    update_time: float | None = None
    report_interval: float = float(DEFAULT_REPORT_INTERVAL_SECONDS)
    has_node_metric: bool = False  # status.nodeMetric present at all
    node_usage: Usage | None = None
    system_usage: Usage | None = None
    # (window seconds, {aggregation type: usage}) in the order koordlet wrote them
    aggregated: tuple[tuple[float, dict[str, Usage]], ...] = ()
    # "namespace/name" -> (usage, priority class koordlet reported, e.g. "koord-prod")
    pod_usages: dict[str, tuple[Usage, str]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> NodeLoad:
        try:
            metric = NodeMetric.model_validate(obj)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise InvalidObjectError(f"NodeMetric {where}: {first['msg']}") from None
        name = metric.metadata.name
        if not name:
            raise InvalidObjectError("NodeMetric metadata.name: required")
        load = cls(node_name=name)
        policy = metric.spec.metric_collect_policy if metric.spec else None
        if policy is not None and policy.report_interval_seconds:
            load.report_interval = float(policy.report_interval_seconds)
        status = metric.status
        if status is None:
            return load
        load.update_time = status.update_time.timestamp() if status.update_time else None
        info = status.node_metric
        if info is not None:
            load.has_node_metric = True
            # An empty nodeUsage is a usage of zero (Koordinator vectorises it to zeros), not a missing
            # one: the node is then estimated from the pods not yet reflected only, not from all pods.
            load.node_usage = _usage(info.node_usage) or {}
            load.system_usage = _usage(info.system_usage)
            windows = []
            for entry in info.aggregated_node_usages or []:
                if entry.duration is None:
                    continue
                by_type = {t: u for t, rm in (entry.usage or {}).items() if (u := _usage(rm)) is not None}
                windows.append((entry.duration.seconds, by_type))
            load.aggregated = tuple(windows)
        for pm in status.pods_metric or []:
            if pm.name and (usage := _usage(pm.pod_usage)) is not None:
                load.pod_usages[f"{pm.namespace or 'default'}/{pm.name}"] = (usage, pm.priority or "")
        return load

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
