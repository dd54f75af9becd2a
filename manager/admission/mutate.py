"""What the pod mutating webhook does to a pod being created: pure functions over the pod's JSON.

Koordinator's semantics (pkg/webhook/pod/mutating/cluster_colocation_profile.go, extended_resource_spec.go):
every profile whose namespaceSelector matches the pod's namespace and whose selector matches the pod's labels
(both as the pod arrives) applies, in name order, each after its `probability` roll: labels, annotations,
labelKeysMapping, annotationKeysMapping, labelSuffixes, schedulerName, qosClass (label koordinator.sh/qosClass),
priorityClassName (with the class's value and preemptionPolicy), koordinatorPriority (label koordinator.sh/priority),
then the patch. Once any profile matched, cpu and memory of every container, init container and the overhead of a
koord-batch pod become kubernetes.io/batch-cpu (milli-cores) and batch-memory, of a koord-mid pod mid-cpu and
mid-memory (mutatePodResourceSpec; Koordinator maps no other class, so koord-free pods keep cpu and memory), and a
limit without a request gets the limit as request. Unless a matched profile carries the annotation
config.koordinator.sh/skip-update-resources.

Where Koordinator fails the whole admission (a PriorityClass that does not exist, a patch that does not apply),
the profile is skipped for that pod and the reason counted: the pod is created, never refused for a profile.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

import orjson

from common.api import constants as c
from common.api.colocation import ColocationProfile
from common.api.pod import PriorityClass, defaulted_priority_class, priority_class_from, qos_class_of
from common.api.podpatch import PatchError, apply_patch
from common.api.quantity import Format, Quantity, QuantityError
from common.api.scheduling import PriorityClassInfo

JSON = dict[str, Any]

# Koordinator apis/extension/resource.go ResourceNameMap: the classes whose cpu/memory are renamed.
RESOURCE_NAMES: Final[Mapping[PriorityClass, Mapping[str, str]]] = {
    PriorityClass.BATCH: {c.RESOURCE_CPU: c.BATCH_CPU, c.RESOURCE_MEMORY: c.BATCH_MEMORY},
    PriorityClass.MID: {c.RESOURCE_CPU: c.MID_CPU, c.RESOURCE_MEMORY: c.MID_MEMORY},
}


class Skip:
    """Why a matched profile did not apply to a pod (the `outcome` label of the admission metrics)."""

    PROBABILITY: Final = "skipped_probability"
    PRIORITY_CLASS_MISSING: Final = "skipped_priority_class_missing"
    PATCH: Final = "skipped_patch"


@dataclass
class Mutation:
    pod: JSON  # a copy, changed; the original is left as it was
    matched: list[str] = field(default_factory=list)  # profile names, in the order they were considered
    applied: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)  # (profile, Skip.*, detail)
    resources_renamed: bool = False


def copy_json(value: JSON) -> JSON:
    """A deep copy of decoded JSON (orjson's round trip: several times faster than copy.deepcopy on a pod)."""
    copied: JSON = orjson.loads(orjson.dumps(value))
    return copied


def profile_matches(
    profile: ColocationProfile, namespace_labels: Mapping[str, str], pod_labels: Mapping[str, str]
) -> bool:
    return (profile.namespace_selector is None or profile.namespace_selector.matches(namespace_labels)) and (
        profile.selector is None or profile.selector.matches(pod_labels)
    )


def _labels(pod: JSON, kind: str = "labels") -> dict[str, str]:
    meta = pod.setdefault("metadata", {})
    found = meta.get(kind)
    if not isinstance(found, dict):
        found = meta[kind] = {}
    return cast(dict[str, str], found)


def apply_profile(pod: JSON, profile: ColocationProfile, priority_class: PriorityClassInfo | None) -> None:
    """One profile onto `pod`, in Koordinator's order (doMutateByColocationProfile). Raises PatchError."""
    if profile.labels:
        _labels(pod).update(profile.labels)
    if profile.annotations:
        _labels(pod, "annotations").update(profile.annotations)
    if profile.label_keys_mapping:
        labels = _labels(pod)
        for old, new in profile.label_keys_mapping.items():
            labels[new] = labels.get(old, "")  # Go reads a missing key as ""
    if profile.annotation_keys_mapping:
        annotations = _labels(pod, "annotations")
        for old, new in profile.annotation_keys_mapping.items():
            annotations[new] = annotations.get(old, "")
    if profile.label_suffixes:
        labels = _labels(pod)
        for key, suffix in profile.label_suffixes.items():
            if key in labels:
                labels[key] = labels[key] + suffix
    spec = pod.setdefault("spec", {})
    if profile.scheduler_name:
        spec["schedulerName"] = profile.scheduler_name
    if profile.qos_class:
        _labels(pod)[c.LABEL_QOS_CLASS] = profile.qos_class
    if priority_class is not None:
        spec["priorityClassName"] = priority_class.name
        spec["priority"] = priority_class.value
        if priority_class.preemption_policy is None:
            spec.pop("preemptionPolicy", None)
        else:
            spec["preemptionPolicy"] = priority_class.preemption_policy
    if profile.koordinator_priority is not None:
        _labels(pod)[c.LABEL_SUB_PRIORITY] = str(profile.koordinator_priority)
    if profile.patch is not None:
        apply_patch(pod, profile.patch)


def mutate_pod(
    pod: JSON,
    namespace_labels: Mapping[str, str],
    profiles: Sequence[ColocationProfile],
    priority_classes: Mapping[str, PriorityClassInfo],
    roll: Callable[[], int] = lambda: random.randrange(100),
) -> Mutation:
    """Every matching profile applied to a copy of `pod` (see the module's docstring). `roll()` is the dice of
    `probability`: an integer in [0, 100); a profile of N % applies when it is at most N (Koordinator's
    `randIntnFn(100) > percent` skips)."""
    pod_labels = (pod.get("metadata") or {}).get("labels") or {}
    matched = sorted((p for p in profiles if profile_matches(p, namespace_labels, pod_labels)), key=lambda p: p.name)
    result = Mutation(pod)
    if not matched:
        return result
    result.pod = current = copy_json(pod)
    result.matched = [p.name for p in matched]
    for profile in matched:
        if profile.percent == 0 or (profile.percent != 100 and roll() > profile.percent):
            result.skipped.append((profile.name, Skip.PROBABILITY, f"probability {profile.percent}%"))
            continue
        priority_class = None
        if profile.priority_class_name:
            priority_class = priority_classes.get(profile.priority_class_name)
            if priority_class is None:
                result.skipped.append((profile.name, Skip.PRIORITY_CLASS_MISSING,
                                       f"PriorityClass {profile.priority_class_name} does not exist"))  # fmt: skip
                continue
        trial = copy_json(current) if profile.patch is not None else current
        try:
            apply_profile(trial, profile, priority_class)
        except PatchError as exc:
            result.skipped.append((profile.name, Skip.PATCH, str(exc)))
            continue
        current = trial
        result.applied.append(profile.name)
    result.pod = current
    if not any(p.skip_update_resources for p in matched):
        result.resources_renamed = rename_resources(current)
    if result.applied:
        _labels(current, "annotations")[c.ANNOTATION_COLOCATION_PROFILE] = ",".join(result.applied)
    return result


def _renamed_quantity(resource: str, raw: Any) -> str | int:
    if resource != c.RESOURCE_CPU:
        return raw if isinstance(raw, str | int) else str(raw)
    # batch-cpu and mid-cpu count milli-cores: NewQuantity(cpu.MilliValue(), DecimalSI), e.g. 500m -> "500", 2 -> "2k".
    return Quantity.from_int(Quantity.parse(raw).milli_value(), Format.DECIMAL_SI).canonical()


def _rename_in(resources: Any, names: Mapping[str, str]) -> bool:
    if not isinstance(resources, dict):
        return False
    changed = False
    for resource, renamed in names.items():
        if resource in resources:
            resources[renamed] = _renamed_quantity(resource, resources.pop(resource))
            changed = True
    return changed


def rename_resources(pod: JSON) -> bool:
    """mutatePodResourceSpec in place: returns whether anything changed. A quantity that does not parse is left
    for the API server to refuse (it validates every quantity of a pod)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    raw = priority_class_from(meta.get("labels") or {}, spec.get("priority"))
    names = RESOURCE_NAMES.get(defaulted_priority_class(raw, qos_class_of(pod)))
    if names is None:
        return False
    changed = False
    try:
        for key in ("initContainers", "containers"):
            for container in spec.get(key) or []:
                requirements = container.get("resources") if isinstance(container, dict) else None
                if not isinstance(requirements, dict):
                    continue
                for kind in ("requests", "limits"):
                    changed |= _rename_in(requirements.get(kind), names)
                limits = requirements.get("limits")
                if not isinstance(limits, dict):
                    continue
                for renamed in names.values():
                    requests = requirements.get("requests")
                    if renamed in limits and not (isinstance(requests, dict) and renamed in requests):
                        # restrictResourceRequestAndLimit: a limit alone is the request too
                        if not isinstance(requests, dict):
                            requests = requirements["requests"] = {}
                        requests[renamed] = limits[renamed]
                        changed = True
        changed |= _rename_in(spec.get("overhead"), names)
    except QuantityError:
        return changed
    return changed


def extended_resource_spec(pod: JSON) -> str | None:
    """The value of annotation node.koordinator.sh/extended-resource-spec for `pod`, None when it is already right
    (Koordinator's mutateByExtendedResources: batch-cpu and batch-memory of every app container, as Go's
    json.Marshal writes ExtendedResourceSpec: map keys sorted, empty maps left out)."""
    containers: JSON = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        if not isinstance(container, dict):
            continue
        resources = container.get("resources")
        entry = {}
        for kind in ("limits", "requests"):
            values = resources.get(kind) if isinstance(resources, dict) else None
            if not isinstance(values, dict):
                continue
            picked = {name: _canonical(values[name]) for name in (c.BATCH_CPU, c.BATCH_MEMORY) if name in values}
            if picked:
                entry[kind] = picked
        if entry:
            containers[str(container.get("name"))] = entry
    wanted: JSON = {"containers": containers} if containers else {}
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    current = annotations.get(c.ANNOTATION_EXTENDED_RESOURCE_SPEC)
    if current is None and not wanted:
        return None
    try:
        if current is not None and _normalized(orjson.loads(current)) == wanted:
            return None
    except orjson.JSONDecodeError:
        pass
    return orjson.dumps(wanted, option=orjson.OPT_SORT_KEYS).decode()


def _canonical(raw: Any) -> str:
    try:
        return Quantity.parse(raw).canonical()
    except QuantityError:
        return str(raw)


def _normalized(spec: Any) -> Any:
    if not isinstance(spec, dict):
        return spec
    containers = spec.get("containers") or {}
    if not isinstance(containers, dict):
        return spec
    out = {name: {k: {r: _canonical(v) for r, v in (entry.get(k) or {}).items()}
                  for k in ("limits", "requests") if entry.get(k)}
           for name, entry in containers.items() if isinstance(entry, dict)}  # fmt: skip
    return {"containers": out} if out else {}
