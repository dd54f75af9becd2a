"""NodeSLO (`slo.koordinator.sh/v1alpha1`): per-node watermarks rendered by the manager, enforced by the agent."""

from __future__ import annotations

import enum
from typing import Annotated, Any, ClassVar

from pydantic import Field, field_validator

from common.api.constants import SLO_API_VERSION
from common.api.nodemetric import PRIORITY_CLASSES, QOS_CLASSES
from common.api.wire import CRD, INT32, PERCENT, KubeModel, ObjectMeta


class CPUSuppressPolicy(enum.StrEnum):
    CPUSET = "cpuset"
    CFS_QUOTA = "cfsQuota"


class CPUEvictPolicy(enum.StrEnum):
    EVICT_BY_REAL_LIMIT = "evictByRealLimit"
    EVICT_BY_ALLOCATABLE = "evictByAllocatable"


class ResourceThresholdStrategy(KubeModel):
    """`spec.resourceUsedThresholdWithBE`. Unset fields mean Koordinator's defaults (see `koordinator_defaults`)."""

    # Descriptions and bounds are the CRD's (common/api/crdgen/from_model.py generates it from here). No enum on
    # the policies, as in Koordinator's CRD: a NodeSLO it writes with another policy must not be rejected.
    enable: bool | None = Field(
        default=None, description="Master switch of the BE suppress/evict strategies (default false)."
    )
    cpu_suppress_threshold_percent: Annotated[int | None, PERCENT] = Field(
        default=None, description="Node CPU usage cap in % of capacity for BE suppression (65)."
    )
    cpu_suppress_min_percent: Annotated[int | None, PERCENT] = Field(
        default=None, description="Floor of the BE CPU suppression in % of capacity."
    )
    cpu_suppress_policy: CPUSuppressPolicy | None = Field(
        default=None, description="How BE CPU is suppressed: cpuset (default) or cfsQuota."
    )
    memory_evict_threshold_percent: Annotated[int | None, PERCENT] = Field(
        default=None, description="Node memory usage % that triggers BE eviction (70)."
    )
    memory_evict_lower_percent: Annotated[int | None, PERCENT] = Field(
        default=None, description="Evict until memory usage % is below this (threshold - 2)."
    )
    memory_allocatable_evict_threshold_percent: int | None = Field(
        default=None, description="Memory request % of allocatable that triggers eviction."
    )
    memory_allocatable_evict_lower_percent: int | None = Field(
        default=None, description="Evict until memory request % of allocatable is below this."
    )
    cpu_evict_be_satisfaction_upper_percent: int | None = Field(
        default=None,
        alias="cpuEvictBESatisfactionUpperPercent",
        description="Stop evicting when BE real CPU limit / request exceeds this %.",
    )
    cpu_evict_be_satisfaction_lower_percent: int | None = Field(
        default=None,
        alias="cpuEvictBESatisfactionLowerPercent",
        description="Start evicting when BE real CPU limit / request is below this %.",
    )
    cpu_evict_be_usage_threshold_percent: int | None = Field(
        default=None,
        alias="cpuEvictBEUsageThresholdPercent",
        description="BE CPU usage % of its real limit needed before evicting (90).",
    )
    cpu_evict_time_window_seconds: int | None = Field(
        default=None, description="Averaging window in seconds for CPU eviction."
    )
    cpu_evict_threshold_percent: Annotated[int | None, PERCENT] = Field(
        default=None, description="Node CPU usage % that triggers CPU eviction."
    )
    cpu_evict_lower_percent: Annotated[int | None, PERCENT] = Field(
        default=None, description="Evict until node CPU usage % is below this (threshold - 2)."
    )
    cpu_allocatable_evict_threshold_percent: int | None = Field(
        default=None, description="CPU request % of allocatable that triggers eviction."
    )
    cpu_allocatable_evict_lower_percent: int | None = Field(
        default=None, description="Evict until CPU request % of allocatable is below this."
    )
    cpu_evict_policy: CPUEvictPolicy | None = Field(
        default=None, description="Policy of BE CPU eviction: evictByRealLimit (default) or evictByAllocatable."
    )
    evict_enabled_priority_threshold: Annotated[int | None, INT32] = Field(
        default=None, description="Highest pod priority evictable by CPU/memory eviction."
    )
    allocatable_evict_priority_threshold: Annotated[int | None, INT32] = Field(
        default=None, description="Highest pod priority evictable by allocatable eviction."
    )

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
    base: str | None = Field(
        default=None, description="Cgroup base: CgroupRoot, Kubepods, KubepodsBurstable or KubepodsBesteffort."
    )
    parent_dir: str | None = Field(default=None, description="Parent directory under the base.")
    relative_path: str | None = Field(default=None, description="Path under the parent directory.")


class HostApplicationSpec(KubeModel):
    name: str = Field(description="Application name.")
    priority: str | None = Field(default=None, description=f"Priority class of the application: {PRIORITY_CLASSES}.")
    qos: str | None = Field(default=None, description=f"QoS class of the application: {QOS_CLASSES}.")
    cgroup_path: CgroupPath | None = Field(
        default=None, description="Host cgroup of the application; derived from priority and qos when unset."
    )
    strategy: Annotated[dict[str, Any] | None, CRD(schema="struct{}")] = Field(
        default=None, description="QoS strategy of the application (no fields yet)."
    )


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
        default=None,
        alias="resourceUsedThresholdWithBE",
        description="Node usage thresholds that suppress or evict BE pods.",
    )
    # Carried verbatim here; their schemas are written out in common/api/crdgen/nodeslo.py.
    resource_qos_strategy: Annotated[ResourceQOSStrategy | None, CRD(schema="ResourceQOSStrategy")] = Field(
        default=None, alias="resourceQOSStrategy"
    )
    cpu_burst_strategy: Annotated[dict[str, Any] | None, CRD(schema="CPUBurstStrategy")] = None
    system_strategy: Annotated[dict[str, Any] | None, CRD(schema="SystemStrategy")] = None
    extensions: dict[str, Any] | None = Field(default=None, description="Third-party extensions.")
    host_applications: list[
        Annotated[HostApplicationSpec, CRD(description="QoS management of an out-of-band application.")]
    ] | None = Field(
        default=None, description="Out-of-band applications on the node."
    )


class NodeSLO(KubeModel):
    api_version: str = SLO_API_VERSION
    kind: str = "NodeSLO"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: NodeSLOSpec | None = Field(default=None, description="Desired SLO configuration of the node.")
    status: Annotated[dict[str, Any] | None, CRD(schema="struct{}")] = Field(
        default=None, description="Observed state of the NodeSLO (no fields)."
    )

    _always_emit: ClassVar[tuple[str, ...]] = ("api_version", "kind", "metadata")

    def thresholds(self) -> ResourceThresholdStrategy:
        """The node's `resourceUsedThresholdWithBE` with Koordinator's defaults filled in."""
        own = self.spec.resource_used_threshold_with_be if self.spec else None
        return (own or ResourceThresholdStrategy()).with_defaults()
