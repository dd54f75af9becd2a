"""BE CPU suppress arithmetic (koordinator `pkg/koordlet/qosmanager/plugins/cpusuppress`).

    suppress(BE) = capacity * cpuSuppressThresholdPercent / 100
                   - Σ usage of non-BE pods - Σ usage of non-BE host applications
                   - max(node used - Σ all pods - Σ all host apps, node reserved)
    floor: capacity * cpuSuppressMinPercent / 100 when that is set

The result is what best-effort pods may use right now. The `cfsQuota` policy turns it into
the besteffort QoS cgroup's CFS quota, the `cpuset` policy into a number of CPUs; both move
in bounded steps so a short spike of high-priority load does not whipsaw the BE pods.
Usages come in float cores (as collected); each term is truncated to milli-cores like
koordlet does, so the arithmetic matches it to the milli-core.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

CFS_PERIOD_US: Final = 100_000  # koordlet always computes against the default period
BE_MIN_CFS_QUOTA_US: Final = 2_000  # never starve BE completely: 0.02 cores
UNLIMITED_CFS_QUOTA: Final = -1  # cgroup v1 "no limit"; what suppress restores
SUPPRESS_BYPASS_DELTA_RATIO: Final = 0.01  # quota moves smaller than 1% of the node are skipped
BE_MAX_INCREASE_RATIO: Final = 0.1  # BE grows by at most 10% of the node per round ("scale up slow")
BE_MIN_CPUSET_CPUS: Final = 2


def capacity_cores(capacity_milli: int) -> int:
    """Whole cores of the node as Quantity.Value() gives them (rounded up)."""
    return -(-capacity_milli // 1000)


# --- suppress ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PodCPUUsage:
    """A pod with a CPU usage sample. `best_effort` is None when the agent has metrics for a pod
    it has no metadata for; such pods are counted as non-BE (they might be anything)."""

    uid: str
    used_cores: float
    best_effort: bool | None


@dataclass(frozen=True, slots=True)
class HostAppCPUUsage:
    """A NodeSLO host application with a usage sample. It counts as BE only when its QoS is BE
    *and* it runs under the kubepods besteffort cgroup, where the BE limits reach it."""

    name: str
    used_cores: float
    best_effort: bool


@dataclass(frozen=True, slots=True)
class SuppressBreakdown:
    capacity_milli: int
    threshold_percent: int
    pods_non_be_used_milli: int
    host_apps_non_be_used_milli: int
    system_used_milli: int  # max(unaccounted node usage, node reserved)
    floor_milli: int | None  # capacity * cpuSuppressMinPercent / 100, when set
    suppress_milli: int  # may be negative before policies apply their minimums

    def explain(self) -> str:
        floor = f", floor {self.floor_milli}m" if self.floor_milli is not None else ""
        return (
            f"BE suppress {self.suppress_milli}m = capacity {self.capacity_milli}m * {self.threshold_percent}%"
            f" - non-BE pods {self.pods_non_be_used_milli}m - non-BE host apps {self.host_apps_non_be_used_milli}m"
            f" - system {self.system_used_milli}m{floor}"
        )


def be_suppress(
    *,
    capacity_milli: int,
    node_used_cores: float,
    node_reserved_milli: int,
    pods: Iterable[PodCPUUsage],
    host_apps: Iterable[HostAppCPUUsage],
    threshold_percent: int,
    min_percent: int | None = None,
) -> SuppressBreakdown:
    """How many milli-cores best-effort pods may use (see module docstring)."""
    pods_all = pods_non_be = 0.0
    for pod in pods:
        pods_all += pod.used_cores
        if pod.best_effort is not True:
            pods_non_be += pod.used_cores
    apps_all = apps_non_be = 0.0
    for app in host_apps:
        apps_all += app.used_cores
        if not app.best_effort:
            apps_non_be += app.used_cores
    # Whatever the node uses beyond pods and host apps is the system's; it gets at least what
    # the node reserved for it, so BE cannot grow into kubelet/system reservations.
    system_used = max(node_used_cores - pods_all - apps_all, 0.0)
    system_used = max(system_used, node_reserved_milli / 1000)

    pods_non_be_milli = int(pods_non_be * 1000)
    apps_non_be_milli = int(apps_non_be * 1000)
    system_milli = int(system_used * 1000)
    suppress = capacity_milli * threshold_percent // 100 - pods_non_be_milli - apps_non_be_milli - system_milli
    floor = None
    if min_percent is not None:
        floor = capacity_milli * min_percent // 100
        suppress = max(suppress, floor)
    return SuppressBreakdown(
        capacity_milli=capacity_milli,
        threshold_percent=threshold_percent,
        pods_non_be_used_milli=pods_non_be_milli,
        host_apps_non_be_used_milli=apps_non_be_milli,
        system_used_milli=system_milli,
        floor_milli=floor,
        suppress_milli=suppress,
    )


# --- cfsQuota policy ---------------------------------------------------------------------
def be_cfs_quota_target(suppress_milli: int) -> int:
    """The CFS quota (µs per 100 ms period) worth `suppress_milli`, at least BE_MIN_CFS_QUOTA_US."""
    return max(suppress_milli * CFS_PERIOD_US // 1000, BE_MIN_CFS_QUOTA_US)


@dataclass(frozen=True, slots=True)
class CfsQuotaStep:
    """Where to move the besteffort cgroup's quota this round; `quota_us` None means leave it."""

    quota_us: int | None
    target_us: int
    reason: str


