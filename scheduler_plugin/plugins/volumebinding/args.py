"""VolumeBindingArgs with kube-scheduler's field names, defaults and validation
(pkg/scheduler/apis/config: VolumeBindingArgs; v1 defaults; validation_pluginargs.go).

`shape` is kube-scheduler's storage-capacity scoring curve. kube-scheduler v1.36 accepts it only with
the StorageCapacityScoring feature gate (alpha, off by default) and scores nothing without it; Loadline
has no feature gates, so setting `shape` is what turns the Score on, exactly as the gate does there.
"""

from __future__ import annotations

import itertools

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

MAX_CUSTOM_PRIORITY_SCORE = 10  # config.MaxCustomPriorityScore: shape scores are 0..10, scaled to 0..100


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True)


class UtilizationShapePoint(_Args):
    utilization: int = Field(ge=0, le=100)
    score: int = Field(ge=0, le=MAX_CUSTOM_PRIORITY_SCORE)


class VolumeBindingArgs(_Args):
    # How long PreBind waits for the PV controller (and provisioner) to finish binding; then the pod is rolled
    # back and retried with backoff. 0 does not wait at all (every binding that is not complete at once fails).
    bind_timeout_seconds: int = Field(default=600, ge=0)
    shape: list[UtilizationShapePoint] | None = None

    @field_validator("shape")
    @classmethod
    def _increasing(cls, shape: list[UtilizationShapePoint] | None) -> list[UtilizationShapePoint] | None:
        if shape is None:
            return None
        if not shape:
            raise ValueError("at least one point must be specified")
        for before, after in itertools.pairwise(shape):
            if after.utilization <= before.utilization:
                raise ValueError("utilization values must be sorted in increasing order")
        return shape
