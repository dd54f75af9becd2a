"""The predictor's training from the agent's sample ring, its bounds, its checkpoint and what it does with bad input
(koordlet's predict_server_test.go where it has a table; the bad-input cases are issue 30's)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from agent.prediction import checkpoint
from agent.prediction.models import CPU_BUCKETS, NODE_ITEM_UIDS, NODE_UID, PeakModels, node_item_uid
from agent.prediction.predictor import PeakPredictor, PredictorSettings
from agent.prediction.reclaimable import PredictedPod, Resources
from agent.series import (
    CPU_USAGE_CORES,
    MEMORY_ANON_USAGE_BYTES,
    NODE_CPU_USAGE_CORES,
    NODE_MEMORY_USAGE_BYTES,
    SeriesKey,
)
from agent.store.ring import SampleRing

MI = 1 << 20
WALL = 1_800_000_000.0


class Node:
    """A sample ring fed as the sampler feeds it: one column a second."""

    def __init__(self) -> None:
        self.ring = SampleRing(600)
        self.t = 0.0

    def run(self, seconds: int, node: tuple[float, float], pods: dict[str, tuple[float, float]]) -> None:
        keys = [SeriesKey(NODE_CPU_USAGE_CORES), SeriesKey(NODE_MEMORY_USAGE_BYTES)]
        values = [*node]
        for uid, (cpu, mem) in pods.items():
            keys += [SeriesKey(CPU_USAGE_CORES, uid), SeriesKey(MEMORY_ANON_USAGE_BYTES, uid)]
            values += [cpu, mem]
        for _ in range(seconds):
            self.t += 1.0
            self.ring.append_column(self.t, keys, np.asarray(values, dtype=np.float64))


def prod(uid: str, cpu_milli: int = 2000, memory: int = 1 << 30) -> PredictedPod:
    return PredictedPod(uid, "koord-prod", Resources(cpu_milli, memory), created_at=0.0, key=f"default/{uid}")


def bucket_end(cores: float) -> float:
    """What a model predicts for a constant usage: the end of its bucket."""
    return float(CPU_BUCKETS.starts[CPU_BUCKETS.find([cores])[0] + 1])


def predictor(tmp_path: Path | None = None, **kw: object) -> PeakPredictor:
    return PeakPredictor(PredictorSettings(checkpoint_dir=tmp_path, **kw), metrics=False)  # type: ignore[arg-type]


# ------------------------------------------------------------------ predict_server_test.go
def test_training_builds_pod_node_priority_and_system_models() -> None:
    """TestPredictServerMainLoop: two pods, node memory 256Mi -> 9 models (pods 2, node 1, priorities 5, sys 1);
    the node's CPU of 0 predicts the first bucket's end, 25m."""
    node = Node()
    node.run(60, (0.0, 256 * MI), {"pod1": (1.0, 128 * MI), "pod2": (3.0, 128 * MI)})
    p = predictor()
    step = p.train(node.ring, [prod("pod1"), prod("pod2")], mono=node.t, wall=WALL)
    assert (step.pods, step.node) == (2, True)
    assert len(p.models) == 9
    node_prediction = p.models.predict([NODE_UID])[NODE_UID]
    assert int(node_prediction.cpu["p90"] * 1000) == 25
    assert node_prediction.memory["p90"] >= 10 << 20
    for i in range(2, 101):  # 100 samples of a rising CPU: the p90 follows it up
        node.run(60, (0.0, 256 * MI), {"pod1": (float(i), 128 * MI), "pod2": (3.0, 128 * MI)})
        p.train(node.ring, [prod("pod1"), prod("pod2")], mono=node.t, wall=WALL + 60 * i)
    assert p.models.predict(["pod1"])["pod1"].cpu["p90"] >= 90


def test_priority_and_system_models_sum_the_pods() -> None:
    node = Node()
    node.run(60, (4.0, 8 << 30), {"a": (1.0, 1 << 30), "b": (0.5, 1 << 30), "c": (0.25, 512 * MI)})
    p = predictor()
    pods = [prod("a"), prod("b"), PredictedPod("c", "koord-batch", Resources(0, 0), created_at=0.0)]
    p.train(node.ring, pods, mono=node.t, wall=WALL)
    got = p.models.predict([node_item_uid("koord-prod"), node_item_uid("koord-batch"), node_item_uid("sys")])
    assert got[node_item_uid("koord-prod")].cpu["max"] == bucket_end(1.5)
    assert got[node_item_uid("koord-batch")].cpu["max"] == bucket_end(0.25)
    assert got[node_item_uid("sys")].cpu["max"] == bucket_end(4.0 - 1.75)


def test_models_expire_when_no_longer_trained() -> None:
    """TestPredictServerGCOldModels: without pods, 7 node-level models; past the expiration they go. A pod that
    left the node loses its model once it has not been trained for the expiration."""
    node = Node()
    node.run(60, (1.0, 256 * MI), {"gone": (0.5, MI)})
    p = predictor(model_expiration_seconds=1800.0)
    p.train(node.ring, [prod("gone")], mono=node.t, wall=WALL)
    assert len(p.models) == 8
    assert set(p.models.expired(WALL + 1800 + 60, 1800.0)) == {*NODE_ITEM_UIDS, "gone"}
    node.run(1860, (1.0, 256 * MI), {})
    step = p.train(node.ring, [], mono=node.t, wall=WALL + 1860)
    assert step.expired == ["gone"] and "gone" not in p.models and len(p.models) == 7


# ------------------------------------------------------------------ bounds
def test_pods_beyond_the_bound_get_no_model() -> None:
    node = Node()
    pods = {f"p{i}": (0.1, MI) for i in range(5)}
    node.run(60, (1.0, 256 * MI), pods)
    p = predictor(max_pods=3)
    step = p.train(node.ring, [prod(u) for u in pods], mono=node.t, wall=WALL)
    assert len(step.refused) == 2
    assert len(p.models) == 3 + 7  # three pods and every node item: node items always have room


def test_memory_per_model_is_bounded() -> None:
    """(158 + 205) float64 buckets and four scalars a model: 2,936 bytes; the banks never hold more than
    max_models rows, so 512 pods take at most 1.5 MiB however many pods come and go."""
    models = PeakModels(max_models=512 + 7)
    for i in range(2000):  # pods come and go; expired ones free their rows
        models.update([f"pod-{i}"], np.array([0.1]), np.array([1e6]), WALL + i)
        if len(models) > 400:
            models.remove(models.uids()[:100])
    assert models.cpu.rows <= 512 + 7
    per_model = (models.cpu.weights.shape[1] + models.memory.weights.shape[1] + 4) * 8
    assert per_model == 2936
    assert models.nbytes <= (512 + 7) * per_model


# ------------------------------------------------------------------ bad input
def test_restarted_container_and_counter_reset_do_not_reach_the_model() -> None:
    """A counter reset leaves a gap in the pod's CPU rate (agent.store.rates): NaN samples are skipped; values that
    are not finite or negative are dropped and counted; the pod keeps its model (same UID)."""
    node = Node()
    node.run(60, (1.0, 256 * MI), {"pod": (0.5, 100 * MI)})
    p = predictor()
    p.train(node.ring, [prod("pod")], mono=node.t, wall=WALL)
    node.run(61, (1.0, 256 * MI), {"pod": (float("nan"), 100 * MI)})  # every CPU sample of the window lost
    step = p.train(node.ring, [prod("pod")], mono=node.t, wall=WALL + 61)
    assert (step.pods, step.skipped_pods) == (0, 1)
    node.run(61, (1.0, 256 * MI), {"pod": (-3.0, float("inf"))})
    step = p.train(node.ring, [prod("pod")], mono=node.t, wall=WALL + 122)
    assert step.dropped_samples == 2 and step.skipped_pods == 1
    assert "pod" in p.models and p.models.predict(["pod"])["pod"].cpu["max"] == bucket_end(0.5)


def test_clock_jump_moves_the_models_not_their_weights(caplog: pytest.LogCaptureFixture) -> None:
    node = Node()
    node.run(60, (1.0, 256 * MI), {"pod": (0.5, 100 * MI)})
    p, q = predictor(), predictor()
    for m in (p, q):
        m.train(node.ring, [prod("pod")], mono=node.t, wall=WALL)
    node.run(60, (1.0, 256 * MI), {"pod": (2.0, 100 * MI)})
    with caplog.at_level(logging.WARNING):
        step = p.train(node.ring, [prod("pod")], mono=node.t, wall=WALL + 60 + 3 * 86400)  # +3 days
    q.train(node.ring, [prod("pod")], mono=node.t, wall=WALL + 60)
    assert step.clock_jump_seconds == pytest.approx(3 * 86400)
    assert "wall clock jumped" in caplog.text
    assert p.models.predict(["pod"]) == q.models.predict(["pod"])
    assert not step.expired  # nothing expired by the jump
    back = p.train(node.ring, [prod("pod")], mono=node.t + 60, wall=WALL + 120 + 3 * 86400 - 7200)  # 2 h back
    assert back.clock_jump_seconds == pytest.approx(-7200)


# ------------------------------------------------------------------ checkpoints
def trained(tmp_path: Path) -> PeakPredictor:
    node = Node()
    node.run(60, (2.0, 4 << 30), {"pod": (0.5, 100 * MI)})
    p = predictor(tmp_path)
    p.train(node.ring, [prod("pod")], mono=node.t, wall=WALL)
    return p


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    p = trained(tmp_path)
    assert p.save(p.snapshot())
    q = predictor(tmp_path)
    assert "8 models" in q.restore()
    uids = ["pod", NODE_UID, node_item_uid("sys")]
    assert q.models.predict(uids) == p.models.predict(uids)
    assert q.models.history_since("pod") == WALL


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"", "not JSON"),  # empty
        (b'{"format": "loadline.io/peak-models", "version": 1, "models": [{"uid": "po', "not JSON"),  # truncated
        (b"\x00\xff garbage", "not JSON"),
        (
            json.dumps({"UID": "pod", "CPU": {"totalWeight": 1}, "LastUpdated": "2026-01-01T00:00:00Z"}).encode(),
            "not a Loadline peak-model checkpoint",
        ),  # koordlet's per-model file
        (json.dumps({"format": "loadline.io/peak-models", "version": 99}).encode(), "version 99"),
        (b"[1, 2, 3]", "not a Loadline peak-model checkpoint"),
    ],
)
def test_unusable_checkpoint_is_a_logged_reset(
    tmp_path: Path, content: bytes, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / checkpoint.FILENAME).write_bytes(content)
    p = predictor(tmp_path)
    with caplog.at_level(logging.WARNING):
        outcome = p.restore()
    assert outcome.startswith("reset:") and why in outcome
    assert "peak models reset" in caplog.text
    assert len(p.models) == 0
    assert (tmp_path / (checkpoint.FILENAME + ".rejected")).read_bytes() == content
    assert not (tmp_path / checkpoint.FILENAME).exists()


def test_checkpoint_of_other_histograms_is_a_reset(tmp_path: Path) -> None:
    p = trained(tmp_path)
    p.save(p.snapshot())
    other = predictor(tmp_path, cpu_half_life_seconds=3600.0)
    assert "other cpu histograms" in other.restore() and len(other.models) == 0


def test_checkpoint_with_a_malformed_model_is_a_reset(tmp_path: Path) -> None:
    p = trained(tmp_path)
    models = p.snapshot()
    models[0]["cpu"]["bucketWeights"] = {"9999": 1}
    p.save(models)
    q = predictor(tmp_path)
    outcome = q.restore()
    assert outcome.startswith("reset:") and "outside" in outcome and len(q.models) == 0


def test_first_start_is_not_a_reset(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    p = predictor(tmp_path)
    with caplog.at_level(logging.WARNING):
        assert p.restore().startswith("no checkpoint")
    assert "reset" not in caplog.text


def test_unwritable_checkpoint_directory_is_logged_not_raised(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    p = predictor(tmp_path / "file" / "sub")
    assert p.save([]) is False


def test_result_before_training_is_empty() -> None:
    p = predictor()
    got = p.result([prod("pod")], Resources(8000, 16 << 30), wall=WALL)
    assert got.reclaimable is None and got.peak is None


def test_result_after_training_lends_what_the_pods_do_not_use() -> None:
    node = Node()
    node.run(60, (1.2, 4 << 30), {"a": (0.5, 500 * MI), "b": (0.5, 500 * MI)})
    p = predictor(min_history_seconds=0.0)
    pods = [prod("a"), prod("b")]
    p.train(node.ring, pods, mono=node.t, wall=WALL)
    got = p.result(pods, Resources(8000, 16 << 30), wall=WALL + 60)
    assert got.reclaimable is not None and got.peak is not None
    # requests 4 cores; the Prod tier (1 core) and the system (0.2) at most ~1.2 x 1.1 -> ~2.6 cores to lend
    assert 2400 <= got.reclaimable.cpu_milli <= 2800
    assert got.reclaimable.cpu_milli + got.peak.cpu_milli <= 4000
