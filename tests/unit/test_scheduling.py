"""The shared scheduling semantics (common/api/scheduling.py): one set of tests for the scheduler's
plugins and the descheduler's nodeFit. kube-scheduler's behaviour on the same cases is checked
against the real binary in tests/integration/test_scheduling_semantics.py."""

from __future__ import annotations

import pytest

from common.api.malformed import MalformedObjectError
from common.api.scheduling import (
    Requirement,
    SelectorTerm,
    Taint,
    Toleration,
    first_untolerated,
    node_matches,
    parse_node_affinity,
    parse_tolerations,
)

NO_SCHEDULE = Taint("dedicated", "gpu", "NoSchedule")
NO_EXECUTE = Taint("maintenance", "", "NoExecute")
PREFER = Taint("soft", "x", "PreferNoSchedule")


@pytest.mark.parametrize(("toleration", "taint", "expected"), [
    (Toleration(operator="Exists"), NO_SCHEDULE, True),  # empty key + Exists: every taint
    (Toleration(operator="Exists"), NO_EXECUTE, True),
    (Toleration(operator="Exists", effect="NoExecute"), NO_SCHEDULE, False),  # ... of that effect only
    (Toleration("dedicated", "Exists"), NO_SCHEDULE, True),  # Exists ignores the value
    (Toleration("dedicated", "Equal", "gpu"), NO_SCHEDULE, True),  # empty effect: every effect
    (Toleration("dedicated", "Equal", "cpu"), NO_SCHEDULE, False),
    (Toleration("dedicated", "Equal", "gpu", "NoExecute"), NO_SCHEDULE, False),
    (Toleration("other", "Exists"), NO_SCHEDULE, False),
    (Toleration("maintenance", "Equal"), NO_EXECUTE, True),  # Equal with no value matches an empty value
])
def test_toleration_matches_as_v1_toleration_tolerates_taint(
    toleration: Toleration, taint: Taint, expected: bool
) -> None:
    assert toleration.tolerates(taint) is expected


def test_parsed_tolerations_default_the_operator_to_equal_and_refuse_unknown_ones() -> None:
    assert parse_tolerations([{"operator": "Exists"}, {"key": "k", "value": "v"}]) == (
        Toleration("", "Exists", "", ""), Toleration("k", "Equal", "v", ""),
    )
    with pytest.raises(MalformedObjectError, match=r"spec\.tolerations\[0\]\.operator"):
        parse_tolerations([{"key": "k", "operator": "Maybe"}])


def test_required_affinity_absent_is_none_and_parsed_gt_carries_its_number() -> None:
    assert parse_node_affinity(None)[0] is None
    required, _ = parse_node_affinity({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["8"]}]}]}}})
    assert required == (SelectorTerm((Requirement("cores", "Gt", ("8",), 8),)),)
    assert node_matches("n", {"cores": "16"}, {}, required) and not node_matches("n", {"cores": "4"}, {}, required)
    assert not node_matches("n", {}, {}, ())  # a required affinity without terms matches no node


def test_node_affinity_terms_are_ored_and_requirements_anded() -> None:
    labels = {"zone": "a", "cores": "16"}
    term_zone_b = SelectorTerm(match_expressions=(Requirement("zone", "In", ("b",)),))
    term_big = SelectorTerm(
        match_expressions=(
            Requirement("cores", "Gt", ("8",)),
            Requirement("gpu", "DoesNotExist"),
        )
    )
    by_name = SelectorTerm(match_fields=(Requirement("metadata.name", "In", ("n1",)),))
    assert node_matches("n1", labels, {}, (term_zone_b, term_big))
    assert not node_matches("n1", labels, {}, (term_zone_b,))
    assert not node_matches("n1", labels, {"zone": "b"}, ())
    assert node_matches("n1", labels, {}, (by_name,))
    assert not node_matches("n2", labels, {}, (by_name,))
    assert not node_matches("n1", labels, {}, (SelectorTerm(),))  # empty term: nothing
    lt_garbage = SelectorTerm(match_expressions=(Requirement("zone", "Lt", ("3",)),))
    assert not node_matches("n1", labels, {}, (lt_garbage,))


def test_taints_need_tolerations_except_prefer_no_schedule() -> None:
    taints = (Taint("dedicated", "gpu", "NoSchedule"), Taint("soft", "", "PreferNoSchedule"))
    assert first_untolerated(taints, ()) is not None
    assert first_untolerated(taints, (Toleration("dedicated", "Equal", "gpu"),)) is None
    assert first_untolerated(taints, (Toleration("dedicated", "Equal", "cpu"),)) is not None
    assert first_untolerated(taints, (Toleration(operator="Exists"),)) is None  # tolerates everything
    assert first_untolerated(taints, (Toleration("dedicated", "Exists", effect="NoExecute"),)) is not None
    assert first_untolerated((Taint("soft", "", "PreferNoSchedule"),), ()) is None
