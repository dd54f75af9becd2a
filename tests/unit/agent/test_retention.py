"""A longer window (NodeMetric spec change) grows the sampler's ring without losing any sample."""

from __future__ import annotations

import numpy as np

from agent.sampler import Sampler, regrow_ring
from agent.store.ring import SampleRing


def filled(slots: int, columns: int) -> SampleRing:
    ring = SampleRing(slots, initial_rows=2)
    for i in range(columns):
        keys = ["a", "b"] if i % 3 else ["a"]  # "b" has gaps
        ring.append_column(float(i), keys, [float(i), 100.0 + i][: len(keys)])
    return ring


def history(ring: SampleRing, key: str) -> list[tuple[float, float]]:
    row = ring.row_of(key)
    assert row is not None
    out = []
    for col in np.argsort(ring.times):
        t = float(ring.times[col])
        v = float(ring.values[row, col])
        if not np.isnan(t) and not np.isnan(v):
            out.append((t, v))
    return out


def test_regrow_keeps_every_column_in_order_wrapped_or_not() -> None:
    for columns in (3, 10, 25):  # not full, exactly full, wrapped
        ring = filled(10, columns)
        grown = regrow_ring(ring, 40)
        assert grown.slots == 40 and len(grown) == len(ring)
        for key in ("a", "b"):
            assert history(grown, key) == history(ring, key)
        grown.append_column(1000.0, ["a"], [1.0])  # and it keeps working as a ring
        assert history(grown, "a")[-1] == (1000.0, 1.0)


def test_sampler_grows_for_a_longer_retention_but_never_shrinks() -> None:
    sampler = Sampler([], interval=0.5, windows=(10.0,))
    slots = sampler.ring.slots
    assert not sampler.ensure_retention(5.0) and sampler.ring.slots == slots and sampler.retention == 5.0
    assert sampler.ensure_retention(60.0) and sampler.ring.slots == sampler.slots_for(60.0) > slots


def test_regrow_of_an_empty_ring() -> None:
    assert len(regrow_ring(SampleRing(4), 8)) == 0
