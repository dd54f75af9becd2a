"""What was wrong with an API object a component cannot use: the one error type for malformed input.

Every component (scheduler, descheduler, manager) raises or carries a `MalformedObjectError` for an
object in the cluster it cannot read, and counts it under the same metric by `kind` and `reason`
(`common/kube/malformed.py`). `reason` is a short, closed set of labels; `field` and `detail` say
exactly where and what, for the log line.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from common.api.quantity import NegativeQuantityError, QuantityError, QuantityRangeError


class InvalidTimeError(ValueError):
    """Text that is not an RFC 3339 time (`common/api/wire.py` parses times)."""


class MalformedReason(enum.StrEnum):
    """Why an object is unusable; the `reason` label of `loadline_malformed_objects_total`."""

    INVALID_QUANTITY = "invalid_quantity"
    NEGATIVE_QUANTITY = "negative_quantity"
    OUT_OF_RANGE = "out_of_range"
    INVALID_TIME = "invalid_time"
    WRONG_TYPE = "wrong_type"
    MISSING_FIELD = "missing_field"
    INVALID_VALUE = "invalid_value"
    TOO_DEEP = "too_deep"  # nested deeper than common.kube.http.MAX_JSON_DEPTH: the deeper part was cut


class MalformedObjectError(ValueError):
    """An API object that cannot be used. ``str()`` reads "<kind> <name> <field>: <detail>"."""

    def __init__(
        self,
        detail: str,
        *,
        kind: str = "",
        name: str = "",
        field: str = "",
        reason: MalformedReason = MalformedReason.INVALID_VALUE,
    ) -> None:
        self.kind, self.name, self.field, self.detail, self.reason = kind, name, field, detail, reason
        where = " ".join(part for part in (kind, name, field) if part)
        super().__init__(f"{where}: {detail}" if where else detail)


def field_path(loc: Sequence[int | str]) -> str:
    """A pydantic error location as the API spells the field: ``status.podsMetric[1].podUsage``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


_OBJECT_TYPES = frozenset({"dict_type", "model_type", "model_attributes_type", "mapping_type"})
_LIST_TYPES = frozenset({"list_type", "tuple_type", "iterable_type", "sequence_type"})


def quantity_reason(exc: QuantityError) -> MalformedReason:
    if isinstance(exc, QuantityRangeError):
        return MalformedReason.OUT_OF_RANGE
    if isinstance(exc, NegativeQuantityError):
        return MalformedReason.NEGATIVE_QUANTITY
    return MalformedReason.INVALID_QUANTITY


def _describe(error: ErrorDetails) -> tuple[str, MalformedReason]:
    raw: Any = error.get("input")
    cause = (error.get("ctx") or {}).get("error")
    kind = error["type"]
    if isinstance(cause, QuantityRangeError):
        return str(cause), quantity_reason(cause)
    if isinstance(cause, NegativeQuantityError):
        return f"{raw!r} is not a valid usage quantity", quantity_reason(cause)
    if isinstance(cause, QuantityError):
        what = "usage quantity" if any("usage" in str(part).lower() for part in error["loc"]) else "quantity"
        return f"{raw!r} is not a valid {what}", quantity_reason(cause)
    if isinstance(cause, InvalidTimeError):
        return f"{raw!r} is not an RFC 3339 time", MalformedReason.INVALID_TIME
    if kind == "missing":
        return "required", MalformedReason.MISSING_FIELD
    if kind in _OBJECT_TYPES:
        return "must be an object", MalformedReason.WRONG_TYPE
    if kind in _LIST_TYPES:
        return "must be a list", MalformedReason.WRONG_TYPE
    if kind.endswith(("_type", "_parsing")):
        return error["msg"], MalformedReason.WRONG_TYPE
    return error["msg"], MalformedReason.INVALID_VALUE


def from_validation_error(kind: str, name: str, exc: ValidationError) -> MalformedObjectError:
    """The first thing pydantic found wrong with object ``name`` of ``kind``, as a MalformedObjectError."""
    first = exc.errors()[0]
    detail, reason = _describe(first)
    return MalformedObjectError(detail, kind=kind, name=name, field=field_path(first["loc"]), reason=reason)
