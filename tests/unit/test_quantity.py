"""Tests for common.api.quantity against facts from apimachinery's quantity_test.go.

Vector values are transcribed with ``dq(m, e)``, the nano count of Go's
``decQuantity(m, e, format)`` (m * 10^e), so each row can be compared to Go.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from common.api.quantity import (
    QUANTITY_PATTERN,
    Format,
    NonNegativeQuantity,
    Quantity,
    QuantityError,
    ResourceList,
    consumer_units,
    format_quantity,
    parse_quantity,
)

DSI, BSI, DEXP = Format.DECIMAL_SI, Format.BINARY_SI, Format.DECIMAL_EXPONENT
NANO = 10**9
MAX_INT64 = 2**63 - 1


def dq(mantissa: int, exponent: int) -> int:
    """Nanos of Go's decQuantity(mantissa, exponent, _); must be a whole nano count."""
    value = Fraction(mantissa) * Fraction(10) ** exponent * NANO
    assert value.denominator == 1
    return int(value)


# --- Go TestQuantityParse ----------------------------------------------------------------

PARSE_VECTORS: list[tuple[str, int, Format]] = [
    ("0", 0, DSI),
    ("0n", 0, DSI),
    ("0u", 0, DSI),
    ("0m", 0, DSI),
    ("0Ki", 0, BSI),
    ("0k", 0, DSI),
    ("0Mi", 0, BSI),
    ("0G", 0, DSI),
    ("0Ti", 0, BSI),
    ("1", dq(1, 0), DSI),
    ("1Ki", dq(1024, 0), BSI),
    ("8Ki", dq(8 * 1024, 0), BSI),
    ("7Mi", dq(7 * 1024**2, 0), BSI),
    ("6Gi", dq(6 * 1024**3, 0), BSI),
    ("5Ti", dq(5 * 1024**4, 0), BSI),
    ("4Pi", dq(4 * 1024**5, 0), BSI),
    ("3Ei", dq(3 * 1024**6, 0), BSI),
    ("100Ti", dq(100 * 1024**4, 0), BSI),
    ("5n", dq(5, -9), DSI),
    ("4u", dq(4, -6), DSI),
    ("3m", dq(3, -3), DSI),
    ("9", dq(9, 0), DSI),
    ("8k", dq(8, 3), DSI),
    ("50k", dq(5, 4), DSI),
    ("7M", dq(7, 6), DSI),
    ("6G", dq(6, 9), DSI),
    ("5T", dq(5, 12), DSI),
    ("40T", dq(4, 13), DSI),
    ("300T", dq(3, 14), DSI),
    ("2P", dq(2, 15), DSI),
    ("1E", dq(1, 18), DSI),
    ("1E-3", dq(1, -3), DEXP),
    ("1e3", dq(1, 3), DEXP),
    ("1E6", dq(1, 6), DEXP),
    ("1e9", dq(1, 9), DEXP),
    ("1E12", dq(1, 12), DEXP),
    ("1e15", dq(1, 15), DEXP),
    ("1E18", dq(1, 18), DEXP),
    ("1e14", dq(1, 14), DEXP),
    ("1e13", dq(1, 13), DEXP),
    ("100.035k", dq(100035, 0), DSI),
    ("0.001", dq(1, -3), DSI),
    ("0.0005k", dq(5, -1), DSI),
    ("0.005", dq(5, -3), DSI),
    ("0.05", dq(5, -2), DSI),
    ("0.5", dq(5, -1), DSI),
    ("0.00050k", dq(5, -1), DSI),
    ("0.00500", dq(5, -3), DSI),
    ("0.05000", dq(5, -2), DSI),
    ("0.50000", dq(5, -1), DSI),
    ("0.5e0", dq(5, -1), DEXP),
    ("0.5e-1", dq(5, -2), DEXP),
    ("0.5e-2", dq(5, -3), DEXP),
    ("10.035M", dq(10035, 3), DSI),
    ("1.2e3", dq(12, 2), DEXP),
    ("1.3E+6", dq(13, 5), DEXP),
    ("1.40e9", dq(14, 8), DEXP),
    ("1.53E12", dq(153, 10), DEXP),
    ("1.6e15", dq(16, 14), DEXP),
    ("1.7E18", dq(17, 17), DEXP),
    ("9.01", dq(901, -2), DSI),
    ("8.1k", dq(81, 2), DSI),
    ("7.123456M", dq(7123456, 0), DSI),
    ("6.987654321G", dq(6987654321, 0), DSI),
    ("5.444T", dq(5444, 9), DSI),
    ("40.1T", dq(401, 11), DSI),
    ("300.2T", dq(3002, 11), DSI),
    ("2.5P", dq(25, 14), DSI),
    ("1.01E", dq(101, 16), DSI),
    # things that round up to the next nano
    ("3.001n", dq(4, -9), DSI),
    ("1.1E-9", dq(2, -9), DEXP),
    ("0.0000000001", dq(1, -9), DSI),
    ("0.0000000005", dq(1, -9), DSI),
    ("0.00000000050", dq(1, -9), DSI),
    ("0.5e-9", dq(1, -9), DEXP),
    ("0.9n", dq(1, -9), DSI),
    ("0.00000012345", dq(124, -9), DSI),
    ("0.00000012354", dq(124, -9), DSI),
    # BinarySI saturates at MaxInt64
    ("9Ei", MAX_INT64 * NANO, BSI),
    ("9223372036854775807Ki", MAX_INT64 * NANO, BSI),
    ("12E", dq(12, 18), DSI),
    # fractional binary
    ("100.035Ki", dq(10243584, -2), BSI),
    ("0.5Mi", dq(524288, 0), BSI),
    ("0.05Gi", dq(536870912, -1), BSI),
    ("0.025Ti", dq(274877906944, -1), BSI),
    # "things written by trolls"
    ("0.000000000001Ki", dq(2, -9), DSI),  # rounds up and changes format
    (".001", dq(1, -3), DSI),
    (".0001k", dq(100, -3), DSI),
    ("1.", dq(1, 0), DSI),
    ("1.G", dq(1, 9), DSI),
]


