"""Process settings of `loadline scheduler`: flags over the KubeSchedulerConfiguration file over defaults.

The file's process-level stanzas are read the way kube-scheduler reads them:
`clientConnection` (`kubeconfig`, and `qps`/`burst`, the client-side rate limit of every API
request, default 50/100 as in kube-scheduler) and `leaderElection` (`leaderElect`, `leaseDuration`,
`renewDeadline`, `retryPeriod`, `resourceName`, `resourceNamespace`). Errors name the
field and stop the process at start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from common.api.wire import GoDuration
from common.config import ConfigError
from scheduler_plugin.framework.config import KubeSchedulerConfiguration

DEFAULT_PORT = 10251
DEFAULT_LEASE_NAME = "loadline-scheduler"
DEFAULT_LEASE_NAMESPACE = "kube-system"
DEFAULT_CLIENT_QPS = 50.0  # kube-scheduler's clientConnection defaults (kubescheduler.config.k8s.io/v1)
DEFAULT_CLIENT_BURST = 100


@dataclass(frozen=True, slots=True)
class LeaderElection:
    enabled: bool = True
    name: str = DEFAULT_LEASE_NAME
    namespace: str = DEFAULT_LEASE_NAMESPACE
    lease_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 2.0


@dataclass(frozen=True, slots=True)
class SchedulerOptions:
    kubeconfig: str | None
    bind_address: str
    port: int
    leader_election: LeaderElection
    identity: str | None = None
    explain_cache_size: int = 1000
    unschedulable_timeout_seconds: float = 300.0
    crd_retry_seconds: float = 60.0
    client_qps: float = DEFAULT_CLIENT_QPS
    client_burst: int = DEFAULT_CLIENT_BURST
    tie_break_seed: int | None = None  # seeds the choice among equally good nodes (tests, benchmarks)


def _duration(section: Mapping[str, Any], field: str, default: float) -> float:
    raw = section.get(field)
    if raw is None:
        return default
    try:
        seconds = GoDuration.parse(raw).seconds
    except ValueError as exc:
        raise ConfigError(f"invalid scheduler configuration: leaderElection.{field}: {exc}") from None
    if seconds <= 0:
        raise ConfigError(f"invalid scheduler configuration: leaderElection.{field}: must be positive, got {raw!r}")
    return seconds


def leader_election_from(config: KubeSchedulerConfiguration, flags: Mapping[str, Any]) -> LeaderElection:
    """Flags (None = not given) over the file's `leaderElection` over defaults."""
    section: Mapping[str, Any] = config.leader_election or {}
    enabled = section.get("leaderElect", True)
    if not isinstance(enabled, bool):
        raise ConfigError(
            f"invalid scheduler configuration: leaderElection.leaderElect: expected a boolean, got {enabled!r}"
        )
    lock = section.get("resourceLock", "leases")
    if lock != "leases":
        raise ConfigError(
            f"invalid scheduler configuration: leaderElection.resourceLock: only 'leases' is supported, got {lock!r}"
        )
    election = LeaderElection(
        enabled=enabled if flags.get("leader_elect") is None else bool(flags["leader_elect"]),
        name=str(flags.get("lease_name") or section.get("resourceName") or DEFAULT_LEASE_NAME),
        namespace=str(flags.get("lease_namespace") or section.get("resourceNamespace") or DEFAULT_LEASE_NAMESPACE),
        lease_seconds=flags.get("lease_duration") or _duration(section, "leaseDuration", 15.0),
        renew_deadline_seconds=flags.get("renew_deadline") or _duration(section, "renewDeadline", 10.0),
        retry_period_seconds=flags.get("retry_period") or _duration(section, "retryPeriod", 2.0),
    )
    if election.enabled and not (
        election.lease_seconds > election.renew_deadline_seconds > election.retry_period_seconds > 0
    ):
        raise ConfigError(
            "invalid scheduler configuration: leaderElection: leaseDuration > renewDeadline > retryPeriod > 0 is "
            f"required, got {election.lease_seconds}s, {election.renew_deadline_seconds}s, "
            f"{election.retry_period_seconds}s"
        )
    return election


def kubeconfig_from(config: KubeSchedulerConfiguration, flag: str | None) -> str | None:
    if flag:
        return flag
    connection = config.client_connection or {}
    path = connection.get("kubeconfig")
    if path is not None and not isinstance(path, str):
        raise ConfigError(
            f"invalid scheduler configuration: clientConnection.kubeconfig: expected a path, got {path!r}"
        )
    return path or None


def client_limits_from(config: KubeSchedulerConfiguration) -> tuple[float, int]:
    """`clientConnection.qps` and `.burst`, defaulted like kube-scheduler's."""
    connection = config.client_connection or {}
    qps = connection.get("qps", DEFAULT_CLIENT_QPS)
    if isinstance(qps, bool) or not isinstance(qps, int | float) or qps <= 0:
        raise ConfigError(
            f"invalid scheduler configuration: clientConnection.qps: expected a positive number, got {qps!r}"
        )
    burst = connection.get("burst", DEFAULT_CLIENT_BURST)
    if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
        raise ConfigError(
            f"invalid scheduler configuration: clientConnection.burst: expected a positive integer, got {burst!r}"
        )
    return float(qps), burst
