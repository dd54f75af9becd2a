"""LowNodeLoad descheduler: balance nodes by their real usage (Koordinator semantics).

The planning core (this package's exports, entry point :func:`plan_round`) is pure: no API I/O.
The daemon around it (`loadline descheduler`, main.py) lives in adapters/inputs (API objects →
core records), controller (the round loop), evictor (Eviction API, events), health and metrics;
docs/descheduler.md describes it.
"""

from scheduler_plugin.descheduler.anomaly import AnomalyDetector, DetectorState, DetectorStore
from scheduler_plugin.descheduler.args import ArgsError, LowNodeLoadArgs, parse_args, resolve_pools
from scheduler_plugin.descheduler.balance import plan_round
from scheduler_plugin.descheduler.model import (
    NodeMetricSnapshot,
    NodeSnapshot,
    OwnerRef,
    PlannedEviction,
    PodSnapshot,
    PoolSummary,
    RoundPlan,
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
    "NodeSnapshot",
    "OwnerRef",
    "PlannedEviction",
    "PodSnapshot",
    "PoolSummary",
    "RoundPlan",
    "descheduled_event_message",
    "parse_args",
    "plan_round",
    "resolve_pools",
]
