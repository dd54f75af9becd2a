"""The decaying histograms against Koordinator's tables (pkg/util/histogram/*_test.go, v1.8.0), plus what the
bank adds: many rows at once, checkpoints that survive bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent.prediction.histogram import (
    MAX_CHECKPOINT_WEIGHT,
    ExponentialBuckets,
    HistogramBank,
    LinearBuckets,
)
from agent.prediction.models import CPU_BUCKETS, MEMORY_BUCKETS, PeakModels

HOUR = 3600.0
START = 1234567890.0  # Koordinator's startTime (time.Unix(1234567890, 0))
# The plain (non-decaying) histogram tables, on a decaying bank: at a multiple of the half-life a sample's weight is
# exactly the weight given (the reference is that time), as in histogram_test.go's anyTime.
ANY_TIME = 1234566000.0
WEIGHT_EPSILON = 1e-15
LINEAR = LinearBuckets(10.0, 1.0, WEIGHT_EPSILON)  # testHistogramOptions


def bank(buckets: LinearBuckets | ExponentialBuckets = LINEAR, half_life: float = HOUR) -> HistogramBank:
    return HistogramBank(buckets, half_life, rows=1)


def pct(b: HistogramBank, p: float, row: int = 0) -> float:
    return float(b.percentiles([row], p)[0])


# ------------------------------------------------------------------ histogram_options_test.go
def test_linear_options() -> None:
    o = LinearBuckets(5.0, 0.3, 0.001)
    assert o.num_buckets == 18
    assert o.starts[0] == 0.0
    assert o.starts[17] == pytest.approx(5.1)
    assert list(o.find([-1.0, 0.0, 1.3, 100.0])) == [0, 0, 4, 17]


def test_exponential_options() -> None:
    o = ExponentialBuckets(500.0, 40.0, 1.5, 0.001)
    assert o.num_buckets == 6
    assert list(o.starts) == [0.0, 40.0, 100.0, 190.0, 325.0, 527.5]
    assert list(o.find([-1.0, 39.99, 40.0, 100.0, 900.0])) == [0, 0, 1, 2, 5]


def test_koordinator_bucket_schemes() -> None:
    """predict_server.go: CPU 0.025 cores x 1.05 up to 1024 cores, memory 5 MiB x 1.05 up to 2 TiB;
    TestDefaultHistogram: the extremes come back within one bucket's growth (5 %)."""
    assert (CPU_BUCKETS.num_buckets, MEMORY_BUCKETS.num_buckets) == (158, 205)
    models = PeakModels(max_models=8)
    for low, high, bank_of in ((0.05, 1024.0, "cpu"), (10 << 20, 1 << 31, "memory")):
        b = getattr(models, bank_of)
        b.resize(1)
        b.add([0, 0], [low, high], START)
        assert abs(pct(b, 1.0) - high) / high <= 0.05
        assert abs(pct(b, 0.0) - low) / low <= 0.05


# ------------------------------------------------------------------ histogram_test.go (no decay: one timestamp)
def test_empty_histogram_percentiles_are_zero() -> None:
    b = bank()
    for p in (-0.5, 0.0, 0.5, 1.0, 1.5):
        assert pct(b, p) == 0.0
    assert b.is_empty(0)


def test_percentiles() -> None:
    b = bank()
    for i in range(1, 5):
        b.add([0], [float(i)], ANY_TIME, weight=float(i))
    expected = {0.0: 2, 0.1: 2, 0.2: 3, 0.3: 3, 0.4: 4, 0.5: 4, 0.6: 4, 0.7: 5, 0.8: 5, 0.9: 5, 1.0: 5}
    assert {p: pct(b, p) for p in expected} == expected


def test_percentile_out_of_bounds() -> None:
    b = bank(LinearBuckets(1.0, 0.1, WEIGHT_EPSILON))
    b.add([0], [0.1], ANY_TIME, weight=0.1)
    b.add([0], [0.2], ANY_TIME, weight=0.2)
    assert pct(b, -0.1) == pytest.approx(0.2)
    assert pct(b, 1.1) == pytest.approx(0.3)
    b.add([0], [0.0], ANY_TIME, weight=0.1)
    b.add([0], [1.0], ANY_TIME, weight=0.2)
    assert pct(b, -0.1) == pytest.approx(0.1)
    assert pct(b, 1.1) == pytest.approx(1.0)


def test_non_empty_on_epsilon_addition() -> None:
    b = bank(LinearBuckets(1.0, 0.1, WEIGHT_EPSILON))
    b.add([0], [9.9], ANY_TIME, weight=WEIGHT_EPSILON * 3)
    assert not b.is_empty(0)
    b.add([0], [0.1], ANY_TIME, weight=WEIGHT_EPSILON * 0.3)
    b.add([0], [999.9], ANY_TIME, weight=WEIGHT_EPSILON * 0.3)
    assert not b.is_empty(0)


def test_checkpoint_of_empty_histogram() -> None:
    saved = bank().save(0)
    assert saved["totalWeight"] == 0.0 and saved["bucketWeights"] == {}


def test_checkpoint_scales_the_heaviest_bucket_to_max_weight() -> None:
    b = bank()
    b.add([0], [1.0], ANY_TIME)
    assert b.save(0)["bucketWeights"] == {str(LINEAR.find([1.0])[0]): MAX_CHECKPOINT_WEIGHT}


def test_checkpoint_drops_relatively_small_values() -> None:
    b = bank()
    b.add([0], [1.0], ANY_TIME, weight=1.0)
    b.add([0], [2.0], ANY_TIME, weight=100000.0)
    saved = b.save(0)
    assert saved["totalWeight"] == 100001.0
    assert saved["bucketWeights"] == {"2": MAX_CHECKPOINT_WEIGHT}