@pytest.mark.parametrize(("text", "nanos", "fmt"), PARSE_VECTORS)
def test_parse_vectors(text: str, nanos: int, fmt: Format) -> None:
    q = Quantity.parse(text)
    assert (q.nanos, q.format) == (nanos, fmt)
    assert q.raw == text


@pytest.mark.parametrize(("text", "nanos", "fmt"), PARSE_VECTORS)
@pytest.mark.parametrize("sign", ["-", "+"])
def test_parse_vectors_with_explicit_sign(text: str, nanos: int, fmt: Format, sign: str) -> None:
    q = Quantity.parse(sign + text)
    assert (q.nanos, q.format) == ((-nanos if sign == "-" else nanos), fmt)


# --- Go TestQuantityString: (nanos, format) -> canonical, and an alternate spelling -------

STRING_VECTORS: list[tuple[int, Format, str, str]] = [
    (dq(1024**3, 0), BSI, "1Gi", "1024Mi"),
    (dq(300 * 1024**2, 0), BSI, "300Mi", "307200Ki"),
    (dq(6 * 1024, 0), BSI, "6Ki", ""),
    (dq(1001 * 1024**3, 0), BSI, "1001Gi", "1025024Mi"),
    (dq(1024**4, 0), BSI, "1Ti", "1024Gi"),
    (dq(5, 0), BSI, "5", "5000m"),
    (dq(500, -3), BSI, "500m", "0.5"),
    (dq(1, 9), DSI, "1G", "1000M"),
    (dq(1000, 6), DSI, "1G", "0.001T"),
    (dq(1000000, 3), DSI, "1G", ""),
    (dq(1000000000, 0), DSI, "1G", ""),
    (dq(1, -3), DSI, "1m", "1000u"),
    (dq(80, -3), DSI, "80m", ""),
    (dq(1080, -3), DSI, "1080m", "1.08"),
    (dq(108, -2), DSI, "1080m", "1080000000n"),
    (dq(10800, -4), DSI, "1080m", ""),
    (dq(300, 6), DSI, "300M", ""),
    (dq(1, 12), DSI, "1T", ""),
    (dq(1, 18), DSI, "1E", ""),
    # DecimalSI has no suffix past E: current apimachinery falls back to exponent notation
    (dq(1, 21), DSI, "1e21", "1000E"),
    (dq(5, 21), DSI, "5e21", "5000E"),
    (dq(1, 24), DSI, "1e24", "1000000E"),
    (dq(1234567, 6), DSI, "1234567M", ""),
    (dq(1234567, -3), BSI, "1234567m", ""),
    (dq(3, 3), DSI, "3k", ""),
    (dq(1025, 0), BSI, "1025", ""),
    (0, DSI, "0", ""),
    (0, BSI, "0", ""),
    (dq(1, 9), DEXP, "1e9", ".001e12"),
    (dq(1, -3), DEXP, "1e-3", "0.001e0"),
    (dq(1, -9), DEXP, "1e-9", "1000e-12"),
    (dq(80, -3), DEXP, "80e-3", ""),
    (dq(300, 6), DEXP, "300e6", ""),
    (dq(1, 12), DEXP, "1e12", ""),
    (dq(1, 3), DEXP, "1e3", ""),
    (dq(3, 3), DEXP, "3e3", ""),
    (0, DEXP, "0", "00"),
    (dq(1, -9), DSI, "1n", ""),
    (dq(80, -9), DSI, "80n", ""),
    (dq(1080, -9), DSI, "1080n", ""),
    (dq(108, -8), DSI, "1080n", ""),
    (1080, DSI, "1080n", ""),  # decQuantity(10800, -10)
    (dq(1, -6), DSI, "1u", ""),
    (dq(80, -6), DSI, "80u", ""),
    (dq(1080, -6), DSI, "1080u", ""),
]


