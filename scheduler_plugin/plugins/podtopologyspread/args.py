"""PodTopologySpreadArgs (kubescheduler.config.k8s.io/v1), with kube-scheduler's defaults and validation
(pkg/scheduler/apis/config/validation/validation_pluginargs.go, ValidatePodTopologySpreadArgs)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from common.api import constants as c

# metav1validation.ValidateLabelName: an optional DNS subdomain prefix and "/", then a name of at most 63.
_LABEL_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                         r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True)


class DefaultConstraint(_Args):
    """A v1.TopologySpreadConstraint applied to pods without their own; its selector is the pod's workload's."""

    max_skew: int = Field(gt=0)
    topology_key: str
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"]
    min_domains: int | None = Field(default=None, ge=1)
    node_affinity_policy: Literal["Honor", "Ignore"] | None = None
    node_taints_policy: Literal["Honor", "Ignore"] | None = None
    match_label_keys: list[str] = Field(default_factory=list)
    label_selector: Any = None

    @field_validator("topology_key")
    @classmethod
    def _label_name(cls, value: str) -> str:
        if not value:
            raise ValueError("can not be empty")
        if _LABEL_NAME.match(value) is None or len(value.rsplit("/", 1)[0]) > 253:
            raise ValueError(f"{value!r} is not a valid label name")
        return value

    @field_validator("label_selector")
    @classmethod
    def _no_selector(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError("constraint must not define a selector, as they deduced for each pod")
        return value


# kube-scheduler's systemDefaultConstraints (podtopologyspread/plugin.go): for pods of a Service, ReplicaSet,
# StatefulSet or ReplicationController without constraints of their own.
SYSTEM_DEFAULT_CONSTRAINTS = (
    DefaultConstraint(max_skew=3, topology_key=c.LABEL_HOSTNAME, when_unsatisfiable="ScheduleAnyway"),
    DefaultConstraint(max_skew=5, topology_key=c.LABEL_TOPOLOGY_ZONE, when_unsatisfiable="ScheduleAnyway"),
)


class PodTopologySpreadArgs(_Args):
    default_constraints: list[DefaultConstraint] = Field(default_factory=list)
    defaulting_type: Literal["System", "List"] = "System"

    @model_validator(mode="after")
    def _consistent(self) -> PodTopologySpreadArgs:
        if self.defaulting_type == "System" and self.default_constraints:
            raise ValueError("defaultingType: System is invalid when .defaultConstraints are not empty (use List)")
        seen: set[tuple[str, str]] = set()
        for i, constraint in enumerate(self.default_constraints):
            pair = (constraint.topology_key, constraint.when_unsatisfiable)
            if pair in seen:
                raise ValueError(f"defaultConstraints[{i}]: Duplicate value: {{{pair[0]}, {pair[1]}}}")
            seen.add(pair)
        return self

    @property
    def constraints(self) -> tuple[DefaultConstraint, ...]:
        """The default constraints in effect (the system's when defaultingType is System)."""
        return SYSTEM_DEFAULT_CONSTRAINTS if self.defaulting_type == "System" else tuple(self.default_constraints)
