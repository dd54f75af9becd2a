"""The part of a strategic merge patch a ClusterColocationProfile may apply to a pod (its `spec.patch`).

Koordinator applies `spec.patch` with apimachinery's StrategicMergePatch onto any field of the Pod
(pkg/webhook/pod/mutating/cluster_colocation_profile.go). A patch that leaves a field of the wrong type makes
the API server refuse every pod the profile matches, whatever the webhook's failurePolicy (a webhook's patch
that does not decode is an internal error, k8s.io/apiserver .../mutating/dispatcher.go). Loadline therefore
takes the subset below, with every value type-checked, and the validating webhook refuses a profile whose patch
reaches beyond it, naming the field:

    metadata.labels, metadata.annotations          string maps (null removes a key)
    spec.terminationGracePeriodSeconds,
    spec.activeDeadlineSeconds                     integers >= 0 (null removes)
    spec.nodeSelector                              string map
    spec.tolerations                               list of tolerations (replaces the pod's list)
    spec.affinity.nodeAffinity                     node affinity (its term lists replace the pod's)
    spec.schedulingGates                           list of {name}, merged by name
    spec.runtimeClassName, spec.schedulerName      strings
    spec.containers, spec.initContainers           list merged by name; an item may set only
                                                   `env` (merged by name, {name, value} only) and
                                                   `resources` (requests / limits: quantity maps)

The merge follows StrategicMergePatch (k8s.io/apimachinery/pkg/util/strategicpatch/patch.go): maps merge
key by key, null deletes, a value absent from the pod is taken with its nulls dropped, a list with a merge key
(`patchMergeKey` in k8s.io/api/core/v1/types.go: containers and initContainers by name, env by name,
schedulingGates by name) merges item by item and orders the result as mergeSortedSlice does, any other list is
replaced. Directives (`$patch`, `$retainKeys`, `$setElementOrder/...`, `$deleteFromPrimitiveList/...`) are not
taken. A container a patch names must be in the pod: a patch would otherwise add a container without an image.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from common.api.malformed import MalformedObjectError
from common.api.quantity import Quantity, QuantityError
from common.api.scheduling import TAINT_EFFECTS, parse_node_affinity
from common.api.validation import (
    FieldError,
    annotation_map_errors,
    dns_subdomain_problems,
    forbidden,
    invalid,
    label_map_errors,
    not_supported,
    qualified_name_problems,
    required,
)

JSON = dict[str, Any]

# Lists merged item by item, by this key (k8s.io/api/core/v1/types.go patchMergeKey); the path's "*" is a list item.
MERGE_KEYS: dict[tuple[str, ...], str] = {
    ("spec", "containers"): "name",
    ("spec", "initContainers"): "name",
    ("spec", "schedulingGates"): "name",
    ("spec", "containers", "*", "env"): "name",
    ("spec", "initContainers", "*", "env"): "name",
}


class PatchError(ValueError):
    """The patch cannot be applied to this pod (a container it names is not there)."""


# --- checking ----------------------------------------------------------------------------------------------
def _type_name(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", int: "integer", float: "number"}.get(
        type(value), type(value).__name__
    )


def _object(path: str, value: Any) -> list[FieldError]:
    return [] if isinstance(value, dict) else [invalid(path, _type_name(value), "must be an object")]


def _string_map(path: str, value: Any, *, labels: bool) -> list[FieldError]:
    if (errors := _object(path, value)) or not value:
        return errors
    bad = [invalid(f"{path}[{k}]", _type_name(v), "must be a string, or null to remove the key")
           for k, v in value.items() if v is not None and not isinstance(v, str)]  # fmt: skip
    if bad:
        return bad
    present = {k: v for k, v in value.items() if v is not None}
    return label_map_errors(path, present) if labels else annotation_map_errors(path, present)


def _non_negative_int(path: str, value: Any) -> list[FieldError]:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return []
    return [invalid(path, value, "must be an integer >= 0, or null to remove it")]


def _name_string(path: str, value: Any) -> list[FieldError]:
    if value is None:
        return []
    if not isinstance(value, str):
        return [invalid(path, _type_name(value), "must be a string")]
    return [invalid(path, value, p) for p in dns_subdomain_problems(value)]


def _node_selector(path: str, value: Any) -> list[FieldError]:
    return [] if value is None else _string_map(path, value, labels=True)


_TOLERATION_KEYS = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})


def _tolerations(path: str, value: Any) -> list[FieldError]:
    if value is None:
        return []
    if not isinstance(value, list):
        return [invalid(path, _type_name(value), "must be a list of tolerations")]
    errors: list[FieldError] = []
    for i, item in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(item, dict):
            errors.append(invalid(where, _type_name(item), "must be an object"))
            continue
        errors += [not_supported(f"{where}.{k}", k, sorted(_TOLERATION_KEYS))
                   for k in item if k not in _TOLERATION_KEYS]  # fmt: skip
        for key in ("key", "operator", "value", "effect"):
            if key in item and not isinstance(item[key], str):
                errors.append(invalid(f"{where}.{key}", _type_name(item[key]), "must be a string"))
        operator = item.get("operator") or "Equal"
        if operator not in ("Equal", "Exists"):
            errors.append(not_supported(f"{where}.operator", operator, ["Equal", "Exists"]))
        if operator == "Exists" and item.get("value"):
            errors.append(invalid(f"{where}.operator", operator, "value must be empty when operator is Exists"))
        effect = item.get("effect") or ""
        if effect and effect not in TAINT_EFFECTS:
            errors.append(not_supported(f"{where}.effect", effect, sorted(TAINT_EFFECTS)))
        seconds = item.get("tolerationSeconds")
        if seconds is not None and (not isinstance(seconds, int) or isinstance(seconds, bool)):
            errors.append(invalid(f"{where}.tolerationSeconds", _type_name(seconds), "must be an integer"))
        if isinstance(item.get("key"), str) and item["key"]:
            errors += [invalid(f"{where}.key", item["key"], p) for p in qualified_name_problems(item["key"])]
    return errors


def _affinity(path: str, value: Any) -> list[FieldError]:
    if value is None or (errors := _object(path, value)):
        return [] if value is None else errors
    errors = [forbidden(f"{path}.{k}", "a profile's patch may set only affinity.nodeAffinity") for k in value
              if k != "nodeAffinity"]  # fmt: skip
    node_affinity = value.get("nodeAffinity")
    if node_affinity is not None:
        try:
            parse_node_affinity({"nodeAffinity": node_affinity}, path)
        except MalformedObjectError as exc:
            errors.append(invalid(f"{path}.nodeAffinity", _type_name(node_affinity), str(exc)))
    return errors


def _scheduling_gates(path: str, value: Any) -> list[FieldError]:
    if value is None:
        return []
    if not isinstance(value, list):
        return [invalid(path, _type_name(value), "must be a list of {name}")]
    errors: list[FieldError] = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or set(item) != {"name"} or not isinstance(item["name"], str):
            errors.append(invalid(f"{path}[{i}]", _type_name(item), "must be an object with a string `name` only"))
        else:
            errors += [invalid(f"{path}[{i}].name", item["name"], p) for p in qualified_name_problems(item["name"])]
    return errors


def _quantities(path: str, value: Any) -> list[FieldError]:
    if value is None or (errors := _object(path, value)):
        return [] if value is None else errors
    errors = []
    for name, raw in value.items():
        errors += [invalid(path, name, p) for p in qualified_name_problems(name)]
        if raw is None:
            continue
        try:
            if isinstance(raw, bool) or not isinstance(raw, str | int) or Quantity.parse(raw).sign() < 0:
                raise QuantityError("not a non-negative quantity")
        except QuantityError:
            errors.append(invalid(f"{path}[{name}]", raw, "must be a non-negative quantity, e.g. 500m or 1Gi"))
    return errors


def _resources(path: str, value: Any) -> list[FieldError]:
    if value is None or (errors := _object(path, value)):
        return [] if value is None else errors
    errors = [not_supported(f"{path}.{k}", k, ["limits", "requests"]) for k in value if k not in ("limits", "requests")]
    return errors + [e for k in ("requests", "limits") if k in value for e in _quantities(f"{path}.{k}", value[k])]


def _env(path: str, value: Any) -> list[FieldError]:
    if value is None:
        return []
    if not isinstance(value, list):
        return [invalid(path, _type_name(value), "must be a list of {name, value}")]
    errors: list[FieldError] = []
    for i, item in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
            errors.append(required(f"{where}.name", "every env item of a patch needs a string name (its merge key)"))
            continue
        for key, field_value in item.items():
            if key == "value":
                if field_value is not None and not isinstance(field_value, str):
                    errors.append(invalid(f"{where}.value", _type_name(field_value), "must be a string"))
            elif key != "name":
                errors.append(forbidden(f"{where}.{key}", "a profile's patch may set only name and value of an env "
                                                          "variable"))  # fmt: skip
    return errors


def _containers(path: str, value: Any) -> list[FieldError]:
    if value is None:
        return [forbidden(path, "a profile's patch may not remove the pod's containers")]
    if not isinstance(value, list):
        return [invalid(path, _type_name(value), "must be a list of containers merged by name")]
    errors: list[FieldError] = []
    for i, item in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
            errors.append(required(f"{where}.name", "every container of a patch needs a string name (its merge key)"))
            continue
        for key, field_value in item.items():
            if key == "env":
                errors += _env(f"{where}.env", field_value)
            elif key == "resources":
                errors += _resources(f"{where}.resources", field_value)
            elif key != "name":
                errors.append(forbidden(f"{where}.{key}", "a profile's patch may set only env and resources of a "
                                                          "container"))  # fmt: skip
    return errors


_SPEC_FIELDS: dict[str, Callable[[str, Any], list[FieldError]]] = {
    "terminationGracePeriodSeconds": _non_negative_int,
    "activeDeadlineSeconds": _non_negative_int,
    "nodeSelector": _node_selector,
    "tolerations": _tolerations,
    "affinity": _affinity,
    "schedulingGates": _scheduling_gates,
    "runtimeClassName": _name_string,
    "schedulerName": _name_string,
    "containers": _containers,
    "initContainers": _containers,
}
SUPPORTED_FIELDS = (
    "metadata.labels", "metadata.annotations", *(f"spec.{name}" for name in _SPEC_FIELDS),
)  # fmt: skip


def _directives(value: Any, path: str) -> list[FieldError]:
    if isinstance(value, dict):
        found = [forbidden(f"{path}.{k}", "strategic merge patch directives ($patch, $retainKeys, $setElementOrder, "
                                          "$deleteFromPrimitiveList) are not supported in a profile's patch")
                 for k in value if isinstance(k, str) and k.startswith("$")]  # fmt: skip
        return found + [e for k, v in value.items() if not str(k).startswith("$")
                        for e in _directives(v, f"{path}.{k}")]  # fmt: skip
    if isinstance(value, list):
        return [e for i, v in enumerate(value) for e in _directives(v, f"{path}[{i}]")]
    return []


def patch_errors(patch: Any, path: str = "spec.patch") -> list[FieldError]:
    """Why `patch` is not a patch Loadline applies; empty when it is."""
    if not isinstance(patch, dict):
        return [invalid(path, _type_name(patch), "must be an object: a strategic merge patch of the pod")]
    if errors := _directives(patch, path):
        return errors
    errors = []
    for key, value in patch.items():
        where = f"{path}.{key}"
        if key == "metadata":
            if errors_here := _object(where, value):
                errors += errors_here
                continue
            for meta_key, meta_value in value.items():
                if meta_key in ("labels", "annotations"):
                    errors += _string_map(f"{where}.{meta_key}", meta_value, labels=meta_key == "labels")
                else:
                    errors.append(not_supported(f"{where}.{meta_key}", meta_key, ["annotations", "labels"]))
        elif key == "spec":
            if errors_here := _object(where, value):
                errors += errors_here
                continue
            for spec_key, spec_value in value.items():
                check = _SPEC_FIELDS.get(spec_key)
                if check is None:
                    errors.append(not_supported(f"{where}.{spec_key}", spec_key, sorted(_SPEC_FIELDS)))
                else:
                    errors += check(f"{where}.{spec_key}", spec_value)
        else:
            errors.append(not_supported(where, key, ["metadata", "spec"]))
    return errors


# --- applying ---------------------------------------------------------------------------------------------
def _without_nulls(value: Any) -> Any:
    """A value the pod does not have yet, as StrategicMergePatch takes it (IgnoreUnmatchedNulls)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _merge_map(original: JSON, patch: Mapping[str, Any], path: tuple[str, ...]) -> JSON:
    for key, value in patch.items():
        here = (*path, key)
        if value is None:
            original.pop(key, None)
        elif key not in original or original[key] is None:
            original[key] = _without_nulls(value)
        elif isinstance(value, dict) and isinstance(original[key], dict):
            original[key] = _merge_map(original[key], value, here)
        elif isinstance(value, list) and isinstance(original[key], list) and here in MERGE_KEYS:
            original[key] = _merge_list(original[key], value, here, MERGE_KEYS[here])
        else:
            original[key] = _without_nulls(value)
    return original


