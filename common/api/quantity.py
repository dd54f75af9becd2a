"""Exact Kubernetes ``resource.Quantity`` parsing and canonical formatting.

Mirrors k8s.io/apimachinery/pkg/api/resource so that what we read from, and write
to, the API server means exactly what the Go side means:

* A value is held exactly as an integer count of nanos (1e-9). Parsing rounds a
  finer value *up* (away from zero) to the next nano, like Go's ``inf.RoundUp``:
  "if you ask for some resource you get some", so ``0.1n`` is ``1n``, not zero.
* The suffix family seen on input (DecimalSI, BinarySI, DecimalExponent) is
  remembered and drives the canonical form, as in Go's ``CanonicalizeBytes``.
* The string as read is kept in ``raw`` and re-emitted by ``to_wire()``, so a
  read-modify-write never rewrites fields we did not touch.

Only the CRD validation grammar is accepted (see ``QUANTITY_PATTERN``), further
narrowed to what Go's parser takes: an exponent after ``e``/``E`` must be an
integer. Absurd inputs (|value| >= 10**100, more than 1000 significant digits)
are rejected instead of allocating huge ints.
"""

from __future__ import annotations

import enum
import functools
import math
import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, GetCoreSchemaHandler, GetJsonSchemaHandler, ValidationInfo
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from common.api.constants import RESOURCE_CPU

__all__ = [
    "MAX_CONSUMER_UNITS",
    "QUANTITY_PATTERN",
    "Format",
    "NegativeQuantityError",
    "NonNegativeQuantity",
    "Quantity",
    "QuantityError",
    "QuantityRangeError",
    "ResourceList",
    "consumer_units",
    "format_quantity",
    "parse_quantity",
]

# The pattern our CRDs (and controller-gen for resource.Quantity) put in OpenAPI schemas.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

# QUANTITY_PATTERN restricted to what Go's ParseQuantity accepts: "1e1.5" or "1e.5"
# pass the CRD pattern but Go rejects them, so the exponent is an integer here. We
# use fullmatch() and [0-9] on purpose: Python's "$" also matches before a trailing
# newline and "\d" matches non-ASCII digits, neither of which Go accepts.
_WIRE_RE = re.compile(
    r"(?P<sign>[+-])?"
    r"(?:(?P<int>[0-9]+)(?:\.(?P<frac>[0-9]*))?|\.(?P<frac_only>[0-9]+))"
    r"(?:(?P<bin>[KMGTPE])i|[eE](?P<exp>[+-]?[0-9]+)|(?P<dec>[numkMGTPE]))?"
)

_NANO = 10**9
_DECIMAL_EXPONENTS = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIXES = {exp: suffix for suffix, exp in _DECIMAL_EXPONENTS.items()}
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")  # index = power of 1024
_BINARY_EXPONENTS = {suffix[0]: 10 * power for power, suffix in enumerate(_BINARY_SUFFIXES) if suffix}

# Go silently caps a parsed BinarySI magnitude at MaxInt64 ("9Ei" -> 2^63-1).
_MAX_BINARY_NANOS = (2**63 - 1) * _NANO
# Guards against absurd inputs. Go has no such limits; nothing legitimate comes near them.
_MAX_DECIMAL_DIGITS = 100  # |value| must stay below 10**100
_MAX_SIGNIFICANT_DIGITS = 1000
_INT32 = range(-(2**31), 2**31)
_INT64 = range(-(2**63), 2**63)


class QuantityError(ValueError):
    """A value that is not a valid Kubernetes quantity (the message names it)."""


# The one range rule for numbers from the wire. Consumers hold a resource in Koordinator's
# vector unit (cpu in milli-cores, everything else in whole units: bytes, counts) in int64
# arrays and divide it as float64. 2^53 is float64's exact-integer range and leaves int64
# room to add 1024 such values (a node's usage plus its pods' estimates) without wrapping.
# It is 9e12 cores or 8 PiB: nothing real comes near it, while "1e16" cores, "8Ei" bytes or
# "9223372036854775807m" would overflow (or silently wrap) the arrays they are written to.
MAX_CONSUMER_UNITS = 2**53


class NegativeQuantityError(QuantityError):
    """A valid quantity where only a non-negative one makes sense (a usage)."""


