"""Per-node anomaly detection: a node must stay hot for several consecutive rounds before anything is
evicted from it, so a short spike does not trigger migrations.

Koordinator's BasicDetector semantics, with the clock passed in so rounds are testable:
- OK state: each abnormal mark counts; when the consecutive count EXCEEDS ``consecutiveAbnormalities``
  the node becomes anomalous (default 5: the 6th consecutive hot round).
- Anomaly state lasts ``timeout``; then it returns to OK with fresh counters. More than
  ``consecutiveNormalities`` consecutive normal marks also return it to OK.
- A normal mark breaks an abnormal streak and vice versa.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from scheduler_plugin.descheduler.args import AnomalyCondition, LowNodeLoadArgs, effective_detector_cache_timeout


class DetectorState(Enum):
    OK = "ok"
    ANOMALY = "anomaly"


@dataclass(slots=True)
class AnomalyDetector:
    condition: AnomalyCondition
    state: DetectorState = DetectorState.OK
    consecutive_abnormalities: int = 0
    consecutive_normalities: int = 0
    anomaly_until: float = 0.0  # meaningful in ANOMALY state only

    def current_state(self, now: float) -> DetectorState:
        if self.state is DetectorState.ANOMALY and self.anomaly_until < now:
            self._enter(DetectorState.OK, now)
        return self.state

    def mark(self, normal: bool, now: float) -> DetectorState:
        state = self.current_state(now)
        if normal:
            self.consecutive_normalities += 1
            self.consecutive_abnormalities = 0
            if state is DetectorState.ANOMALY and (
                self.consecutive_normalities > self.condition.consecutive_normalities
            ):
                self._enter(DetectorState.OK, now)
        else:
            self.consecutive_abnormalities += 1
            self.consecutive_normalities = 0
            if state is DetectorState.OK and (
                self.consecutive_abnormalities > self.condition.consecutive_abnormalities
            ):
                self._enter(DetectorState.ANOMALY, now)
        return self.state

    def reset(self) -> None:
        self.state = DetectorState.OK
        self.consecutive_abnormalities = 0
        self.consecutive_normalities = 0
        self.anomaly_until = 0.0

    def _enter(self, state: DetectorState, now: float) -> None:
        self.state = state
        self.consecutive_abnormalities = 0
        self.consecutive_normalities = 0
        self.anomaly_until = now + self.condition.timeout if state is DetectorState.ANOMALY else 0.0


def detector_key(pool: str, node: str) -> str:
    """Detectors are per (pool, node): Koordinator keys them by node only, so with overlapping
    pools (the top-level pool covers every node) one pool's reset would erase another's streak."""
    return f"{pool}/{node}"


class DetectorStore:
    """Detectors by :func:`detector_key`; kept across rounds by the caller. An entry not marked abnormal for
    ``cache_timeout`` seconds is forgotten (Koordinator's detectorCacheTimeout), so a node that was
    hot long ago starts from zero."""

    def __init__(self, cache_timeout: float) -> None:
        self.cache_timeout = cache_timeout
        self._entries: dict[str, tuple[AnomalyDetector, float]] = {}

    @classmethod
    def from_args(cls, args: LowNodeLoadArgs) -> DetectorStore:
        return cls(effective_detector_cache_timeout(args))

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, node: str, now: float) -> AnomalyDetector | None:
        entry = self._entries.get(node)
        if entry is None:
            return None
        if now - entry[1] > self.cache_timeout:
            del self._entries[node]
            return None
        return entry[0]

    def mark_abnormal(self, node: str, condition: AnomalyCondition, now: float) -> bool:
        """Mark one hot round; True when the node is anomalous (evictable) this round."""
        if condition.consecutive_abnormalities == 1:
            return True  # Koordinator: every hot node qualifies immediately
        detector = self.get(node, now) or AnomalyDetector(condition)
        state = detector.mark(normal=False, now=now)
        self._entries[node] = (detector, now)
        return state is DetectorState.ANOMALY

    def mark_normal(self, node: str, now: float) -> None:
        detector = self.get(node, now)
        if detector is not None:
            detector.mark(normal=True, now=now)

    def reset(self, node: str, now: float) -> None:
        detector = self.get(node, now)
        if detector is not None:
            detector.reset()
