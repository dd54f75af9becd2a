"""`SimulatedPods`: the pods a simulation (preemption's dry run, nominated pods) took off or put on node rows.

VolumeRestrictions and NodeVolumeLimits judge a node by the volumes of its pods; the snapshot never changes in a
simulation, so they keep, in their cycle state, which pods it removed from or added to each row and read a row's
pods through `pods_on`. A cloned cycle state copies it (kube-scheduler clones the NodeInfo instead).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import IndexArray, Snapshot


@dataclass(slots=True)
class SimulatedPods:
    removed: dict[int, set[str]] = field(default_factory=dict)  # row -> keys of its pods taken away
    added: dict[int, list[PodInfo]] = field(default_factory=dict)  # row -> pods put there

    def clone(self) -> SimulatedPods:
        return SimulatedPods({k: set(v) for k, v in self.removed.items()}, {k: list(v) for k, v in self.added.items()})

    def apply(self, rows: IndexArray, pods: Sequence[PodInfo], sign: int) -> None:
        """`pods[i]` added to (sign 1) or removed from (sign -1) row `rows[i]`; an addition undoes a removal."""
        for row, pod in zip(rows.tolist(), pods, strict=True):
            if sign > 0:
                if pod.key in self.removed.get(row, ()):
                    self.removed[row].discard(pod.key)
                else:
                    self.added.setdefault(row, []).append(pod)
            else:
                added = self.added.get(row, [])
                if any(p.key == pod.key for p in added):
                    self.added[row] = [p for p in added if p.key != pod.key]
                else:
                    self.removed.setdefault(row, set()).add(pod.key)

    def touches(self, row: int) -> bool:
        return bool(self.removed.get(row) or self.added.get(row))

    def pods_on(self, snapshot: Snapshot, row: int) -> list[PodInfo]:
        """The row's pods as the simulation has them."""
        removed = self.removed.get(row, set())
        return [r.pod for key, r in snapshot.node(row).pods.items() if key not in removed] + self.added.get(row, [])
