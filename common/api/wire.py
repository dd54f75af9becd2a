"""Shared plumbing for API models: lossless read-modify-write of Kubernetes JSON.

Every model keeps fields it does not know (`extra="allow"`), so an object written by a
newer Koordinator survives our read-modify-write. Dumping uses `exclude_unset`, so a
field that was absent on the wire stays absent, as Go's `omitempty` would have it;
fields Go always writes are listed in `_always_emit`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    GetCoreSchemaHandler,
    PlainSerializer,
    StrictInt,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import core_schema

from common.api.malformed import InvalidTimeError, MalformedObjectError, MalformedReason


class KubeModel(BaseModel):
    model_config = ConfigDict(
        extra="allow",
        populate_by_name=True,
        alias_generator=to_camel,
        validate_assignment=True,
        serialize_by_alias=True,
        # Validators and serializers are built on a model's first use, not at import: a process builds only the
        # models it uses (a standalone agent, which writes no NodeMetric, none until /nodemetric is asked for:
        # -0.9 MiB resident).
        defer_build=True,
    )

    _always_emit: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="after")
    def _mark_always_emitted(self) -> Self:
        for name in self._always_emit:
            self.__pydantic_fields_set__.add(name)
        return self

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> Self:
        return cls.model_validate(obj)

    def to_wire(self) -> dict[str, Any]:
        """The JSON the API server stores, with unknown fields kept and absent fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class WireView(BaseModel):
    """The fields of an object a digest reads (`poddigest.py`, `nodedigest.py`): validated, never written back,
    so unknown fields are ignored rather than kept."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, alias_generator=to_camel, defer_build=True)


class MetaView(WireView):
    """metadata as the digests read it (the kinds add their own fields)."""

    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


QuantityText = str | StrictInt | float  # a resource.Quantity on the wire, parsed by `Quantity.parse`


@dataclass(frozen=True, slots=True)
class CRD:
    """A field's CRD facts beyond its Python type, as `Annotated` metadata (read by common/api/crdgen/from_model.py,
    as controller-gen reads `+kubebuilder` markers)."""

    fmt: str | None = None  # integer format: "int32" for a Go int32 (default int64)
    required: bool = False  # in the parent's `required` (the model itself may still read it leniently)
    default: Any = None
    enum: bool = False  # a StrEnum: its values, in declaration order, are the CRD's enum
    minimum: int | None = None  # bounds the API server enforces (the model still reads what it is given)
    maximum: int | None = None
    schema: str | None = None  # a type whose schema is written out in crdgen, e.g. "metav1.Condition"
    description: str | None = None  # of a list's items or a map's values (a field's is its Field description)


INT32 = CRD(fmt="int32")
PERCENT = CRD(minimum=0, maximum=100)


# --- metav1.Time and metav1.MicroTime ------------------------------------------------
def parse_rfc3339(text: str) -> datetime:
    """metav1.Time's wire text → an aware datetime; the one time parser of every component.

    A time without an offset is taken as UTC, as Go's metav1.Time unmarshalling does.
    """
    try:
        parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except (ValueError, TypeError, AttributeError):
        raise InvalidTimeError(f"invalid RFC 3339 time {text!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def parse_time(value: Any, field: str) -> float | None:
    """A time field of a watched object (as JSON) → epoch seconds; None when absent.

    Anything else that is not RFC 3339 raises a MalformedObjectError naming ``field``: the object
    is malformed and its digest says so (a time read as "absent" would hide it, and change what the
    component does, e.g. the order pods are evicted in).
    """
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise MalformedObjectError(
            f"expected an RFC 3339 time, got {value!r}", field=field, reason=MalformedReason.INVALID_TIME
        )
    try:
        return parse_rfc3339(value).timestamp()
    except InvalidTimeError as exc:
        raise MalformedObjectError(str(exc), field=field, reason=MalformedReason.INVALID_TIME) from None


def _parse_time(value: Any) -> Any:
    return parse_rfc3339(value) if isinstance(value, str) else value


def format_time(value: datetime | float, *, micro: bool = False) -> str:
    """metav1.Time's wire form (RFC 3339, UTC, whole seconds), or with ``micro`` metav1.MicroTime's
    (microseconds, as Leases' renewTime and events.k8s.io's eventTime take). ``value``: an aware
    datetime (naive is taken as UTC) or epoch seconds."""
    if isinstance(value, int | float):
        value = datetime.fromtimestamp(value, UTC)
    elif value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    if value.utcoffset():
        try:
            value = value.astimezone(UTC)
        except OverflowError:  # past the calendar's ends (0001-01-01T00:00:00+01:00): clamped, datetime stops there
            value = datetime.min.replace(tzinfo=UTC) if value.year == 1 else datetime.max.replace(tzinfo=UTC)
    # the year by hand: strftime's %Y does not pad years below 1000 on glibc ("1-01-01")
    return f"{value.year:04d}-" + value.strftime("%m-%dT%H:%M:%S.%fZ" if micro else "%m-%dT%H:%M:%SZ")


Time = Annotated[datetime, BeforeValidator(_parse_time), PlainSerializer(format_time, return_type=str)]


# --- metav1.Duration (Go time.Duration text) ------------------------------------
_DURATION_UNITS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}
_DURATION_TERM = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


@dataclass(frozen=True, slots=True, eq=False)
class GoDuration:
    """A Go `time.Duration` as text on the wire (`5m0s`), exact to the nanosecond."""

    nanoseconds: int
    raw: str | None = None

    @classmethod
    def parse(cls, value: str | GoDuration) -> GoDuration:
        if isinstance(value, GoDuration):
            return value
        if not isinstance(value, str):
            raise ValueError(f"invalid duration {value!r}: expected a string like '5m0s'")
        text = value
        sign = 1
        if text[:1] in "+-" and text:
            sign = -1 if text[0] == "-" else 1
            text = text[1:]
        if text == "0":
            return cls(0, value)
        pos, total = 0, 0
        if not text:
            raise ValueError(f"invalid duration {value!r}")
        while pos < len(text):
            m = _DURATION_TERM.match(text, pos)
            if not m:
                raise ValueError(f"invalid duration {value!r}: expected terms like 1h, 5m, 30s, 500ms")
            number, unit = m.groups()
            whole, _, frac = number.partition(".")
            scale = _DURATION_UNITS[unit]
            total += int(whole or 0) * scale
            if frac:
                total += int(frac) * scale // 10 ** len(frac)
            pos = m.end()
            if total > 2**63:  # Go's ParseDuration: beyond an int64 of nanoseconds is an error
                raise ValueError(f"invalid duration {value!r}: out of range (about 2562047h at most)")
        if total == 2**63 and sign > 0:
            raise ValueError(f"invalid duration {value!r}: out of range (about 2562047h at most)")
        return cls(sign * total, value)

    @classmethod
    def from_seconds(cls, seconds: float) -> GoDuration:
        return cls(round(seconds * 10**9))

    @property
    def seconds(self) -> float:
        return self.nanoseconds / 10**9

    def canonical(self) -> str:
        """Go's Duration.String(): `5m0s`, `1h0m0s`, `1.5s`, `300ms`."""
        ns = abs(self.nanoseconds)
        sign = "-" if self.nanoseconds < 0 else ""
        if ns == 0:
            return "0s"
        if ns < 10**9:
            for unit, scale in (("ms", 10**6), ("µs", 10**3), ("ns", 1)):
                if ns >= scale:
                    return sign + _trim_fraction(ns, scale) + unit
        hours, rest = divmod(ns, 3600 * 10**9)
        minutes, rest = divmod(rest, 60 * 10**9)
        out = sign
        if hours:
            out += f"{hours}h"
        if hours or minutes:
            out += f"{minutes}m"
        return out + _trim_fraction(rest, 10**9) + "s"

    def to_wire(self) -> str:
        return self.raw if self.raw is not None else self.canonical()

    def __str__(self) -> str:
        return self.canonical()

    def __repr__(self) -> str:
        return f"GoDuration({self.canonical()!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GoDuration) and other.nanoseconds == self.nanoseconds

    def __hash__(self) -> int:
        return hash(self.nanoseconds)

    def __lt__(self, other: GoDuration) -> bool:
        return self.nanoseconds < other.nanoseconds

    @classmethod
    def __get_pydantic_core_schema__(cls, source: type[Any], handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls.parse,
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda d: d.to_wire(), return_schema=core_schema.str_schema()
            ),
            json_schema_input_schema=core_schema.str_schema(),
        )


def _trim_fraction(value: int, scale: int) -> str:
    whole, frac = divmod(value, scale)
    if not frac:
        return str(whole)
    digits = len(str(scale)) - 1
    return f"{whole}.{frac:0{digits}d}".rstrip("0")


# --- metav1.ObjectMeta (the parts we read; the rest is kept as extra) -------------
class OwnerReference(KubeModel):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(KubeModel):
    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[OwnerReference] | None = None
