"""The node reservation annotation as the batch formulas consume it (parsing lives in common.api.reservation)."""

from __future__ import annotations

from collections.abc import Mapping

from common.api import reservation
from common.api.reservation import ReservationError
from manager.noderesource.model import ResourcePair

__all__ = ["ReservationError", "parse_node_reservation", "reservation_from_annotations"]


def parse_node_reservation(annotation: str) -> ResourcePair:
    """Raises ReservationError when the annotation cannot be used."""
    parsed = reservation.parse_node_reservation(annotation)
    return ResourcePair(parsed.cpu_milli, parsed.memory_bytes)


def reservation_from_annotations(annotations: Mapping[str, str] | None) -> ResourcePair | None:
    parsed = reservation.node_reservation(annotations)
    return None if parsed is None else ResourcePair(parsed.cpu_milli, parsed.memory_bytes)