@pytest.mark.parametrize(("nanos", "fmt", "expect", "alternate"), STRING_VECTORS)
def test_canonical_vectors(nanos: int, fmt: Format, expect: str, alternate: str) -> None:
    q = Quantity(nanos, fmt)
    assert q.canonical() == expect
    assert str(q) == expect
    assert format_quantity(q) == expect
    assert Quantity.parse(expect) == q
    if alternate:
        assert Quantity.parse(alternate).canonical() == expect
    if nanos:
        assert Quantity(-nanos, fmt).canonical() == "-" + expect


# Go TestQuantityParseEmit, the Quantity doc comment, plus the examples from our design notes.
EMIT_VECTORS: list[tuple[str, str]] = [
    ("1Ki", "1Ki"),
    ("1Mi", "1Mi"),
    ("1Gi", "1Gi"),
    ("1024Mi", "1Gi"),
    ("1000M", "1G"),
    (".001Ki", "1024m"),
    (".000001Ki", "1024u"),
    (".000000001Ki", "1024n"),
    (".000000000001Ki", "2n"),
    ("1.5Gi", "1536Mi"),
    ("1.1Ki", "1126400m"),  # BinarySI that is not an integer prints as DecimalSI
    ("1536", "1536"),
    ("1500", "1500"),
    ("15000", "15k"),
    ("1.5", "1500m"),
    ("0.5Gi", "512Mi"),
    ("20498764Ki", "20498764Ki"),
    ("1e3", "1e3"),
    ("1.5e3", "1500"),
    ("12e-1", "1200e-3"),
    ("100m", "100m"),
    ("0.1", "100m"),
    ("1000m", "1"),
    ("1n", "1n"),
    ("1e-12", "1e-9"),  # rounded up to 1n, but the exponent format is remembered
    ("1E", "1E"),
    ("1E3", "1e3"),
    ("+1k", "1k"),
    ("0.000", "0"),
    ("-0", "0"),
    ("-0Ki", "0"),
    ("9Ei", "9223372036854775807"),
    ("8Ei", "9223372036854775807"),
    ("7Ei", "7Ei"),
    ("1024Ei", "9223372036854775807"),
]


@pytest.mark.parametrize(("text", "expect"), EMIT_VECTORS)
def test_parse_emit(text: str, expect: str) -> None:
    assert Quantity.parse(text).canonical() == expect
    negative = Quantity.parse("-" + text.lstrip("+-"))
    assert negative.canonical() == (expect if expect == "0" else "-" + expect)


INVALID_STRINGS = [
    "",
    "abc",
    "aoeu",
    "Non-Numeric",
    "1.1.1",
    "1.1.M",
    "1+1.0M",
    "1Mii",
    "1ki",
    "1K",
    "0.1mi",
    "0.1am",
    ".5i",
    "1i",
    "-3.01i",
    "-3.01e-",
    "1e",
    "1e+",
    "1E-",
    "1e1.5",  # allowed by the CRD pattern, rejected by Go
    "1e.5",  # idem
    "1e5.",  # idem
    "1e3e3",
    "--1",
    "+-1",
    "+",
    "-",
    ".",
    "-.",
    "e3",
    ".e3",
    "Ki",
    " 1",
    "1 ",
    "\t1",
    "1\n",  # Python's "$" would accept this
    "１",  # fullwidth digit: "\d" would accept this
    "١",  # Arabic-Indic digit
    "1_000",
    "0x10",
    "NaN",
    "Infinity",
    "1e99999999999999999999",  # Go's ParseInt fails
    "1e2147483648",  # Go would silently wrap this int32 exponent
    "1e-2147483649",  # idem (it would wrap to a huge positive exponent)
    "1e100",  # absurd magnitude guard
    "1" + "0" * 100,
    "1." + "1" * 1001,  # absurd precision guard
]


