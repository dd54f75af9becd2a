"""Coscheduling: gang scheduling with PodGroups (both CRD groups) or labels/annotations only."""

from scheduler_plugin.plugins.coscheduling.args import CoschedulingArgs
from scheduler_plugin.plugins.coscheduling.plugin import NAME, Coscheduling

__all__ = ["NAME", "Coscheduling", "CoschedulingArgs"]
