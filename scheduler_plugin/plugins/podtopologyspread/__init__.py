"""PodTopologySpread: kube-scheduler's topologySpreadConstraints, with its default (system) constraints."""

from scheduler_plugin.plugins.podtopologyspread.args import PodTopologySpreadArgs
from scheduler_plugin.plugins.podtopologyspread.plugin import NAME, PodTopologySpread

__all__ = ["NAME", "PodTopologySpread", "PodTopologySpreadArgs"]
