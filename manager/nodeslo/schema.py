"""Pydantic models of the `slo-controller-config` ConfigMap values, with Koordinator's bounds.

These are edge models: they validate what an operator typed, with Go's decoding rules
(strict JSON types, field names matched case-insensitively, unknown fields ignored) and the
`validate:"..."` bounds of Koordinator's types. Merging and rendering work on plain JSON
dicts (see merge.py), so the wire field names below are the ones Koordinator writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from common.api import scheduling
from common.api.nodemetric import MAX_AGGREGATE_WINDOW_SECONDS, MAX_AGGREGATE_WINDOWS, check_aggregate_seconds
from common.api.quantity import Quantity
from common.api.validation import label_value_problems, qualified_name_problems
from common.api.wire import GoDuration

# Integers are Go int64 fields in Koordinator (and in the NodeSLO CRD we render them into);
# times are multiplied into a Go time.Duration (int64 nanoseconds), so they stop where it does.
_INT64_MAX = 2**63 - 1
Int64 = Annotated[int, Field(ge=-(2**63), le=_INT64_MAX)]
Percent = Annotated[int, Field(ge=0, le=100)]
NonNegative = Annotated[int, Field(ge=0, le=_INT64_MAX)]
Positive = Annotated[int, Field(ge=1, le=_INT64_MAX)]
PositiveSeconds = Annotated[int, Field(ge=1, le=_INT64_MAX // 10**9)]
PositiveMinutes = Annotated[int, Field(ge=1, le=_INT64_MAX // (60 * 10**9))]
Flag = Annotated[int, Field(ge=0, le=1)]  # kernel knobs written as 0/1


def _positive_duration(value: GoDuration) -> GoDuration:
    if value.nanoseconds <= 0:
        raise ValueError(f"duration must be positive, got {value.canonical()!r}")
    return GoDuration(value.nanoseconds)  # dropped raw text: rendered as Go would, e.g. "5m" -> "5m0s"


PositiveDuration = Annotated[GoDuration, AfterValidator(_positive_duration)]


def _window_agents_can_keep(value: GoDuration) -> GoDuration:
    check_aggregate_seconds(value.seconds)  # the agents obey it: refused here rather than OOM-killed there
    return value


# An aggregation window every agent keeps samples for (common/api/nodemetric.py MAX_AGGREGATE_WINDOW_SECONDS).
AggregateWindow = Annotated[PositiveDuration, AfterValidator(_window_agents_can_keep)]
AggregateSeconds = Annotated[int, Field(ge=1, le=MAX_AGGREGATE_WINDOW_SECONDS)]


def _valid_quantity(value: str | int) -> str | int:
    Quantity.parse(value)
    return value


QuantityText = Annotated[str | int, AfterValidator(_valid_quantity)]


class GoJSONModel(BaseModel):
    """Decodes like Go's encoding/json into a Koordinator struct.

    - strict types: "65" or 65.0 is not an int64, "true" is not a bool;
    - a key matches a field case-insensitively when no exact match exists (Koordinator's own
      docs write `CPUEvictTimeWindowSeconds`), unknown keys are ignored;
    - only the wire names count: a Python field name such as `cpu_suppress_threshold_percent`
      is an unknown key to Go, so it is to us.
    """

    model_config = ConfigDict(strict=True, extra="ignore", validate_by_name=False, validate_by_alias=True, frozen=True)

    _folded_aliases: ClassVar[dict[type[BaseModel], dict[str, str]]] = {}

    @classmethod
    def _alias_index(cls) -> dict[str, str]:
        index = GoJSONModel._folded_aliases.get(cls)
        if index is None:
            index = {}
            for name, info in cls.model_fields.items():
                alias = info.alias or name
                index.setdefault(alias.lower(), alias)
            GoJSONModel._folded_aliases[cls] = index
        return index

    @model_validator(mode="before")
    @classmethod
    def _fold_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        index = cls._alias_index()
        folded: dict[str, Any] = {}
        for key, value in data.items():
            alias = index.get(key.lower()) if isinstance(key, str) else None
            if alias is None or alias == key or alias in data:
                folded[key] = value
            else:
                folded[alias] = value
        return folded


# --- metav1.LabelSelector -------------------------------------------------------------
class LabelSelectorRequirement(GoJSONModel):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] | None = None

    @model_validator(mode="after")
    def _values_fit_operator(self) -> LabelSelectorRequirement:
        # metav1.LabelSelectorAsSelector rejects these; Koordinator would skip the entry silently.
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        # A ConfigMap is not validated by the API server: a key or value no label can have matches no node, and
        # the rules bound their length (key ≤ 253 + 1 + 63, value ≤ 63) as they are bounded on the nodes.
        _check_label(self.key, self.values or ())
        return self


def _check_label(key: str, values: Iterable[str]) -> None:
    problems = qualified_name_problems(key)
    if problems:
        raise ValueError(f"key {key[:80]!r}: {problems[0]}")
    for value in values:
        if found := label_value_problems(value):
            raise ValueError(f"value {value[:80]!r} of {key!r}: {found[0]}")


class LabelSelector(GoJSONModel):
    match_labels: dict[str, str] | None = Field(default=None, alias="matchLabels")
    match_expressions: list[LabelSelectorRequirement] | None = Field(default=None, alias="matchExpressions")

    @model_validator(mode="after")
    def _labels_are_labels(self) -> LabelSelector:
        for key, value in (self.match_labels or {}).items():
            _check_label(key, (value,))
        return self

    def compile(self) -> scheduling.LabelSelector:
        expressions = ((req.key, req.operator, req.values or ()) for req in self.match_expressions or ())
        return scheduling.LabelSelector.of(self.match_labels, expressions)


class NodeProfile(GoJSONModel):
    """NodeCfgProfile: which nodes an entry applies to. No selector matches no node."""

    name: str | None = None
    node_selector: LabelSelector | None = Field(default=None, alias="nodeSelector")

    PROFILE_KEYS: ClassVar[frozenset[str]] = frozenset({"name", "nodeSelector"})


# --- colocation-config ------------------------------------------------------------------
class AggregatePolicy(GoJSONModel):
    durations: Annotated[list[AggregateWindow], Field(max_length=MAX_AGGREGATE_WINDOWS)] | None = None


class ColocationStrategy(GoJSONModel):
    enable: bool | None = None
    metric_aggregate_duration_seconds: AggregateSeconds | None = Field(
        default=None, alias="metricAggregateDurationSeconds"
    )
    metric_report_interval_seconds: PositiveSeconds | None = Field(default=None, alias="metricReportIntervalSeconds")
    metric_aggregate_policy: AggregatePolicy | None = Field(default=None, alias="metricAggregatePolicy")
    metric_memory_collect_policy: (
        Literal["usageWithoutPageCache", "usageWithHotPageCache", "usageWithPageCache"] | None
    ) = Field(default=None, alias="metricMemoryCollectPolicy")
    cpu_reclaim_threshold_percent: NonNegative | None = Field(default=None, alias="cpuReclaimThresholdPercent")
    # "prediction" is Loadline's (manager/noderesource/formulas.py); Koordinator's manager reads it as "usage".
    cpu_calculate_policy: Literal["usage", "maxUsageRequest", "prediction"] | None = Field(
        default=None, alias="cpuCalculatePolicy"
    )
    memory_reclaim_threshold_percent: NonNegative | None = Field(default=None, alias="memoryReclaimThresholdPercent")
    memory_calculate_policy: Literal["usage", "request", "maxUsageRequest", "prediction"] | None = Field(
        default=None, alias="memoryCalculatePolicy"
    )
    degrade_time_minutes: PositiveMinutes | None = Field(default=None, alias="degradeTimeMinutes")
    update_time_threshold_seconds: PositiveSeconds | None = Field(default=None, alias="updateTimeThresholdSeconds")
    resource_diff_threshold: Annotated[float, Field(gt=0, le=1)] | None = Field(
        default=None, alias="resourceDiffThreshold"
    )
    mid_cpu_threshold_percent: Percent | None = Field(default=None, alias="midCPUThresholdPercent")
    mid_memory_threshold_percent: Percent | None = Field(default=None, alias="midMemoryThresholdPercent")
    mid_unallocated_percent: Percent | None = Field(default=None, alias="midUnallocatedPercent")
    mid_static_cpu_reserved_percent: Percent | None = Field(default=None, alias="midStaticCPUReservedPercent")
    mid_static_memory_reserved_percent: Percent | None = Field(default=None, alias="midStaticMemoryReservedPercent")
    mid_reclaim_mode: str | None = Field(default=None, alias="midReclaimMode")
    batch_cpu_threshold_percent: NonNegative | None = Field(default=None, alias="batchCPUThresholdPercent")
    batch_memory_threshold_percent: NonNegative | None = Field(default=None, alias="batchMemoryThresholdPercent")
    extensions: dict[str, Any] | None = None


class NodeColocationConfig(ColocationStrategy, NodeProfile):
    pass


class ColocationConfig(ColocationStrategy):
    node_configs: list[NodeColocationConfig] | None = Field(default=None, alias="nodeConfigs")


# --- resource-threshold-config ------------------------------------------------------------
class ResourceThresholdStrategy(GoJSONModel):
    enable: bool | None = None
    cpu_suppress_threshold_percent: Percent | None = Field(default=None, alias="cpuSuppressThresholdPercent")
    cpu_suppress_min_percent: Percent | None = Field(default=None, alias="cpuSuppressMinPercent")
    cpu_suppress_policy: Literal["cpuset", "cfsQuota"] | None = Field(default=None, alias="cpuSuppressPolicy")
    memory_evict_threshold_percent: Percent | None = Field(default=None, alias="memoryEvictThresholdPercent")
    memory_evict_lower_percent: Percent | None = Field(default=None, alias="memoryEvictLowerPercent")
    # Request-based ("allocatable") thresholds may exceed 100: requests can overcommit the node.
    memory_allocatable_evict_threshold_percent: NonNegative | None = Field(
        default=None, alias="memoryAllocatableEvictThresholdPercent"
    )
    memory_allocatable_evict_lower_percent: NonNegative | None = Field(
        default=None, alias="memoryAllocatableEvictLowerPercent"
    )
    cpu_evict_be_satisfaction_upper_percent: Percent | None = Field(
        default=None, alias="cpuEvictBESatisfactionUpperPercent"
    )
    cpu_evict_be_satisfaction_lower_percent: Percent | None = Field(
        default=None, alias="cpuEvictBESatisfactionLowerPercent"
    )
    cpu_evict_be_usage_threshold_percent: Percent | None = Field(default=None, alias="cpuEvictBEUsageThresholdPercent")
    cpu_evict_time_window_seconds: PositiveSeconds | None = Field(default=None, alias="cpuEvictTimeWindowSeconds")
    cpu_evict_threshold_percent: Percent | None = Field(default=None, alias="cpuEvictThresholdPercent")
    cpu_evict_lower_percent: Percent | None = Field(default=None, alias="cpuEvictLowerPercent")
    cpu_allocatable_evict_threshold_percent: NonNegative | None = Field(
        default=None, alias="cpuAllocatableEvictThresholdPercent"
    )
    cpu_allocatable_evict_lower_percent: NonNegative | None = Field(
        default=None, alias="cpuAllocatableEvictLowerPercent"
    )
    cpu_evict_policy: Literal["evictByRealLimit", "evictByAllocatable"] | None = Field(
        default=None, alias="cpuEvictPolicy"
    )
    evict_enabled_priority_threshold: Int64 | None = Field(default=None, alias="evictEnabledPriorityThreshold")
    allocatable_evict_priority_threshold: Int64 | None = Field(default=None, alias="allocatableEvictPriorityThreshold")


class NodeResourceThresholdStrategy(ResourceThresholdStrategy, NodeProfile):
    pass


class ResourceThresholdConfig(GoJSONModel):
    cluster_strategy: ResourceThresholdStrategy | None = Field(default=None, alias="clusterStrategy")
    node_strategies: list[NodeResourceThresholdStrategy] | None = Field(default=None, alias="nodeStrategies")


# --- resource-qos-config ------------------------------------------------------------------
class CPUQOSConfig(GoJSONModel):
    enable: bool | None = None
    group_identity: Annotated[int, Field(ge=-1, le=2)] | None = Field(default=None, alias="groupIdentity")
    sched_idle: Flag | None = Field(default=None, alias="schedIdle")
    core_expeller: bool | None = Field(default=None, alias="coreExpeller")


class MemoryQOSConfig(GoJSONModel):
    enable: bool | None = None
    min_limit_percent: Percent | None = Field(default=None, alias="minLimitPercent")
    low_limit_percent: Percent | None = Field(default=None, alias="lowLimitPercent")
    throttling_percent: Percent | None = Field(default=None, alias="throttlingPercent")
    wmark_ratio: Percent | None = Field(default=None, alias="wmarkRatio")
    wmark_scale_permill: Annotated[int, Field(ge=1, le=1000)] | None = Field(default=None, alias="wmarkScalePermill")
    wmark_min_adj: Annotated[int, Field(ge=-25, le=50)] | None = Field(default=None, alias="wmarkMinAdj")
    page_cache_limit_enable: Flag | None = Field(default=None, alias="pageCacheLimitEnable")
    page_cache_limit_sync: Flag | None = Field(default=None, alias="pageCacheLimitSync")
    page_cache_limit_size: NonNegative | None = Field(default=None, alias="pageCacheLimitSize")
    priority_enable: Flag | None = Field(default=None, alias="priorityEnable")
    priority: Annotated[int, Field(ge=0, le=12)] | None = None
    oom_kill_group: Flag | None = Field(default=None, alias="oomKillGroup")


class ResctrlQOSConfig(GoJSONModel):
    enable: bool | None = None
    cat_range_start_percent: Percent | None = Field(default=None, alias="catRangeStartPercent")
    cat_range_end_percent: Percent | None = Field(default=None, alias="catRangeEndPercent")
    mba_percent: Percent | None = Field(default=None, alias="mbaPercent")


class IOConfig(GoJSONModel):
    read_iops: NonNegative | None = Field(default=None, alias="readIOPS")
    write_iops: NonNegative | None = Field(default=None, alias="writeIOPS")
    read_bps: NonNegative | None = Field(default=None, alias="readBPS")
    write_bps: NonNegative | None = Field(default=None, alias="writeBPS")
    io_weight_percent: Annotated[int, Field(ge=1, le=100)] | None = Field(default=None, alias="ioWeightPercent")
    read_latency: Int64 | None = Field(default=None, alias="readLatency")
    write_latency: Int64 | None = Field(default=None, alias="writeLatency")
    read_latency_percent: Percent | None = Field(default=None, alias="readLatencyPercent")
    write_latency_percent: Percent | None = Field(default=None, alias="writeLatencyPercent")
    enable_user_model: bool | None = Field(default=None, alias="enableUserModel")
    model_read_bps: Positive | None = Field(default=None, alias="modelReadBPS")
    model_write_bps: Positive | None = Field(default=None, alias="modelWriteBPS")
    model_read_seq_iops: Positive | None = Field(default=None, alias="modelReadSeqIOPS")
    model_write_seq_iops: Positive | None = Field(default=None, alias="modelWriteSeqIOPS")
    model_read_rand_iops: Positive | None = Field(default=None, alias="modelReadRandIOPS")
    model_write_rand_iops: Positive | None = Field(default=None, alias="modelWriteRandIOPS")


class BlockConfig(GoJSONModel):
    name: str | None = None
    block_type: Literal["device", "volumegroup", "podvolume"] | None = Field(default=None, alias="type")
    io_cfg: IOConfig | None = Field(default=None, alias="ioCfg")


class BlkIOQOSConfig(GoJSONModel):
    enable: bool | None = None
    blocks: list[BlockConfig] | None = None


class NetworkQOSConfig(GoJSONModel):
    # IntOrString: an int is a percent of the node's bandwidth, a string a quantity such as "50M".
    enable: bool | None = None
    ingress_request: Int64 | str | None = Field(default=None, alias="ingressRequest")
    ingress_limit: Int64 | str | None = Field(default=None, alias="ingressLimit")
    egress_request: Int64 | str | None = Field(default=None, alias="egressRequest")
    egress_limit: Int64 | str | None = Field(default=None, alias="egressLimit")


class ResourceQOS(GoJSONModel):
    cpu_qos: CPUQOSConfig | None = Field(default=None, alias="cpuQOS")
    memory_qos: MemoryQOSConfig | None = Field(default=None, alias="memoryQOS")
    blkio_qos: BlkIOQOSConfig | None = Field(default=None, alias="blkioQOS")
    resctrl_qos: ResctrlQOSConfig | None = Field(default=None, alias="resctrlQOS")
    network_qos: NetworkQOSConfig | None = Field(default=None, alias="networkQOS")


class ResourceQOSPolicies(GoJSONModel):
    cpu_policy: Literal["groupIdentity", "coreSched"] | None = Field(default=None, alias="cpuPolicy")
    net_qos_policy: Literal["tc", "terway-qos"] | None = Field(default=None, alias="netQOSPolicy")


class ResourceQOSStrategy(GoJSONModel):
    policies: ResourceQOSPolicies | None = None
    lsr_class: ResourceQOS | None = Field(default=None, alias="lsrClass")
    ls_class: ResourceQOS | None = Field(default=None, alias="lsClass")
    be_class: ResourceQOS | None = Field(default=None, alias="beClass")
    system_class: ResourceQOS | None = Field(default=None, alias="systemClass")
    cgroup_root: ResourceQOS | None = Field(default=None, alias="cgroupRoot")


class NodeResourceQOSStrategy(ResourceQOSStrategy, NodeProfile):
    pass


class ResourceQOSConfig(GoJSONModel):
    cluster_strategy: ResourceQOSStrategy | None = Field(default=None, alias="clusterStrategy")
    node_strategies: list[NodeResourceQOSStrategy] | None = Field(default=None, alias="nodeStrategies")


# --- cpu-burst-config ---------------------------------------------------------------------
class CPUBurstStrategy(GoJSONModel):
    policy: Literal["none", "cpuBurstOnly", "cfsQuotaBurstOnly", "auto"] | None = None
    cpu_burst_percent: Annotated[int, Field(ge=1, le=10000)] | None = Field(default=None, alias="cpuBurstPercent")
    cfs_quota_burst_percent: Annotated[int, Field(ge=100)] | None = Field(default=None, alias="cfsQuotaBurstPercent")
    cfs_quota_burst_period_seconds: Annotated[int, Field(ge=-1)] | None = Field(
        default=None, alias="cfsQuotaBurstPeriodSeconds"
    )
    share_pool_threshold_percent: Percent | None = Field(default=None, alias="sharePoolThresholdPercent")


class NodeCPUBurstStrategy(CPUBurstStrategy, NodeProfile):
    pass


class CPUBurstConfig(GoJSONModel):
    cluster_strategy: CPUBurstStrategy | None = Field(default=None, alias="clusterStrategy")
    node_strategies: list[NodeCPUBurstStrategy] | None = Field(default=None, alias="nodeStrategies")


# --- system-config ------------------------------------------------------------------------
class SystemStrategy(GoJSONModel):
    min_free_kbytes_factor: Positive | None = Field(default=None, alias="minFreeKbytesFactor")
    watermark_scale_factor: Annotated[int, Field(ge=1, le=400)] | None = Field(
        default=None, alias="watermarkScaleFactor"
    )
    memcg_reap_background: Flag | None = Field(default=None, alias="memcgReapBackGround")
    page_cache_limit_enabled: Flag | None = Field(default=None, alias="pageCacheLimitEnabled")
    total_network_bandwidth: QuantityText | None = Field(default=None, alias="totalNetworkBandwidth")


class NodeSystemStrategy(SystemStrategy, NodeProfile):
    pass


class SystemConfig(GoJSONModel):
    cluster_strategy: SystemStrategy | None = Field(default=None, alias="clusterStrategy")
    node_strategies: list[NodeSystemStrategy] | None = Field(default=None, alias="nodeStrategies")


# --- host-application-config ----------------------------------------------------------------
class CgroupPath(GoJSONModel):
    base: str | None = None
    parent_dir: str | None = Field(default=None, alias="parentDir")
    relative_path: str | None = Field(default=None, alias="relativePath")


class HostApplicationSpec(GoJSONModel):
    name: str
    priority: str | None = None
    qos: str | None = None
    cgroup_path: CgroupPath | None = Field(default=None, alias="cgroupPath")


class NodeHostApplicationConfig(NodeProfile):
    applications: list[HostApplicationSpec] | None = None


class HostApplicationConfig(GoJSONModel):
    applications: list[HostApplicationSpec] | None = None
    node_configs: list[NodeHostApplicationConfig] | None = Field(default=None, alias="nodeConfigs")


ScopedConfigModel = ResourceThresholdConfig | ResourceQOSConfig | CPUBurstConfig | SystemConfig
