"""The shared scheduling semantics (common/api/scheduling.py): one set of tests for the scheduler's
plugins, the descheduler's nodeFit and filters, and the manager's NodeSLO profiles. kube-scheduler's behaviour on the same cases is checked
against the real binary in tests/integration/test_scheduling_semantics.py."""

from __future__ import annotations

from typing import Any

import pytest

from common.api.malformed import MalformedObjectError
from common.api.scheduling import (
    LabelSelector,
    Requirement,
    SelectorTerm,
    Taint,
    Toleration,
    first_untolerated,
    node_matches,
    parse_label_selector,
    parse_node_affinity,
    parse_tolerations,
)
from manager.nodeslo import schema as nodeslo_schema
from scheduler_plugin.descheduler import args as descheduler_args

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


@pytest.mark.parametrize(
    ("doc", "labels", "matches"),
    [
        ({}, {}, True),  # empty selector: everything
        ({"matchLabels": {"pool": "a"}}, {"pool": "a", "x": "y"}, True),
        ({"matchLabels": {"pool": "a"}}, {"pool": "b"}, False),
        ({"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a", "b"]}]}, {"pool": "b"}, True),
        ({"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}, {}, False),
        ({"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["a"]}]}, {}, True),
        ({"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["a"]}]}, {"pool": "a"}, False),
        ({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, {"gpu": ""}, True),
        ({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}, {"gpu": "1"}, False),
        (
            {"matchLabels": {"pool": "a"}, "matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
            {"pool": "a"},
            False,
        ),
        (
            {
                "matchLabels": {"app": "web"},
                "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["a", "b"]},
                    {"key": "legacy", "operator": "DoesNotExist"},
                ],
            },
            {"app": "web", "tier": "a"},
            True,
        ),
        ({"matchLabels": {"app": "web"}}, {"tier": "a"}, False),
    ],
)
def test_label_selector(doc: dict[str, Any], labels: dict[str, str], matches: bool) -> None:
    selector = parse_label_selector(doc, "selector")
    assert selector.matches(labels) is matches
    # The manager's and the descheduler's config schemas compile to this same selector.
    assert nodeslo_schema.LabelSelector.model_validate(doc).compile() == selector
    assert descheduler_args.LabelSelector.model_validate(doc).compile() == selector


def test_label_selector_parse_refuses_node_selector_operators_and_names_the_field() -> None:
    assert parse_label_selector(None, "s") == LabelSelector()
    with pytest.raises(MalformedObjectError, match=r"s\.matchExpressions\[0\]\.operator: unknown operator 'Gt'"):
        parse_label_selector({"matchExpressions": [{"key": "n", "operator": "Gt", "values": ["1"]}]}, "s")
    with pytest.raises(MalformedObjectError, match=r"s\.matchLabels\.app: expected a string"):
        parse_label_selector({"matchLabels": {"app": 1}}, "s")


# --------------------------------------------------------------------------- pod affinity, topology spread
def test_pod_affinity_terms_take_kube_schedulers_namespaces() -> None:
    """newAffinityTerm: neither namespaces nor a namespaceSelector means the pod's own namespace; an empty
    namespaceSelector selects every namespace; an absent labelSelector matches no pod."""
    from common.api.scheduling import parse_pod_affinity

    sel = {"matchLabels": {"app": "a"}}
    parsed = parse_pod_affinity({
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": sel, "topologyKey": "zone"},
            {"labelSelector": sel, "topologyKey": "zone", "namespaces": ["x"]},
            {"labelSelector": sel, "topologyKey": "zone", "namespaceSelector": {}},
            {"topologyKey": "zone", "namespaces": ["x"]},
        ]},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 7, "podAffinityTerm": {"labelSelector": sel, "topologyKey": "host",
                                              "namespaceSelector": {"matchLabels": {"team": "t"}}}}]},
    }, "mine")
    assert parsed is not None and parsed.term_count == 5
    own, listed, everywhere, nothing = parsed.required_affinity
    assert own.namespaces == frozenset({"mine"}) and own.matches("mine", {"app": "a"}, {})
    assert not own.matches("other", {"app": "a"}, {})
    assert listed.namespaces == frozenset({"x"}) and not listed.matches("mine", {"app": "a"}, {})
    assert everywhere.namespaces == frozenset() and everywhere.matches("any", {"app": "a"}, {})
    assert not nothing.matches("x", {"app": "a"}, {})
    (weighted,) = parsed.preferred_anti_affinity
    assert weighted.weight == 7 and weighted.term.matches("elsewhere", {"app": "a"}, {"team": "t"})
    assert not weighted.term.matches("elsewhere", {"app": "a"}, {"team": "u"})
    assert parse_pod_affinity({"nodeAffinity": {}}, "mine") is None
    assert parse_pod_affinity(None, "mine") is None


@pytest.mark.parametrize(("raw", "field"), [
    ({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]}}, "topologyKey"),
    ({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 0, "podAffinityTerm": {"topologyKey": "z"}}]}}, "weight"),
    ({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "z", "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}}]}},
     "operator"),
])
def test_malformed_pod_affinity_names_the_field(raw: dict[str, Any], field: str) -> None:
    from common.api.scheduling import parse_pod_affinity

    with pytest.raises(MalformedObjectError, match=field):
        parse_pod_affinity(raw, "ns")


def test_topology_spread_constraints_defaults_and_errors() -> None:
    from common.api.scheduling import parse_topology_spread_constraints

    (c,) = parse_topology_spread_constraints([{"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                                               "labelSelector": {"matchLabels": {"a": "b"}},
                                               "matchLabelKeys": ["pod-template-hash"]}])
    assert (c.max_skew, c.min_domains, c.node_affinity_policy, c.node_taints_policy) == (2, None, "Honor", "Ignore")
    assert c.match_label_keys == ("pod-template-hash",) and c.selector is not None
    (nil,) = parse_topology_spread_constraints([{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "ScheduleAnyway",
                                                 "nodeTaintsPolicy": "Honor", "minDomains": 3}])
    assert nil.selector is None and nil.node_taints_policy == "Honor" and nil.min_domains == 3
    for bad, field in (({"maxSkew": 0}, "maxSkew"), ({"whenUnsatisfiable": "Maybe"}, "whenUnsatisfiable"),
                       ({"nodeAffinityPolicy": "Sometimes"}, "nodeAffinityPolicy"), ({"minDomains": 0}, "minDomains"),
                       ({"topologyKey": ""}, "topologyKey")):
        raw = {"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule", **bad}
        with pytest.raises(MalformedObjectError, match=field):
            parse_topology_spread_constraints([raw])
