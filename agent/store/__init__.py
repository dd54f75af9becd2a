"""Sample store: ring buffers, window aggregation and counter rates."""

from agent.store.aggregate import (
    DEFAULT_WINDOWS,
    QUANTILES,
    AggregateReport,
    WindowStats,
    aggregate_windows,
    average_window,
    build_report,
    nearest_rank_index,
)
from agent.store.ring import SampleRing

__all__ = [
    "DEFAULT_WINDOWS",
    "QUANTILES",
    "AggregateReport",
    "SampleRing",
    "WindowStats",
    "aggregate_windows",
    "average_window",
    "build_report",
    "nearest_rank_index",
]
