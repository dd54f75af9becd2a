"""LowNodeLoadArgs: Koordinator's LowNodeLoad plugin arguments plus the MigrationController limits
Loadline applies itself (it evicts through the Eviction API instead of PodMigrationJobs).

Field names and defaults are Koordinator's (``descheduler/v1alpha2``), so a Koordinator
``LowNodeLoadArgs`` document loads unchanged. Validation errors name the offending field by its
JSON path, e.g. ``nodePools[1].lowThresholds.cpu``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from common.api import scheduling
from scheduler_plugin.descheduler.durations import format_go_duration, parse_go_duration
from scheduler_plugin.descheduler.model import CPU, MEMORY

DEFAULT_POOL_NAME = "__default_node_pool__"
LOADLINE_NAMESPACE = "loadline-system"
# Never evicted unless a user lists them in evictableNamespaces.include explicitly.
PROTECTED_NAMESPACES = ("kube-system", LOADLINE_NAMESPACE)

ResourceThresholds = dict[str, float]


class ArgsError(ValueError):
    """Invalid LowNodeLoadArgs; ``problems`` holds one "field.path: message" line per error."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid LowNodeLoadArgs: " + "; ".join(problems))


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True, validate_default=True
    )


def _duration_seconds(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("must be a duration such as '60s' or a number of seconds")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = parse_go_duration(value)
    else:
        raise ValueError("must be a duration such as '60s' or a number of seconds")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError("must be a non-negative duration")
    return seconds


class LabelSelectorRequirement(_Model):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_match_operator(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"values: must be non-empty for operator {self.operator}")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"values: must be empty for operator {self.operator}")
        return self


class LabelSelector(_Model):
    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)

    def compile(self) -> scheduling.LabelSelector:
        expressions = ((r.key, r.operator, r.values) for r in self.match_expressions)
        return scheduling.LabelSelector.of(self.match_labels, expressions)


class Namespaces(_Model):
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _include_xor_exclude(self) -> Namespaces:
        if self.include and self.exclude:
            raise ValueError("only one of include/exclude namespaces can be set")
        return self


class PodSelector(_Model):
    name: str = ""
    selector: LabelSelector | None = None


class AnomalyCondition(_Model):
    timeout: float = 60.0  # seconds; "1m" in configs
    consecutive_abnormalities: int = Field(default=5, gt=0)
    consecutive_normalities: int = Field(default=3, gt=0)

    _parse_timeout = field_validator("timeout", mode="before")(_duration_seconds)

    @field_serializer("timeout")
    def _dump_timeout(self, value: float) -> str:
        return format_go_duration(value)


def _check_percentages(name: str, thresholds: Mapping[str, float]) -> None:
    for resource, pct in thresholds.items():
        if not math.isfinite(pct) or pct < 0 or pct > 100:
            raise ValueError(f"{name}.{resource}: {pct:g} must be a percentage between 0 and 100")


def _check_threshold_order(
    prefix: str,
    *,
    deviation: bool,
    low: Mapping[str, float],
    high: Mapping[str, float],
    prod_low: Mapping[str, float],
    prod_high: Mapping[str, float],
) -> list[str]:
    problems: list[str] = []
    for label, values in (
        ("highThresholds", high),
        ("lowThresholds", low),
        ("prodHighThresholds", prod_high),
        ("prodLowThresholds", prod_low),
    ):
        try:
            _check_percentages(prefix + label, values)
        except ValueError as exc:
            problems.append(str(exc))

    # In deviation mode low and high are distances below/above the mean, not an ordered window.
    if deviation:
        return problems
    for resource, pct in low.items():
        if resource in high and pct > high[resource]:
            problems.append(
                f"{prefix}lowThresholds.{resource}: {pct:g} must be <= highThresholds.{resource} ({high[resource]:g})"
            )
    for resource, pct in prod_high.items():
        if resource in high and pct > high[resource]:
            problems.append(
                f"{prefix}prodHighThresholds.{resource}: {pct:g} must be <= highThresholds.{resource} "
                f"({high[resource]:g})"
            )
    for resource, pct in prod_low.items():
        if resource in prod_high and pct > prod_high[resource]:
            problems.append(
                f"{prefix}prodLowThresholds.{resource}: {pct:g} must be <= prodHighThresholds.{resource} "
                f"({prod_high[resource]:g})"
            )
    return problems


