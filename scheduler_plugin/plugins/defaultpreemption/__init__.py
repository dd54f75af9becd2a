"""DefaultPreemption: the PostFilter that takes room back from lower-priority pods."""

from scheduler_plugin.plugins.defaultpreemption.args import DefaultPreemptionArgs
from scheduler_plugin.plugins.defaultpreemption.dryrun import Candidate
from scheduler_plugin.plugins.defaultpreemption.plugin import (
    DECISION,
    NAME,
    DefaultPreemption,
    PreemptionDecision,
)

__all__ = ["DECISION", "NAME", "Candidate", "DefaultPreemption", "DefaultPreemptionArgs", "PreemptionDecision"]
