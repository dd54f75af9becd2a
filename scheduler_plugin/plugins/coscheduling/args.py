"""CoschedulingArgs (scheduler-plugins names and defaults, apis/config/v1/defaults.go)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class CoschedulingArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True)

    permit_waiting_time_seconds: int = Field(default=60, ge=1)
    pod_group_backoff_seconds: int = Field(default=0, ge=0)
    pod_group_reject_percentage: int = Field(default=10, ge=0, le=100)
    # Ours: a gang without minResources is checked against room for its remaining members
    # (sized like its smallest pending member) before any of them reserves a node.
    implicit_min_resources: bool = True
