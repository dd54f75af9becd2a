from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.store.rates import CounterRates


def test_first_sample_gives_no_rate_then_rates_follow() -> None:
    r = CounterRates(1.0)
    assert r.update("cpu", 100.0, 10.0) is None
    assert r.update("cpu", 100.5, 11.0) == 0.5
    assert r.update("cpu", 101.5, 11.5) == 2.0
    assert r.drops.first == 1


def test_counter_going_backwards_drops_one_sample_and_rebases() -> None:
    r = CounterRates(1.0)
    r.update("c", 1_000.0, 0.0)
    assert r.update("c", 1_010.0, 1.0) == 10.0
    assert r.update("c", 3.0, 2.0) is None  # reset (restart, wrap, driver reload): never negative
    assert r.update("c", 8.0, 3.0) == 5.0  # measured from the post-reset baseline, not "huge"
    assert r.drops.reset == 1


def test_sample_after_a_stall_is_dropped() -> None:
    r = CounterRates(1.0)
    r.update("c", 0.0, 0.0)
    assert r.update("c", 1.0, 1.0) == 1.0
    assert r.update("c", 50.0, 4.5) is None  # 3.5 s > 3 x 1 s: would smear a burst over the stall
    assert r.update("c", 51.0, 5.5) == 1.0
    assert r.update("c", 54.0, 8.5) == 1.0  # exactly 3x is still fine
    assert r.drops.stall == 1


def test_new_source_restarts_the_series() -> None:
    r = CounterRates(1.0)
    r.update("pod/c", 500.0, 0.0, "containerd://aaa")
    assert r.update("pod/c", 501.0, 1.0, "containerd://aaa") == 1.0
    # the container restarted: new ID, new counter; even though 900 > 501 this is not a rate
    assert r.update("pod/c", 900.0, 2.0, "containerd://bbb") is None
    assert r.update("pod/c", 900.25, 3.0, "containerd://bbb") == 0.25


def test_time_not_advancing_keeps_the_old_baseline() -> None:
    r = CounterRates(1.0)
    r.update("c", 0.0, 5.0)
    assert r.update("c", 7.0, 5.0) is None
    assert r.update("c", 2.0, 6.0) == 2.0  # from the t=5 reading (0), not the duplicate
    assert r.drops.not_advanced == 1


def test_implausible_rates_are_dropped() -> None:
    r = CounterRates(1.0)
    r.update("c", 0.0, 0.0)
    assert r.update("c", 1e12, 1.0, max_rate=64.0) is None
    assert r.update("c", 1e12 + 3, 2.0, max_rate=64.0) == 3.0


def test_prune_forgets_silent_series() -> None:
    r = CounterRates(1.0)
    r.update("a", 0.0, 0.0)
    r.update("b", 0.0, 10.0)
    assert r.prune(5.0) == 1 and len(r) == 1
    assert r.update("a", 1.0, 11.0) is None  # first sample again


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 5.0), st.floats(-1e6, 1e6), st.booleans()), min_size=1, max_size=50))
def test_rates_are_never_negative_nor_larger_than_any_increase(steps) -> None:
    r = CounterRates(1.0)
    t, value = 0.0, 0.0
    r.update("c", value, t)
    for dt, delta, reset in steps:
        t += dt
        previous = value
        value = abs(delta) / 10 if reset else value + abs(delta)
        rate = r.update("c", value, t)
        if rate is not None:
            assert rate >= 0.0
            assert dt <= 3.0
            assert rate * dt <= value - previous + 1e-6 * max(1.0, abs(value))
