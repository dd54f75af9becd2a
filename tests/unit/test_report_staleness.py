"""The one rule for "the report is too old" (`common/api/nodemetric_digest.report_staleness`), as the
scheduler, descheduler and manager read it, and the one time parser/formatter."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import pytest

from common.api.malformed import MalformedObjectError, MalformedReason
from common.api.nodemetric import MAX_CLOCK_SKEW_SECONDS
from common.api.nodemetric_digest import Staleness, digest_node_metric, report_staleness, stale_reports
from common.api.wire import format_time, parse_time

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("update_time", "at_limit", "past_limit", "expected"),
    [
        (None, True, True, Staleness.NEVER_UPDATED),
        (math.nan, True, True, Staleness.NEVER_UPDATED),
        (-math.inf, True, True, Staleness.NEVER_UPDATED),
        (NOW - 179, True, False, None),
        (NOW - 180, True, False, Staleness.TOO_OLD),  # Koordinator's LoadAware: age ≥ expiration
        (NOW - 181, True, True, Staleness.TOO_OLD),
        (NOW + MAX_CLOCK_SKEW_SECONDS, True, True, None),  # within the clock skew
        (NOW + MAX_CLOCK_SKEW_SECONDS + 1, True, True, Staleness.FROM_THE_FUTURE),
    ],
)
def test_report_staleness(update_time: float | None, at_limit: bool, past_limit: bool, expected: Staleness) -> None:
    assert report_staleness(update_time, NOW, 180) is expected
    # the slo-controller degrades only after the limit (now.After(updateTime + degradeTime))
    lenient = report_staleness(update_time, NOW, 180, stale_at_limit=False)
    if expected is Staleness.TOO_OLD:
        assert lenient is (Staleness.TOO_OLD if past_limit else None)
    else:
        assert lenient is expected


def test_stale_reports_agrees_with_the_rule() -> None:
    times = [math.nan, -math.inf, *(NOW + d for d in np.arange(-400.0, 120.0, 0.5))]
    mask = stale_reports(np.array(times), NOW, 180)
    assert mask.tolist() == [report_staleness(t, NOW, 180) is not None for t in times]
    assert mask.any() and not mask.all()


def test_parse_time_names_the_field() -> None:
    assert parse_time(None, "metadata.creationTimestamp") is None
    assert parse_time("", "metadata.creationTimestamp") is None
    assert parse_time("2026-07-24T06:52:45Z", "f") == datetime(2026, 7, 24, 6, 52, 45, tzinfo=UTC).timestamp()
    for bad in ("yesterday", 12):
        with pytest.raises(MalformedObjectError) as caught:
            parse_time(bad, "status.startTime")
        assert caught.value.field == "status.startTime" and caught.value.reason is MalformedReason.INVALID_TIME


def test_format_time() -> None:
    when = datetime(2026, 7, 24, 6, 52, 45, 123456, tzinfo=UTC)
    assert format_time(when) == "2026-07-24T06:52:45Z"
    assert format_time(when, micro=True) == "2026-07-24T06:52:45.123456Z"
    assert format_time(when.timestamp()) == "2026-07-24T06:52:45Z"  # epoch seconds
    assert format_time(when.replace(tzinfo=None)) == "2026-07-24T06:52:45Z"  # naive is UTC
    # the calendar's ends: a four-digit year, and offsets that would cross them clamped rather than raising
    assert format_time(datetime(1, 1, 1, tzinfo=UTC)) == "0001-01-01T00:00:00Z"
    assert format_time(datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))) == "0001-01-01T00:00:00Z"
    assert format_time(datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-1)))) == "9999-12-31T23:59:59Z"
    assert format_time(datetime(2026, 7, 24, 8, 52, 45, tzinfo=timezone(timedelta(hours=2)))) == "2026-07-24T06:52:45Z"


def test_target_aggregated_usage_falls_back_as_koordinator() -> None:
    """getTargetAggregatedUsage (pod_assign_cache.go): no window asked and nothing aggregated for the type →
    nodeUsage, also when the report has no aggregated windows at all; a window asked and missing → None."""
    usage = {"resources": {"cpu": "1500m"}}
    bare = digest_node_metric({"metadata": {"name": "n"}, "status": {"nodeMetric": {"nodeUsage": usage}}})
    assert bare.aggregated_usage("p95", None) == {"cpu": 1500}
    assert bare.aggregated_usage("p95", 300) is None
    nothing = digest_node_metric({"metadata": {"name": "n"}, "status": {}})
    assert nothing.aggregated_usage("p95", None) is None  # no nodeUsage either: the caller estimates
