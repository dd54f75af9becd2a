"""Collectors: one module per source, registered in `registry.COLLECTORS`."""

from agent.collectors.base import Collector, CollectorStats, SeriesErrors, run_collector
from agent.collectors.registry import COLLECTORS, CollectorContext, build_collectors

__all__ = [
    "COLLECTORS",
    "Collector",
    "CollectorContext",
    "CollectorStats",
    "SeriesErrors",
    "build_collectors",
    "run_collector",
]
