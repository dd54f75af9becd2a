"""Why a pod went where it went, or why it is pending: one line per node.

Built from a cycle run with `record=True`. The `loadline explain` command and the
scheduler's HTTP endpoint render these rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler_plugin.framework.schedule_one import ScheduleResult
from scheduler_plugin.framework.snapshot import Snapshot


@dataclass(slots=True)
class NodeExplanation:
    node: str
    rejected_by: str = ""  # plugin that filtered the node out ("" when it was feasible)
    reasons: list[str] = field(default_factory=list)
    scores: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # plugin -> (raw, normalized, weight)
    total: int | None = None
    chosen: bool = False

    def line(self) -> str:
        if self.rejected_by:
            return f"{self.node}: rejected by {self.rejected_by}: {'; '.join(self.reasons)}"
        if self.total is None:
            return f"{self.node}: feasible, not scored" + (" (chosen)" if self.chosen else "")
        parts = ", ".join(f"{p}={n}×{w}" for p, (_, n, w) in self.scores.items())
        return f"{self.node}: total {self.total} ({parts})" + (" (chosen)" if self.chosen else "")


def explain(result: ScheduleResult, snapshot: Snapshot) -> list[NodeExplanation]:
    """Rejected nodes with their reasons, then scored nodes by total (best first)."""
    rows: dict[int, NodeExplanation] = {}
    if result.diagnosis is not None:
        for rejection in result.diagnosis.rejections:
            for row in rejection.rows.tolist():
                name = _node_name(snapshot, row)
                if name is None:
                    continue
                entry = rows.setdefault(row, NodeExplanation(name))
                entry.rejected_by = entry.rejected_by or rejection.plugin or "PreFilter"
                entry.reasons.append(rejection.reason)
    scores = result.scores
    if scores is not None and scores.totals is not None:
        for k, row in enumerate(scores.rows.tolist()):
            name = _node_name(snapshot, row)
            if name is None:
                continue
            entry = rows.setdefault(row, NodeExplanation(name))
            entry.rejected_by, entry.reasons = "", []
            entry.total = int(scores.totals[k])
            entry.scores = {
                name: (int(scores.raw[name][k]), int(scores.normalized[name][k]), scores.weights[name])
                for name in scores.normalized
            }
    if result.node_name is not None:
        node = snapshot.node_by_name(result.node_name)
        if node is not None:
            rows.setdefault(node.index, NodeExplanation(result.node_name)).chosen = True
    return sorted(rows.values(), key=lambda e: (e.rejected_by != "", -(e.total or 0), e.node))


def _node_name(snapshot: Snapshot, row: int) -> str | None:
    """The node at a row, or None when it was removed since the cycle ran (the result is kept for
    `explain` after the cluster moved on)."""
    try:
        return snapshot.node_name(row)
    except KeyError:
        return None
