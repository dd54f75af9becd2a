"""The agent's settings: defaults < YAML file (`--config`) < `LOADLINE_AGENT_*` environment < flags.

Every field is also a flag (`collect_interval_seconds` -> `--collect-interval-seconds`) and an environment
variable (`LOADLINE_AGENT_COLLECT_INTERVAL_SECONDS`). Lists are comma separated in flags and environment
(`--aggregate-windows 5m,10m,30m`). Durations are seconds or Go durations (`90`, `1.5s`, `5m`, `5m0s`).
The node name also comes from `NODE_NAME` (the downward API) when nothing else sets it. A bad value stops
the agent at start with the field named (exit status 2).

Intervals and windows have Koordinator's defaults (collect 1 s, report 60 s, nodeUsage over 300 s,
windows 5m/10m/30m) but no minimum of their own, so tests and demos can run on seconds. Values that come
from a NodeMetric's `spec.metricCollectPolicy` are clamped as koordlet clamps them (aggregate >= 60 s,
report >= 30 s; `spec_min_*` below). Windows and the aggregate duration are bounded as the manager bounds
colocation-config's (`common/api/nodemetric.py`: at most 3,600 s each, 8 windows): the ring keeps a sample per
collect interval for the longest.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from agent.collectors.cgroups import PsiScope
from agent.qos.batch_resource import IsolationMode
from common.api.nodemetric import NodeMemoryCollectPolicy, check_aggregate_seconds, check_aggregate_windows
from common.api.quantity import Quantity
from common.api.wire import GoDuration
from common.config import ConfigError, load_settings

ENV_PREFIX = "LOADLINE_AGENT"
DEFAULT_PORT = 9321
# RFC 1123 subdomain: what a Node (and so a NodeMetric) may be called.
_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _seconds(value: Any) -> Any:
    """`90`, `"90"`, `"1.5s"`, `"5m"`, `"5m0s"` -> seconds (float). Anything else is left to pydantic."""
    if isinstance(value, GoDuration):
        return value.seconds
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text)
        except ValueError:
            pass
        try:
            return GoDuration.parse(text).seconds
        except ValueError as exc:
            raise ValueError(f"not a duration: {value!r} (use seconds or a Go duration like 30s, 5m)") from exc
    return value


def _list(value: Any) -> Any:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _bytes(value: Any) -> Any:
    if isinstance(value, str):
        return Quantity.parse(value.strip()).value()
    return value


def _on_off(value: Any) -> Any:
    """true/false (YAML's on/off, or a flag's) for a mode that is on or off."""
    if isinstance(value, bool) or (isinstance(value, str) and value.lower() in ("true", "false")):
        return "on" if str(value).lower() == "true" else "off"
    return value


Seconds = Annotated[float, BeforeValidator(_seconds), Field(gt=0)]
SecondsOrZero = Annotated[float, BeforeValidator(_seconds), Field(ge=0)]
SecondsList = Annotated[list[Annotated[float, BeforeValidator(_seconds), Field(gt=0)]], BeforeValidator(_list)]
Bytes = Annotated[int, BeforeValidator(_bytes), Field(ge=0)]


class AgentSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # --- identity and cluster access
    node_name: str | None = Field(None, description="node to report for (in a pod: NODE_NAME from the downward API)")
    kubeconfig: str | None = Field(None, description="kubeconfig file; default $KUBECONFIG, ~/.kube/config, in-cluster")
    kubelet_url: str = Field(
        "http://127.0.0.1:10255",
        description="standalone: the kubelet's pod list (GET <url>/pods) names pods when it answers; '' not to ask",
    )

    # --- sampling and aggregation
    collect_interval_seconds: Seconds = Field(1.0, description="seconds between collect cycles")
    report_interval_seconds: Seconds = Field(60.0, description="seconds between NodeMetric status writes")
    aggregate_duration_seconds: Seconds = Field(300.0, description="window of nodeUsage/systemUsage/podsMetric")
    aggregate_windows: SecondsList = Field(
        default_factory=lambda: [300.0, 600.0, 1800.0],
        description="windows of aggregatedNodeUsages (avg p50 p90 p95 p99), comma separated",
    )
    node_memory_collect_policy: NodeMemoryCollectPolicy = Field(
        NodeMemoryCollectPolicy.USAGE_WITHOUT_PAGE_CACHE, description="node memory series reported as usage"
    )
    aggregation_interval_seconds: Seconds = Field(
        15.0,
        description="seconds between aggregations for /metrics (percentiles are never computed in a scrape); a "
        "window is aggregated again once 1/20 of it is new samples (5m every 15 s, 10m every 30 s, 30m every 90 s)",
    )

    pod_window_metrics: bool = Field(
        False,
        description="export each pod's window series on /metrics (avg p50 p90 p95 p99 of CPU, memory and "
        "throttling per window: 60 series a pod); off: node and system windows only, pods as raw counters "
        "(cAdvisor's shape), so a 5,000-node Prometheus can scrape every agent (docs/monitoring.md)",
    )

    # --- collectors
    proc_root: Path = Field(Path("/proc"), description="procfs of the host")
    sys_root: Path = Field(Path("/sys"), description="sysfs of the host (InfiniBand, netdevs)")
    cgroup_root: Path = Field(Path("/sys/fs/cgroup"), description="cgroup mount of the host")
    cgroup_parent: str = Field("", description="kubelet --cgroup-root below the cgroup mount")
    pod_logs_dir: Path = Field(
        Path("/var/log/pods"),
        description="no API server (--once, standalone without the kubelet's pod list): pods are named by the "
        "kubelet's pod log directories here (<namespace>_<name>_<uid>), else by their UID",
    )
    collectors: Annotated[list[str] | None, BeforeValidator(_list)] = Field(
        None, description="collectors to run, comma separated (unset: those enabled by default)"
    )
    netlink: bool = Field(
        False,
        description="netdev: take the link inventory from netlink (pyroute2: link kinds; +9 MB RSS) rather than "
        "/sys/class/net",
    )
    psi: PsiScope = Field(
        PsiScope.OFF,
        description="cgroups with PSI series (pods: pod cgroups, read every 2 s; all: containers too); off by default "
        "as koordlet's PSICollector feature gate: 3 more files a pod (the node's PSI is always read)",
    )
    container_interval_seconds: SecondsOrZero = Field(
        0.0,
        description="seconds between reads of container cgroups in the collect cycle; 0: when /metrics is "
        "scraped, at most once a cycle (their series are exported raw only; pods are read every cycle)",
    )

    # --- publishing
    publish: bool = Field(True, description="write the NodeMetric status (off: sample and export only)")
    qos_enforcement: bool = Field(
        True,
        description="act on the node's NodeSLO (BE CPU suppress, BE memory evict) when it enables them, and hold "
        "batch pods to their batch resources (--batch-isolation); off: measure only",
    )
    batch_isolation: Annotated[IsolationMode, BeforeValidator(_on_off)] = Field(
        IsolationMode.ON,
        description="with --qos-enforcement, set each batch pod's cgroups (cpu.shares, CFS quota, memory limit) from "
        "its kubernetes.io/batch-cpu and batch-memory: on, dry-run (log and count what would be set, write nothing) "
        "or off",
    )
    create_nodemetric: bool = Field(
        True, description="create the NodeMetric if missing (off when Koordinator's manager creates them)"
    )
    follow_nodemetric_spec: bool = Field(True, description="watch the NodeMetric's spec.metricCollectPolicy")
    spec_min_aggregate_duration_seconds: float = Field(60.0, ge=0, description="koordlet's clamp of the spec value")
    spec_min_report_interval_seconds: float = Field(30.0, ge=0, description="koordlet's clamp of the spec value")
    publish_qps: float = Field(0.1, gt=0, description="client-side token bucket for NodeMetric writes (koordlet 0.1)")
    publish_burst: int = Field(2, ge=1, description="token bucket burst (koordlet 2)")
    retry_initial_seconds: Seconds = Field(1.0, description="first retry delay after a failed publish")
    retry_max_seconds: Seconds = Field(10.0, description="longest retry delay (jittered) while the API server fails")
    request_timeout_seconds: Seconds = Field(10.0, description="timeout of one API request")

    # --- peak prediction (Koordinator's peak predictor: prodReclaimableMetric, prodPeakMetric; agent/prediction)
    prediction: bool = Field(True, description="predict the Prod tier's peaks and publish prodReclaimableMetric")
    prediction_checkpoint_dir: Path | None = Field(
        None, description="directory of the models' checkpoint (a hostPath in the chart); unset: none, models restart"
    )
    prediction_cold_start_seconds: Seconds = Field(86400.0, description="a pod lends nothing until this old")
    prediction_safety_margin_percent: int = Field(10, ge=0, le=1000, description="headroom above a predicted peak")
    prediction_cpu_half_life_seconds: Seconds = Field(43200.0, description="CPU histograms halve old weight this often")
    prediction_memory_half_life_seconds: Seconds = Field(86400.0, description="memory histograms' half-life")
    prediction_training_interval_seconds: Seconds = Field(60.0, description="seconds between training steps")
    prediction_model_expiration_seconds: Seconds = Field(1800.0, description="a model not trained this long is dropped")
    prediction_checkpoint_interval_seconds: Seconds = Field(600.0, description="seconds between checkpoint writes")
    prediction_min_history_seconds: SecondsOrZero = Field(
        3600.0,
        description="a pod lends nothing until its model has this much history (0: as koordlet, from the first "
        "training; Loadline's guard for an agent that lost its checkpoint)",
    )
    prediction_max_pods: int = Field(512, ge=1, le=100000, description="pods with a model at most (~2.9 KiB each)")

    # --- Prometheus and health: the HTTP server, spelled as every component's (`--bind-address`, `--port`)
    metrics_enabled: bool = Field(True, description="serve /metrics, /healthz, /readyz")
    bind_address: str | None = Field(
        None,
        description="listen address of /metrics, /healthz, /readyz (unset: 0.0.0.0, standalone 127.0.0.1; "
        "formerly --metrics-address)",
    )
    port: int = Field(
        DEFAULT_PORT, ge=0, le=65535, description="HTTP port of /metrics (formerly --metrics-port); 0: any free port"
    )

    # --- `--once`
    once_seconds: Seconds = Field(10.0, description="how long `--once` samples this machine")
    once_output: Literal["table", "yaml"] = Field(
        "table", description="`--once` prints a table in human units, or the NodeMetric as YAML"
    )

    # --- `--simulate`
    simulate_node_selector: str = Field("", description="label selector of the nodes to simulate")
    simulate_node_annotation: str = Field(
        "kwok.x-k8s.io/node", description="annotation (key or key=value) the simulated nodes carry; '' for any node"
    )
    simulate_usage_fraction: float = Field(
        0.4, gt=0, le=4, description="mean usage as a fraction of requests when a pod declares none"
    )
    simulate_burstiness: float = Field(0.3, ge=0, le=10, description="default CPU coefficient of variation")
    simulate_node_noise: float = Field(0.2, ge=0, le=10, description="coefficient of variation of system usage")
    simulate_system_cpu: float = Field(0.3, ge=0, description="mean system (non-pod) CPU of a node, cores")
    simulate_system_memory: Bytes = Field(1 << 30, description="mean system memory of a node (bytes or 1Gi)")
    simulate_seed: int | None = Field(None, description="random seed (unset: a random one)")

    # --- logging
    log_level: str = Field("info", description="one of debug, info, warning, error")
    log_json: bool = Field(False, description="log JSON lines")

    @field_validator("node_name")
    @classmethod
    def _node_name(cls, value: str | None) -> str | None:
        if value is not None and (len(value) > 253 or not _NODE_NAME.fullmatch(value)):
            raise ValueError("must be a lower-case RFC 1123 name, like a Node's")
        return value

    @field_validator("aggregate_windows")
    @classmethod
    def _windows(cls, value: list[float]) -> list[float]:
        if not value:
            raise ValueError("at least one window is needed")
        windows = sorted(set(value))
        check_aggregate_windows(windows)  # the bounds the manager holds colocation-config to (issue 29)
        return windows

    @field_validator("aggregate_duration_seconds")
    @classmethod
    def _aggregate_duration(cls, value: float) -> float:
        check_aggregate_seconds(value)
        return value

    @field_validator("collectors")
    @classmethod
    def _collectors(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        from agent.collectors.registry import COLLECTORS

        known = {spec.name for spec in COLLECTORS}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"unknown collectors {unknown}; known: {sorted(known)}")
        return value

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        if value.lower() not in ("debug", "info", "warning", "error", "critical"):
            raise ValueError("must be debug, info, warning, error or critical")
        return value.lower()

    @field_validator("simulate_node_annotation")
    @classmethod
    def _annotation(cls, value: str) -> str:
        key = value.partition("=")[0]
        if value and not key:
            raise ValueError("needs a key: 'key' or 'key=value'")
        return value

    @model_validator(mode="after")
    def _orderings(self) -> AgentSettings:
        if self.retry_max_seconds < self.retry_initial_seconds:
            raise ValueError("retry_max_seconds must not be below retry_initial_seconds")
        if 0 < self.container_interval_seconds < self.collect_interval_seconds:
            raise ValueError(
                "container_interval_seconds must be 0 (when scraped) or not below collect_interval_seconds"
            )
        return self

    @property
    def retention_seconds(self) -> float:
        return max(*self.aggregate_windows, self.aggregate_duration_seconds)


FLAG_ALIASES: Mapping[str, tuple[str, ...]] = {
    "collect_interval_seconds": ("--collect-interval",),
    "report_interval_seconds": ("--report-interval",),
    "aggregate_duration_seconds": ("--aggregate-duration",),
    "aggregate_windows": ("--windows",),
    "aggregation_interval_seconds": ("--aggregation-interval",),
}


# Settings renamed so that every component spells a meaning the same way: the old flag, YAML key and
# LOADLINE_AGENT_* variable still work and log that they are deprecated (common/flags.py).
RENAMED: Mapping[str, str] = {"metrics_port": "port", "metrics_address": "bind_address"}


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def load(
    flags: Mapping[str, Any],
    *,
    file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> AgentSettings:
    """Settings from all sources; raises `ConfigError` naming the field on a bad value."""
    import os

    env = os.environ if environ is None else environ
    settings = load_settings(
        AgentSettings, file=file, env_prefix=ENV_PREFIX, flags=flags, environ=env, renamed=RENAMED
    )
    if settings.node_name is None and env.get("NODE_NAME"):
        try:
            return AgentSettings.model_validate({**settings.model_dump(), "node_name": env["NODE_NAME"]})
        except ValueError as exc:
            raise ConfigError(f"invalid configuration (NODE_NAME):\n  node_name: {exc}") from None
    return settings


__all__ = ["ENV_PREFIX", "FLAG_ALIASES", "RENAMED", "AgentSettings", "ConfigError", "flag_name", "load"]
