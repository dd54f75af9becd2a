"""LowNodeLoad descheduler core: balance nodes by their real usage (Koordinator semantics).

Pure planning only; no API I/O. Entry point: :func:`plan_round`.
"""

from scheduler_plugin.descheduler.anomaly import AnomalyDetector, DetectorState, DetectorStore
from scheduler_plugin.descheduler.args import ArgsError, LowNodeLoadArgs, parse_args, resolve_pools
from scheduler_plugin.descheduler.balance import plan_round
from scheduler_plugin.descheduler.model import (
    NodeMetricSnapshot,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    NodeSnapshot,
    OwnerRef,
    PlannedEviction,
    PodSnapshot,
    PoolSummary,
    RoundPlan,
    Taint,
    Toleration,
)
from scheduler_plugin.descheduler.reason import EVENT_ACTION, EVENT_REASON, descheduled_event_message

__all__ = [
    "EVENT_ACTION",
    "EVENT_REASON",
    "AnomalyDetector",
    "ArgsError",
    "DetectorState",
    "DetectorStore",
    "LowNodeLoadArgs",
    "NodeMetricSnapshot",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "NodeSnapshot",
    "OwnerRef",
    "PlannedEviction",
    "PodSnapshot",
    "PoolSummary",
    "RoundPlan",
    "Taint",
    "Toleration",
    "descheduled_event_message",
    "parse_args",
    "plan_round",
    "resolve_pools",
]