@pytest.mark.parametrize("text", INVALID_STRINGS)
def test_invalid_strings(text: str) -> None:
    with pytest.raises(QuantityError) as err:
        Quantity.parse(text, field="cpu")
    assert str(err.value).startswith(f"invalid quantity {text!r} for field cpu: ")


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, True, None, b"1", [1]])
def test_invalid_non_strings(value: object) -> None:
    with pytest.raises(QuantityError, match=rf"invalid quantity {re.escape(repr(value))} for field memory: "):
        Quantity.parse(value, field="memory")  # type: ignore[arg-type]


def test_error_is_value_error_and_field_is_optional() -> None:
    with pytest.raises(ValueError, match=r"^invalid quantity 'abc': "):
        parse_quantity("abc")


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_from_float_rejects_non_finite(value: float) -> None:
    with pytest.raises(QuantityError, match=re.escape(repr(value))):
        Quantity.from_float(value)


def test_magnitude_guard_boundaries() -> None:
    assert Quantity.parse("9" * 100).nanos == (10**100 - 1) * NANO
    assert Quantity.parse("1e99").nanos == 10**108
    assert Quantity.parse(10**100 - 1).nanos == (10**100 - 1) * NANO
    with pytest.raises(QuantityError):
        Quantity.parse(10**100)
    with pytest.raises(QuantityError):
        Quantity.parse(1e100)
    # tiny values are cheap and round up to 1n, as in Go
    assert Quantity.parse("1e-2000000000").nanos == 1
    assert Quantity.parse("-0." + "0" * 5000 + "1").nanos == -1
    assert Quantity.parse("0e99999999999").nanos == 0


# --- constructors (Go TestNewSet, TestMilliNewSet, TestNewScaledSet) ---------------------


@pytest.mark.parametrize(
    ("value", "fmt", "expect"),
    [
        (1, DSI, "1"),
        (1000, DSI, "1k"),
        (1234000, DSI, "1234k"),
        (1024, BSI, "1Ki"),
        (1000000, DEXP, "1e6"),
        (1024 * 1024, BSI, "1Mi"),
        (-1024, BSI, "-1Ki"),
        (0, BSI, "0"),
    ],
)
def test_from_int(value: int, fmt: Format, expect: str) -> None:
    q = Quantity.from_int(value, fmt)
    assert (q.canonical(), q.raw, q.to_wire()) == (expect, None, expect)
    assert Quantity.parse(q.canonical()).value() == value


def test_from_int_defaults_to_binary_si() -> None:
    assert Quantity.from_int(2048).canonical() == "2Ki"


@pytest.mark.parametrize(
    ("milli", "fmt", "expect"),
    [
        (1, DSI, "1m"),
        (1000, DSI, "1"),
        (1234000, DSI, "1234"),
        (1024, BSI, "1024m"),
        (1000000, DEXP, "1e3"),
        (1024 * 1024, BSI, "1048576m"),
        (1024 * 1000, BSI, "1Ki"),
        (1000 * 1000, BSI, "1k"),
        (2**20 * 1000, BSI, "1Mi"),
    ],
)
def test_from_milli(milli: int, fmt: Format, expect: str) -> None:
    q = Quantity.from_milli(milli, fmt)
    assert q.canonical() == expect
    assert Quantity.parse(q.canonical()).milli_value() == milli


@pytest.mark.parametrize(
    ("value", "nanos", "expect"),
    [
        (0.1, dq(1, -1), "100m"),
        (1.5, dq(15, -1), "1500m"),
        (1e-7, dq(1, -7), "100n"),
        (1e-12, 1, "1n"),
        (-2.5e-10, -1, "-1n"),
        (1e16, dq(1, 16), "10P"),
        (3.0, dq(3, 0), "3"),
        (-0.0, 0, "0"),
    ],
)
def test_from_float_and_parse_float(value: float, nanos: int, expect: str) -> None:
    q = Quantity.from_float(value)
    assert (q.nanos, q.format, q.canonical()) == (nanos, DSI, expect)
    parsed = Quantity.parse(value)
    assert (parsed.nanos, parsed.to_wire()) == (nanos, expect)  # no float raw: emitted canonically


