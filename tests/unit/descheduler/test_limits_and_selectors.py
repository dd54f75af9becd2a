from __future__ import annotations

import pytest

from scheduler_plugin.descheduler.args import LabelSelector
from scheduler_plugin.descheduler.limits import max_unavailable
from scheduler_plugin.descheduler.selectors import compile_any_of, compile_label_selector


@pytest.mark.parametrize(
    ("replicas", "configured", "expected"),
    [
        (1, None, 1),
        (3, None, 1),
        (4, None, 2),
        (10, None, 2),
        (11, None, 1),  # 10 % of 11, rounded down
        (50, None, 5),
        (50, 3, 3),
        (50, "20%", 10),
        (3, "10%", 1),  # rounds to 0 -> 1
    ],
)
def test_max_unavailable_per_workload(replicas: int, configured: int | str | None, expected: int) -> None:
    assert max_unavailable(replicas, configured) == expected


def test_label_selector_matching() -> None:
    sel = LabelSelector.model_validate(
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "legacy", "operator": "DoesNotExist"},
            ],
        }
    )
    match = compile_label_selector(sel)
    assert match({"app": "web", "tier": "a"})
    assert not match({"app": "web", "tier": "c"})
    assert not match({"app": "web", "tier": "a", "legacy": "1"})
    assert not match({"tier": "a"})
    assert compile_label_selector(None)({})
    notin = compile_label_selector(
        LabelSelector.model_validate({"matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["1"]}]})
    )
    assert notin({}) and notin({"x": "2"}) and not notin({"x": "1"})
    exists = compile_any_of(
        [LabelSelector.model_validate({"matchExpressions": [{"key": "x", "operator": "Exists"}]}), None]
    )
    assert exists({"x": ""}) and not exists({})
    assert compile_any_of([])({"anything": "goes"})
