"""The malformed-object counter: one count per object version, and series at 0 from start."""

from __future__ import annotations

from prometheus_client import REGISTRY

from common.api.malformed import MalformedObjectError, MalformedReason
from common.kube.malformed import MalformedObjects

NAME = "loadline_malformed_objects_total"


def count(kind: str, reason: str) -> float | None:
    return REGISTRY.get_sample_value(NAME, {"kind": kind, "reason": reason})


def test_the_kinds_a_component_reads_are_counted_at_zero_from_start() -> None:
    assert count("UnitTestKindA", "out_of_range") is None
    MalformedObjects(("UnitTestKindA",))
    for reason in MalformedReason:
        assert count("UnitTestKindA", reason.value) == 0.0, reason


def test_each_version_is_counted_once_and_a_readable_object_clears() -> None:
    malformed = MalformedObjects(("UnitTestKindB",))
    error = MalformedObjectError("beyond ±2^53", kind="UnitTestKindB", name="n1", reason=MalformedReason.OUT_OF_RANGE)
    obj = {"metadata": {"name": "n1", "resourceVersion": "7"}}
    malformed.report("UnitTestKindB", "n1", obj, error)
    malformed.report("UnitTestKindB", "n1", obj, error)  # a re-list delivers the same version again
    assert count("UnitTestKindB", "out_of_range") == 1.0
    assert malformed.current() == [("UnitTestKindB", "n1")]
    malformed.report("UnitTestKindB", "n1", {"metadata": {"resourceVersion": "8"}}, error)
    assert count("UnitTestKindB", "out_of_range") == 2.0
    malformed.clear("UnitTestKindB", "n1")
    assert malformed.current() == []
