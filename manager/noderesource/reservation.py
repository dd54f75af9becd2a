"""The node annotation `node.koordinator.sh/reservation`, resolved to the resources it reserves.

Format (apis/extension NodeReservation): `{"resources": {"cpu": "2", "memory": "4Gi"}, "reservedCPUs": "0-1"}`;
when `reservedCPUs` is set, the reserved CPU is the number of CPUs it lists.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from common.api.constants import ANNOTATION_NODE_RESERVATION
from common.api.quantity import Quantity, QuantityError
from common.cpulist import parse_cpu_list
from manager.noderesource.model import ResourcePair


class ReservationError(ValueError):
    """The annotation is present but unusable; Koordinator then ignores it, and so do we."""


def count_cpu_list(text: str) -> int:
    """Number of CPUs in a Linux cpu list such as `0-3,8,10-11`."""
    try:
        return len(parse_cpu_list(text))
    except ValueError as exc:
        raise ReservationError(str(exc)) from None


def parse_node_reservation(annotation: str) -> ResourcePair:
    """Resolve the annotation's JSON; raises ReservationError when it cannot be used."""
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
        cpu = Quantity.parse(resources["cpu"]).milli_value() if "cpu" in resources else 0
        memory = Quantity.parse(resources["memory"]).value() if "memory" in resources else 0
    except (QuantityError, TypeError) as exc:
        raise ReservationError(f"{ANNOTATION_NODE_RESERVATION}: {exc}") from exc
    reserved_cpus = doc.get("reservedCPUs")
    if reserved_cpus:
        if not isinstance(reserved_cpus, str):
            raise ReservationError(f"{ANNOTATION_NODE_RESERVATION}.reservedCPUs must be a cpu list string")
        cpu = count_cpu_list(reserved_cpus) * 1000
    return ResourcePair(cpu, memory)


def reservation_from_annotations(annotations: Mapping[str, str] | None) -> ResourcePair | None:
    """The reservation a node's annotations declare, or None when absent or unusable."""
    if not annotations or ANNOTATION_NODE_RESERVATION not in annotations:
        return None
    try:
        return parse_node_reservation(annotations[ANNOTATION_NODE_RESERVATION])
    except ReservationError:
        return None
