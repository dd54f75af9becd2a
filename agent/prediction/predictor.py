"""The peak predictor of one node (the design's "Recommender"): trains the models, checkpoints them, answers the
report's `prodReclaimableMetric` and `prodPeakMetric`.

Training (every `training_interval`, 1 min, koordlet's `peakPredictServer.training`): from the samples the agent
already keeps, the p90 of the last interval of

- every pod on the node (its pod cgroup's CPU and anon memory, the podsMetric series) -> the pod's model;
- the node (CPU, memory without page cache) -> `__node__`;
- the pods of each priority class, summed -> `__node-koord-prod__`, ... (0 for a class with no pods);
- the node minus all pods, at least 0 -> `__node-sys__`.

Models not updated for `model_expiration` (30 min) are dropped; a pod beyond `max_pods` gets no model (counted,
logged once). Nothing here blocks the event loop: a training step is a few numpy calls over the pods' rows (0.3 ms
at 100 pods), the checkpoint's JSON and file writes run on a thread.

Bad input: samples that are not finite or negative are dropped (a counter reset already yields no rate, see
`agent.store.rates`); a pod that restarts keeps its model (same UID), a recreated pod starts a new one (its cold
start runs from its creation); a wall clock that jumps (the gap between two trainings differs from the monotonic
one by more than `CLOCK_JUMP_SECONDS`) moves every model's timestamps by the jump, logged and counted, so neither
decay nor model ages see it; a checkpoint that cannot be used is a logged reset (`agent.prediction.checkpoint`).
Whatever the models say, the reclaimable never exceeds allocatable minus the predicted peak (`reclaimable.py`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from agent.prediction import checkpoint
from agent.prediction.models import NODE_UID, PRIORITY_ITEMS, SYSTEM_ITEM, PeakModels, node_item_uid
from agent.prediction.reclaimable import (
    CPU_PERCENTILE,
    MEMORY_PERCENTILE,
    PredictedPod,
    ReclaimPolicy,
    ReclaimResult,
    Resources,
    prod_reclaimable,
)
from agent.series import (
    CPU_USAGE_CORES,
    MEMORY_ANON_USAGE_BYTES,
    NODE_CPU_USAGE_CORES,
    NODE_MEMORY_USAGE_BYTES,
    SeriesKey,
)
from agent.store.aggregate import aggregate_windows
from agent.store.ring import SampleRing
from common.api.constants import RESOURCE_CPU, RESOURCE_MEMORY
from common.api.nodedigest import digest_node
from common.api.poddigest import digest_pod

log = logging.getLogger("loadline.agent.prediction")

CLOCK_JUMP_SECONDS: Final = 60.0  # wall and monotonic clocks may drift apart by this much between trainings
TRAINING_QUANTILE: Final = (("p90", 0.9),)  # koordlet's metricServer reads the p90 of the last interval


@dataclass(frozen=True, slots=True)
class PredictorSettings:
    """koordlet's `prediction.Config` defaults; `min_history_seconds` is Loadline's (see reclaimable.py)."""

    checkpoint_dir: Path | None = None
    cold_start_seconds: float = 24 * 3600.0
    safety_margin_percent: int = 10
    cpu_half_life_seconds: float = 12 * 3600.0
    memory_half_life_seconds: float = 24 * 3600.0
    training_interval_seconds: float = 60.0
    model_expiration_seconds: float = 30 * 60.0
    checkpoint_interval_seconds: float = 10 * 60.0
    min_history_seconds: float = 0.0
    max_pods: int = 512

    @property
    def policy(self) -> ReclaimPolicy:
        return ReclaimPolicy(self.cold_start_seconds, self.safety_margin_percent, self.min_history_seconds)


# ------------------------------------------------------------------------------------------------ pods and node
def predicted_pod(pod: Mapping[str, Any]) -> PredictedPod | None:
    """A pod object as the reclaimable calculation reads it (from its digest, `common/api/poddigest.py`); None
    without a UID, or when the pod cannot be read (the agent's pod watch counts it): its requests are unknown."""
    digest = digest_pod(pod)
    if not digest.uid or digest.problem is not None:
        return None
    requests = digest.requests
    return PredictedPod(
        uid=digest.uid,
        priority=digest.priority_class.value,
        request=Resources(requests.get(RESOURCE_CPU, 0), requests.get(RESOURCE_MEMORY, 0)),
        created_at=digest.creation_timestamp,
        terminating=digest.deleting or digest.phase in ("Succeeded", "Failed"),
        key=digest.key,
    )


def node_allocatable(node: Mapping[str, Any]) -> Resources | None:
    """The raw-allocatable annotation (CPU normalisation, amplification) when it has cpu and memory, else
    status.allocatable (from the Node's digest, `common/api/nodedigest.py`)."""
    digest = digest_node(node)
    for source in (digest.raw_allocatable or {}, digest.allocatable):
        if RESOURCE_CPU in source and RESOURCE_MEMORY in source:
            return Resources(source[RESOURCE_CPU], source[RESOURCE_MEMORY])
    return None


# ------------------------------------------------------------------------------------------------ metrics
class _Metrics:
    """The process's prediction series (agent/prediction/metrics.py), imported on first use."""

    def __init__(self) -> None:
        from agent.prediction import metrics

        self.models, self.model_bytes, self.refused = metrics.MODELS, metrics.MODEL_BYTES, metrics.REFUSED
        self.resets, self.dropped, self.training_seconds = metrics.RESETS, metrics.DROPPED, metrics.TRAINING_SECONDS
        self.checkpoints, self.reclaimable, self.peak = metrics.CHECKPOINTS, metrics.RECLAIMABLE, metrics.PEAK


# ------------------------------------------------------------------------------------------------ the predictor
@dataclass
class TrainingStep:
    """What one training did (for tests, logs and the bench)."""

    pods: int = 0
    skipped_pods: int = 0
    refused: list[str] = field(default_factory=list)
    node: bool = False
    dropped_samples: int = 0
    expired: list[str] = field(default_factory=list)
    clock_jump_seconds: float = 0.0


class PeakPredictor:
    def __init__(
        self,
        settings: PredictorSettings,
        *,
        wall: Callable[[], float] = time.time,
        metrics: bool = True,
    ) -> None:
        self.settings = settings
        self.wall = wall
        self.models = PeakModels(
            cpu_half_life_seconds=settings.cpu_half_life_seconds,
            memory_half_life_seconds=settings.memory_half_life_seconds,
            max_models=settings.max_pods + 7,
        )
        self.metrics = _Metrics() if metrics else None
        self._last_clocks: tuple[float, float] | None = None  # (wall, monotonic) of the last training
        self._refused_logged: set[str] = set()
        self.last_result: ReclaimResult | None = None
        self.trainings = 0
        self._head = checkpoint.header(
            {"buckets": self.models.cpu.buckets.describe(), "halfLifeSeconds": settings.cpu_half_life_seconds},
            {"buckets": self.models.memory.buckets.describe(), "halfLifeSeconds": settings.memory_half_life_seconds},
        )

    # -------------------------------------------------------------------------------------------- training
    def train(
        self, ring: SampleRing, pods: Iterable[PredictedPod], *, mono: float, wall: float | None = None
    ) -> TrainingStep:
        """One training step at monotonic time `mono` (the ring's clock) and wall time `wall` (the models')."""
        started = time.perf_counter()
        now = self.wall() if wall is None else wall
        step = TrainingStep()
        step.clock_jump_seconds = self._follow_clock(now, mono)

        pod_list = [p for p in pods if not p.terminating]
        keys: list[SeriesKey] = [SeriesKey(NODE_CPU_USAGE_CORES), SeriesKey(NODE_MEMORY_USAGE_BYTES)]
        for pod in pod_list:
            keys.append(SeriesKey(CPU_USAGE_CORES, pod.uid))
            keys.append(SeriesKey(MEMORY_ANON_USAGE_BYTES, pod.uid))
        values = self._p90(ring, mono, keys)
        bad = ~np.isfinite(values) | (values < 0)
        step.dropped_samples = int(np.count_nonzero(bad & ~np.isnan(values)))
        values[bad] = np.nan

        uids: list[str] = []
        cpu: list[float] = []
        mem: list[float] = []
        by_class: dict[str, list[float]] = {c: [0.0, 0.0] for c in PRIORITY_ITEMS}
        all_pods = [0.0, 0.0]
        for i, pod in enumerate(pod_list):
            c, m = values[2 + 2 * i], values[3 + 2 * i]
            if math.isnan(c) or math.isnan(m):
                step.skipped_pods += 1
                continue
            uids.append(pod.uid)
            cpu.append(float(c))
            mem.append(float(m))
            totals = by_class.setdefault(pod.priority if pod.priority in by_class else "", [0.0, 0.0])
            totals[0] += float(c)
            totals[1] += float(m)
            all_pods[0] += float(c)
            all_pods[1] += float(m)
        step.pods = len(uids)
        node_cpu, node_mem = float(values[0]), float(values[1])
        step.node = not (math.isnan(node_cpu) or math.isnan(node_mem))
        for cls in PRIORITY_ITEMS:
            uids.append(node_item_uid(cls))
            cpu.append(by_class[cls][0])
            mem.append(by_class[cls][1])
        if step.node:
            uids += [NODE_UID, node_item_uid(SYSTEM_ITEM)]
            cpu += [node_cpu, max(node_cpu - all_pods[0], 0.0)]
            mem += [node_mem, max(node_mem - all_pods[1], 0.0)]
        step.refused = self.models.update(uids, np.asarray(cpu), np.asarray(mem), now)
        step.expired = self.models.remove(self.models.expired(now, self.settings.model_expiration_seconds))
        self.trainings += 1
        self._account(step, time.perf_counter() - started)
        return step

    def _p90(self, ring: SampleRing, mono: float, keys: Sequence[SeriesKey]) -> np.ndarray:
        rows = [ring.row_of(k) for k in keys]
        out = np.full(len(keys), np.nan)
        present = [(i, r) for i, r in enumerate(rows) if r is not None]
        if not present:
            return out
        mask = np.zeros(ring.high_water, dtype=np.bool_)
        mask[[r for _, r in present]] = True
        (stats,) = aggregate_windows(
            ring,
            mono,
            (self.settings.training_interval_seconds,),
            TRAINING_QUANTILE,
            min_coverage=0.0,
            quantile_rows=mask,
        )
        p90 = stats.quantiles["p90"]
        for i, r in present:
            if r < p90.shape[0] and stats.count[r] > 0:
                out[i] = p90[r]
        return out

    def _follow_clock(self, wall: float, mono: float) -> float:
        last, self._last_clocks = self._last_clocks, (wall, mono)
        if last is None:
            return 0.0
        jump = (wall - last[0]) - (mono - last[1])
        if abs(jump) <= CLOCK_JUMP_SECONDS:
            return 0.0
        self.models.shift_time(jump)
        log.warning(
            "wall clock jumped by %+.0f s between two trainings: every model's timestamps moved with it (decay, "
            "model ages and expiry as if it had not)",
            jump,
        )
        if self.metrics is not None:
            self.metrics.resets.labels("clock_jump").inc()
        return jump

    def _account(self, step: TrainingStep, seconds: float) -> None:
        new = [uid for uid in step.refused if uid not in self._refused_logged]
        if new:
            self._refused_logged.update(new)
            log.warning(
                "%d pod(s) left without a peak model: %d models is the bound (--prediction-max-pods %d); they lend "
                "nothing to mid resources",
                len(new),
                self.models.max_models,
                self.settings.max_pods,
            )
        if self.metrics is not None:
            self.metrics.models.set(len(self.models))
            self.metrics.model_bytes.set(self.models.nbytes)
            self.metrics.refused.inc(len(new))
            self.metrics.dropped.inc(step.dropped_samples)
            self.metrics.training_seconds.set(seconds)

    # -------------------------------------------------------------------------------------------- results
    def result(
        self,
        pods: Iterable[PredictedPod],
        allocatable: Resources | None,
        *,
        wall: float | None = None,
        policy: ReclaimPolicy | None = None,
    ) -> ReclaimResult:
        """prodReclaimable and prodPeak for the pods the report carries (koordlet: those with a podsMetric entry);
        `policy` other than the settings' only for what-if comparisons (the bench's margin sweep)."""
        now = self.wall() if wall is None else wall
        pod_list = list(pods)
        wanted = [p.uid for p in pod_list] + [node_item_uid(SYSTEM_ITEM), *(node_item_uid(c) for c in PRIORITY_ITEMS)]
        predictions = self.models.predict(wanted, cpu=(CPU_PERCENTILE,), memory=(MEMORY_PERCENTILE,))
        since = {uid: s for uid in wanted if (s := self.models.history_since(uid)) is not None}
        result = prod_reclaimable(
            pod_list, predictions, allocatable, policy or self.settings.policy, now=now, model_since=since
        )
        if policy is not None:
            return result
        self.last_result = result
        if self.metrics is not None:
            for gauge, value in ((self.metrics.reclaimable, result.reclaimable), (self.metrics.peak, result.peak)):
                gauge.labels("cpu").set(value.cpu_milli / 1000 if value else 0.0)
                gauge.labels("memory").set(value.memory_bytes if value else 0.0)
        return result

    # -------------------------------------------------------------------------------------------- checkpoints
    def restore(self) -> str:
        """Load the checkpoint (blocking file I/O: call on a thread at start). Returns what happened, logged."""
        directory = self.settings.checkpoint_dir
        if directory is None:
            return "no checkpoint directory: models start empty at every start"
        restored = checkpoint.load(directory, self._head)
        if restored.models is None:
            return self._reset(restored.reason, first_start=restored.reason.startswith("no checkpoint"))
        try:
            self.models.restore(restored.models)
        except ValueError as exc:
            checkpoint.reject(directory, str(exc))
            return self._reset(f"{checkpoint.path_in(directory)}: {exc}")
        now = self.wall()
        if restored.saved_at is not None and restored.saved_at > now + CLOCK_JUMP_SECONDS:
            self.models.shift_time(now - restored.saved_at)
            log.warning("checkpoint saved %.0f s in the future: models moved back to now", restored.saved_at - now)
        if self.metrics is not None:
            self.metrics.models.set(len(self.models))
        log.info("peak models restored: %s", restored.reason)
        return restored.reason

    def _reset(self, reason: str, *, first_start: bool = False) -> str:
        self.models.clear()
        if first_start:
            log.info("peak models start empty: %s", reason)
            return reason
        log.warning("peak models reset, starting empty: %s", reason)
        if self.metrics is not None:
            self.metrics.resets.labels("checkpoint_unusable").inc()
        return f"reset: {reason}"

    def snapshot(self) -> list[dict[str, Any]]:
        """The models as checkpoint entries (on the loop: the banks are not copied, so no training may run)."""
        return self.models.export()

    def save(self, models: list[dict[str, Any]]) -> bool:
        """Write a snapshot (blocking: call on a thread). Logs and counts a failure, never raises."""
        directory = self.settings.checkpoint_dir
        if directory is None:
            return False
        try:
            size = checkpoint.save(directory, self._head, models, self.wall())
        except OSError as exc:
            log.warning("peak-model checkpoint not written to %s: %s", directory, exc)
            if self.metrics is not None:
                self.metrics.checkpoints.labels("failed").inc()
            return False
        log.debug("peak-model checkpoint: %d models, %d bytes", len(models), size)
        if self.metrics is not None:
            self.metrics.checkpoints.labels("ok").inc()
        return True

    # -------------------------------------------------------------------------------------------- the daemon's loop
    async def run(
        self,
        ring: Callable[[], SampleRing],
        pods: Callable[[], Iterable[PredictedPod]],
        refresh_node: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Restore, then train every interval (the first after one interval of samples) and checkpoint every
        checkpoint interval, until cancelled; the last checkpoint is written on the way out."""
        await asyncio.to_thread(self.restore)
        interval = self.settings.training_interval_seconds
        last_checkpoint = time.monotonic()
        try:
            while True:
                await asyncio.sleep(interval)
                if refresh_node is not None:
                    await refresh_node()
                try:
                    self.train(ring(), pods(), mono=time.monotonic())
                except Exception:  # a bug must not stop the predictor for good; the next interval tries again
                    log.exception("peak-model training failed")
                if time.monotonic() - last_checkpoint >= self.settings.checkpoint_interval_seconds:
                    last_checkpoint = time.monotonic()
                    await asyncio.to_thread(self.save, self.snapshot())
        finally:
            if self.settings.checkpoint_dir is not None and self.trainings:
                await asyncio.shield(asyncio.to_thread(self.save, self.snapshot()))


__all__ = ["PeakPredictor", "PredictorSettings", "TrainingStep", "node_allocatable", "predicted_pod"]