def test_from_float_keeps_requested_format() -> None:
    assert Quantity.from_float(2048.0, BSI).canonical() == "2Ki"


def test_constructor_validation() -> None:
    assert Quantity(1, "BinarySI").format is BSI  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Quantity(1, "Bogus")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Quantity(True)
    with pytest.raises(TypeError):
        Quantity(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Quantity.from_milli(1.5)  # type: ignore[arg-type]


# --- accessors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value", "milli"),
    [
        ("1", 1, 1000),
        ("1n", 1, 1),
        ("1500m", 2, 1500),
        ("1.0001m", 1, 2),
        ("-1n", -1, -1),
        ("-1.5", -2, -1500),
        ("0", 0, 0),
        ("1Ki", 1024, 1024000),
        ("2.000000001", 3, 2001),
        ("9.01", 10, 9010),
    ],
)
def test_value_and_milli_value_round_away_from_zero(text: str, value: int, milli: int) -> None:
    q = Quantity.parse(text)
    assert (q.value(), q.milli_value()) == (value, milli)


def test_scalar_accessors() -> None:
    q = Quantity.parse("-1.5Gi")
    assert q.sign() == -1 and not q.is_zero()
    assert q.as_float() == -1.5 * 2**30
    assert Quantity.parse("0Mi").is_zero() and Quantity.parse("0").sign() == 0
    assert Quantity.parse("1n").sign() == 1
    assert Quantity.parse("100m").as_float() == 0.1
    assert repr(Quantity.parse("1.5")) == "Quantity('1500m')"


def test_to_wire_keeps_raw_and_falls_back_to_canonical() -> None:
    assert Quantity.parse("1024Mi").to_wire() == "1024Mi"
    assert Quantity.parse("1024Mi").canonical() == "1Gi"
    wire = Quantity.parse(1500).to_wire()
    assert wire == 1500 and isinstance(wire, int)
    assert Quantity(dq(15, 2)).to_wire() == "1500"


# --- value semantics and arithmetic (Go TestAdd, TestSub, *ZeroPreservesSuffix) -------------


def test_equality_and_hash_are_by_value() -> None:
    gi, mi = Quantity.parse("1Gi"), Quantity.parse("1024Mi")
    assert gi == mi and hash(gi) == hash(mi)
    assert Quantity.parse("1000m") == Quantity.parse("1") == Quantity.parse("1e0")
    assert len({gi, mi, Quantity.parse("1073741824")}) == 1
    assert Quantity.parse("1") != 1
    assert Quantity.parse("1") != "1"
    assert gi != Quantity.parse("1G")


def test_ordering() -> None:
    q = [Quantity.parse(s) for s in ("10000T", "100Gi", "50m", "100m", "-1", "0")]
    assert [x.canonical() for x in sorted(q)] == ["-1", "0", "50m", "100m", "100Gi", "10P"]
    a, b = Quantity.parse("100m"), Quantity.parse("50m")
    same = Quantity.parse("0.1")
    assert a > b and a >= b and b < a and b <= a
    assert a <= same and a >= same and not a < same and not a > same
    with pytest.raises(TypeError):
        _ = a < 1  # type: ignore[operator]


@pytest.mark.parametrize(
    ("a", "b", "add", "sub"),
    [
        (Quantity(dq(10, 0), DSI), Quantity(dq(1, 1), DSI), Quantity(dq(20, 0), DSI), Quantity(0, DSI)),
        (Quantity(dq(10, 0), DSI), Quantity(dq(1, 0), BSI), Quantity(dq(11, 0), DSI), Quantity(dq(9, 0), DSI)),
        (Quantity(dq(10, 0), BSI), Quantity(dq(1, 0), DSI), Quantity(dq(11, 0), BSI), Quantity(dq(9, 0), BSI)),
        (Quantity(0, DSI), Quantity(dq(50, 0), DSI), Quantity(dq(50, 0), DSI), Quantity(dq(-50, 0), DSI)),
        (Quantity(dq(50, 0), DSI), Quantity(0, DSI), Quantity(dq(50, 0), DSI), Quantity(dq(50, 0), DSI)),
    ],
)
def test_add_sub(a: Quantity, b: Quantity, add: Quantity, sub: Quantity) -> None:
    total, diff = a + b, a - b
    assert (total.nanos, total.format, total.raw) == (add.nanos, add.format, None)
    assert (diff.nanos, diff.format, diff.raw) == (sub.nanos, sub.format, None)


