"""The node annotation `node.koordinator.sh/reservation`: resources kept away from pods.

Format (Koordinator apis/extension NodeReservation): `{"resources": {"cpu": "2", "memory": "4Gi"},
"reservedCPUs": "0-1"}`. When `reservedCPUs` is set, the reserved CPU is the number of CPUs it lists.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from common.api.constants import ANNOTATION_NODE_RESERVATION
from common.api.quantity import Quantity, QuantityError, consumer_units
from common.cpulist import parse_cpu_list


class ReservationError(ValueError):
    """The annotation is present but unusable; Koordinator then ignores it, and so do we."""


@dataclass(frozen=True, slots=True)
class NodeReservation:
    cpu_milli: int
    memory_bytes: int
    reserved_cpus: tuple[int, ...] = ()


def parse_node_reservation(annotation: str) -> NodeReservation:
    """Resolve the annotation's JSON; raises ReservationError naming what is wrong."""
    try:
        doc = json.loads(annotation)
    except json.JSONDecodeError as exc:
        raise ReservationError(f"{ANNOTATION_NODE_RESERVATION} is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise ReservationError(f"{ANNOTATION_NODE_RESERVATION} must be a JSON object")
    resources = doc.get("resources") or {}
    if not isinstance(resources, dict):
        raise ReservationError(f"{ANNOTATION_NODE_RESERVATION}.resources must be an object")
    try:
        cpu = consumer_units("cpu", Quantity.parse(resources["cpu"])) if "cpu" in resources else 0
        memory = consumer_units("memory", Quantity.parse(resources["memory"])) if "memory" in resources else 0
    except (QuantityError, TypeError) as exc:
        raise ReservationError(f"{ANNOTATION_NODE_RESERVATION}: {exc}") from exc
    cpus: tuple[int, ...] = ()
    listed = doc.get("reservedCPUs")
    if listed:
        if not isinstance(listed, str):
            raise ReservationError(f"{ANNOTATION_NODE_RESERVATION}.reservedCPUs must be a cpu list string")
        try:
            cpus = tuple(parse_cpu_list(listed))
        except ValueError as exc:
            raise ReservationError(str(exc)) from None
        cpu = len(cpus) * 1000
    return NodeReservation(cpu, memory, cpus)


def node_reservation(annotations: Mapping[str, str] | None) -> NodeReservation | None:
    """The reservation a node's annotations declare, or None when absent or unusable."""
    if not annotations or ANNOTATION_NODE_RESERVATION not in annotations:
        return None
    try:
        return parse_node_reservation(annotations[ANNOTATION_NODE_RESERVATION])
    except ReservationError:
        return None
