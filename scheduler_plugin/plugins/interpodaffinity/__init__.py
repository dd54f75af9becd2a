"""InterPodAffinity: kube-scheduler's required and preferred pod affinity and anti-affinity."""

from scheduler_plugin.plugins.interpodaffinity.args import InterPodAffinityArgs
from scheduler_plugin.plugins.interpodaffinity.plugin import NAME, InterPodAffinity

__all__ = ["NAME", "InterPodAffinity", "InterPodAffinityArgs"]
