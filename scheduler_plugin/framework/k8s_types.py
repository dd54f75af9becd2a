"""Immutable, parsed forms of the Kubernetes scheduling fields plugins match on.

Parsed once when an object enters the snapshot, so the hot path never walks JSON.
A malformed field raises `MalformedObjectError` naming it; the caller logs and skips the object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common.api.malformed import MalformedObjectError, MalformedReason
from common.api.wire import InvalidTimeError, parse_rfc3339

NODE_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """v1.Toleration.ToleratesTaint: an empty effect/key matches all; Exists ignores the value."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator in ("Equal", "") and self.value == taint.value


def tolerated(taint: Taint, tolerations: Sequence[Toleration]) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


@dataclass(frozen=True, slots=True)
class Requirement:
    """One node selector requirement; Gt/Lt hold their single integer in `number`."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    number: int | None = None


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """A NodeSelectorTerm: all expressions (labels) and fields (only metadata.name) must match."""

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.match_expressions and not self.match_fields


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    weight: int
    term: SelectorTerm


def parse_time(value: Any, field: str) -> float | None:
    """metav1.Time (RFC 3339) as epoch seconds; None when absent."""
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise MalformedObjectError(
            f"expected an RFC 3339 time, got {value!r}", field=field, reason=MalformedReason.INVALID_TIME
        )
    try:
        return parse_rfc3339(value).timestamp()
    except InvalidTimeError as exc:
        raise MalformedObjectError(str(exc), field=field, reason=MalformedReason.INVALID_TIME) from None


def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise MalformedObjectError(f"{field}: expected an object, got {type(value).__name__}")
    return value


def _sequence(value: Any, field: str) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise MalformedObjectError(f"{field}: expected a list, got {type(value).__name__}")
    return value


def string_map(value: Any, field: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in _mapping(value, field).items():
        if not isinstance(v, str):
            raise MalformedObjectError(f"{field}.{k}: expected a string, got {v!r}")
        out[str(k)] = v
    return out


def parse_taints(value: Any, field: str = "spec.taints") -> tuple[Taint, ...]:
    taints = []
    for i, raw in enumerate(_sequence(value, field)):
        item = _mapping(raw, f"{field}[{i}]")
        effect = item.get("effect", "")
        if effect not in TAINT_EFFECTS:
            raise MalformedObjectError(f"{field}[{i}].effect: unknown taint effect {effect!r}")
        taints.append(Taint(str(item.get("key", "")), str(item.get("value", "") or ""), effect))
    return tuple(taints)


def parse_tolerations(value: Any, field: str = "spec.tolerations") -> tuple[Toleration, ...]:
    out = []
    for i, raw in enumerate(_sequence(value, field)):
        item = _mapping(raw, f"{field}[{i}]")
        operator = item.get("operator") or "Equal"
        if operator not in ("Equal", "Exists"):
            raise MalformedObjectError(f"{field}[{i}].operator: unknown toleration operator {operator!r}")
        out.append(
            Toleration(
                key=str(item.get("key") or ""),
                operator=operator,
                value=str(item.get("value") or ""),
                effect=str(item.get("effect") or ""),
            )
        )
    return tuple(out)


def _parse_requirement(raw: Any, field: str) -> Requirement:
    item = _mapping(raw, field)
    key = item.get("key")
    if not isinstance(key, str) or not key:
        raise MalformedObjectError(f"{field}.key: required")
    operator = item.get("operator")
    if operator not in NODE_SELECTOR_OPERATORS:
        raise MalformedObjectError(f"{field}.operator: unknown operator {operator!r}")
    values = tuple(str(v) for v in _sequence(item.get("values"), f"{field}.values"))
    if operator in ("In", "NotIn") and not values:
        raise MalformedObjectError(f"{field}.values: must be non-empty for {operator}")
    if operator in ("Exists", "DoesNotExist") and values:
        raise MalformedObjectError(f"{field}.values: must be empty for {operator}")
    number = None
    if operator in ("Gt", "Lt"):
        if len(values) != 1:
            raise MalformedObjectError(f"{field}.values: {operator} needs exactly one value")
        try:
            number = int(values[0])
        except ValueError:
            raise MalformedObjectError(f"{field}.values[0]: {values[0]!r} is not an integer") from None
    return Requirement(key, operator, values, number)


def parse_selector_term(raw: Any, field: str) -> SelectorTerm:
    item = _mapping(raw, field)
    expressions = tuple(
        _parse_requirement(r, f"{field}.matchExpressions[{i}]")
        for i, r in enumerate(_sequence(item.get("matchExpressions"), f"{field}.matchExpressions"))
    )
    fields = tuple(
        _parse_requirement(r, f"{field}.matchFields[{i}]")
        for i, r in enumerate(_sequence(item.get("matchFields"), f"{field}.matchFields"))
    )
    for i, req in enumerate(fields):
        if req.key != "metadata.name":
            raise MalformedObjectError(
                f"{field}.matchFields[{i}].key: only metadata.name is supported, got {req.key!r}"
            )
    return SelectorTerm(expressions, fields)


def parse_node_affinity(
    affinity: Any, field: str = "spec.affinity"
) -> tuple[tuple[SelectorTerm, ...] | None, tuple[PreferredTerm, ...]]:
    """(required terms or None when there is no required affinity, preferred terms)."""
    node_affinity = _mapping(_mapping(affinity, field).get("nodeAffinity"), f"{field}.nodeAffinity")
    base = f"{field}.nodeAffinity"
    required: tuple[SelectorTerm, ...] | None = None
    req_raw = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if req_raw is not None:
        req_field = f"{base}.requiredDuringSchedulingIgnoredDuringExecution"
        terms = _sequence(_mapping(req_raw, req_field).get("nodeSelectorTerms"), f"{req_field}.nodeSelectorTerms")
        required = tuple(parse_selector_term(t, f"{req_field}.nodeSelectorTerms[{i}]") for i, t in enumerate(terms))
    preferred = []
    pref_field = f"{base}.preferredDuringSchedulingIgnoredDuringExecution"
    pref_raw = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution")
    for i, raw in enumerate(_sequence(pref_raw, pref_field)):
        item = _mapping(raw, f"{pref_field}[{i}]")
        weight = item.get("weight")
        if not isinstance(weight, int) or not 1 <= weight <= 100:
            raise MalformedObjectError(f"{pref_field}[{i}].weight: must be an integer in 1..100, got {weight!r}")
        term = parse_selector_term(item.get("preference"), f"{pref_field}[{i}].preference")
        preferred.append(PreferredTerm(weight, term))
    return required, tuple(preferred)
