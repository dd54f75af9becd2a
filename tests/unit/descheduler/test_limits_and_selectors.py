from __future__ import annotations

import pytest

from scheduler_plugin.descheduler.limits import max_unavailable
from scheduler_plugin.descheduler.podfilter import SKIP_SELECTOR, PodFilter
from tests.unit.descheduler.builders import make_args, rs_pod


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


def test_pod_selectors_are_ored_and_none_selects_every_pod() -> None:
    # The selectors' own semantics are pinned in tests/unit/test_scheduling.py; here the descheduler's
    # use: any podSelector lets a pod through, and no selector at all lets every pod through.
    exists = {"matchExpressions": [{"key": "x", "operator": "Exists"}]}
    any_of = PodFilter.from_args(make_args(podSelectors=[{"name": "x", "selector": exists}, {"name": "none"}]))
    assert any_of.blocker(rs_pod("a", "n", labels={"x": ""})) is None
    assert any_of.blocker(rs_pod("b", "n")) == SKIP_SELECTOR
    assert PodFilter.from_args(make_args()).blocker(rs_pod("c", "n", labels={"anything": "goes"})) is None
