"""PodGroup CRDs and every way a pod can say it belongs to a gang.

Two CRD groups carry the same PodGroup shape: scheduler-plugins' `scheduling.x-k8s.io`
and the older `scheduling.sigs.k8s.io` Koordinator vendors. A gang can also be declared
with labels or annotations only (seed 000's `pod-group.scheduling.sigs.k8s.io/name` +
`/min-available`, Koordinator's `gang.scheduling.koordinator.sh/*`).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import Field, ValidationError, field_validator

from common.api import constants as c
from common.api.malformed import MalformedObjectError, MalformedReason, from_validation_error
from common.api.pod import scalar
from common.api.quantity import ResourceList
from common.api.wire import GoDuration, KubeModel, ObjectMeta, Time

API_VERSIONS = (f"{c.PODGROUP_GROUP}/{c.PODGROUP_VERSION}", f"{c.PODGROUP_GROUP_LEGACY}/{c.PODGROUP_VERSION}")


class PodGroupPhase(enum.StrEnum):
    PENDING = "Pending"
    PRE_SCHEDULING = "PreScheduling"  # legacy group only
    SCHEDULING = "Scheduling"
    SCHEDULED = "Scheduled"  # legacy group only
    RUNNING = "Running"
    FINISHED = "Finished"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


class PodGroupSpec(KubeModel):
    min_member: int | None = Field(default=None, ge=1)
    min_resources: ResourceList | None = None
    schedule_timeout_seconds: int | None = Field(default=None, ge=0)


class PodGroupStatus(KubeModel):
    phase: PodGroupPhase | None = None
    occupied_by: str | None = None
    scheduled: int | None = None  # removed from scheduler-plugins in 2023; still in the legacy group
    running: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    schedule_start_time: Time | None = None


class PodGroup(KubeModel):
    api_version: str = API_VERSIONS[0]
    kind: str = "PodGroup"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodGroupSpec = Field(default_factory=PodGroupSpec)
    status: PodGroupStatus | None = None

    _always_emit: ClassVar[tuple[str, ...]] = ("api_version", "kind", "metadata")

    @field_validator("api_version")
    @classmethod
    def _known_group(cls, value: str) -> str:
        if value not in API_VERSIONS:
            raise ValueError(
                f"apiVersion {value!r} is not a PodGroup version; expected one of {', '.join(API_VERSIONS)}"
            )
        return value


@dataclass(frozen=True, slots=True)
class PodGroupDigest:
    """What the scheduler reads of a PodGroup of either API group, digested once at the edge
    (quantities in Koordinator's vector unit: cpu in milli-cores, the rest by value)."""

    namespace: str
    name: str
    min_member: int
    min_resources: dict[str, int]
    schedule_timeout_seconds: int | None
    creation_timestamp: float  # epoch seconds; 0 when unset

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def digest_pod_group(obj: Mapping[str, Any]) -> PodGroupDigest:
    """Validate a PodGroup as the CRD does; raises MalformedObjectError naming the field."""
    try:
        group = PodGroup.model_validate(obj)
    except ValidationError as exc:
        meta_raw = obj.get("metadata")
        name = str(meta_raw.get("name") or "") if isinstance(meta_raw, Mapping) else ""
        raise from_validation_error("PodGroup", name, exc) from None
    meta = group.metadata
    if not meta.name:
        raise MalformedObjectError(
            "required", kind="PodGroup", field="metadata.name", reason=MalformedReason.MISSING_FIELD
        )
    return PodGroupDigest(
        namespace=meta.namespace or "default",
        name=meta.name,
        min_member=group.spec.min_member or 1,
        min_resources={k: scalar(k, q) for k, q in (group.spec.min_resources or {}).items()},
        schedule_timeout_seconds=group.spec.schedule_timeout_seconds,
        creation_timestamp=meta.creation_timestamp.timestamp() if meta.creation_timestamp else 0.0,
    )


class GangSource(enum.StrEnum):
    POD_GROUP = "scheduling.x-k8s.io/pod-group"  # label → PodGroup CRD (scheduler-plugins)
    POD_GROUP_LEGACY = "pod-group.scheduling.sigs.k8s.io"  # label → PodGroup CRD (Koordinator)
    KOORDINATOR_ANNOTATIONS = "gang.scheduling.koordinator.sh"  # annotations only
    LIGHTWEIGHT_LABELS = "pod-group.scheduling.sigs.k8s.io/name"  # labels only (seed 000)


class GangMode(enum.StrEnum):
    STRICT = "Strict"
    NON_STRICT = "NonStrict"


@dataclass(frozen=True, slots=True)
class GangRef:
    """Which gang a pod is in, and what its labels/annotations say about it.

    `min_available` is None when it must be read from the PodGroup object.
    """

    namespace: str
    name: str
    source: GangSource
    min_available: int | None = None
    total_number: int | None = None
    waiting_time: GoDuration | None = None
    mode: GangMode = GangMode.STRICT
    match_policy: str | None = None
    groups: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def uses_crd(self) -> bool:
        return self.source in (GangSource.POD_GROUP, GangSource.POD_GROUP_LEGACY)


class GangSpecError(ValueError):
    """A pod's gang labels/annotations are malformed; the message names the key and value."""


def _positive_int(meta: Mapping[str, str], key: str) -> int | None:
    raw = meta.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise GangSpecError(f"{key}={raw!r} is not an integer") from None
    if value < 1:
        raise GangSpecError(f"{key}={raw!r} must be at least 1")
    return value


def gang_of(pod: Mapping[str, Any]) -> GangRef | None:
    """The gang a pod (Kubernetes JSON) belongs to, or None. Raises GangSpecError on malformed keys."""
    meta = pod.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    namespace = meta.get("namespace") or "default"

    if name := labels.get(c.LABEL_POD_GROUP):
        return GangRef(namespace, name, GangSource.POD_GROUP)
    if name := labels.get(c.LABEL_POD_GROUP_LEGACY):
        return GangRef(namespace, name, GangSource.POD_GROUP_LEGACY)
    if name := annotations.get(c.ANNOTATION_GANG_NAME):
        minimum = _positive_int(annotations, c.ANNOTATION_GANG_MIN_AVAILABLE)
        total = _positive_int(annotations, c.ANNOTATION_GANG_TOTAL_NUMBER)
        if total is not None and minimum is not None and total < minimum:
            total = minimum  # Koordinator corrects a total below the minimum
        waiting = annotations.get(c.ANNOTATION_GANG_WAITING_TIME)
        try:
            waiting_time = GoDuration.parse(waiting) if waiting else None
        except ValueError as exc:
            raise GangSpecError(f"{c.ANNOTATION_GANG_WAITING_TIME}: {exc}") from None
        mode_raw = annotations.get(c.ANNOTATION_GANG_MODE, GangMode.STRICT.value)
        try:
            mode = GangMode(mode_raw)
        except ValueError:
            raise GangSpecError(f"{c.ANNOTATION_GANG_MODE}={mode_raw!r} must be Strict or NonStrict") from None
        groups_raw = annotations.get(c.ANNOTATION_GANG_GROUPS)
        groups: tuple[str, ...] = ()
        if groups_raw:
            try:
                parsed = json.loads(groups_raw)
            except json.JSONDecodeError:
                raise GangSpecError(f"{c.ANNOTATION_GANG_GROUPS}={groups_raw!r} is not a JSON list") from None
            if not isinstance(parsed, list) or not all(isinstance(g, str) for g in parsed):
                raise GangSpecError(f'{c.ANNOTATION_GANG_GROUPS}={groups_raw!r} must be a JSON list of "ns/name"')
            groups = tuple(parsed)
        return GangRef(
            namespace,
            name,
            GangSource.KOORDINATOR_ANNOTATIONS,
            min_available=minimum,
            total_number=total if total is not None else minimum,
            waiting_time=waiting_time,
            mode=mode,
            match_policy=annotations.get(c.ANNOTATION_GANG_MATCH_POLICY),
            groups=groups,
        )
    if name := labels.get(c.LABEL_LIGHTWEIGHT_GANG_NAME):
        minimum = _positive_int(labels, c.LABEL_LIGHTWEIGHT_GANG_MIN_AVAILABLE)
        if minimum is None:
            raise GangSpecError(
                f"{c.LABEL_LIGHTWEIGHT_GANG_NAME}={name!r} needs {c.LABEL_LIGHTWEIGHT_GANG_MIN_AVAILABLE}"
            )
        return GangRef(namespace, name, GangSource.LIGHTWEIGHT_LABELS, min_available=minimum, total_number=minimum)
    return None
