"""Why a pod fits nowhere: per-node rejections and kube-scheduler's FitError message.

The message format is kube-scheduler's (`FitError.Error()`):
    0/<N> nodes are available: <PreFilter msg>. <sorted "count reason" list>. <PostFilter msg>
(no period of its own after the PostFilter message, which is usually a FitError message ending in one).
When PreFilter rejected the pod, the per-node histogram is left out (every node carries
that same status), exactly as kube-scheduler does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scheduler_plugin.framework.filterresult import FilterResult
from scheduler_plugin.framework.snapshot import IndexArray
from scheduler_plugin.framework.status import Code

NO_NODE_AVAILABLE = "0/{} nodes are available:"
NO_NODES_IN_CLUSTER = "no nodes available to schedule pods"


@dataclass(frozen=True, slots=True)
class NodeRejection:
    plugin: str
    reason: str
    code: Code
    rows: IndexArray  # snapshot rows rejected for this reason


@dataclass(slots=True)
class Diagnosis:
    num_all_nodes: int
    rejections: list[NodeRejection] = field(default_factory=list)
    prefilter_msg: str = ""
    postfilter_msg: str = ""
    unschedulable_plugins: set[str] = field(default_factory=set)

    def add_filter_result(self, plugin: str, candidates: IndexArray, result: FilterResult) -> None:
        for rejection in result.rejections:
            self.rejections.append(NodeRejection(plugin, rejection.reason, rejection.code, candidates[rejection.mask]))
        if result.rejections:
            self.unschedulable_plugins.add(plugin)

    def add_rows(self, plugin: str, reason: str, code: Code, rows: IndexArray) -> None:
        if rows.size:
            self.rejections.append(NodeRejection(plugin, reason, code, rows))
            if plugin:
                self.unschedulable_plugins.add(plugin)

    def reason_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.rejections:
            counts[r.reason] = counts.get(r.reason, 0) + int(r.rows.size)
        return counts

    def message(self) -> str:
        text = NO_NODE_AVAILABLE.format(self.num_all_nodes)
        if self.prefilter_msg:
            text += f" {self.prefilter_msg}."
        else:
            histogram = sorted(f"{count} {reason}" for reason, count in self.reason_counts().items())
            if histogram:
                text += f" {', '.join(histogram)}."
        if self.postfilter_msg:
            text += f" {self.postfilter_msg}"
        return text

    def rows_rejected_with(self, *codes: Code) -> IndexArray:
        parts = [r.rows for r in self.rejections if r.code in codes]
        if not parts:
            return np.zeros(0, np.intp)
        return np.unique(np.concatenate(parts)).astype(np.intp)

    def reasons_for_row(self, row: int) -> list[tuple[str, str]]:
        """(plugin, reason) pairs that rejected one node (for `explain`)."""
        return [(r.plugin, r.reason) for r in self.rejections if bool(np.any(r.rows == row))]