class NodePool(_Model):
    """A node group with its own thresholds; unset fields inherit the top-level values."""

    name: str = ""
    node_selector: LabelSelector | None = None
    use_deviation_thresholds: bool | None = None
    high_thresholds: ResourceThresholds = Field(default_factory=dict)
    low_thresholds: ResourceThresholds = Field(default_factory=dict)
    prod_high_thresholds: ResourceThresholds = Field(default_factory=dict)
    prod_low_thresholds: ResourceThresholds = Field(default_factory=dict)
    resource_weights: dict[str, int] = Field(default_factory=dict)
    anomaly_condition: AnomalyCondition | None = None


class LowNodeLoadArgs(_Model):
    api_version: str | None = None
    kind: str | None = None

    # --- Koordinator LowNodeLoadArgs ---
    paused: bool = False
    dry_run: bool = False
    # Act only if more than this many nodes are under the low thresholds.
    number_of_nodes: int = Field(default=0, ge=0)
    node_metric_expiration_seconds: int = Field(default=180, gt=0)
    evictable_namespaces: Namespaces = Field(default_factory=lambda: Namespaces(exclude=list(PROTECTED_NAMESPACES)))
    node_selector: LabelSelector | None = None
    pod_selectors: list[PodSelector] = Field(default_factory=list)
    node_fit: bool = True
    use_deviation_thresholds: bool = False
    high_thresholds: ResourceThresholds = Field(default_factory=dict)
    low_thresholds: ResourceThresholds = Field(default_factory=dict)
    prod_high_thresholds: ResourceThresholds = Field(default_factory=dict)
    prod_low_thresholds: ResourceThresholds = Field(default_factory=dict)
    resource_weights: dict[str, int] = Field(default_factory=dict)
    anomaly_condition: AnomalyCondition = Field(default_factory=AnomalyCondition)
    detector_cache_timeout: float = 300.0  # seconds; raised to deschedulingInterval if smaller
    node_pools: list[NodePool] = Field(default_factory=list)

    # --- DeschedulerConfiguration / MigrationControllerArgs limits, applied by Loadline itself ---
    descheduling_interval: float = 60.0  # seconds
    max_migrating_per_node: int | None = Field(default=2, gt=0)
    max_migrating_per_namespace: int | None = Field(default=None, gt=0)
    max_migrating_globally: int | None = Field(default=None, gt=0)
    # int or "N%"; unset: replicas > 10 -> 10 %, 4..10 -> 2, else 1 (Koordinator's default).
    max_unavailable_per_workload: int | str | None = None
    evict_qps: float = Field(default=10.0, gt=0, alias="evictQPS")  # global Eviction API rate
    evict_burst: int = Field(default=1, gt=0)
    evict_local_storage_pods: bool = False

    _parse_durations = field_validator("detector_cache_timeout", "descheduling_interval", mode="before")(
        _duration_seconds
    )

    @field_serializer("detector_cache_timeout", "descheduling_interval")
    def _dump_duration(self, value: float) -> str:
        return format_go_duration(value)

    @field_validator("descheduling_interval")
    @classmethod
    def _interval_positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be greater than 0")
        return value

    @field_validator("max_unavailable_per_workload")
    @classmethod
    def _int_or_percent(cls, value: int | str | None) -> int | str | None:
        if value is None:
            return None
        if isinstance(value, int):
            if value <= 0:
                raise ValueError("must be greater than 0")
            return value
        m = re.fullmatch(r"(\d+)%", value.strip())
        if m is None or int(m.group(1)) <= 0 or int(m.group(1)) > 100:
            raise ValueError("must be a positive integer or a percentage such as '10%'")
        return value.strip()

    @model_validator(mode="after")
    def _thresholds_consistent(self) -> LowNodeLoadArgs:
        problems = _check_threshold_order(
            "",
            deviation=self.use_deviation_thresholds,
            low=self.low_thresholds,
            high=self.high_thresholds,
            prod_low=self.prod_low_thresholds,
            prod_high=self.prod_high_thresholds,
        )
        for i, pool in enumerate(self.node_pools):
            eff = resolve_pool(self, pool, f"nodePools[{i}]")
            problems += _check_threshold_order(
                f"nodePools[{i}].",
                deviation=eff.use_deviation_thresholds,
                low=eff.low_thresholds,
                high=eff.high_thresholds,
                prod_low=eff.prod_low_thresholds,
                prod_high=eff.prod_high_thresholds,
            )
        if not any(p.low_thresholds or p.high_thresholds for p in resolve_pools(self)):
            problems.append(
                "highThresholds: no thresholds configured (set highThresholds/lowThresholds at the top level "
                "or in nodePools)"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self


@dataclass(frozen=True, slots=True)
class ResolvedPool:
    """A node pool with inheritance applied: everything one balancing pass needs."""

    name: str
    node_selector: LabelSelector | None
    use_deviation_thresholds: bool
    high_thresholds: Mapping[str, float]
    low_thresholds: Mapping[str, float]
    prod_high_thresholds: Mapping[str, float]
    prod_low_thresholds: Mapping[str, float]
    resource_weights: Mapping[str, int]
    anomaly_condition: AnomalyCondition

    @property
    def prod_enabled(self) -> bool:
        return bool(self.prod_high_thresholds or self.prod_low_thresholds)

    @property
    def resource_names(self) -> tuple[str, ...]:
        """Threshold resources plus memory (Koordinator always accounts memory), sorted."""
        names = {MEMORY}
        for thresholds in (
            self.low_thresholds,
            self.high_thresholds,
            self.prod_low_thresholds,
            self.prod_high_thresholds,
        ):
            names.update(thresholds)
        return tuple(sorted(names))

    def weight(self, resource: str) -> int:
        return self.resource_weights.get(resource, 1)


def _weights(explicit: Mapping[str, int], resources: tuple[str, ...]) -> dict[str, int]:
    # Koordinator: 1 for cpu, memory and every threshold resource; weights <= 0 become 1.
    weights = dict.fromkeys((CPU, MEMORY, *resources), 1)
    for resource, w in explicit.items():
        weights[resource] = w if w > 0 else 1
    return weights


def resolve_pool(args: LowNodeLoadArgs, pool: NodePool, fallback_name: str) -> ResolvedPool:
    draft = ResolvedPool(
        name=pool.name or fallback_name,
        node_selector=pool.node_selector,
        use_deviation_thresholds=(
            args.use_deviation_thresholds if pool.use_deviation_thresholds is None else pool.use_deviation_thresholds
        ),
        high_thresholds=dict(pool.high_thresholds or args.high_thresholds),
        low_thresholds=dict(pool.low_thresholds or args.low_thresholds),
        prod_high_thresholds=dict(pool.prod_high_thresholds or args.prod_high_thresholds),
        prod_low_thresholds=dict(pool.prod_low_thresholds or args.prod_low_thresholds),
        resource_weights={},
        anomaly_condition=pool.anomaly_condition or args.anomaly_condition,
    )
    weights = _weights(pool.resource_weights or args.resource_weights, draft.resource_names)
    return dataclasses.replace(draft, resource_weights=weights)


def resolve_pools(args: LowNodeLoadArgs) -> list[ResolvedPool]:
    """The pools in processing order; top-level settings form the first pool, as in Koordinator."""
    pools: list[ResolvedPool] = []
    if args.high_thresholds or args.low_thresholds:
        top = NodePool(name=DEFAULT_POOL_NAME, node_selector=args.node_selector)
        pools.append(resolve_pool(args, top, DEFAULT_POOL_NAME))
    for i, pool in enumerate(args.node_pools):
        pools.append(resolve_pool(args, pool, f"nodePools[{i}]"))
    return pools


def effective_detector_cache_timeout(args: LowNodeLoadArgs) -> float:
    return max(args.detector_cache_timeout, args.descheduling_interval)


def parse_args(data: Mapping[str, Any]) -> LowNodeLoadArgs:
    """Validate a LowNodeLoadArgs document; raises ArgsError whose lines name each bad field."""
    try:
        return LowNodeLoadArgs.model_validate(dict(data))
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            path = ""
            for part in err["loc"]:
                path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
            msg = err["msg"].removeprefix("Value error, ")
            problems.append(f"{path}: {msg}" if path else msg)
        raise ArgsError(problems) from exc