@pytest.mark.parametrize("text", ["100m", "1Gi", "3e3"])
def test_zero_operand_preserves_suffix(text: str) -> None:
    value, zero = Quantity.parse(text), Quantity.parse("0")
    assert (value + zero).canonical() == text
    assert (zero + value).canonical() == text
    assert (value - zero).canonical() == text
    assert (zero - value).canonical() == (-value).canonical() == "-" + text


def test_neg_keeps_format_and_drops_raw() -> None:
    q = -Quantity.parse("2Gi")
    assert (q.nanos, q.format, q.raw, q.canonical()) == (-2 * 2**30 * NANO, BSI, None, "-2Gi")
    assert (-q).canonical() == "2Gi"


def test_arithmetic_with_non_quantity_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        _ = Quantity.parse("1") + 1  # type: ignore[operator]


# --- hypothesis properties --------------------------------------------------------------------

_MAX_BINARY_NANOS = MAX_INT64 * NANO

nanos_values = st.one_of(
    st.integers(-(10**40), 10**40),
    st.builds(lambda m, k: m * 10**k, st.integers(-999, 999), st.integers(0, 40)),
    st.builds(lambda m, k: m * 1024**k * NANO, st.integers(-2048, 2048), st.integers(0, 6)),
)


@st.composite
def quantities(draw: st.DrawFn) -> Quantity:
    fmt = draw(st.sampled_from(list(Format)))
    nanos = draw(nanos_values)
    if fmt is BSI and abs(nanos) > _MAX_BINARY_NANOS:
        nanos %= _MAX_BINARY_NANOS  # Go caps larger BinarySI values on parse
    return Quantity(nanos, fmt)


_CANONICAL_RE = re.compile(r"(-?)([0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|e-?[0-9]+)?")


@settings(max_examples=400)
@given(quantities())
def test_canonical_is_a_fixed_point_of_parse(q: Quantity) -> None:
    text = q.canonical()
    assert re.fullmatch(QUANTITY_PATTERN, text)
    again = Quantity.parse(text)
    assert again == q
    if q.format is BSI and not text.endswith("i"):
        # BinarySI printed as a plain number re-parses as DecimalSI (as in Go), which
        # may pick a decimal suffix: one more step must then be stable.
        text = again.canonical()
        again = Quantity.parse(text)
        assert again == q
    assert again.canonical() == text


def test_binary_si_suffix_stops_at_ei() -> None:
    # Only reachable through arithmetic (parsing caps BinarySI at MaxInt64); Go has no
    # suffix past Ei either, so the mantissa keeps the rest.
    assert Quantity(2**70 * NANO, BSI).canonical() == "1024Ei"
    assert Quantity(-(2**80) * NANO, BSI).canonical() == "-1048576Ei"


def test_binary_si_plain_number_reparses_as_decimal_si() -> None:
    # Go: NewQuantity(5000, BinarySI).String() == "5000", ParseQuantity("5000").String() == "5k"
    q = Quantity.from_int(5000, BSI)
    assert q.canonical() == "5000"
    assert Quantity.parse(q.canonical()).canonical() == "5k"


@settings(max_examples=400)
@given(quantities())
def test_canonical_is_minimal(q: Quantity) -> None:
    # No fraction, no redundant zeros: the mantissa can't be moved into a larger suffix.
    if q.nanos == 0:
        assert q.canonical() == "0"
        return
    match = _CANONICAL_RE.fullmatch(q.canonical())
    assert match is not None
    sign, mantissa, suffix = match.group(1), int(match.group(2)), match.group(3) or ""
    assert (sign == "-") == (q.nanos < 0)
    assert mantissa != 0
    if suffix.endswith("i") or (q.format is BSI and suffix == "" and abs(q.nanos) >= 1024 * NANO):
        assert suffix == "Ei" or mantissa % 1024 != 0
    elif suffix != "E":
        assert mantissa % 1000 != 0


# Independent oracle for the wire grammar, built on fractions.
_ORACLE_DECIMAL = {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_ORACLE_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}

