"""NodeSLO (`slo.koordinator.sh/v1alpha1`): per-node watermarks rendered by the manager, enforced by the agent."""

from __future__ import annotations

import enum
from typing import Annotated, Any, ClassVar

from pydantic import Field, field_validator

from common.api.constants import SLO_API_VERSION
from common.api.nodemetric import PRIORITY_CLASSES, QOS_CLASSES
from common.api.quantity import Quantity
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


# --- spec.resourceQOSStrategy, spec.cpuBurstStrategy, spec.systemStrategy (apis/slo/v1alpha1/nodeslo_types.go) ----
# Bounds are the CRD's (what the API server enforces); the model reads what it is given. The slo-controller-config
# models that render these (manager/nodeslo/schema.py) bound them as Koordinator's `validate` tags do, within these
# (tests/unit/test_crd_models.py).
_BANDWIDTH = "int = % of total bandwidth (0-100), string = bytes/s such as 50M"


class CPUQOS(KubeModel):
    enable: bool | None = Field(default=None, description="Whether CPU QoS is enabled.")
    group_identity: int | None = Field(default=None, description="Group identity value (cpuPolicy groupIdentity).")
    sched_idle: int | None = Field(default=None, description="cpu.idle value; 1 = SCHED_IDLE (cpuPolicy coreSched).")
    core_expeller: bool | None = Field(
        default=None, description="Whether the class can expel idle pods at SMT level (coreSched)."
    )


class MemoryQOS(KubeModel):
    enable: bool | None = Field(default=None, description="Whether memory QoS is enabled (default false).")
    min_limit_percent: Annotated[int | None, CRD(minimum=0)] = Field(
        default=None, description="memory.min as % of the memory request."
    )
    low_limit_percent: Annotated[int | None, CRD(minimum=0)] = Field(
        default=None, description="memory.low as % of the memory request."
    )
    throttling_percent: Annotated[int | None, CRD(minimum=0)] = Field(
        default=None, description="memory.high factor in %."
    )
    wmark_ratio: Annotated[int | None, PERCENT] = Field(default=None, description="memory.wmark_ratio (Anolis OS).")
    wmark_scale_permill: Annotated[int | None, CRD(minimum=1, maximum=1000)] = Field(
        default=None, description="memory.wmark_scale_factor (Anolis OS)."
    )
    wmark_min_adj: Annotated[int | None, CRD(minimum=-25, maximum=50)] = Field(
        default=None, description="memory.wmark_min_adj (Anolis OS)."
    )
    priority_enable: int | None = Field(default=None, description="Enable memcg OOM priority.")
    priority: int | None = Field(default=None, description="memcg OOM priority.")
    oom_kill_group: int | None = Field(default=None, description="memcg OOM kill group.")
    page_cache_limit_enable: int | None = Field(
        default=None, description="memory.pagecache_limit.enable, 0 or 1 (Anolis OS)."
    )
    page_cache_limit_size: int | None = Field(
        default=None, description="memory.pagecache_limit.size in bytes (Anolis OS)."
    )
    page_cache_limit_sync: int | None = Field(
        default=None, description="memory.pagecache_limit.sync: 1 = reclaim synchronously over the limit (Anolis OS)."
    )


