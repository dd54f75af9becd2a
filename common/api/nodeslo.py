"""NodeSLO (`slo.koordinator.sh/v1alpha1`): per-node watermarks rendered by the manager, enforced by the agent."""

from __future__ import annotations

import enum
from typing import Any, ClassVar

from pydantic import Field, field_validator

from common.api.constants import SLO_API_VERSION
from common.api.wire import KubeModel, ObjectMeta


class CPUSuppressPolicy(enum.StrEnum):
    CPUSET = "cpuset"
    CFS_QUOTA = "cfsQuota"


class CPUEvictPolicy(enum.StrEnum):
    EVICT_BY_REAL_LIMIT = "evictByRealLimit"
    EVICT_BY_ALLOCATABLE = "evictByAllocatable"


class ResourceThresholdStrategy(KubeModel):
    """`spec.resourceUsedThresholdWithBE`. Unset fields mean Koordinator's defaults (see `koordinator_defaults`)."""

    enable: bool | None = None
    cpu_suppress_threshold_percent: int | None = None
    cpu_suppress_min_percent: int | None = None
    cpu_suppress_policy: CPUSuppressPolicy | None = None
    memory_evict_threshold_percent: int | None = None
    memory_evict_lower_percent: int | None = None
    memory_allocatable_evict_threshold_percent: int | None = None
    memory_allocatable_evict_lower_percent: int | None = None
    cpu_evict_be_satisfaction_upper_percent: int | None = Field(
        default=None, alias="cpuEvictBESatisfactionUpperPercent"
    )
    cpu_evict_be_satisfaction_lower_percent: int | None = Field(
        default=None, alias="cpuEvictBESatisfactionLowerPercent"
    )
    cpu_evict_be_usage_threshold_percent: int | None = Field(default=None, alias="cpuEvictBEUsageThresholdPercent")
    cpu_evict_time_window_seconds: int | None = None
    cpu_evict_threshold_percent: int | None = None
    cpu_evict_lower_percent: int | None = None
    cpu_allocatable_evict_threshold_percent: int | None = None
    cpu_allocatable_evict_lower_percent: int | None = None
    cpu_evict_policy: CPUEvictPolicy | None = None
    evict_enabled_priority_threshold: int | None = None
    allocatable_evict_priority_threshold: int | None = None

    @field_validator("cpu_suppress_policy", "cpu_evict_policy", mode="before")
    @classmethod
    def _unknown_policy_is_default(cls, value: object) -> object:
        # Koordinator's CRD takes any string here and koordlet falls back to the default policy for
        # one it does not know; so does the agent, instead of refusing the whole NodeSLO.
        known = {p.value for p in (*CPUSuppressPolicy, *CPUEvictPolicy)}
        return value if value is None or value in known else None

    @classmethod
    def koordinator_defaults(cls) -> ResourceThresholdStrategy:
        # pkg/util/sloconfig/nodeslo_config.go: DefaultResourceThresholdStrategy
        return cls(
            enable=False,
            cpu_suppress_threshold_percent=65,
            cpu_suppress_policy=CPUSuppressPolicy.CPUSET,
            memory_evict_threshold_percent=70,
            cpu_evict_policy=CPUEvictPolicy.EVICT_BY_REAL_LIMIT,
        )

    def with_defaults(self) -> ResourceThresholdStrategy:
        """Koordinator's defaults overlaid by every field this object sets."""
        merged = self.koordinator_defaults().model_dump(exclude_none=True)
        merged.update(self.model_dump(exclude_none=True))
        return type(self).model_validate(merged)

    def effective_memory_evict_lower_percent(self) -> int | None:
        if self.memory_evict_lower_percent is not None:
            return self.memory_evict_lower_percent
        if self.memory_evict_threshold_percent is None:
            return None
        return self.memory_evict_threshold_percent - 2


class CgroupPath(KubeModel):
    base: str | None = None
    parent_dir: str | None = None
    relative_path: str | None = None


class HostApplicationSpec(KubeModel):
    name: str
    priority: str | None = None
    qos: str | None = None
    cgroup_path: CgroupPath | None = None


class ResourceQOSStrategy(KubeModel):
    # The per-class sub-trees are large and evolve upstream; they are carried verbatim.
    policies: dict[str, Any] | None = None
    lsr_class: dict[str, Any] | None = Field(default=None, alias="lsrClass")
    ls_class: dict[str, Any] | None = Field(default=None, alias="lsClass")
    be_class: dict[str, Any] | None = Field(default=None, alias="beClass")
    system_class: dict[str, Any] | None = Field(default=None, alias="systemClass")
    cgroup_root: dict[str, Any] | None = None


class NodeSLOSpec(KubeModel):
    resource_used_threshold_with_be: ResourceThresholdStrategy | None = Field(
        default=None, alias="resourceUsedThresholdWithBE"
    )
    resource_qos_strategy: ResourceQOSStrategy | None = Field(default=None, alias="resourceQOSStrategy")
    cpu_burst_strategy: dict[str, Any] | None = None
    system_strategy: dict[str, Any] | None = None
    extensions: dict[str, Any] | None = None
    host_applications: list[HostApplicationSpec] | None = None


class NodeSLO(KubeModel):
    api_version: str = SLO_API_VERSION
    kind: str = "NodeSLO"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: NodeSLOSpec | None = None
    status: dict[str, Any] | None = None

    _always_emit: ClassVar[tuple[str, ...]] = ("api_version", "kind", "metadata")

    def thresholds(self) -> ResourceThresholdStrategy:
        """The node's `resourceUsedThresholdWithBE` with Koordinator's defaults filled in."""
        own = self.spec.resource_used_threshold_with_be if self.spec else None
        return (own or ResourceThresholdStrategy()).with_defaults()