digits = st.text("0123456789", max_size=25)
suffixes = st.one_of(
    st.sampled_from(sorted(_ORACLE_DECIMAL) + sorted(_ORACLE_BINARY)),
    st.builds(
        lambda e, sign, n, pad: f"{e}{sign}{'0' * pad}{n}",
        st.sampled_from("eE"),
        st.sampled_from(["", "+", "-"]),
        st.integers(0, 40),
        st.integers(0, 2),
    ),
)


@st.composite
def wire_numbers(draw: st.DrawFn) -> str:
    """An unsigned <number> of the CRD grammar: 1, 1., 1.5 or .5."""
    integer = draw(digits.filter(bool))
    shape = draw(st.sampled_from(["int", "dot", "frac", "leading-dot"]))
    if shape == "int":
        return integer
    if shape == "dot":
        return integer + "."
    fraction = draw(digits.filter(bool))
    return f"{integer}.{fraction}" if shape == "frac" else f".{fraction}"


def oracle(unsigned: str, suffix: str) -> tuple[int, Format]:
    integer, _, fraction = unsigned.partition(".")
    value = Fraction(int(integer or "0")) + Fraction(int(fraction or "0"), 10 ** len(fraction))
    if suffix in _ORACLE_BINARY:
        value *= 2 ** _ORACLE_BINARY[suffix]
        fmt = BSI
    elif suffix in _ORACLE_DECIMAL:
        value *= Fraction(10) ** _ORACLE_DECIMAL[suffix]
        fmt = DSI
    else:
        value *= Fraction(10) ** int(suffix[1:])
        fmt = DEXP
    nanos = math.ceil(value * NANO)
    if fmt is BSI:
        nanos = min(nanos, _MAX_BINARY_NANOS)
        if 0 < nanos < NANO:
            fmt = DSI
    return nanos, fmt


@settings(max_examples=500)
@given(st.sampled_from(["", "+", "-"]), wire_numbers(), suffixes)
def test_wire_strings_match_oracle_and_round_trip(sign: str, unsigned: str, suffix: str) -> None:
    text = sign + unsigned + suffix
    assert re.fullmatch(QUANTITY_PATTERN, text)
    q = Quantity.parse(text)
    nanos, fmt = oracle(unsigned, suffix)
    assert q.nanos == (-nanos if sign == "-" else nanos)
    assert q.format == fmt
    assert q.raw == text and q.to_wire() == text
    assert Quantity.parse(q.canonical()) == q


@given(wire_numbers(), suffixes)
def test_negation_is_symmetric(unsigned: str, suffix: str) -> None:
    positive, negative = Quantity.parse(unsigned + suffix), Quantity.parse("-" + unsigned + suffix)
    assert negative == -positive and negative.format == positive.format
    expected = "0" if positive.is_zero() else "-" + positive.canonical()
    assert negative.canonical() == expected
    assert negative.sign() == -positive.sign()


@given(st.integers(0, 10**20), digits.filter(lambda d: d.strip("0") != ""), st.sampled_from(["", "-"]))
def test_sub_nano_digits_round_up_away_from_zero(whole: int, extra: str, sign: str) -> None:
    q = Quantity.parse(f"{sign}{whole}.{extra}n")
    assert q.nanos == (-(whole + 1) if sign else whole + 1)
    assert Quantity.parse(f"{sign}{whole}.{'0' * len(extra)}n").nanos == (-whole if sign else whole)


@given(st.integers(-(10**30), 10**30))
def test_int_input_is_exact_and_kept_raw(value: int) -> None:
    q = Quantity.parse(value)
    assert (q.nanos, q.format) == (value * NANO, DSI)
    assert q.to_wire() is value
    assert q.value() == value and q.milli_value() == value * 1000


@given(nanos_values)
def test_value_and_milli_value_are_ceilings_away_from_zero(nanos: int) -> None:
    q = Quantity(nanos)
    for got, unit in ((q.value(), NANO), (q.milli_value(), 10**6)):
        exact = Fraction(abs(nanos), unit)
        assert abs(got) == math.ceil(exact)
        assert got == 0 or (got > 0) == (nanos > 0)


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e90, max_value=1e90))
def test_from_float_is_ceiling_of_shortest_repr(value: float) -> None:
    exact = Fraction(repr(value)) * NANO
    expected = math.ceil(abs(exact))
    assert Quantity.from_float(value).nanos == (-expected if exact < 0 else expected)


@given(quantities(), quantities())
def test_add_sub_are_exact(a: Quantity, b: Quantity) -> None:
    assert (a + b).nanos == a.nanos + b.nanos
    assert ((a + b) - b) == a
    assert (a < b) == (a.nanos < b.nanos) and (a == b) == (a.nanos == b.nanos)