def test_checkpoint_of_multiple_values() -> None:
    b = bank()
    for value, weight in ((1.0, 1.0), (2.0, 10000.0), (3.0, 50.0)):
        b.add([0], [value], ANY_TIME, weight=weight)
    saved = b.save(0)
    assert saved["totalWeight"] == 10051.0
    assert saved["bucketWeights"] == {"1": 1, "2": 10000, "3": 50}


def test_load_checkpoint() -> None:
    b = bank()
    b.load(0, {"totalWeight": 6.0, "bucketWeights": {"0": 1, "1": 2}})
    assert b.total[0] == 6.0
    assert (b.weights[0, 0], b.weights[0, 1]) == (2.0, 4.0)


@pytest.mark.parametrize(
    "checkpoint",
    [
        {"totalWeight": 1.0, "bucketWeights": {"-1": 1}},  # negative bucket
        {"totalWeight": 1.0, "bucketWeights": {"99": 1}},  # beyond the buckets
        {"totalWeight": -1.0, "bucketWeights": {}},  # negative total
        None,  # nil checkpoint
        # and what a truncated or foreign file can hold
        {"totalWeight": "x"},
        {"totalWeight": float("nan")},
        {"totalWeight": 1.0, "bucketWeights": {"1": -3}},
        {"totalWeight": 1.0, "bucketWeights": {"a": 1}},
        {"totalWeight": 1.0, "bucketWeights": [1, 2]},
        {"totalWeight": 1.0, "referenceTimestamp": "2018-01-02T03:04:05Z"},
    ],
)
def test_load_refuses_malformed_checkpoints(checkpoint: object) -> None:
    b = bank()
    b.add([0], [3.0], ANY_TIME)
    with pytest.raises(ValueError):
        b.load(0, checkpoint)
    assert b.is_empty(0) and b.total[0] == 0.0


# ------------------------------------------------------------------ decaying_histogram_test.go
def test_simple_decay() -> None:
    """A sample 20 half-lives newer outweighs one 1000x heavier by 2^20 x 0.001 > 1000."""
    b = bank()
    b.add([0], [2.0], START, weight=1000.0)
    b.add([0], [1.0], START + 20 * HOUR)
    assert pct(b, 0.999) == pytest.approx(2.0)
    assert pct(b, 1.0) == pytest.approx(3.0)


def test_long_term_decay_renormalises() -> None:
    b = bank()
    b.add([0], [2.0], START)
    b.add([0], [1.0], START + 101 * HOUR)  # relative decay beyond 2^100: the reference moves
    assert pct(b, 1.0) == pytest.approx(2.0)
    assert math.isfinite(b.total[0]) and b.total[0] < 2.0


def test_decaying_percentiles() -> None:
    b = bank()
    for i in range(1, 5):
        b.add([0], [float(i)], START + (i - 1) * HOUR, weight=float(i))
    expected = {0.0: 2, 0.02: 2, 0.03: 3, 0.10: 3, 0.11: 4, 0.34: 4, 0.35: 5, 1.0: 5}
    assert {p: pct(b, p) for p in expected} == expected


def test_no_decay_at_one_timestamp() -> None:
    b = bank()
    for i in range(1, 5):
        b.add([0], [float(i)], START, weight=float(i))
    expected = {0.0: 2, 0.1: 2, 0.2: 3, 0.3: 3, 0.4: 4, 0.5: 4, 0.6: 4, 0.7: 5, 0.8: 5, 0.9: 5, 1.0: 5}
    assert {p: pct(b, p) for p in expected} == expected


def test_decaying_checkpoint_round_trip() -> None:
    b = bank()
    b.add([0], [2.0], START + 100 * HOUR)
    saved = b.save(0)
    assert saved["referenceTimestamp"] == b.reference[0] != 0.0
    assert saved["bucketWeights"] and saved["totalWeight"]
    other = bank()
    other.load(0, saved)
    assert other.reference[0] == b.reference[0]
    assert pct(other, 0.5) == pct(b, 0.5)


def test_decaying_load_keeps_the_reference() -> None:
    b = bank()
    reference = 1514862245.0  # 2018-01-02T03:04:05Z
    b.load(0, {"totalWeight": 6.0, "bucketWeights": {"0": 1}, "referenceTimestamp": reference})
    assert not b.is_empty(0)
    assert b.reference[0] == reference


# ------------------------------------------------------------------ the bank: rows at once
def test_rows_are_independent_and_vectorised() -> None:
    """Many rows in one call give what one row at a time gives."""
    rng = np.random.default_rng(7)
    values = rng.gamma(2.0, 0.5, size=(50, 40))
    together = HistogramBank(CPU_BUCKETS, 12 * HOUR, rows=40)
    alone = [HistogramBank(CPU_BUCKETS, 12 * HOUR, rows=1) for _ in range(40)]
    for step in range(50):
        t = START + step * 60.0
        together.add(np.arange(40), values[step], t)
        for row in range(40):
            alone[row].add([0], [values[step, row]], t)
    for p in (0.5, 0.9, 0.95, 0.98, 1.0):
        assert list(together.percentiles(np.arange(40), p)) == [pct(a, p) for a in alone]


def test_repeated_rows_in_one_call() -> None:
    b = HistogramBank(LINEAR, HOUR, rows=2)
    b.add([0, 0, 1], [1.0, 3.0, 5.0], [ANY_TIME, ANY_TIME + HOUR, ANY_TIME])
    assert b.total[0] == pytest.approx(3.0)  # 1 (at the reference) + 2 (one half-life later)
    assert pct(b, 1.0, 1) == 6.0
