"""The extender's wire format: ExtenderArgs parsing (Go field names), answers, 0–100 → 0–10 scaling."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from scheduler_plugin.extender.wire import (
    BadRequest,
    filter_result,
    host_priority_list,
    parse_args,
    scale_scores,
    to_extender_score,
)

POD = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": []}}


def body(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def test_cache_capable_request_as_kube_scheduler_sends_it() -> None:
    # ExtenderArgs marshalled by Go: every field present, the unused one null.
    args = parse_args(body(Pod=POD, Nodes=None, NodeNames=["a", "b", "a"]))
    assert args.cache_mode
    assert args.pod == POD
    assert args.nodes is None
    assert args.node_names == ("a", "b", "a")
    assert args.candidate_names() == ["a", "b"]


def test_full_node_request() -> None:
    nodes = [{"metadata": {"name": "a", "resourceVersion": "7"}}, {"metadata": {"name": "b"}}]
    args = parse_args(body(Pod=POD, Nodes={"metadata": {}, "items": nodes}, NodeNames=None))
    assert not args.cache_mode
    assert args.nodes == tuple(nodes)
    assert args.candidate_names() == ["a", "b"]


def test_go_nil_items_means_no_nodes() -> None:
    args = parse_args(body(Pod=POD, Nodes={"metadata": {}, "items": None}, NodeNames=None))
    assert args.nodes == ()
    assert args.candidate_names() == []


def test_keys_match_case_insensitively_like_go() -> None:
    args = parse_args(body(pod=POD, nodeNames=["a"]))
    assert args.node_names == ("a",)
    assert args.pod == POD


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "body is not JSON"),
        (b"{not json", "body is not JSON"),
        (b"\xff\xfe", "body is not JSON"),
        (b"[1, 2]", "body: expected a JSON object (ExtenderArgs), got a list"),
        (b'"Pod"', "body: expected a JSON object (ExtenderArgs), got a string"),
        (body(NodeNames=["a"]), "Pod: required"),
        (body(Pod=None, NodeNames=["a"]), "Pod: required"),
        (body(Pod=[1], NodeNames=["a"]), "Pod: expected an object, got a list"),
        (body(Pod=POD), "Nodes or NodeNames: one is required"),
        (body(Pod=POD, Nodes=None, NodeNames=None), "Nodes or NodeNames: one is required"),
        (body(Pod=POD, Nodes=[{"metadata": {"name": "a"}}]), "Nodes: expected a NodeList object, got a list"),
        (body(Pod=POD, Nodes={"items": {"a": 1}}), "Nodes.items: expected a list, got an object"),
        (body(Pod=POD, Nodes={"items": [{"metadata": {"name": "a"}}, 3]}), "Nodes.items[1]: expected a Node object"),
        (body(Pod=POD, Nodes={"items": [{"metadata": {}}]}), "Nodes.items[0].metadata.name: required"),
        (body(Pod=POD, NodeNames="a"), "NodeNames: expected a list of strings, got a string"),
        (body(Pod=POD, NodeNames=["a", 7]), "NodeNames[1]: expected a non-empty string, got 7"),
        (body(Pod=POD, NodeNames=[""]), "NodeNames[0]: expected a non-empty string"),
        (body(Pod=POD, Nodes={"items": []}, NodeNames=["a"]), "Nodes and NodeNames: only one may be set"),
        (b"[" * 100_000 + b"]" * 100_000, "body"),
    ],
)
def test_malformed_bodies_name_the_problem(raw: bytes, reason: str) -> None:
    with pytest.raises(BadRequest) as excinfo:
        parse_args(raw)
    assert str(excinfo.value).startswith(reason)


def test_filter_result_cache_mode_uses_go_field_names() -> None:
    result = filter_result(passed=["a"], failed={"b": "x"}, unresolvable={"c": "y"}, cache_mode=True)
    assert result == {
        "Nodes": None,
        "NodeNames": ["a"],
        "FailedNodes": {"b": "x"},
        "FailedAndUnresolvableNodes": {"c": "y"},
        "Error": "",
    }


def test_filter_result_full_node_mode_echoes_the_node_objects() -> None:
    node_a = {"metadata": {"name": "a", "labels": {"k": "v"}}, "status": {}}
    node_b = {"metadata": {"name": "b"}}
    result = filter_result(passed=["a"], failed={"b": "hot"}, unresolvable={}, cache_mode=False,
                           nodes_by_name={"a": node_a, "b": node_b})
    assert result["Nodes"] == {"metadata": {}, "items": [node_a]}
    assert result["NodeNames"] == ["a"]
    assert result["FailedNodes"] == {"b": "hot"}


def test_filter_error_result() -> None:
    result = filter_result(passed=[], failed={}, unresolvable={}, cache_mode=False, error="boom")
    assert result == {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {},
                      "Error": "boom"}


def test_host_priority_list_is_a_bare_array() -> None:
    assert host_priority_list({"a": 7, "b": 0}) == [{"Host": "a", "Score": 7}, {"Host": "b", "Score": 0}]


@pytest.mark.parametrize(
    ("total", "max_total", "expected"),
    [
        (0, 100, 0),
        (100, 100, 10),
        (99, 100, 9),  # integer division: only the maximum gets 10
        (95, 100, 9),
        (45, 100, 4),
        (75, 100, 7),
        (59, 100, 5),
        (10, 100, 1),
        (9, 100, 0),
        (150, 300, 5),  # two plugins, weights 1 + 2: out of 300
        (237, 300, 7),
        (300, 300, 10),
        (400, 300, 10),  # clamped
        (-5, 100, 0),
        (50, 0, 0),  # no score plugin ran
    ],
)
def test_scores_scale_from_0_100_to_0_10(total: int, max_total: int, expected: int) -> None:
    assert to_extender_score(total, max_total) == expected


def test_absolute_scaling_divides_by_the_maximum_possible_total() -> None:
    totals = np.asarray([59, 75, 0, 100], dtype=np.int64)
    assert scale_scores(totals, 100, "absolute") == [5, 7, 0, 10]


def test_relative_scaling_spans_0_10_over_the_requested_nodes() -> None:
    # lowest 40 → 0, highest 75 → 10, 59 → (59 − 40)·10/35 = 5.4 → 5, 74 → 9.7 → 9
    totals = np.asarray([59, 75, 40, 74], dtype=np.int64)
    assert scale_scores(totals, 100, "relative") == [5, 10, 0, 9]
    # weighted totals out of 300 scale the same way
    assert scale_scores(totals * 3, 300, "relative") == [5, 10, 0, 9]


def test_relative_scaling_without_differences_falls_back_to_absolute() -> None:
    assert scale_scores(np.asarray([62, 62], dtype=np.int64), 100, "relative") == [6, 6]
    assert scale_scores(np.asarray([], dtype=np.int64), 100, "relative") == []
