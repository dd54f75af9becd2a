"""What a batch pod's cgroups are set to: koordlet's batchresource hook (koordinator v1.8.0
`pkg/koordlet/runtimehooks/hooks/batchresource/batch_resource.go`, reconciler mode), as pure functions.

A pod requesting only `kubernetes.io/batch-cpu` / `kubernetes.io/batch-memory` is a BestEffort pod to the kubelet:
cpu.shares 2, no CFS quota, no memory limit. Koordinator holds it to its batch resources instead:

    pod       cpu.shares   Σ app containers' batch-cpu requests (milli-cores) × 1024 / 1000, at least 2
              cfs quota    Σ batch-cpu limits × 100000 / 1000 µs per 100 ms, at least 1000; -1 once a container
                           has no batch-cpu limit; -1 for every batch pod while BE suppression runs with the cfsQuota
                           policy (the besteffort cgroup's quota then holds them: on cgroup v1 a child's quota above its
                           parent's is refused, so per-pod quotas would break suppression)
              memory limit Σ batch-memory limits in bytes; -1 (none) once a container has none
    container the same from the container's own request and limits (a container without a request: shares 2)

Only containers that name a batch resource count (koordlet's util.GetPodExtendedResources); another container of the
pod (a sidecar) is left as the kubelet set it, inside the pod's limits.

The values come from the app containers' resources (what the scheduler placed), else from the
`node.koordinator.sh/extended-resource-spec` annotation Koordinator's webhook writes for its runtime hooks
(`{"containers": {"<name>": {"requests": {...}, "limits": {...}}}}`). Init containers are not counted, as in
koordlet; they run inside the pod's cgroup and are held by it.

Beyond koordlet: a value above the node's capacity is held to the capacity (the same effect, and a quota the kernel
accepts: an absurd one would be refused); a quantity that is negative, fractional (batch-cpu is whole milli-cores) or
out of range makes the pod malformed, and nothing of it is written. The node's
`node.koordinator.sh/cpu-normalization-ratio` (koordlet's CPU normalization) divides the quota, rounded up.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from common.api.constants import BATCH_CPU, BATCH_MEMORY
from common.api.quantity import Quantity, QuantityError, consumer_units

ANNOTATION_EXTENDED_RESOURCE_SPEC: Final = "node.koordinator.sh/extended-resource-spec"
ANNOTATION_CPU_NORMALIZATION_RATIO: Final = "node.koordinator.sh/cpu-normalization-ratio"

CPU_SHARE_UNIT: Final = 1024  # shares of one core
CPU_SHARES_MIN: Final = 2  # the kernel's (and a BestEffort pod's) minimum
CPU_SHARES_MAX: Final = 262_144  # the kernel's maximum
CFS_PERIOD_US: Final = 100_000
CFS_QUOTA_MIN_US: Final = 1_000  # the kernel refuses less than 1 ms
UNLIMITED: Final = -1


class IsolationMode(StrEnum):
    """The agent's `--batch-isolation`: hold batch pods (on), only say what would be set (dry-run), or neither."""

    ON = "on"
    DRY_RUN = "dry-run"
    OFF = "off"


class BatchSpecError(ValueError):
    """A pod's batch resources cannot be read; the message names the field."""


@dataclass(frozen=True, slots=True)
class ContainerBatch:
    """One app container's batch resources; None where the container does not set the value."""

    name: str
    cpu_request_milli: int | None = None
    cpu_limit_milli: int | None = None
    memory_limit_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class BatchSpec:
    source: str  # "spec" or "annotation"
    containers: tuple[ContainerBatch, ...]


@dataclass(frozen=True, slots=True)
class CgroupTargets:
    cpu_shares: int
    cfs_quota_us: int  # per 100 ms; -1 unlimited
    memory_limit_bytes: int  # -1 unlimited


