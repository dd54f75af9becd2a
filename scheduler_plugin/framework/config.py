"""`KubeSchedulerConfiguration` (kubescheduler.config.k8s.io/v1) as pydantic models.

Unknown fields are errors (kube-scheduler decodes strictly). Top-level fields that
belong to the scheduler process rather than to profiles (clientConnection,
leaderElection, extenders, ...) are accepted here and read by the process.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

API_VERSION = "kubescheduler.config.k8s.io/v1"
DEFAULT_SCHEDULER_NAME = "loadline-scheduler"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True)


class PluginRef(_Strict):
    name: str = Field(min_length=1)
    weight: int | None = Field(default=None, ge=0)


class PluginSet(_Strict):
    enabled: list[PluginRef] = Field(default_factory=list)
    disabled: list[PluginRef] = Field(default_factory=list)


class Plugins(_Strict):
    pre_enqueue: PluginSet = Field(default_factory=PluginSet)
    queue_sort: PluginSet = Field(default_factory=PluginSet)
    pre_filter: PluginSet = Field(default_factory=PluginSet)
    filter: PluginSet = Field(default_factory=PluginSet)
    post_filter: PluginSet = Field(default_factory=PluginSet)
    pre_score: PluginSet = Field(default_factory=PluginSet)
    score: PluginSet = Field(default_factory=PluginSet)
    reserve: PluginSet = Field(default_factory=PluginSet)
    permit: PluginSet = Field(default_factory=PluginSet)
    pre_bind: PluginSet = Field(default_factory=PluginSet)
    bind: PluginSet = Field(default_factory=PluginSet)
    post_bind: PluginSet = Field(default_factory=PluginSet)
    multi_point: PluginSet = Field(default_factory=PluginSet)


class PluginConfig(_Strict):
    name: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)


class Profile(_Strict):
    scheduler_name: str = Field(default=DEFAULT_SCHEDULER_NAME, min_length=1)
    percentage_of_nodes_to_score: int | None = Field(default=None, ge=0, le=100)
    plugins: Plugins = Field(default_factory=Plugins)
    plugin_config: list[PluginConfig] = Field(default_factory=list)


class KubeSchedulerConfiguration(_Strict):
    api_version: Literal["kubescheduler.config.k8s.io/v1"] = "kubescheduler.config.k8s.io/v1"
    kind: Literal["KubeSchedulerConfiguration"] = "KubeSchedulerConfiguration"
    parallelism: int = Field(default=16, ge=1)
    percentage_of_nodes_to_score: int | None = Field(default=None, ge=0, le=100)
    pod_initial_backoff_seconds: int = Field(default=1, ge=1)
    pod_max_backoff_seconds: int = Field(default=10, ge=1)
    profiles: list[Profile] = Field(default_factory=lambda: [Profile()], min_length=1)
    # Read by the scheduler process, not by the framework.
    client_connection: dict[str, Any] | None = None
    leader_election: dict[str, Any] | None = None
    extenders: list[dict[str, Any]] = Field(default_factory=list)
    feature_gates: dict[str, bool] | None = None
    delay_cache_until_active: bool | None = None
    enable_profiling: bool | None = None
    enable_contention_profiling: bool | None = None
    healthz_bind_address: str | None = None
    metrics_bind_address: str | None = None

    @model_validator(mode="after")
    def _backoff_order(self) -> KubeSchedulerConfiguration:
        if self.pod_max_backoff_seconds < self.pod_initial_backoff_seconds:
            raise ValueError("podMaxBackoffSeconds must be at least podInitialBackoffSeconds")
        return self


# Extension-point attribute names of `Plugins`, keyed by the YAML names the framework uses.
POINT_FIELDS = {
    "preEnqueue": "pre_enqueue",
    "queueSort": "queue_sort",
    "preFilter": "pre_filter",
    "filter": "filter",
    "postFilter": "post_filter",
    "preScore": "pre_score",
    "score": "score",
    "reserve": "reserve",
    "permit": "permit",
    "preBind": "pre_bind",
    "bind": "bind",
    "postBind": "post_bind",
}