class QuantityRangeError(QuantityError):
    """A valid quantity beyond the range rule (MAX_CONSUMER_UNITS)."""


class Format(enum.StrEnum):  # a str subclass, like Go's `type Format string`
    DECIMAL_SI = "DecimalSI"  # 12M  = 12 * 10^6
    BINARY_SI = "BinarySI"  # 12Mi = 12 * 2^20
    DECIMAL_EXPONENT = "DecimalExponent"  # 12e6


class _Reject(ValueError):
    """Internal: why a value is invalid; parse() turns it into a QuantityError."""


def _describe(value: object, field: str | None, reason: str) -> str:
    where = f" for field {field}" if field else ""
    return f"invalid quantity {value!r}{where}: {reason}"


def _magnitude_nanos(digits: str, exp10: int, exp2: int) -> int:
    """int(digits) * 10**exp10 * 2**exp2 in nanos, rounded up; exp2 is 0..60."""
    significant = digits.lstrip("0")
    stripped = significant.rstrip("0")
    if not stripped:
        return 0
    exp10 += len(significant) - len(stripped)
    if len(stripped) > _MAX_SIGNIFICANT_DIGITS:
        raise _Reject(f"more than {_MAX_SIGNIFICANT_DIGITS} significant digits")
    order = exp10 + len(stripped)  # the value is below 10**order * 2**exp2
    if order > _MAX_DECIMAL_DIGITS:
        raise _Reject(f"magnitude of 10^{_MAX_DECIMAL_DIGITS} or more is not supported")
    if order + 19 <= -9:
        # Below 1n even after the largest binary multiplier (2^60 < 10^19): rounds up
        # to 1n. Short-circuiting also keeps "1e-2000000000" from building 10**2e9.
        return 1
    scaled = int(stripped) << exp2
    shift = exp10 + 9
    factor: int = 10 ** abs(shift)  # int ** int is typed Any (it may be a float)
    if shift >= 0:
        return scaled * factor
    return -(-scaled // factor)  # ceiling division: round up to the next nano


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> tuple[int, Format]:
    """Parse a wire string into (nanos, format) following Go's ParseQuantity.

    Cached: a cluster's objects repeat a few quantity strings ("250m", "1Gi") and the scheduler
    parses every pod's requests and limits on each spec change; rejections are not cached."""
    match = _WIRE_RE.fullmatch(text)
    if match is None:
        raise _Reject(
            "expected <sign?><number><suffix?> such as 100m, 1.5Gi or 2e3 (suffixes n u m k M G T P E, "
            "Ki Mi Gi Ti Pi Ei, or e<integer>)"
        )
    integer = match["int"] or ""
    fraction = match["frac"] or match["frac_only"] or ""
    is_zero = not (integer + fraction).strip("0")
    exp2 = 0
    if match["bin"] is not None:
        fmt, exp10, exp2 = Format.BINARY_SI, 0, _BINARY_EXPONENTS[match["bin"]]
    elif match["exp"] is not None:
        # Go reads the exponent with a 64-bit ParseInt (longer ones are errors), then
        # truncates it to int32; we reject what would wrap rather than mimic it.
        fmt = Format.DECIMAL_EXPONENT
        exp10 = int(match["exp"]) if len(match["exp"].lstrip("+-").lstrip("0")) <= 19 else 2**63
        if exp10 not in _INT64 or (exp10 not in _INT32 and not is_zero):
            raise _Reject("exponent out of range")
    else:
        fmt, exp10 = Format.DECIMAL_SI, _DECIMAL_EXPONENTS[match["dec"] or ""]
    if is_zero:
        return 0, fmt
    magnitude = _magnitude_nanos(integer + fraction, exp10 - len(fraction), exp2)
    if fmt is Format.BINARY_SI:
        magnitude = min(magnitude, _MAX_BINARY_NANOS)
        if magnitude < _NANO:
            fmt = Format.DECIMAL_SI  # Go: a fraction of one can't be shown as BinarySI
    return (-magnitude if match["sign"] == "-" else magnitude), fmt


def _format_decimal(magnitude: int, exponent_form: bool) -> str:
    """Mantissa with trailing zeros moved into a power-of-ten exponent that is a multiple of 3."""
    digits = str(magnitude)
    mantissa = digits.rstrip("0")
    exponent = -9 + len(digits) - len(mantissa)
    pad = exponent % 3  # lower the exponent to the multiple of 3 at or below it
    mantissa += "0" * pad
    exponent -= pad
    if not exponent_form and exponent in _DECIMAL_SUFFIXES:
        return mantissa + _DECIMAL_SUFFIXES[exponent]
    # DecimalExponent, or DecimalSI beyond "E" (10^18): current apimachinery falls back
    # to exponent notation there ("1000E" -> "1e21") instead of dropping the suffix.
    return f"{mantissa}e{exponent}" if exponent else mantissa


def _format_binary(units: int) -> str:
    power = 0
    while power < len(_BINARY_SUFFIXES) - 1 and units % 1024 == 0:
        units //= 1024
        power += 1
    return f"{units}{_BINARY_SUFFIXES[power]}"


def _ceil_div_away(nanos: int, unit: int) -> int:
    """nanos / unit rounded away from zero, as Go's ScaledValue does."""
    magnitude = -(-abs(nanos) // unit)
    return magnitude if nanos >= 0 else -magnitude


def _check_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    return value


@functools.total_ordering
@dataclass(frozen=True, slots=True, eq=False)
class Quantity:
    """An exact quantity: ``nanos`` units of 1e-9, plus the format used to print it."""

    nanos: int
    format: Format = Format.DECIMAL_SI
    raw: str | int | None = None

    def __post_init__(self) -> None:
        _check_int(self.nanos, "nanos")
        if not isinstance(self.format, Format):
            object.__setattr__(self, "format", Format(self.format))  # accept "BinarySI" etc.

    # -- construction -------------------------------------------------------------

    @classmethod
    def parse(cls, value: str | int | float | Quantity, field: str | None = None) -> Quantity:
        if isinstance(value, Quantity):
            return value
        try:
            if isinstance(value, bool):
                raise _Reject("a boolean is not a quantity")
            if isinstance(value, int):
                # A JSON number: Go parses its text, so it is an exact DecimalSI integer.
                if abs(value) >= 10**_MAX_DECIMAL_DIGITS:
                    raise _Reject(f"magnitude of 10^{_MAX_DECIMAL_DIGITS} or more is not supported")
                return cls(value * _NANO, Format.DECIMAL_SI, value)
            if isinstance(value, float):
                return cls(cls._float_nanos(value), Format.DECIMAL_SI)
            if isinstance(value, str):
                nanos, fmt = _parse_text(value)
                return cls(nanos, fmt, value)
            raise _Reject(f"unsupported type {type(value).__name__}")
        except _Reject as exc:
            raise QuantityError(_describe(value, field, str(exc))) from None

    @staticmethod
    def _float_nanos(value: float) -> int:
        if not math.isfinite(value):
            raise _Reject("not a finite number")
        # repr() is the shortest string that round-trips, i.e. the number a human or
        # a JSON encoder wrote; parsing it avoids binary-fraction noise (0.1 -> 100m).
        return _parse_text(repr(value))[0]

    @classmethod
    def from_milli(cls, milli: int, format: Format = Format.DECIMAL_SI) -> Quantity:
        """Go NewMilliQuantity."""
        return cls(_check_int(milli, "milli") * 10**6, format)

    @classmethod
    def from_int(cls, value: int, format: Format = Format.BINARY_SI) -> Quantity:
        """Go NewQuantity (BinarySI by default, as used for byte counts)."""
        return cls(_check_int(value, "value") * _NANO, format)

    @classmethod
    def from_float(cls, value: float, format: Format = Format.DECIMAL_SI) -> Quantity:
        """Exact value of the float's shortest repr, rounded up to a nano; NaN/inf raise."""
        try:
            return cls(cls._float_nanos(value), format)
        except _Reject as exc:
            raise QuantityError(_describe(value, None, str(exc))) from None

    # -- output ---------------------------------------------------------------------

    def canonical(self) -> str:
        """Go's String(): the canonical form for this value and format."""
        if self.nanos == 0:
            return "0"
        sign = "-" if self.nanos < 0 else ""
        magnitude = abs(self.nanos)
        # BinarySI is only used for integers of at least 1Ki; anything else would
        # need rounding or a fraction, so Go prints it as DecimalSI.
        if self.format is Format.BINARY_SI and magnitude >= 1024 * _NANO and magnitude % _NANO == 0:
            return sign + _format_binary(magnitude // _NANO)
        return sign + _format_decimal(magnitude, self.format is Format.DECIMAL_EXPONENT)

    def to_wire(self) -> str | int:
        return self.raw if self.raw is not None else self.canonical()

    def value(self) -> int:
        """Go Value(): whole units, rounded away from zero (no int64 overflow here)."""
        return _ceil_div_away(self.nanos, _NANO)

    def milli_value(self) -> int:
        """Go MilliValue(): thousandths, rounded away from zero."""
        return _ceil_div_away(self.nanos, 10**6)

    def as_float(self) -> float:
        return self.nanos / _NANO  # int / int true division is correctly rounded

    def is_zero(self) -> bool:
        return self.nanos == 0

    def sign(self) -> int:
        return (self.nanos > 0) - (self.nanos < 0)

    def __str__(self) -> str:
        return self.canonical()

    def __repr__(self) -> str:
        return f"Quantity({self.canonical()!r})"

    # -- value semantics --------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.nanos == other.nanos

    def __hash__(self) -> int:
        return hash(self.nanos)

    def __lt__(self, other: Quantity) -> bool:  # the other orderings come from total_ordering
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.nanos < other.nanos

    def _result_format(self, other: Quantity) -> Format:
        # Go Add/Sub keep the receiver's format, except that a zero receiver adopts
        # the operand's, so summing from Quantity(0) keeps e.g. "1Gi" readable.
        return other.format if self.nanos == 0 else self.format

    def __add__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self.nanos + other.nanos, self._result_format(other))

    def __sub__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self.nanos - other.nanos, self._result_format(other))

    def __neg__(self) -> Quantity:
        return Quantity(-self.nanos, self.format)

    # -- pydantic v2 ----------------------------------------------------------------

    @classmethod
    def __get_pydantic_core_schema__(cls, source_type: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.with_info_plain_validator_function(
            _pydantic_validate,
            serialization=core_schema.plain_serializer_function_ser_schema(_pydantic_serialize),
        )

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        # Same shape controller-gen emits for resource.Quantity in a CRD.
        return {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }


def _pydantic_validate(value: Any, info: ValidationInfo) -> Quantity:
    # QuantityError is a ValueError, which pydantic reports as a ValidationError
    # carrying the field location and the input value.
    return Quantity.parse(value, info.field_name)


def _pydantic_serialize(value: Quantity) -> str | int:
    return value.to_wire()


def _require_non_negative(q: Quantity) -> Quantity:
    if q.nanos < 0:
        raise NegativeQuantityError(f"negative quantity '{q.to_wire()}' is not a valid usage")
    return q


NonNegativeQuantity = Annotated[Quantity, AfterValidator(_require_non_negative)]


def consumer_units(resource: str, q: Quantity, field: str | None = None) -> int:
    """The quantity in Koordinator's vector unit (cpu milli-units, others whole units), range-checked.

    Raises QuantityError beyond ±MAX_CONSUMER_UNITS: such a value cannot be held by the
    consumers' int64/float64 arrays, so the object carrying it is malformed."""
    units = q.milli_value() if resource == RESOURCE_CPU else q.value()
    if -MAX_CONSUMER_UNITS <= units <= MAX_CONSUMER_UNITS:
        return units
    unit = "milli-units" if resource == RESOURCE_CPU else "units"
    where = field or resource
    raise QuantityRangeError(
        f"quantity {q.to_wire()!r} for {where} is out of range: {units} {unit} is beyond ±2^53, "
        "more than any node has and more than the scheduler's arrays can hold"
    )


def _check_resource_list(resources: dict[str, Quantity]) -> dict[str, Quantity]:
    for name, q in resources.items():
        consumer_units(name, q)
    return resources


# A ResourceList from the wire (usages, minResources): non-negative and within the range rule.
ResourceList = Annotated[dict[str, NonNegativeQuantity], AfterValidator(_check_resource_list)]


def parse_quantity(value: str | int | float | Quantity, field: str | None = None) -> Quantity:
    return Quantity.parse(value, field)


def format_quantity(q: Quantity) -> str:
    return q.canonical()