@dataclass(frozen=True, slots=True)
class BatchTargets:
    pod: CgroupTargets
    containers: Mapping[str, CgroupTargets]
    clamped: tuple[str, ...] = field(default=())  # what was held to the node's capacity, for the log


@dataclass(frozen=True, slots=True)
class NodeLimits:
    """What the node has (None: unknown yet, nothing is clamped) and its CPU normalization ratio."""

    cpu_milli: int | None = None
    memory_bytes: int | None = None
    cpu_normalization_ratio: float | None = None


# --- reading a pod ---------------------------------------------------------------------------------
def _units(resource: str, raw: Any, where: str) -> int:
    """A batch quantity in its consumer units (batch-cpu: milli-cores, a whole number; batch-memory: bytes)."""
    try:
        q = Quantity.parse(raw, field=where)
        value = consumer_units(resource, q, where)
    except QuantityError as exc:
        raise BatchSpecError(str(exc)) from None
    if q.sign() < 0:
        raise BatchSpecError(f"{where}: {q.to_wire()!r} is negative")
    if resource == BATCH_CPU and q.nanos % 10**9:
        raise BatchSpecError(f"{where}: {q.to_wire()!r} is not a whole number (batch-cpu counts milli-cores)")
    return value


def _milli_cpu(raw: Any, where: str) -> int:
    return _units(BATCH_CPU, raw, where)


def _bytes(raw: Any, where: str) -> int:
    return _units(BATCH_MEMORY, raw, where)


def _container(name: str, resources: Any, where: str) -> ContainerBatch | None:
    if not isinstance(resources, Mapping):
        raise BatchSpecError(f"{where}: not an object")
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    if not isinstance(requests, Mapping) or not isinstance(limits, Mapping):
        raise BatchSpecError(f"{where}: requests and limits must be objects")
    if not any(BATCH_CPU in r or BATCH_MEMORY in r for r in (requests, limits)):
        return None
    return ContainerBatch(
        name,
        _milli_cpu(requests[BATCH_CPU], f"{where}.requests[{BATCH_CPU}]") if BATCH_CPU in requests else None,
        _milli_cpu(limits[BATCH_CPU], f"{where}.limits[{BATCH_CPU}]") if BATCH_CPU in limits else None,
        _bytes(limits[BATCH_MEMORY], f"{where}.limits[{BATCH_MEMORY}]") if BATCH_MEMORY in limits else None,
    )


def _from_spec(pod: Mapping[str, Any]) -> BatchSpec | None:
    found = [
        parsed
        for i, c in enumerate((pod.get("spec") or {}).get("containers") or [])
        if (parsed := _container(str(c.get("name") or ""), c.get("resources") or {}, f"spec.containers[{i}].resources"))
        is not None
    ]
    return BatchSpec("spec", tuple(found)) if found else None


def _from_annotation(text: str) -> BatchSpec | None:
    where = f"annotation {ANNOTATION_EXTENDED_RESOURCE_SPEC}"
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise BatchSpecError(f"{where}: not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("containers") or {}, dict):
        raise BatchSpecError(f'{where}: expected {{"containers": {{name: {{requests, limits}}}}}}')
    found = [
        parsed
        for name, resources in (doc.get("containers") or {}).items()
        if (parsed := _container(str(name), resources, f"{where} containers[{name!r}]")) is not None
    ]
    return BatchSpec("annotation", tuple(found)) if found else None


def batch_spec(pod: Mapping[str, Any]) -> BatchSpec | None:
    """The pod's batch resources (None: not a batch pod). Raises BatchSpecError when they cannot be read.

    Koordinator's reconciler prefers the pod spec over the annotation (protocol.PodRequest.FromReconciler)."""
    spec = _from_spec(pod)
    if spec is not None:
        return spec
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_EXTENDED_RESOURCE_SPEC)
    return _from_annotation(text) if isinstance(text, str) and text.strip() else None