class IOCfg(KubeModel):
    read_iops: Annotated[int | None, CRD(minimum=0)] = Field(
        default=None, alias="readIOPS", description="Read IOPS limit; 0 disables."
    )
    write_iops: Annotated[int | None, CRD(minimum=0)] = Field(
        default=None, alias="writeIOPS", description="Write IOPS limit; 0 disables."
    )
    read_bps: Annotated[int | None, CRD(minimum=0)] = Field(
        default=None, alias="readBPS", description="Read bytes/s limit; 0 disables."
    )
    write_bps: Annotated[int | None, CRD(minimum=0)] = Field(
        default=None, alias="writeBPS", description="Write bytes/s limit; 0 disables."
    )
    io_weight_percent: Annotated[int | None, CRD(minimum=1, maximum=100)] = Field(
        default=None, description="Weight of the group (1-100, default 100)."
    )
    read_latency: int | None = Field(
        default=None, description="blk-iocost read latency threshold in microseconds (root class only)."
    )
    write_latency: int | None = Field(
        default=None, description="blk-iocost write latency threshold in microseconds (root class only)."
    )
    read_latency_percent: Annotated[int | None, PERCENT] = Field(
        default=None, description="blk-iocost read latency percentile."
    )
    write_latency_percent: Annotated[int | None, PERCENT] = Field(
        default=None, description="blk-iocost write latency percentile."
    )
    enable_user_model: bool | None = Field(
        default=None, description="Use the user-defined blk-iocost cost model (default false)."
    )
    model_read_bps: Annotated[int | None, CRD(minimum=1)] = Field(
        default=None, alias="modelReadBPS", description="Cost model read bytes/s."
    )
    model_write_bps: Annotated[int | None, CRD(minimum=1)] = Field(
        default=None, alias="modelWriteBPS", description="Cost model write bytes/s."
    )
    model_read_seq_iops: Annotated[int | None, CRD(minimum=1)] = Field(
        default=None, alias="modelReadSeqIOPS", description="Cost model sequential read IOPS."
    )
    model_write_seq_iops: Annotated[int | None, CRD(minimum=1)] = Field(
        default=None, alias="modelWriteSeqIOPS", description="Cost model sequential write IOPS."
    )
    model_read_rand_iops: Annotated[int | None, CRD(minimum=1)] = Field(
        default=None, alias="modelReadRandIOPS", description="Cost model random read IOPS."
    )
    model_write_rand_iops: Annotated[int | None, CRD(minimum=1)] = Field(
        default=None, alias="modelWriteRandIOPS", description="Cost model random write IOPS."
    )


class BlockCfg(KubeModel):
    name: str | None = Field(default=None, description="Block device, volume group or volume name.")
    block_type: str | None = Field(
        default=None, alias="type", description="Block type: device, volumegroup or podvolume."
    )
    io_cfg: IOCfg | None = None


class BlkIOQOS(KubeModel):
    enable: bool | None = Field(default=None, description="Whether block IO QoS is enabled.")
    blocks: list[BlockCfg] | None = Field(default=None, description="Per-block IO config.")


class ResctrlQOS(KubeModel):
    enable: bool | None = Field(default=None, description="Whether resctrl QoS is enabled.")
    cat_range_start_percent: Annotated[int | None, PERCENT] = Field(
        default=None, alias="catRangeStartPercent", description="LLC range start in %."
    )
    cat_range_end_percent: Annotated[int | None, PERCENT] = Field(
        default=None, alias="catRangeEndPercent", description="LLC range end in %."
    )
    mba_percent: Annotated[int | None, PERCENT] = Field(default=None, description="Memory bandwidth allocation in %.")


class NetworkQOS(KubeModel):
    # intstr.IntOrString, defaulted by the CRD as upstream's markers say
    enable: bool | None = Field(default=None, description="Whether network QoS is enabled.")
    ingress_request: Annotated[int | str | None, CRD(default=0)] = Field(
        default=None, description=f"Guaranteed ingress bandwidth; {_BANDWIDTH}."
    )
    ingress_limit: Annotated[int | str | None, CRD(default=100)] = Field(
        default=None, description=f"Maximum ingress bandwidth; {_BANDWIDTH}."
    )
    egress_request: Annotated[int | str | None, CRD(default=0)] = Field(
        default=None, description=f"Guaranteed egress bandwidth; {_BANDWIDTH}."
    )
    egress_limit: Annotated[int | str | None, CRD(default=100)] = Field(
        default=None, description=f"Maximum egress bandwidth; {_BANDWIDTH}."
    )