def _merge_list(original: list[Any], patch: list[Any], path: tuple[str, ...], key: str) -> list[Any]:
    """mergeSliceWithoutSpecialElements, then the order of normalizeElementOrder/mergeSortedSlice: the patch's
    items in patch order and the pod's other items in the pod's order, interleaved where both are in the pod."""
    server_order = [item.get(key) for item in original if isinstance(item, dict)]
    merged = list(original)
    item_path = (*path, "*")
    for item in patch:
        at = next((i for i, o in enumerate(merged) if isinstance(o, dict) and o.get(key) == item[key]), None)
        if at is None:
            if path[-1] in ("containers", "initContainers"):
                raise PatchError(f"{'.'.join(path)}: the pod has no container {item[key]!r} (a patch may change "
                                 "the pod's containers, not add one)")  # fmt: skip
            merged.append(_without_nulls(item))
        else:
            merged[at] = _merge_map(merged[at], item, item_path)
    patch_keys = [item[key] for item in patch]
    in_patch = sorted((m for m in merged if m.get(key) in patch_keys), key=lambda m: patch_keys.index(m.get(key)))
    server_only = [m for m in merged if m.get(key) not in patch_keys]

    def index(item: JSON) -> int:
        value = item.get(key)
        return server_order.index(value) if value in server_order else -1

    ordered: list[Any] = []
    left, right = in_patch, server_only
    while left or right:
        if not right:
            ordered.append(left.pop(0))
        elif not left:
            ordered.append(right.pop(0))
        else:
            li, ri = index(left[0]), index(right[0])
            ordered.append(left.pop(0) if li >= 0 and ri >= 0 and li < ri else right.pop(0))
    return ordered


def apply_patch(pod: JSON, patch: Mapping[str, Any]) -> JSON:
    """`patch` (checked by patch_errors) merged into `pod` in place; returns it. Raises PatchError."""
    return _merge_map(pod, patch, ())
