"""NodeResourcesFit: requests against allocatable, and request-based scoring."""

from scheduler_plugin.plugins.noderesources.fit import NAME, NodeResourcesFit, NodeResourcesFitArgs

__all__ = ["NAME", "NodeResourcesFit", "NodeResourcesFitArgs"]
