from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.store import QUANTILES, SampleRing, aggregate_windows, average_window, build_report, nearest_rank_index


# ------------------------------------------------------------------ brute-force reference (one series at a time)
class ReferenceStore:
    """Keeps every column as a Python dict and answers exactly as koordlet's per-series query would."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.columns: list[tuple[float, dict[str, float]]] = []

    def append(self, t: float, values: dict[str, float]) -> None:
        # stored precision is float32, as in the ring
        self.columns.append((t, {k: float(np.float32(v)) for k, v in values.items()}))
        self.columns = self.columns[-self.slots :]

    def query(self, key: str, now: float, duration: float) -> dict[str, float] | None:
        points = [(t, c[key]) for t, c in self.columns if now - duration <= t <= now and key in c]
        if not points:
            return None
        if points[-1][0] - points[0][0] < 0.5 * duration:  # cold start
            return None
        values = sorted(v for _, v in points)
        n = len(values)
        out = {"avg": sum(values) / n}
        for name, q in QUANTILES:
            # koordlet: idx := int(float32(len)*percentile) - 1, clamped at 0, in float32 arithmetic
            idx = max(int(np.float32(n) * np.float32(q)) - 1, 0)
            out[name] = values[idx]
        return out


def check_against_reference(ring: SampleRing, ref: ReferenceStore, keys: list[str], now: float, durations) -> None:
    report = build_report(ring, now, durations)
    for key in keys:
        for d in durations:
            got = report.usage(key, d)
            want = ref.query(key, now, d)
            if want is None:
                assert got is None, (key, d)
                continue
            assert got is not None, (key, d, want)
            assert got["avg"] == pytest.approx(want["avg"], rel=1e-9, abs=1e-9)
            for name, _ in QUANTILES:
                assert got[name] == want[name], (key, d, name)  # exact: same samples, same rank


# ------------------------------------------------------------------ hand-computed
def test_nearest_rank_on_one_to_ten() -> None:
    ring = SampleRing(20)
    for i in range(10):
        ring.append_column(float(i), ["s"], [float(i + 1)])  # values 1..10 at t = 0..9
    report = build_report(ring, 9.0, (10.0,))
    # n = 10: p50 -> idx int(5.0)-1 = 4 -> 5; p90 -> int(9.0)-1 = 8 -> 9; p95 -> int(9.5)-1 = 8 -> 9; p99 -> 9.
    # (Prometheus' linear interpolation would give 5.5 / 9.1 / 9.55 / 9.91: this is deliberately not that.)
    assert report.usage("s", 10.0) == {"avg": 5.5, "p50": 5.0, "p90": 9.0, "p95": 9.0, "p99": 9.0}


def test_rank_index_matches_go_float32_arithmetic() -> None:
    assert nearest_rank_index(1, 0.5).tolist() == 0  # int(0.5) - 1 = -1 -> clamped to 0
    assert nearest_rank_index(20, 0.95).tolist() == 18
    assert nearest_rank_index(300, 0.99).tolist() == 296
    n = np.arange(0, 5000)
    for _, q in QUANTILES:
        go = [max(int(np.float32(k) * np.float32(q)) - 1, 0) for k in n]
        assert nearest_rank_index(n, q).tolist() == go
    # The float32 detail matters: in float64 with the float32-rounded q (0.94999998...), n=20 gives rank 17.
    assert int(20 * float(np.float32(0.95))) - 1 == 17
    with pytest.raises(ValueError):
        nearest_rank_index(10, 0.0)


def test_cold_start_window_reports_nothing() -> None:
    ring = SampleRing(100)
    for t in range(1, 141):
        ring.append_column(float(t), ["s"], [1.0])
    # the ring keeps the last 100 columns, t = 41..140: first-to-last span 99 s
    report = build_report(ring, 140.0, (300.0, 200.0, 197.0, 100.0))
    assert report.usage("s", 300.0) is None  # 99 s < 150 s
    assert report.usage("s", 200.0) is None  # 99 s < 100 s
    assert report.usage("s", 197.0) is not None  # 99 s >= 98.5 s
    assert report.usage("s", 100.0) is not None
    stats = aggregate_windows(ring, 140.0, (300.0,))[0]
    assert stats.count[0] == 100 and stats.span[0] == 99.0 and not stats.reported[0]


def test_cold_start_is_per_series() -> None:
    ring = SampleRing(400)
    for t in range(1, 301):
        keys = ["old"] + (["new"] if t > 200 else [])
        ring.append_column(float(t), keys, [1.0] * len(keys))
    report = build_report(ring, 300.0, (300.0,))
    assert report.usage("old", 300.0) is not None
    assert report.usage("new", 300.0) is None  # 99 s of history < 150 s


def test_gaps_are_skipped_not_zero() -> None:
    ring = SampleRing(20)
    for t in range(10):
        if t in (3, 4, 5):
            ring.append_column(float(t), [], [])  # the series was not sampled
        else:
            ring.append_column(float(t), ["s"], [10.0 * (t + 1)])
    stats = aggregate_windows(ring, 9.0, (10.0,))[0]
    present = [10.0 * (t + 1) for t in range(10) if t not in (3, 4, 5)]
    assert stats.count[0] == 7
    assert stats.avg[0] == pytest.approx(sum(present) / 7)
    assert stats.quantiles["p50"][0] == sorted(present)[int(7 * 0.5) - 1]


def test_windows_across_ring_wrap() -> None:
    slots = 50
    ring, ref = SampleRing(slots), ReferenceStore(slots)
    rng = np.random.default_rng(7)
    for t in range(1, 173):  # wraps more than three times
        vals = {"a": float(rng.gamma(2.0)), "b": float(rng.integers(0, 5))}
        if t % 7 == 0:
            del vals["b"]
        ring.append_column(float(t), list(vals), list(vals.values()))
        ref.append(float(t), vals)
    check_against_reference(ring, ref, ["a", "b"], 172.0, (10.0, 30.0, 49.0, 100.0))


def test_plain_average_over_any_window() -> None:
    ring = SampleRing(100)
    for t in range(1, 61):
        ring.append_column(float(t), ["cpu"], [float(t % 4)])
    stats = average_window(ring, 60.0, 20.0)  # t = 40..60 -> 21 samples
    expected = [float(t % 4) for t in range(40, 61)]
    assert stats.count[0] == 21 and stats.avg[0] == pytest.approx(sum(expected) / 21)
    assert stats.quantiles == {}


def test_quantile_rows_limit_sorting_but_keep_avg() -> None:
    ring = SampleRing(30)
    for t in range(1, 21):
        ring.append_column(float(t), ["pod", "container"], [float(t), float(2 * t)])
    mask = np.zeros(ring.high_water, dtype=bool)
    mask[ring.row_of("pod")] = True
    stats = aggregate_windows(ring, 20.0, (20.0,), quantile_rows=mask)[0]
    pod, container = ring.row_of("pod"), ring.row_of("container")
    assert stats.quantiles["p90"][pod] == 18.0
    assert math.isnan(stats.quantiles["p90"][container])
    assert stats.avg[container] == pytest.approx(21.0)


def test_thread_pool_gives_identical_results() -> None:
    ring = SampleRing(200, initial_rows=64, max_rows=2048)
    rng = np.random.default_rng(3)
    keys = [f"s{i}" for i in range(700)]
    for t in range(1, 260):
        vals = rng.gamma(2.0, size=len(keys))
        vals[rng.random(len(keys)) < 0.05] = np.nan  # sprinkled gaps
        ring.append_column(float(t), keys, vals)
    serial = aggregate_windows(ring, 259.0, (60.0, 150.0), block_rows=64)
    with ThreadPoolExecutor(2) as pool:
        parallel = aggregate_windows(ring, 259.0, (60.0, 150.0), block_rows=64, executor=pool)
    for a, b in zip(serial, parallel, strict=True):
        np.testing.assert_array_equal(a.avg, b.avg)
        for name in a.quantiles:
            np.testing.assert_array_equal(a.quantiles[name], b.quantiles[name])


def test_empty_ring_and_unknown_key() -> None:
    ring = SampleRing(10)
    report = build_report(ring, 5.0)
    assert report.usage("nothing", 300.0) is None


# ------------------------------------------------------------------ property: vectorised == brute force
columns = st.lists(
    st.tuples(
        st.floats(0.2, 3.0),  # time step
        st.dictionaries(
            st.sampled_from(["a", "b", "c", "d"]),
            st.one_of(st.sampled_from([0.0, 1.0, 2.0, 2.5]), st.floats(0, 1e6, width=32)),  # ties and spread
            max_size=4,
        ),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(
    slots=st.integers(2, 25),
    cols=columns,
    durations=st.lists(st.floats(0.5, 60.0), min_size=1, max_size=3, unique=True),
    now_offset=st.floats(-5.0, 5.0),
    block_rows=st.sampled_from([1, 2, 256]),
)
def test_matches_brute_force_reference(slots, cols, durations, now_offset, block_rows) -> None:
    ring, ref = SampleRing(slots, initial_rows=1), ReferenceStore(slots)
    t = 100.0
    for step, vals in cols:
        t += step
        ring.append_column(t, list(vals), list(vals.values()))
        ref.append(t, vals)
    now = t + now_offset
    stats = aggregate_windows(ring, now, durations, block_rows=block_rows)
    for s in stats:
        for key in "abcd":
            row = ring.row_of(key)
            want = ref.query(key, now, s.duration)
            got_reported = row is not None and bool(s.reported[row])
            assert got_reported == (want is not None), (key, s.duration)
            if want is None or row is None:
                continue
            assert s.avg[row] == pytest.approx(want["avg"], rel=1e-9, abs=1e-9)
            for name, _ in QUANTILES:
                assert s.quantiles[name][row] == want[name]
