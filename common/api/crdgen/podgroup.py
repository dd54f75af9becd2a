"""PodGroup schemas for scheduling.x-k8s.io and scheduling.sigs.k8s.io."""

from __future__ import annotations

from collections.abc import Sequence

from common.api.crdgen.schema import Schema, date_time, int32, obj, resource_list, string

# --------------------------------------------------------------------------------------------------
# PodGroup (scheduler-plugins)
# --------------------------------------------------------------------------------------------------


def pod_group_schemas(
    *, min_member_minimum: int | None, phases: Sequence[str], with_scheduled: bool
) -> tuple[Schema, Schema]:
    """Spec and status of a scheduler-plugins PodGroup; the two groups differ only in these knobs."""
    spec = obj(
        {
            "minMember": int32(
                "Minimal number of members that must be schedulable together.",
                minimum=min_member_minimum,
            ),
            "minResources": resource_list("Minimal total resources the members need to run."),
            "scheduleTimeoutSeconds": int32("How long members wait in Permit for the group to be complete."),
        },
        "Desired behaviour of the pod group.",
    )
    counters = {
        "running": int32("Number of running pods."),
        "succeeded": int32("Number of pods that reached phase Succeeded."),
        "failed": int32("Number of pods that reached phase Failed."),
    }
    if with_scheduled:
        counters["scheduled"] = int32("Number of pods that have been scheduled.")
    status = obj(
        {
            "phase": string("Current phase: " + ", ".join(phases) + "."),
            "occupiedBy": string("UID of the workload that occupies the group; empty if not initialized."),
            **counters,
            "scheduleStartTime": date_time("When scheduling of the group started."),
        },
        "Observed state of the pod group; may be out of date.",
    )
    return spec, status
