"""ClusterColocationProfile (`config.koordinator.sh/v1alpha1`, cluster-scoped): colocation without editing workloads.

A profile selects pods by their namespace's labels (`namespaceSelector`) and their own (`selector`) and says what
a selected pod becomes at creation: its QoS class, priority class, scheduler, labels, annotations, a patch. The
manager's mutating webhook applies it (manager/admission/). The fields and their meaning are Koordinator's
(apis/config/v1alpha1/cluster_colocation_profile_types.go, pkg/webhook/pod/mutating/cluster_colocation_profile.go).

`check_profile` reads the wire object once into a `ColocationProfile` digest, or says what is wrong with it, field by
field, in the API server's words: the validating webhook refuses a profile with those errors, and a profile that got
into the cluster anyway (created while no webhook ran) is skipped by the mutating webhook with the same reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import Field, ValidationError

from common.api import constants as c
from common.api.malformed import MalformedObjectError, from_validation_error
from common.api.pod import PRIORITY_RANGES, KoordQoSClass, PriorityClass, priority_class_of_value
from common.api.podpatch import patch_errors
from common.api.scheduling import LabelSelector, parse_label_selector
from common.api.validation import (
    FieldError,
    aggregate,
    annotation_map_errors,
    dns_subdomain_problems,
    forbidden,
    invalid,
    label_map_errors,
    label_value_problems,
    not_supported,
    qualified_name_problems,
)
from common.api.wire import KubeModel, ObjectMeta

KIND = c.COLOCATION_PROFILE_KIND
QOS_CLASSES = ("LSE", "LSR", "LS", "BE", "SYSTEM")
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


class ClusterColocationProfileSpec(KubeModel):
    namespace_selector: dict[str, Any] | None = None
    selector: dict[str, Any] | None = None
    probability: int | str | None = None
    qos_class: str | None = None
    priority_class_name: str | None = None
    koordinator_priority: int | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    label_keys_mapping: dict[str, str] | None = None
    annotation_keys_mapping: dict[str, str] | None = None
    label_suffixes: dict[str, str] | None = None
    scheduler_name: str | None = None
    patch: Any = None


class ClusterColocationProfile(KubeModel):
    api_version: str = c.CONFIG_API_VERSION
    kind: str = KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ClusterColocationProfileSpec = Field(default_factory=ClusterColocationProfileSpec)

    _always_emit: ClassVar[tuple[str, ...]] = ("api_version", "kind", "metadata")


@dataclass(frozen=True, slots=True)
class ColocationProfile:
    """A profile as the webhook applies it: selectors parsed, probability in percent, patch checked."""

    name: str
    uid: str = ""
    namespace_selector: LabelSelector | None = None  # None: every namespace
    selector: LabelSelector | None = None  # None: every pod
    percent: int = 100
    qos_class: str = ""
    priority_class_name: str = ""
    koordinator_priority: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    label_keys_mapping: Mapping[str, str] = field(default_factory=dict)
    annotation_keys_mapping: Mapping[str, str] = field(default_factory=dict)
    label_suffixes: Mapping[str, str] = field(default_factory=dict)
    scheduler_name: str = ""
    patch: Mapping[str, Any] | None = None
    # Annotation config.koordinator.sh/skip-update-resources on the profile: cpu/memory stay as they are.
    skip_update_resources: bool = False


def parse_probability(value: int | str | None) -> int:
    """intstr.GetScaledValueFromIntOrPercent(value, 100, false): an integer, or a string "N%"; None is 100."""
    if value is None:
        return 100
    if isinstance(value, bool):
        raise ValueError("must be an integer or a percentage such as \"50%\"")
    if isinstance(value, int):
        return value
    if not value.endswith("%"):
        raise ValueError("a string must be a percentage such as \"50%\"")
    try:
        return int(value[:-1])
    except ValueError:
        raise ValueError("a string must be a percentage such as \"50%\"") from None


def _selector(raw: Any, path: str, errors: list[FieldError]) -> LabelSelector | None:
    if raw is None:
        return None
    try:
        selector = parse_label_selector(raw, path)
    except MalformedObjectError as exc:
        where, _, detail = str(exc).partition(": ")
        errors.append(invalid(where or path, raw if not isinstance(raw, dict) else "selector", detail or str(exc)))
        return None
    before = len(errors)
    errors += label_map_errors(f"{path}.matchLabels", dict(selector.match_labels))
    for i, req in enumerate(selector.match_expressions):
        where = f"{path}.matchExpressions[{i}]"
        errors += [invalid(f"{where}.key", req.key, p) for p in qualified_name_problems(req.key)]
        errors += [invalid(f"{where}.values", v, p) for v in req.values for p in label_value_problems(v)]
    return selector if len(errors) == before else None


def _resulting_priority_class(spec: ClusterColocationProfileSpec, value: int | None) -> PriorityClass | None:
    """The Koordinator priority class a mutated pod ends with (label first, as GetPodPriorityClassRaw), or None when
    it depends on the pod."""
    label = (spec.labels or {}).get(c.LABEL_PRIORITY_CLASS)
    if label is not None:
        return PriorityClass(label) if label in PRIORITY_RANGES else PriorityClass.NONE
    if value is None:
        return None
    return priority_class_of_value(value)


def combination_error(qos: str, priority: PriorityClass) -> str | None:
    """Koordinator's forbidden QoS and priority class pairs (pkg/webhook/pod/validating/cluster_colocation_profile.go):
    BE with no or a prod priority class, LSR with anything but prod."""
    forbidden_pairs = {
        KoordQoSClass.BE: (PriorityClass.NONE, PriorityClass.PROD),
        KoordQoSClass.LSR: (PriorityClass.NONE, PriorityClass.MID, PriorityClass.BATCH, PriorityClass.FREE),
    }
    if qos in forbidden_pairs and priority in forbidden_pairs[KoordQoSClass(qos)]:
        return f"{c.LABEL_QOS_CLASS}={qos} and priorityClass={priority.value} cannot be used in combination"
    return None


def check_profile(
    obj: Mapping[str, Any], priority_value: Callable[[str], int | None] = lambda _name: None
) -> tuple[ColocationProfile | None, list[FieldError]]:
    """The digest, or None and every reason the profile cannot be applied (the validating webhook's refusal).

    `priority_value(name)`: the value of PriorityClass `name`, None when there is none; a missing class is no
    error here (the profile may come before its class), only what the class's value makes forbidden is."""
    try:
        profile = ClusterColocationProfile.model_validate(obj)
    except ValidationError as exc:
        meta = obj.get("metadata")
        error = from_validation_error(KIND, str(meta.get("name") or "") if isinstance(meta, Mapping) else "", exc)
        return None, [invalid(error.field or "spec", "", error.detail)]
    spec = profile.spec
    errors: list[FieldError] = []
    namespace_selector = _selector(spec.namespace_selector, "spec.namespaceSelector", errors)
    selector = _selector(spec.selector, "spec.selector", errors)
    percent = 100
    try:
        percent = parse_probability(spec.probability)
    except ValueError as exc:
        errors.append(invalid("spec.probability", spec.probability, str(exc)))
    else:
        if not 0 <= percent <= 100:
            errors.append(invalid("spec.probability", spec.probability, "must be between 0 and 100 (or 0% and 100%)"))
    qos = spec.qos_class or ""
    if qos and qos not in QOS_CLASSES:
        errors.append(not_supported("spec.qosClass", qos, QOS_CLASSES))
    if spec.priority_class_name:
        errors += [invalid("spec.priorityClassName", spec.priority_class_name, p)
                   for p in dns_subdomain_problems(spec.priority_class_name)]  # fmt: skip
    if spec.scheduler_name:
        errors += [invalid("spec.schedulerName", spec.scheduler_name, p)
                   for p in dns_subdomain_problems(spec.scheduler_name)]  # fmt: skip
    if spec.koordinator_priority is not None and not INT32_MIN <= spec.koordinator_priority <= INT32_MAX:
        errors.append(invalid("spec.koordinatorPriority", spec.koordinator_priority, "must be a 32-bit integer"))
    errors += label_map_errors("spec.labels", spec.labels or {})
    errors += annotation_map_errors("spec.annotations", spec.annotations or {})
    for name in ("labelKeysMapping", "annotationKeysMapping"):
        mapping = getattr(spec, "label_keys_mapping" if name == "labelKeysMapping" else "annotation_keys_mapping")
        for old, new in (mapping or {}).items():
            errors += [invalid(f"spec.{name}", key, p) for key in (old, new) for p in qualified_name_problems(key)]
    for key, suffix in (spec.label_suffixes or {}).items():
        errors += [invalid("spec.labelSuffixes", key, p) for p in qualified_name_problems(key)]
        if suffix and label_value_problems("a" + suffix + "a"):
            errors.append(invalid(f"spec.labelSuffixes[{key}]", suffix, "a suffix may hold only alphanumeric "
                                                                        "characters, '-', '_' or '.'"))  # fmt: skip
    if spec.patch is not None:
        errors += patch_errors(spec.patch)
    if qos in QOS_CLASSES and spec.priority_class_name:
        outcome = _resulting_priority_class(spec, priority_value(spec.priority_class_name))
        problem = combination_error(qos, outcome) if outcome is not None else None
        if problem:
            errors.append(forbidden("spec", f"every pod this profile mutates would be refused: {problem}"))
    if errors:
        return None, errors
    meta = profile.metadata
    return ColocationProfile(
        name=meta.name or "",
        uid=meta.uid or "",
        namespace_selector=namespace_selector,
        selector=selector,
        percent=percent,
        qos_class=qos,
        priority_class_name=spec.priority_class_name or "",
        koordinator_priority=spec.koordinator_priority,
        labels=dict(spec.labels or {}),
        annotations=dict(spec.annotations or {}),
        label_keys_mapping=dict(spec.label_keys_mapping or {}),
        annotation_keys_mapping=dict(spec.annotation_keys_mapping or {}),
        label_suffixes=dict(spec.label_suffixes or {}),
        scheduler_name=spec.scheduler_name or "",
        patch=spec.patch,
        skip_update_resources=c.ANNOTATION_SKIP_UPDATE_RESOURCES in (meta.annotations or {}),
    ), []


def digest_profile(obj: Mapping[str, Any]) -> ColocationProfile:
    """check_profile's digest; a profile that cannot be applied raises MalformedObjectError with every reason."""
    profile, errors = check_profile(obj)
    if profile is None:
        meta = obj.get("metadata")
        name = str(meta.get("name") or "") if isinstance(meta, Mapping) else ""
        raise MalformedObjectError(aggregate(errors), kind=KIND, name=name)
    return profile
