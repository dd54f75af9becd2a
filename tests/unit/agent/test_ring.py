from __future__ import annotations

import numpy as np
import pytest

from agent.store import SampleRing


def test_append_writes_one_column_and_gaps_are_nan() -> None:
    ring = SampleRing(4, initial_rows=2)
    ring.append_column(1.0, ["a", "b"], [1.0, 2.0])
    ring.append_column(2.0, ["a"], [3.0])
    a, b = ring.row_of("a"), ring.row_of("b")
    assert a is not None and b is not None
    assert ring.values[a, :2].tolist() == [1.0, 3.0]
    assert ring.values[b, 0] == 2.0 and np.isnan(ring.values[b, 1])
    assert ring.times[:2].tolist() == [1.0, 2.0] and np.isnan(ring.times[2:]).all()
    assert ring.head == 1 and ring.columns_written == 2


def test_times_must_increase() -> None:
    ring = SampleRing(4)
    ring.append_column(5.0, [], [])
    with pytest.raises(ValueError, match="increase"):
        ring.append_column(5.0, [], [])


def test_wrap_overwrites_oldest_column_and_clears_it() -> None:
    ring = SampleRing(3, initial_rows=2)
    for t in range(1, 5):  # 4 columns into 3 slots: column of t=1 is overwritten by t=4
        ring.append_column(float(t), ["a"] if t != 4 else ["b"], [float(t)] if t != 4 else [40.0])
    row_a = ring.row_of("a")
    assert row_a is not None
    assert sorted(ring.times.tolist()) == [2.0, 3.0, 4.0]
    assert ring.head == 0
    assert np.isnan(ring.values[row_a, 0])  # overwritten slot is a gap for "a", not its old value 1.0
    assert ring.window_columns(4.0, 10.0) == (slice(1, 3), slice(0, 1))  # oldest first, two pieces


def test_window_columns_selects_by_time_not_count() -> None:
    ring = SampleRing(10)
    for t in (1.0, 2.0, 3.0, 7.0, 8.0):  # a stall between 3 and 7
        ring.append_column(t, [], [])
    assert ring.window_columns(8.0, 4.9) == (slice(3, 5),)  # 7 and 8
    assert ring.window_columns(8.0, 5.0) == (slice(2, 5),)  # both ends inclusive: 3, 7 and 8
    assert ring.window_columns(3.5, 2.0) == (slice(1, 3),)  # `now` before the head: walk back
    assert ring.window_columns(0.5, 100.0) == ()


def test_reused_row_starts_empty() -> None:
    ring = SampleRing(4, initial_rows=1)
    ring.append_column(1.0, ["old"], [9.0])
    assert ring.forget(["old"]) == 1
    ring.append_column(2.0, ["new"], [1.0])
    assert ring.row_of("new") == 0  # same physical row
    assert np.isnan(ring.values[0, 0]) and ring.values[0, 1] == 1.0


def test_drop_stale_frees_rows_of_silent_series() -> None:
    ring = SampleRing(8, initial_rows=4)
    ring.append_column(1.0, ["gone", "live"], [1.0, 1.0])
    for t in (2.0, 3.0, 4.0):
        ring.append_column(t, ["live"], [1.0])
    assert ring.drop_stale(older_than=1.5) == 1
    assert "gone" not in ring and "live" in ring and len(ring) == 1


def test_grows_then_caps_and_evicts_the_longest_silent() -> None:
    ring = SampleRing(4, initial_rows=1, max_rows=3)
    ring.append_column(1.0, ["a", "b"], [1.0, 2.0])  # grows, but not past max_rows
    assert ring.capacity == 3
    ring.append_column(2.0, ["a", "c"], [1.0, 3.0])
    assert ring.capacity == 3
    ring.append_column(3.0, ["a", "c", "d"], [1.0, 3.0, 4.0])  # full: "b" (silent since t=1) is evicted
    assert "b" not in ring and {"a", "c", "d"} <= set(ring.keys())
    ring.append_column(4.0, ["a", "c", "d", "e"], [1.0, 1.0, 1.0, 5.0])  # all live: "e" is rejected
    assert "e" not in ring and ring.rejected_samples == 1
    assert {"a", "c", "d"} == set(ring.keys())


def test_growth_keeps_history_and_leaves_new_rows_untouched() -> None:
    ring = SampleRing(8, initial_rows=2, max_rows=10_000)
    ring.append_column(1.0, ["a", "b"], [1.0, 2.0])
    ring.append_column(2.0, ["a", "b", "c"], [3.0, 4.0, 5.0])  # grows by 256 rows
    assert ring.capacity == 258 and ring.high_water == 3
    a, c = ring.row_of("a"), ring.row_of("c")
    assert a is not None and c is not None
    assert ring.values[a, :2].tolist() == [1.0, 3.0]
    assert np.isnan(ring.values[c, 0]) and ring.values[c, 1] == 5.0


