"""A disagreement found beside koord-scheduler (tests/integration/test_koordinator_compat.py): Loadline's
FailedScheduling text ended "... for scheduling.." where koord-scheduler (kube v1.35.2) and kube-scheduler v1.36.3
end "... for scheduling.". Their FitError.Error() appends the PostFilter message as " %v", without a period of its
own; the message DefaultPreemption returns is itself a FitError text that ends in one."""

from __future__ import annotations

import numpy as np

from scheduler_plugin.framework.diagnosis import Diagnosis, NodeRejection
from scheduler_plugin.framework.status import Code

KOORD_SCHEDULER_SAYS = (
    "0/3 nodes are available: 1 node(s) cpu usage exceed threshold, 2 node(s) didn't match Pod's node "
    "affinity/selector. preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, "
    "2 Preemption is not helpful for scheduling."
)


def test_fit_error_message_adds_no_period_after_the_postfilter_message_as_koord_and_kube_scheduler() -> None:
    diagnosis = Diagnosis(
        3,
        [
            NodeRejection("LoadAwareScheduling", "node(s) cpu usage exceed threshold", Code.UNSCHEDULABLE,
                          np.array([0])),
            NodeRejection("NodeAffinity", "node(s) didn't match Pod's node affinity/selector",
                          Code.UNSCHEDULABLE_AND_UNRESOLVABLE, np.array([1, 2])),
        ],
        postfilter_msg="preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, "
        "2 Preemption is not helpful for scheduling.",
    )  # fmt: skip
    assert diagnosis.message() == KOORD_SCHEDULER_SAYS
