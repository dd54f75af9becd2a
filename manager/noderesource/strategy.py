"""The batch-relevant view of a merged colocation strategy (wire-form dict from manager.nodeslo)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from manager.noderesource.model import BatchStrategy, CalculatePolicy


def _policy(value: Any) -> CalculatePolicy:
    try:
        return CalculatePolicy(value)
    except ValueError:
        return CalculatePolicy.USAGE  # Koordinator falls back to "usage" for anything it does not know


def batch_strategy_from_colocation(strategy: Mapping[str, Any]) -> BatchStrategy:
    """Read the fields the batch formula needs; the dict is already defaulted and validated."""
    defaults = BatchStrategy()
    return BatchStrategy(
        enable=bool(strategy.get("enable", defaults.enable)),
        cpu_reclaim_threshold_percent=int(
            strategy.get("cpuReclaimThresholdPercent", defaults.cpu_reclaim_threshold_percent)
        ),
        memory_reclaim_threshold_percent=int(
            strategy.get("memoryReclaimThresholdPercent", defaults.memory_reclaim_threshold_percent)
        ),
        cpu_calculate_policy=_policy(strategy.get("cpuCalculatePolicy", defaults.cpu_calculate_policy)),
        memory_calculate_policy=_policy(strategy.get("memoryCalculatePolicy", defaults.memory_calculate_policy)),
        batch_cpu_threshold_percent=strategy.get("batchCPUThresholdPercent"),
        batch_memory_threshold_percent=strategy.get("batchMemoryThresholdPercent"),
        degrade_time_minutes=int(strategy.get("degradeTimeMinutes", defaults.degrade_time_minutes)),
        update_time_threshold_seconds=int(
            strategy.get("updateTimeThresholdSeconds", defaults.update_time_threshold_seconds)
        ),
        resource_diff_threshold=float(strategy.get("resourceDiffThreshold", defaults.resource_diff_threshold)),
    )
