"""LoadAwareScheduling: Koordinator-compatible load-aware filter and score."""

from scheduler_plugin.plugins.loadaware.args import LoadAwareSchedulingArgs
from scheduler_plugin.plugins.loadaware.plugin import NAME, LoadAwareScheduling

__all__ = ["NAME", "LoadAwareScheduling", "LoadAwareSchedulingArgs"]