# --- pydantic -------------------------------------------------------------------------------


class Resources(BaseModel):
    cpu: Quantity
    limits: dict[str, NonNegativeQuantity] = {}


def test_pydantic_round_trip_is_lossless() -> None:
    data = {"cpu": "1.5", "limits": {"cpu": "1000m", "memory": "1024Mi", "pods": 110, "zero": "0"}}
    model = Resources.model_validate(data)
    assert model.cpu == Quantity.parse("1500m")
    assert model.limits["memory"] == Quantity.parse("1Gi")
    assert model.model_dump(mode="json") == data
    assert model.model_dump() == data


def test_pydantic_json_input_and_quantity_instances() -> None:
    model = Resources.model_validate_json('{"cpu": 2, "limits": {"memory": "2Gi", "gpu": 0.5}}')
    assert model.model_dump(mode="json") == {"cpu": 2, "limits": {"memory": "2Gi", "gpu": "500m"}}
    model = Resources(cpu=Quantity.from_milli(250), limits={"memory": Quantity.from_int(2**20)})
    assert model.model_dump_json() == '{"cpu":"250m","limits":{"memory":"1Mi"}}'


@pytest.mark.parametrize(
    ("data", "needles"),
    [
        ({"cpu": "abc"}, ["cpu", "'abc'", "invalid quantity"]),
        ({"cpu": "1", "limits": {"memory": "1Mii"}}, ["limits.memory", "'1Mii'"]),
        ({"cpu": "1", "limits": {"memory": "-1"}}, ["limits.memory", "negative quantity '-1' is not a valid usage"]),
        ({"cpu": "1", "limits": {"memory": -1}}, ["limits.memory", "negative quantity '-1' is not a valid usage"]),
        ({"cpu": None}, ["cpu", "None"]),
    ],
)
def test_pydantic_errors_name_field_and_value(data: dict[str, object], needles: list[str]) -> None:
    with pytest.raises(ValidationError) as err:
        Resources.model_validate(data)
    for needle in needles:
        assert needle in str(err.value)


def test_pydantic_json_schema() -> None:
    schema = Resources.model_json_schema()
    cpu = schema["properties"]["cpu"]
    assert cpu["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    assert cpu["pattern"] == QUANTITY_PATTERN
    assert cpu["x-kubernetes-int-or-string"] is True
    assert schema["properties"]["limits"]["additionalProperties"]["pattern"] == QUANTITY_PATTERN


# --- the range rule for numbers from the wire ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("resource", "text", "units"),
    [
        ("cpu", "9007199254740992m", 2**53),  # the edge itself is representable
        ("cpu", "9007199254740.992", 2**53),
        ("memory", "8Pi", 2**53),
        ("memory", "9007199254740992", 2**53),
        ("cpu", "-9007199254740992m", -(2**53)),
        ("batch-cpu", "1000", 1000),
    ],
)
def test_consumer_units_within_the_range(resource: str, text: str, units: int) -> None:
    assert consumer_units(resource, Quantity.parse(text)) == units


@pytest.mark.parametrize(
    ("resource", "text"),
    [
        ("cpu", "1e16"),  # overflowed numpy's int64 (OverflowError in the scheduler)
        ("cpu", "9223372036854775807m"),  # int64 max: wrapped when usage and estimates were summed
        ("memory", "8Ei"),  # wrapped too
        ("cpu", "9007199254740993m"),
        ("memory", "9007199254740993"),
        ("memory", "1e99"),
        ("cpu", "-1e16"),
    ],
)
def test_consumer_units_beyond_the_range_is_an_error_naming_the_value(resource: str, text: str) -> None:
    with pytest.raises(QuantityError, match=f"{re.escape(text)}.*out of range"):
        consumer_units(resource, Quantity.parse(text))


def test_resource_lists_from_the_wire_apply_the_range_rule_per_resource() -> None:
    class Usage(BaseModel):
        resources: ResourceList

    assert Usage.model_validate({"resources": {"memory": "8Pi"}}).resources["memory"] == Quantity.parse("8Pi")
    with pytest.raises(ValidationError, match="out of range"):
        Usage.model_validate({"resources": {"cpu": "8Pi"}})  # 8Pi cores are 2^63 milli-cores
    with pytest.raises(ValidationError, match="negative"):
        Usage.model_validate({"resources": {"cpu": "-1"}})
