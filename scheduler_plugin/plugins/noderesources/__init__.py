"""NodeResourcesFit (requests against allocatable, request-based scoring) and
NodeResourcesBalancedAllocation (balance of the requested fractions)."""

from scheduler_plugin.plugins.noderesources.balanced_allocation import (
    NodeResourcesBalancedAllocation,
    NodeResourcesBalancedAllocationArgs,
)
from scheduler_plugin.plugins.noderesources.fit import NAME, NodeResourcesFit, NodeResourcesFitArgs

__all__ = [
    "NAME",
    "NodeResourcesBalancedAllocation",
    "NodeResourcesBalancedAllocationArgs",
    "NodeResourcesFit",
    "NodeResourcesFitArgs",
]
