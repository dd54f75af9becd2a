"""The counter rules of the agent's one rate engine (`SlotRates`), one counter slot at a time."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.store.rates import RateDrops, SlotRates, stall_limit


class One:
    """One counter slot of `SlotRates`, fed reading by reading (NaN rate -> None)."""

    def __init__(self, interval: float = 1.0, max_rate: float = math.inf, identity: object = ("c", "")) -> None:
        self.drops = RateDrops()
        self.rates = SlotRates([identity], stall_limit(interval), self.drops, [max_rate])

    def update(self, value: float, now: float) -> float | None:
        rate = float(self.rates.update(np.array([value]), now)[0])
        return None if math.isnan(rate) else rate


def test_first_sample_gives_no_rate_then_rates_follow() -> None:
    r = One()
    assert r.update(100.0, 10.0) is None
    assert r.update(100.5, 11.0) == 0.5
    assert r.update(101.5, 11.5) == 2.0
    assert r.drops.first == 1


def test_counter_going_backwards_drops_one_sample_and_rebases() -> None:
    r = One()
    r.update(1_000.0, 0.0)
    assert r.update(1_010.0, 1.0) == 10.0
    assert r.update(3.0, 2.0) is None  # reset (restart, wrap, driver reload): never negative
    assert r.update(8.0, 3.0) == 5.0  # measured from the post-reset baseline, not "huge"
    assert r.drops.reset == 1


def test_sample_after_a_stall_is_dropped() -> None:
    r = One()
    r.update(0.0, 0.0)
    assert r.update(1.0, 1.0) == 1.0
    assert r.update(50.0, 4.5) is None  # 3.5 s > 3 x 1 s: would smear a burst over the stall
    assert r.update(51.0, 5.5) == 1.0
    assert r.update(54.0, 8.5) == 1.0  # exactly 3x is still fine
    assert r.drops.stall == 1


def test_new_source_restarts_the_series() -> None:
    drops = RateDrops()
    old = SlotRates([("pod/c", "containerd://aaa")], 3.0, drops)
    old.update(np.array([500.0]), 0.0)
    assert old.update(np.array([501.0]), 1.0)[0] == 1.0
    # the container restarted: new ID, new counter (a new layout); even though 900 > 501 this is not a rate
    new = SlotRates([("pod/c", "containerd://bbb"), ("pod/d", "x")], 3.0, drops)
    new.carry_over(old)
    assert np.isnan(new.update(np.array([900.0, 1.0]), 2.0)).all()
    assert new.update(np.array([900.25, 2.0]), 3.0).tolist() == [0.25, 1.0]
    # a layout keeping the same (key, source) carries its baseline over: no first sample
    kept = SlotRates([("pod/d", "x")], 3.0, drops)
    kept.carry_over(new)
    assert kept.update(np.array([4.0]), 4.0).tolist() == [2.0]


def test_time_not_advancing_keeps_the_old_baseline() -> None:
    r = One()
    r.update(0.0, 5.0)
    assert r.update(7.0, 5.0) is None
    assert r.update(2.0, 6.0) == 2.0  # from the t=5 reading (0), not the duplicate
    assert r.drops.not_advanced == 1


def test_missing_reading_keeps_the_baseline() -> None:
    r = One()
    r.update(0.0, 0.0)
    assert r.update(math.nan, 1.0) is None
    assert r.update(4.0, 2.0) == 2.0


def test_implausible_rates_are_dropped() -> None:
    r = One(max_rate=64.0)
    r.update(0.0, 0.0)
    assert r.update(1e12, 1.0) is None
    assert r.update(1e12 + 3, 2.0) == 3.0
    assert r.drops.too_large == 1


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 5.0), st.floats(-1e6, 1e6), st.booleans()), min_size=1, max_size=50))
def test_rates_are_never_negative_nor_larger_than_any_increase(steps) -> None:
    r = One()
    t, value = 0.0, 0.0
    r.update(value, t)
    for dt, delta, reset in steps:
        t += dt
        previous = value
        value = abs(delta) / 10 if reset else value + abs(delta)
        rate = r.update(value, t)
        if rate is not None:
            assert rate >= 0.0
            assert dt <= 3.0
            assert rate * dt <= value - previous + 1e-6 * max(1.0, abs(value))