class ResourceQOS(KubeModel):
    """The QoS of one class of pods (or of the root cgroup)."""

    cpu_qos: CPUQOS | None = Field(default=None, alias="cpuQOS", description="Node-level CPU QoS.")
    memory_qos: MemoryQOS | None = Field(default=None, alias="memoryQOS", description="Node-level memory QoS.")
    blkio_qos: BlkIOQOS | None = Field(default=None, alias="blkioQOS", description="Block IO QoS.")
    resctrl_qos: ResctrlQOS | None = Field(
        default=None, alias="resctrlQOS", description="Node-level resctrl (LLC/MBA) QoS."
    )
    network_qos: NetworkQOS | None = Field(default=None, alias="networkQOS", description="Network QoS.")


class ResourceQOSPolicies(KubeModel):
    cpu_policy: str | None = Field(default=None, description="CPU QoS policy: groupIdentity (default) or coreSched.")
    net_qos_policy: str | None = Field(
        default=None, alias="netQOSPolicy", description="Network QoS policy: tc (default) or terway-qos."
    )


class ResourceQOSStrategy(KubeModel):
    policies: ResourceQOSPolicies | None = Field(default=None, description="Policies of pod QoS.")
    lsr_class: ResourceQOS | None = Field(default=None, description="QoS of LSR pods.")
    ls_class: ResourceQOS | None = Field(default=None, description="QoS of LS pods.")
    be_class: ResourceQOS | None = Field(default=None, description="QoS of BE pods.")
    system_class: ResourceQOS | None = Field(default=None, description="QoS of SYSTEM pods.")
    cgroup_root: ResourceQOS | None = Field(default=None, description="QoS of the root cgroup.")


class CPUBurstStrategy(KubeModel):
    policy: str | None = Field(default=None, description="none, cpuBurstOnly, cfsQuotaBurstOnly or auto.")
    cpu_burst_percent: Annotated[int | None, CRD(minimum=0, maximum=10000)] = Field(
        default=None, description="cpu.cfs_burst_us (v1) / cpu.max.burst (v2) in % of the limit (default 1000)."
    )
    cfs_quota_burst_percent: int | None = Field(
        default=None, description="Ceiling of the CFS quota scale-up in % (default 300)."
    )
    cfs_quota_burst_period_seconds: int | None = Field(
        default=None, description="How long a pod may burst, -1 = unlimited (default)."
    )
    share_pool_threshold_percent: int | None = Field(
        default=None, description="Scale CFS quota down above this node CPU usage % (default 50)."
    )


class SystemStrategy(KubeModel):
    min_free_kbytes_factor: int | None = Field(
        default=None, description="vm.min_free_kbytes = factor * total memory / 10000."
    )
    watermark_scale_factor: int | None = Field(default=None, description="vm.watermark_scale_factor.")
    memcg_reap_back_ground: int | None = Field(
        default=None, alias="memcgReapBackGround", description="/sys/kernel/mm/memcg_reaper/reap_background."
    )
    page_cache_limit_enabled: int | None = Field(
        default=None, description="/sys/kernel/mm/pagecache_limit/enabled (Anolis OS)."
    )
    sched_group_identity_enabled: int | None = Field(
        default=None, description="kernel.sched_group_identity_enabled (0 or 1)."
    )
    sched_idle_saver_wmark: int | None = Field(default=None, description="kernel.sched_idle_saver_wmark in ns.")
    sched_features: dict[str, bool] | None = Field(default=None, description="Extra /sys/kernel/sched_features flags.")
    total_network_bandwidth: Quantity | None = Field(
        default=None, description="Total network bandwidth of the node in Mbps."
    )


class NodeSLOSpec(KubeModel):
    resource_used_threshold_with_be: ResourceThresholdStrategy | None = Field(
        default=None,
        alias="resourceUsedThresholdWithBE",
        description="Node usage thresholds that suppress or evict BE pods.",
    )
    resource_qos_strategy: ResourceQOSStrategy | None = Field(
        default=None, alias="resourceQOSStrategy", description="QoS configuration per QoS class."
    )
    cpu_burst_strategy: CPUBurstStrategy | None = Field(default=None, description="CPU burst strategy.")
    system_strategy: SystemStrategy | None = Field(default=None, description="Node-wide kernel settings.")
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
