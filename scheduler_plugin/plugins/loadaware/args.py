"""LoadAwareSchedulingArgs with Koordinator's field names, defaults and validation (koordinator
pkg/scheduler/apis/config/types.go, v1/defaults.go, validation/).

One addition: `scoringStrategy.type: MostUsed` scores the busiest node that is still
under the thresholds highest (bin-packing); Koordinator only has LeastUsed (spreading).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from common.api import constants as c
from common.api.nodemetric import AggregationType
from common.api.wire import GoDuration

DEFAULT_RESOURCE_WEIGHTS = {c.RESOURCE_CPU: 1, c.RESOURCE_MEMORY: 1}
DEFAULT_USAGE_THRESHOLDS = {c.RESOURCE_CPU: 65, c.RESOURCE_MEMORY: 95}
DEFAULT_ESTIMATED_SCALING_FACTORS = {c.RESOURCE_CPU: 85, c.RESOURCE_MEMORY: 70}
DEFAULT_NODE_METRIC_EXPIRATION_SECONDS = 180


class _Args(BaseModel):
    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True, arbitrary_types_allowed=True
    )


def _percentages(value: dict[str, int]) -> dict[str, int]:
    for name, pct in value.items():
        if not 0 <= pct <= 100:
            raise ValueError(f"{name}: {pct} is not a percentage in 0..100")
    return value


class AggregatedArgs(_Args):
    usage_thresholds: dict[str, int] = Field(default_factory=dict)
    usage_aggregation_type: AggregationType | Literal[""] = ""
    usage_aggregated_duration: GoDuration | None = None
    score_aggregation_type: AggregationType | Literal[""] = ""
    score_aggregated_duration: GoDuration | None = None

    _check_thresholds = field_validator("usage_thresholds")(_percentages)

    @property
    def filter_enabled(self) -> bool:
        return bool(self.usage_thresholds) and bool(self.usage_aggregation_type)

    @property
    def score_enabled(self) -> bool:
        return bool(self.score_aggregation_type)


class ScoringStrategy(_Args):
    type: Literal["LeastUsed", "MostUsed"] = "LeastUsed"


class LoadAwareSchedulingArgs(_Args):
    filter_expired_node_metrics: bool = True
    node_metric_expiration_seconds: int = Field(default=DEFAULT_NODE_METRIC_EXPIRATION_SECONDS, gt=0)
    enable_schedule_when_node_metrics_expired: bool = False
    resource_weights: dict[str, int] = Field(default_factory=dict)
    dominant_resource_weight: int = Field(default=0, ge=0, le=100)
    usage_thresholds: dict[str, int] = Field(default_factory=dict)
    prod_usage_thresholds: dict[str, int] = Field(default_factory=dict)
    prod_usage_include_sys: bool = False
    score_according_prod_usage: bool = False
    estimator: Literal["", "DefaultEstimator", "defaultEstimator"] = ""
    estimated_scaling_factors: dict[str, int] = Field(default_factory=dict)
    estimated_seconds_after_pod_scheduled: int | None = Field(default=None, ge=0)
    estimated_seconds_after_initialized: int | None = Field(default=None, ge=0)
    allow_customize_estimation: bool = False
    aggregated: AggregatedArgs | None = None
    supported_resources: list[str] = Field(default_factory=list)
    scoring_strategy: ScoringStrategy = Field(default_factory=ScoringStrategy)

    _check_thresholds = field_validator("usage_thresholds", "prod_usage_thresholds")(_percentages)

    @field_validator("resource_weights")
    @classmethod
    def _weights(cls, value: dict[str, int]) -> dict[str, int]:
        for name, weight in value.items():
            if not 0 < weight <= 100:  # Koordinator rejects 0: leave the resource out instead
                raise ValueError(f"{name}: weight {weight} is not in 1..100")
        return value

    @field_validator("estimated_scaling_factors")
    @classmethod
    def _factors(cls, value: dict[str, int]) -> dict[str, int]:
        for name, factor in value.items():
            if not 0 < factor <= 100:
                raise ValueError(f"{name}: scaling factor {factor} is not in 1..100")
        return value

    @model_validator(mode="after")
    def _defaults(self) -> LoadAwareSchedulingArgs:
        # Koordinator's SetDefaults_LoadAwareSchedulingArgs: fill only what is empty/missing.
        weights = dict(self.resource_weights)
        if not weights and self.dominant_resource_weight == 0:
            weights = dict(DEFAULT_RESOURCE_WEIGHTS)
        thresholds = dict(self.usage_thresholds) or dict(DEFAULT_USAGE_THRESHOLDS)
        factors = dict(self.estimated_scaling_factors)
        for name, factor in DEFAULT_ESTIMATED_SCALING_FACTORS.items():
            factors.setdefault(name, factor)
        missing = sorted(name for name in weights if name not in factors)
        if missing:
            raise ValueError(f"resourceWeights: {missing} need an estimatedScalingFactors entry")
        object.__setattr__(self, "resource_weights", weights)
        object.__setattr__(self, "usage_thresholds", thresholds)
        object.__setattr__(self, "estimated_scaling_factors", factors)
        return self

    def resource_vector(self) -> list[str]:
        """Sorted union of cpu, memory and the resources named in thresholds, weights, factors, supportedResources."""
        names = {c.RESOURCE_CPU, c.RESOURCE_MEMORY}
        names |= set(self.usage_thresholds) | set(self.prod_usage_thresholds) | set(self.resource_weights)
        names |= set(self.estimated_scaling_factors) | set(self.supported_resources)
        if self.aggregated is not None:
            names |= set(self.aggregated.usage_thresholds)
        return sorted(names)