def next_be_cfs_quota(suppress_milli: int, current_quota_us: int, capacity_milli: int) -> CfsQuotaStep:
    """One round of the cfsQuota policy, with koordlet's hysteresis and step limit.

    - a change smaller than 1% of the node's quota is skipped (no churn on noise), except when
      the target is the minimum: being pinned to the floor must always be enforced;
    - an increase is capped at 10% of the node per round once a quota is in place, so BE
      ramps up gradually after load falls; decreases apply at once to protect LS pods;
    - from "unlimited" (-1) the first write goes straight to the target.
    """
    target = be_cfs_quota_target(suppress_milli)
    cores = capacity_cores(capacity_milli)
    min_delta = cores * CFS_PERIOD_US * SUPPRESS_BYPASS_DELTA_RATIO
    if abs(target - current_quota_us) < min_delta and target != BE_MIN_CFS_QUOTA_US:
        return CfsQuotaStep(None, target, f"|{target} - {current_quota_us}| < {min_delta:g}us: below the 1% step")
    max_increase = cores * CFS_PERIOD_US * BE_MAX_INCREASE_RATIO
    if target - current_quota_us > max_increase and current_quota_us != UNLIMITED_CFS_QUOTA:
        stepped = current_quota_us + int(max_increase)
        return CfsQuotaStep(stepped, target, f"increase limited to {int(max_increase)}us per round")
    return CfsQuotaStep(target, target, "target")


def render_cpu_max(quota_us: int, period_us: int = CFS_PERIOD_US) -> str:
    """cgroup v2 `cpu.max` content for a v1-style quota (-1 = unlimited = "max")."""
    return f"{'max' if quota_us < 0 else quota_us} {period_us}"


def parse_cpu_max(text: str) -> tuple[int, int]:
    """cgroup v2 `cpu.max` -> (quota_us with -1 for "max", period_us)."""
    fields = text.split()
    if not fields or len(fields) > 2:
        raise ValueError(f"invalid cpu.max content {text!r}")
    quota = UNLIMITED_CFS_QUOTA if fields[0] == "max" else int(fields[0])
    period = int(fields[1]) if len(fields) == 2 else CFS_PERIOD_US
    return quota, period


# --- cpuset policy -------------------------------------------------------------------------
def be_cpuset_size(suppress_milli: int, current_be_cpus: int, logical_cpus: int) -> int:
    """How many CPUs best-effort pods get this round.

    ceil(suppress cores), at least 2 (a single CPU shared by every BE pod thrashes), and grown
    by at most ceil(10% of the node's logical CPUs) above the current BE cpuset per round.
    Shrinking is never limited: LS pods must be protected at once.
    """
    wanted = max(math.ceil(suppress_milli / 1000), BE_MIN_CPUSET_CPUS)
    max_growth = math.ceil(logical_cpus * BE_MAX_INCREASE_RATIO)
    return min(wanted, current_be_cpus + max_growth)
