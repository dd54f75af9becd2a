"""Degrade (stale NodeMetric, disabled colocation) and the Node status update throttle (koordinator pkg/slo-controller/noderesource)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from common.api.nodemetric_digest import NodeMetricDigest, digest_node_metric
from manager.noderesource.formulas import batch_outcome, decide_node_update, degrade_verdict, is_quantity_diff
from manager.noderesource.model import BatchStrategy, BatchVerdict, NodeCapacity, ResourcePair
from tests.objects import MakeNodeMetric

CPU, MEM = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"
T0 = datetime(2026, 7, 24, 6, 0, 0, tzinfo=UTC)
NODE = NodeCapacity(ResourcePair(10_000, 20_000), ResourcePair(10_000, 20_000))
ENABLED = BatchStrategy(enable=True)


def fresh(update_time: datetime | None) -> NodeMetricDigest:
    """A NodeMetric with a status (no usage) written at `update_time`; None: no updateTime."""
    return digest_node_metric(MakeNodeMetric("n1").system().updated(update_time).valid())


def test_missing_or_never_updated_metric_degrades() -> None:
    assert degrade_verdict(None, T0, 15) is BatchVerdict.NODE_METRIC_MISSING
    assert degrade_verdict(fresh(None), T0, 15) is BatchVerdict.NODE_METRIC_NEVER_UPDATED


def test_metric_expires_strictly_after_degrade_time() -> None:
    metric = fresh(T0)
    assert degrade_verdict(metric, T0 + timedelta(minutes=15), 15) is None
    assert degrade_verdict(metric, T0 + timedelta(minutes=15, seconds=1), 15) is BatchVerdict.NODE_METRIC_EXPIRED
    assert degrade_verdict(metric, T0 + timedelta(minutes=6), 5) is BatchVerdict.NODE_METRIC_EXPIRED

    # a report from the future (beyond MAX_CLOCK_SKEW_SECONDS) would never go stale: it degrades at once
    assert degrade_verdict(fresh(T0 + timedelta(days=365)), T0, 15) is BatchVerdict.NODE_METRIC_EXPIRED
    assert degrade_verdict(fresh(T0 + timedelta(seconds=59)), T0, 15) is None


def test_outcome_removes_resources_when_stale_or_disabled() -> None:
    stale = batch_outcome(NODE, [], fresh(T0), ENABLED, T0 + timedelta(minutes=16))
    assert stale.removes and stale.verdict is BatchVerdict.NODE_METRIC_EXPIRED
    missing = batch_outcome(NODE, [], None, ENABLED, T0)
    assert missing.removes and missing.verdict is BatchVerdict.NODE_METRIC_MISSING
    disabled = batch_outcome(NODE, [], fresh(T0), BatchStrategy(enable=False), T0)
    assert disabled.removes and disabled.verdict is BatchVerdict.COLOCATION_DISABLED


def test_outcome_calculates_when_fresh() -> None:
    outcome = batch_outcome(NODE, [], fresh(T0), ENABLED, T0 + timedelta(minutes=1))
    assert outcome.verdict is BatchVerdict.CALCULATED
    # 10000 - 40 % ; 20000 - 35 % (no usage, no reservation)
    assert outcome.resources is not None
    assert (outcome.resources.cpu_milli, outcome.resources.memory_bytes) == (6_000, 13_000)


def decide(
    current: dict[str, int],
    desired: dict[str, int],
    last_written_at: datetime | None = T0,
    now: datetime = T0 + timedelta(seconds=100),
) -> bool:
    return decide_node_update(
        current=current,
        desired=desired,
        diff_threshold=0.1,
        last_written_at=last_written_at,
        now=now,
        update_time_threshold_seconds=300,
    ).write


def test_presence_change_always_writes() -> None:
    assert decide({}, {CPU: 1_000, MEM: 10})
    assert decide({CPU: 1_000, MEM: 10}, {})
    assert decide({CPU: 1_000, MEM: 10}, {CPU: 1_000})


@pytest.mark.parametrize(
    ("new_cpu", "writes"),
    [(11_000, False), (11_001, True), (9_000, False), (8_999, True), (10_500, False)],
)
def test_relative_change_must_exceed_threshold(new_cpu: int, writes: bool) -> None:
    # old 10000, threshold 10 %: exactly ±1000 is not "more than"
    assert decide({CPU: 10_000, MEM: 100}, {CPU: new_cpu, MEM: 100}) is writes


def test_any_change_from_zero_counts() -> None:
    assert is_quantity_diff(0, 1, 0.1)
    assert not is_quantity_diff(0, 0, 0.1)


def test_small_change_is_written_after_update_time_threshold() -> None:
    current, desired = {CPU: 10_000, MEM: 100}, {CPU: 10_500, MEM: 100}
    assert not decide(current, desired, now=T0 + timedelta(seconds=300))
    assert decide(current, desired, now=T0 + timedelta(seconds=301))
    assert decide(current, desired, last_written_at=None)  # unknown after a restart


def test_identical_values_are_never_rewritten() -> None:
    same = {CPU: 10_000, MEM: 100}
    assert not decide(same, dict(same), last_written_at=None)
    assert not decide({}, {}, last_written_at=None)


def test_other_resources_in_status_are_ignored() -> None:
    assert not decide({CPU: 10_000, MEM: 100, "cpu": 8}, {CPU: 10_000, MEM: 100})
