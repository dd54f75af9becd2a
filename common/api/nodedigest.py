"""A Node digested once per version into what every component reads: labels, taints, allocatable, capacity.

Built from a pydantic model of the fields Loadline reads (`NodeView`; everything else is ignored), like the
pod's (`poddigest.py`). Resource amounts are in Koordinator's vector unit (`cpu` in milli-cores, everything
else by value). A digest is always returned: the first thing wrong with the node is its `problem` (a
`MalformedObjectError` naming the field); resources that do parse are kept beside it, so a component whose
policy allows (the manager rewriting its own batch resources) can still act. Each component states its policy
for a malformed node where it applies it, and counts it in `loadline_malformed_objects_total`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import ValidationError

from common.api import constants as c
from common.api.malformed import MalformedObjectError, MalformedReason, from_validation_error, quantity_reason
from common.api.pod import scalar
from common.api.quantity import Quantity, QuantityError
from common.api.reservation import NodeReservation, ReservationError, parse_node_reservation
from common.api.scheduling import Taint, parse_taints
from common.api.wire import MetaView, QuantityText, WireView

KIND: Final = "Node"


class NodeSpecView(WireView):
    unschedulable: bool | None = None
    taints: list[Any] | None = None  # checked by parse_taints (common/api/scheduling.py)


class NodeStatusView(WireView):
    allocatable: dict[str, QuantityText] | None = None
    capacity: dict[str, QuantityText] | None = None


class NodeView(WireView):
    metadata: MetaView | None = None
    spec: NodeSpecView | None = None
    status: NodeStatusView | None = None


@dataclass(slots=True)
class NodeDigest:
    name: str
    resource_version: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    allocatable: dict[str, int] = field(default_factory=dict)  # status.allocatable, the values that parse
    capacity: dict[str, int] = field(default_factory=dict)  # status.capacity, the values that parse
    # node.koordinator.sh/raw-allocatable (CPU normalisation, amplification): None when absent, or when it does not
    # read, for then Koordinator uses status.allocatable (apis/extension/node_resource_amplification.go)
    raw_allocatable: dict[str, int] | None = None
    # node.koordinator.sh/reservation: None when absent, or when it does not read (Koordinator then ignores it)
    reservation: NodeReservation | None = None
    unparsed: tuple[str, ...] = ()  # every resource field that did not parse ("status.allocatable.cpu")
    problem: MalformedObjectError | None = None  # the first thing wrong; only `name` is sure to be filled
    # an annotation that does not read and is treated as absent (as Koordinator does); the rest is in force.
    # Components count it like a problem (once per version) and otherwise use the digest.
    part_problem: MalformedObjectError | None = None


def _resources(
    digest: NodeDigest, into: dict[str, int], values: Mapping[str, QuantityText] | None, where: str
) -> None:
    for name, raw in (values or {}).items():
        try:
            into[name] = scalar(name, Quantity.parse(raw))
        except QuantityError as exc:
            digest.unparsed += (f"{where}.{name}",)
            if digest.problem is None:
                digest.problem = MalformedObjectError(
                    f"{raw!r} is not a valid quantity",
                    kind=KIND,
                    name=digest.name,
                    field=f"{where}.{name}",
                    reason=quantity_reason(exc),
                )


def _raw_allocatable(annotations: Mapping[str, str]) -> dict[str, int] | None:
    """Raises ValueError when the annotation does not read."""
    text = annotations.get(c.ANNOTATION_RAW_ALLOCATABLE)
    if not text:
        return None
    try:
        data = json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not isinstance(data, Mapping):
        raise ValueError("must be a JSON object")
    try:
        return {str(name): scalar(str(name), Quantity.parse(raw)) for name, raw in data.items()}
    except TypeError as exc:  # QuantityError is a ValueError
        raise ValueError(str(exc)) from None


def _annotations(digest: NodeDigest) -> None:
    """The annotations the digest reads; one that does not read is absent, and the node's part problem."""
    annotations = digest.annotations
    try:
        digest.raw_allocatable = _raw_allocatable(annotations)
    except ValueError as exc:
        digest.part_problem = _annotation_problem(digest.name, c.ANNOTATION_RAW_ALLOCATABLE, exc)
    if annotations.get(c.ANNOTATION_NODE_RESERVATION):
        try:
            digest.reservation = parse_node_reservation(annotations[c.ANNOTATION_NODE_RESERVATION])
        except ReservationError as exc:
            digest.part_problem = digest.part_problem or _annotation_problem(
                digest.name, c.ANNOTATION_NODE_RESERVATION, exc
            )


def _annotation_problem(name: str, annotation: str, exc: Exception) -> MalformedObjectError:
    return MalformedObjectError(
        f"{str(exc)[:300]}; treated as absent",
        kind=KIND,
        name=name,
        field=f"metadata.annotations[{annotation}]",
        reason=MalformedReason.INVALID_VALUE,
    )


def allocatable_with_raw(allocatable: Mapping[str, int], raw: Mapping[str, int] | None) -> dict[str, int]:
    """status.allocatable overridden per key by raw-allocatable: what LoadAware and LowNodeLoad size a node by.

    Koordinator replaces the whole map when the annotation exists; overriding per key is the same for the usual
    cpu+memory annotation and does not zero a resource the annotation omits."""
    return {**allocatable, **raw} if raw else dict(allocatable)


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""


def digest_node(obj: Mapping[str, Any]) -> NodeDigest:
    """The digest of a Node as a watch (or an extender request) delivers it; never raises."""
    if not isinstance(obj, Mapping):
        wrong = MalformedObjectError(
            f"expected an object, got {type(obj).__name__}", kind=KIND, reason=MalformedReason.WRONG_TYPE
        )
        return NodeDigest("", problem=wrong)
    name = _name(obj)
    try:
        view = NodeView.model_validate(obj)
    except ValidationError as exc:
        return NodeDigest(name, problem=from_validation_error(KIND, name, exc))
    meta, spec, status = view.metadata or MetaView(), view.spec or NodeSpecView(), view.status or NodeStatusView()
    digest = NodeDigest(
        name,
        resource_version=meta.resource_version or "",
        labels=meta.labels or {},
        annotations=meta.annotations or {},
        unschedulable=bool(spec.unschedulable),
    )
    _annotations(digest)
    try:
        digest.taints = parse_taints(spec.taints)
    except MalformedObjectError as exc:
        digest.problem = MalformedObjectError(exc.detail, kind=KIND, name=name, field=exc.field, reason=exc.reason)
    if not name:
        digest.problem = MalformedObjectError(
            "required", kind=KIND, field="metadata.name", reason=MalformedReason.MISSING_FIELD
        )
    _resources(digest, digest.allocatable, status.allocatable, "status.allocatable")
    _resources(digest, digest.capacity, status.capacity, "status.capacity")
    return digest