def cpu_normalization_ratio(node: Mapping[str, Any] | None) -> float | None:
    """The node's CPU normalization ratio when it is a usable number > 1 (koordlet ignores anything else)."""
    text = (((node or {}).get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_CPU_NORMALIZATION_RATIO)
    try:
        ratio = float(text) if text is not None else None
    except (TypeError, ValueError):
        return None
    return ratio if ratio is not None and math.isfinite(ratio) and ratio > 1.0 else None


# --- the formulas ----------------------------------------------------------------------------------
def cpu_shares(request_milli: int) -> int:
    """cpu.shares for a batch-cpu request: 1024 per core, at least 2 (at most the kernel's 262144)."""
    return min(max(request_milli * CPU_SHARE_UNIT // 1000, CPU_SHARES_MIN), CPU_SHARES_MAX)


def cfs_quota_us(limit_milli: int, ratio: float | None = None) -> int:
    """CFS quota per 100 ms for a batch-cpu limit (<= 0: unlimited), at least 1 ms; divided by a normalization
    ratio, rounded up, as koordlet does."""
    if limit_milli <= 0:
        return UNLIMITED
    quota = limit_milli * CFS_PERIOD_US // 1000
    if ratio is not None:
        quota = math.ceil(quota / ratio)
    return max(quota, CFS_QUOTA_MIN_US)


def shares_to_weight(shares: int) -> int:
    """cgroup v2 cpu.weight for v1 shares, as the kubelet converts them for pod cgroups (cm.getCPUWeight)."""
    if shares >= CPU_SHARES_MAX:
        return 10_000
    return 1 + (max(shares, CPU_SHARES_MIN) - CPU_SHARES_MIN) * 9999 // (CPU_SHARES_MAX - CPU_SHARES_MIN)


def _clamp(value: int, cap: int | None, what: str, clamped: list[str]) -> int:
    if cap is None or value == UNLIMITED or value <= cap:
        return value
    clamped.append(f"{what} {value} above the node's {cap}")
    return cap


def _targets(
    request_milli: int, limit_milli: int, memory: int, *, node: NodeLimits, cfs_quota: bool, level: str,
    clamped: list[str],
) -> CgroupTargets:  # fmt: skip
    quota_cap = None if node.cpu_milli is None else max(node.cpu_milli * CFS_PERIOD_US // 1000, CFS_QUOTA_MIN_US)
    quota = cfs_quota_us(limit_milli, node.cpu_normalization_ratio) if cfs_quota else UNLIMITED
    return CgroupTargets(
        cpu_shares(request_milli),
        _clamp(quota, quota_cap, f"{level} cfs quota", clamped),
        _clamp(memory if memory > 0 else UNLIMITED, node.memory_bytes, f"{level} memory limit", clamped),
    )


def batch_targets(spec: BatchSpec, node: NodeLimits = NodeLimits(), *, cfs_quota: bool = True) -> BatchTargets:
    """Pod- and container-level values for a batch pod. `cfs_quota` False: quotas lifted (BE suppression by
    cfsQuota holds the pods)."""
    clamped: list[str] = []
    containers = {
        c.name: _targets(
            c.cpu_request_milli or 0,
            c.cpu_limit_milli or 0,
            c.memory_limit_bytes or 0,
            node=node,
            cfs_quota=cfs_quota,
            level=f"container {c.name}",
            clamped=clamped,
        )
        for c in spec.containers
    }
    limited_cpu = all(c.cpu_limit_milli for c in spec.containers)
    limited_memory = all(c.memory_limit_bytes for c in spec.containers)
    pod = _targets(
        sum(c.cpu_request_milli or 0 for c in spec.containers),
        sum(c.cpu_limit_milli or 0 for c in spec.containers) if limited_cpu else 0,
        sum(c.memory_limit_bytes or 0 for c in spec.containers) if limited_memory else 0,
        node=node,
        cfs_quota=cfs_quota,
        level="pod",
        clamped=clamped,
    )
    return BatchTargets(pod, containers, tuple(clamped))
