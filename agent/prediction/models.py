"""The predictor's models by UID: one CPU and one memory decaying histogram each, in two `HistogramBank`s.

A model is a pod (by UID), the node (`__node__`), a priority class of the node's pods (`__node-koord-prod__`, ...,
`__node-__` for pods of no class) or the system (`__node-sys__`: node usage not counted in any pod), as in
koordlet's `prediction/predict_server.go`. Koordinator's buckets and half-lives:

- CPU, cores: exponential buckets from 0.025 cores growing 5 % a bucket up to 1,024 cores (158 buckets), half-life
  12 h;
- memory, bytes: exponential buckets from 5 MiB growing 5 % up to 2 TiB (205 buckets), half-life 24 h;
- epsilon 1e-4 (0.001 x the minimal sample weight 0.1).

Memory is bounded: at most `max_models` models (pods beyond the bound are refused, counted and logged by the
caller; node items always have room). One model is (158 + 205) float64 weights plus a few scalars per bank,
about 2.9 KiB; 512 pods and the 8 node items take 1.5 MiB (`nbytes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from agent.prediction.histogram import ExponentialBuckets, HistogramBank

F64 = npt.NDArray[np.float64]

MIN_SAMPLE_WEIGHT: Final = 0.1
EPSILON: Final = 0.001 * MIN_SAMPLE_WEIGHT
BUCKET_GROWTH: Final = 0.05
CPU_BUCKETS: Final = ExponentialBuckets(1024.0, 0.025, 1.0 + BUCKET_GROWTH, EPSILON)
MEMORY_BUCKETS: Final = ExponentialBuckets(float(1 << 41), float(5 << 20), 1.0 + BUCKET_GROWTH, EPSILON)

NODE_UID: Final = "__node__"
SYSTEM_ITEM: Final = "sys"
# Koordinator's KnownPriorityClasses, "" being the pods of no class.
PRIORITY_ITEMS: Final = ("koord-prod", "koord-mid", "koord-batch", "koord-free", "")
# The percentiles a prediction carries (Koordinator's GetPrediction).
PREDICTED: Final = (("p60", 0.6), ("p90", 0.9), ("p95", 0.95), ("p98", 0.98), ("max", 1.0))


def node_item_uid(item: str) -> str:
    """`__node-<item>__`: the model of a node-level item (a priority class, or `sys`)."""
    return f"__node-{item}__"


NODE_ITEM_UIDS: Final = (NODE_UID, node_item_uid(SYSTEM_ITEM), *(node_item_uid(p) for p in PRIORITY_ITEMS))


@dataclass(frozen=True, slots=True)
class Prediction:
    """Percentiles of one model: CPU in cores, memory in bytes, by name (p60 p90 p95 p98 max)."""

    cpu: dict[str, float]
    memory: dict[str, float]


class PeakModels:
    """Models by UID, at most `max_models`; rows grow by doubling up to the bound."""

    def __init__(
        self,
        *,
        cpu_half_life_seconds: float = 12 * 3600.0,
        memory_half_life_seconds: float = 24 * 3600.0,
        max_models: int = 512 + len(NODE_ITEM_UIDS),
    ) -> None:
        if max_models < len(NODE_ITEM_UIDS):
            raise ValueError(f"max_models must leave room for the {len(NODE_ITEM_UIDS)} node items")
        self.max_models = max_models
        self.cpu = HistogramBank(CPU_BUCKETS, cpu_half_life_seconds)
        self.memory = HistogramBank(MEMORY_BUCKETS, memory_half_life_seconds)
        self.row_of: dict[str, int] = {}
        self._free: list[int] = []
        self.first_sample: F64 = np.zeros(0)  # seconds; when the model got its first sample
        self.last_updated: F64 = np.zeros(0)

    def __len__(self) -> int:
        return len(self.row_of)

    def __contains__(self, uid: object) -> bool:
        return uid in self.row_of

    @property
    def nbytes(self) -> int:
        return self.cpu.nbytes + self.memory.nbytes + self.first_sample.nbytes + self.last_updated.nbytes

    def uids(self) -> list[str]:
        return list(self.row_of)

    # ------------------------------------------------------------------------------------------------ rows
    def _grow(self) -> None:
        old = self.cpu.rows
        new = min(max(16, old * 2), self.max_models)
        for bank in (self.cpu, self.memory):
            bank.resize(new)
        for name in ("first_sample", "last_updated"):
            grown = np.zeros(new)
            grown[:old] = getattr(self, name)
            setattr(self, name, grown)
        self._free.extend(range(new - 1, old - 1, -1))

    def _pod_models(self) -> int:
        return sum(1 for uid in self.row_of if uid not in NODE_ITEM_UIDS)

    def row(self, uid: str) -> int | None:
        """The row of `uid`, created (empty) if there is room; None when the bound refuses a new pod model."""
        row = self.row_of.get(uid)
        if row is not None:
            return row
        if uid not in NODE_ITEM_UIDS and self._pod_models() >= self.max_models - len(NODE_ITEM_UIDS):
            return None
        if not self._free:
            self._grow()
        row = self._free.pop()
        self.row_of[uid] = row
        for bank in (self.cpu, self.memory):
            bank.clear([row])
        self.first_sample[row] = 0.0
        self.last_updated[row] = 0.0
        return row

    def remove(self, uids: Iterable[str]) -> list[str]:
        removed = []
        for uid in uids:
            row = self.row_of.pop(uid, None)
            if row is not None:
                self._free.append(row)
                removed.append(uid)
        return removed

    def clear(self) -> None:
        self.remove(list(self.row_of))

    # ------------------------------------------------------------------------------------------------ training
    def update(self, uids: Sequence[str], cpu_cores: F64, memory_bytes: F64, now: float) -> list[str]:
        """One sample per model (weight 1, Koordinator's training step); returns the UIDs refused by the bound."""
        rows, refused, kept = [], [], []
        for i, uid in enumerate(uids):
            row = self.row(uid)
            if row is None:
                refused.append(uid)
                continue
            rows.append(row)
            kept.append(i)
        if rows:
            r = np.asarray(rows, dtype=np.intp)
            k = np.asarray(kept, dtype=np.intp)
            self.cpu.add(r, np.asarray(cpu_cores, dtype=np.float64)[k], now)
            self.memory.add(r, np.asarray(memory_bytes, dtype=np.float64)[k], now)
            fresh = self.first_sample[r] == 0.0
            self.first_sample[r[fresh]] = now
            self.last_updated[r] = now
        return refused

    def expired(self, now: float, max_age_seconds: float) -> list[str]:
        """Models not updated for longer than `max_age_seconds` (Koordinator's model expiration)."""
        return [uid for uid, row in self.row_of.items() if now - self.last_updated[row] > max_age_seconds]

    def shift_time(self, seconds: float) -> None:
        """Move every model's timestamps by `seconds` (the clock jumped: keep relative weights and ages)."""
        rows = np.asarray(list(self.row_of.values()), dtype=np.intp)
        if rows.size == 0:
            return
        for bank in (self.cpu, self.memory):
            bank.reference[rows] += seconds
        self.first_sample[rows] += seconds
        self.last_updated[rows] += seconds

    # ------------------------------------------------------------------------------------------------ reading
    def predict(
        self, uids: Sequence[str], cpu: Sequence[str] | None = None, memory: Sequence[str] | None = None
    ) -> dict[str, Prediction]:
        """Predictions of the known models among `uids`, vectorised over the models: the named percentiles of
        PREDICTED (default all; the report reads p95 CPU and p98 memory only)."""
        known = [uid for uid in uids if uid in self.row_of]
        if not known:
            return {}
        rows = np.asarray([self.row_of[uid] for uid in known], dtype=np.intp)
        wanted_cpu = [(n, q) for n, q in PREDICTED if cpu is None or n in cpu]
        wanted_memory = [(n, q) for n, q in PREDICTED if memory is None or n in memory]
        cpu_values = [(name, self.cpu.percentiles(rows, q).tolist()) for name, q in wanted_cpu]
        memory_values = [(name, self.memory.percentiles(rows, q).tolist()) for name, q in wanted_memory]
        return {
            uid: Prediction(
                {name: values[i] for name, values in cpu_values},
                {name: values[i] for name, values in memory_values},
            )
            for i, uid in enumerate(known)
        }

    def history_since(self, uid: str) -> float | None:
        row = self.row_of.get(uid)
        return None if row is None else float(self.first_sample[row])

    # ------------------------------------------------------------------------------------------------ checkpoints
    def export(self) -> list[dict[str, Any]]:
        out = []
        for uid, row in self.row_of.items():
            out.append(
                {
                    "uid": uid,
                    "firstSample": float(self.first_sample[row]),
                    "lastUpdated": float(self.last_updated[row]),
                    "cpu": self.cpu.save(row),
                    "memory": self.memory.save(row),
                }
            )
        return out

    def restore(self, models: Sequence[dict[str, Any]]) -> None:
        """Replace every model by those of a checkpoint; raises ValueError (models left empty) on a bad entry."""
        self.clear()
        try:
            for i, entry in enumerate(models):
                if not isinstance(entry, dict) or not isinstance(entry.get("uid"), str) or not entry["uid"]:
                    raise ValueError(f"model {i} has no uid")
                times = [entry.get("firstSample"), entry.get("lastUpdated")]
                if not all(isinstance(t, (int, float)) and not isinstance(t, bool) and np.isfinite(t) for t in times):
                    raise ValueError(f"model {entry['uid']}: firstSample/lastUpdated are not numbers")
                if entry["uid"] in self.row_of:
                    raise ValueError(f"model {entry['uid']} appears twice")
                row = self.row(entry["uid"])
                if row is None:
                    raise ValueError(f"more pod models than the bound of {self.max_models - len(NODE_ITEM_UIDS)}")
                try:
                    self.cpu.load(row, entry.get("cpu"))
                    self.memory.load(row, entry.get("memory"))
                except ValueError as exc:
                    raise ValueError(f"model {entry['uid']}: {exc}") from None
                self.first_sample[row] = float(times[0])  # type: ignore[arg-type]
                self.last_updated[row] = float(times[1])  # type: ignore[arg-type]
        except ValueError:
            self.clear()
            raise


__all__ = [
    "CPU_BUCKETS",
    "MEMORY_BUCKETS",
    "NODE_ITEM_UIDS",
    "NODE_UID",
    "PRIORITY_ITEMS",
    "SYSTEM_ITEM",
    "PeakModels",
    "Prediction",
    "node_item_uid",
]