def test_duplicate_new_key_in_one_column_takes_one_row() -> None:
    ring = SampleRing(4)
    ring.append_column(1.0, ["x", "x"], [1.0, 2.0])
    assert len(ring) == 1 and ring.high_water == 1


def test_memory_stays_bounded_under_churn() -> None:
    """Thousands of short-lived series: rows are recycled once a series is silent for the retention."""
    retention = 30.0
    ring = SampleRing(40, initial_rows=16)
    live_per_cycle = 50
    for cycle in range(400):  # 400 cycles x 50 fresh series = 20,000 distinct series
        t = float(cycle + 1)
        keys = [f"pod-{cycle}-{i}" for i in range(live_per_cycle)]
        ring.append_column(t, keys, np.ones(live_per_cycle))
        ring.drop_stale(t - retention)
    # At most (retention + 1) cycles' worth of series are retained; capacity is bounded by that, not by 20,000.
    assert len(ring) <= (retention + 1) * live_per_cycle
    assert ring.capacity <= 2 * (retention + 1) * live_per_cycle
    assert ring.nbytes() < 2 * (retention + 1) * live_per_cycle * 40 * 4 + 64 * 1024


def test_a_repeated_column_reuses_its_rows_until_rows_change() -> None:
    """The steady-state fast path (same keys as the last column) must write exactly what the slow path would,
    also after a row was freed and reused by another key, and when the caller mutates its key list."""
    ring = SampleRing(8, initial_rows=4, max_rows=4)
    keys = ["a", "b", "c"]
    ring.append_column(1.0, keys, [1.0, 2.0, 3.0])
    ring.append_column(2.0, keys, [4.0, 5.0, 6.0])  # cached rows
    assert [ring.values[ring.row_of(k), ring.head] for k in keys] == [4.0, 5.0, 6.0]
    ring.forget(["a"])  # the same keys next, but a row was freed: the cached rows must not be used
    ring.append_column(2.5, keys, [4.5, 5.5, 6.5])
    assert [ring.values[ring.row_of(k), ring.head] for k in keys] == [4.5, 5.5, 6.5]
    ring.forget(["a"])  # frees a row, which another key then takes
    ring.append_column(3.0, ["d"], [7.0])  # "d" takes a's old row
    ring.append_column(4.0, keys, [8.0, 9.0, 10.0])  # "a" comes back in a new row
    assert ring.row_of("a") != ring.row_of("d")
    assert [ring.values[ring.row_of(k), ring.head] for k in keys] == [8.0, 9.0, 10.0]
    assert np.isnan(ring.values[ring.row_of("d"), ring.head])
    keys[2] = "d"  # the same list object, other contents
    ring.append_column(5.0, keys, [11.0, 12.0, 13.0])
    assert ring.values[ring.row_of("d"), ring.head] == 13.0 and np.isnan(ring.values[ring.row_of("c"), ring.head])


def test_growth_within_the_reservation_is_a_wider_view_not_a_copy() -> None:
    ring = SampleRing(8, initial_rows=2, max_rows=1024)
    ring.append_column(1.0, ["a", "b"], [1.0, 2.0])
    before = ring.values
    ring.append_column(2.0, ["a", "b", "c"], [3.0, 4.0, 5.0])  # a third row: grows
    assert ring.capacity > 2
    assert np.shares_memory(before, ring.values)  # the same buffer: no second ring held during growth
    assert ring.values[ring.row_of("a"), :2].tolist() == [1.0, 3.0]


def test_growth_past_the_reservation_copies_and_keeps_history(monkeypatch: pytest.MonkeyPatch) -> None:
    import agent.store.ring as ring_module

    monkeypatch.setattr(ring_module, "RESERVE_BYTES", 8 * 4 * 3)  # room for 3 rows of 8 slots
    ring = SampleRing(8, initial_rows=2, max_rows=1024)
    keys = [f"s{i}" for i in range(300)]
    ring.append_column(1.0, keys[:2], [1.0, 2.0])
    before = ring.values
    ring.append_column(2.0, keys, [float(i) for i in range(300)])
    assert ring.capacity >= 300 and not np.shares_memory(before, ring.values)
    assert ring.values[ring.row_of("s1"), :2].tolist() == [2.0, 1.0]
    assert ring.values[ring.row_of("s299"), 1] == 299.0 and np.isnan(ring.values[ring.row_of("s299"), 0])
