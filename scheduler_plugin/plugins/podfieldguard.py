"""PodFieldGuard: a pod that sets a field which decides placement and which Loadline does not
implement is refused out loud, never placed as if the field were not there.

The fields and the reasons are the Refused rows of `framework/podfields.py` (read once per pod
into `PodInfo.refused_fields`). PreFilter answers UnschedulableAndUnresolvable, so the pod gets
`PodScheduled=False` and a FailedScheduling event whose message names the fields and says to
use another scheduler; preemption is not tried. First in the default profile's PreFilters.
"""

from __future__ import annotations

from pydantic import BaseModel

from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.interfaces import FrameworkHandle, PreFilterResult
from scheduler_plugin.framework.podfields import RefusedField
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.framework.status import SUCCESS, Status

NAME = "PodFieldGuard"
MAX_FIELDS_NAMED = 3  # an event note stays readable (and short) however many fields a pod sets
USE_ANOTHER = "set spec.schedulerName to a scheduler that implements it (e.g. default-scheduler)"


def refusal_message(fields: tuple[RefusedField, ...]) -> str:
    named = "; ".join(f"{f.path}: {f.reason}" for f in fields[:MAX_FIELDS_NAMED])
    more = f"; and {len(fields) - MAX_FIELDS_NAMED} more" if len(fields) > MAX_FIELDS_NAMED else ""
    noun = "field" if len(fields) == 1 else "fields"
    return f"pod uses {noun} loadline-scheduler does not implement ({named}{more}); {USE_ANOTHER}"


class PodFieldGuard:
    name = NAME

    @classmethod
    def new(cls, _args: BaseModel | None, _handle: FrameworkHandle) -> PodFieldGuard:
        return cls()

    def events_to_register(self) -> frozenset[str]:
        return frozenset()  # no cluster event helps; a changed pod is queued again anyway

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        if not pod.refused_fields:
            return None, SUCCESS
        return None, Status.unresolvable(refusal_message(pod.refused_fields), plugin=NAME)
