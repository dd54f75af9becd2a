"""A CRD's structural schema from the pydantic model that reads and writes the object: one source.

Field names (aliases), types and descriptions come from the model; what a CRD says beyond the Python
type (an int32 format, a required field, a default, an enum, a schema kept as upstream writes it) is
a `CRD` marker (common/api/wire.py) in the field's `Annotated` metadata. Koordinator generates its
CRDs from its Go types the same way (controller-gen reads the `+kubebuilder` markers beside the fields).
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from common.api.crdgen.schema import (
    Schema,
    _described,
    array,
    boolean,
    condition,
    date_time,
    empty_obj,
    int_or_string,
    integer,
    map_of,
    obj,
    preserved,
    quantity,
    string,
)
from common.api.quantity import Quantity
from common.api.wire import CRD, GoDuration

NONE = CRD()
# Schemas a field names instead of deriving (`CRD(schema=...)`): upstream types with validation of their own.
NAMED_SCHEMAS: dict[str, Callable[[], Schema]] = {
    "metav1.Condition": condition,
    "struct{}": empty_obj,
}


def _marker(metadata: list[Any]) -> CRD:
    found = [m for m in metadata if isinstance(m, CRD)]
    return found[0] if found else NONE


def strip_annotation(annotation: Any) -> tuple[Any, list[Any]]:
    """The annotation without Optional and Annotated, with the Annotated metadata found on the way (the
    constraints of a `Field(ge=..., le=...)` inside it flattened); a union of several types is left as it is."""
    metadata: list[Any] = []
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation, *extra = typing.get_args(annotation)
            for item in extra:
                metadata.extend(getattr(item, "metadata", None) or [item])
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation, metadata
            annotation = args[0]
        else:
            return annotation, metadata


def model_schema(model: type[BaseModel], description: str | None = None) -> Schema:
    """The object schema of a model: every field by its wire name."""
    properties: dict[str, Schema] = {}
    required: list[str] = []
    for name, info in model.model_fields.items():
        wire = info.alias or name
        inner, metadata = strip_annotation(info.annotation)
        marker = _marker([*info.metadata, *metadata])
        properties[wire] = _schema(inner, marker, info.description)
        if marker.required:
            required.append(wire)
    return obj(properties, description, required=required)


def field_schema(model: type[BaseModel], name: str) -> Schema:
    """The schema of one field of a model (e.g. a kind's `spec`), with the field's description."""
    info = model.model_fields[name]
    inner, metadata = strip_annotation(info.annotation)
    return _schema(inner, _marker([*info.metadata, *metadata]), info.description)


def _schema(annotation: Any, marker: CRD, description: str | None) -> Schema:
    if marker.schema is not None:
        return _described(NAMED_SCHEMAS[marker.schema](), description)
    annotation, metadata = strip_annotation(annotation)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType) and set(typing.get_args(annotation)) - {type(None)} == {int, str}:
        return int_or_string(description, default=marker.default)  # an intstr.IntOrString
    if origin is list:
        (item,) = typing.get_args(annotation)
        inner, inner_metadata = strip_annotation(item)
        item_marker = _marker(inner_metadata)
        return array(_schema(inner, item_marker, item_marker.description), description)
    if origin is dict:
        _, value = typing.get_args(annotation)
        if value is Any:
            return preserved(description)
        inner, inner_metadata = strip_annotation(value)
        value_marker = _marker(inner_metadata)
        return map_of(_schema(inner, value_marker, value_marker.description), description)
    if not isinstance(annotation, type):
        raise TypeError(f"no CRD type for {annotation!r}")
    if issubclass(annotation, BaseModel):
        return model_schema(annotation, description)
    if issubclass(annotation, bool):
        return boolean(description, default=marker.default)
    if issubclass(annotation, enum.StrEnum):
        return string(description, enum=[m.value for m in annotation] if marker.enum else None)
    if issubclass(annotation, int):
        return integer(description, fmt=marker.fmt or "int64", minimum=marker.minimum, maximum=marker.maximum)
    if issubclass(annotation, str | GoDuration):
        return string(description)
    if issubclass(annotation, datetime):
        return date_time(description)
    if issubclass(annotation, Quantity):
        return quantity(description)
    raise TypeError(f"no CRD type for {annotation!r} (metadata {metadata!r})")
