"""Provisional placements: the pod we just scored, counted on our best node until its binding is seen.

kube-scheduler assumes a pod in its own cache before it schedules the next one; the extender only
learns where a pod went when the binding reaches its pod watch — after kube-scheduler has already
scheduled the next few pods of a burst. Without a stand-in, those pods all see the same "coldest"
node and pile onto it (LoadAware's assign cache exists to prevent exactly that). So after
prioritize we account the pod on the node our scores favour most — the one kube-scheduler picks
unless its own plugins outweigh ours — as an assumed pod in the snapshot. When the binding
arrives, the snapshot moves it to the real node if kube-scheduler chose another one; if no
binding arrives within the TTL (the pod failed elsewhere in the cycle, or was deleted), the
stand-in is dropped.
"""

from __future__ import annotations

from collections import OrderedDict

from scheduler_plugin.extender import metrics
from scheduler_plugin.framework.clock import Clock
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import Snapshot

DEFAULT_TTL_SECONDS = 15.0
# Stand-ins held at once: kube-scheduler places a few hundred pods a second, so one TTL of them is a few
# thousand; requests beyond that (a flood of made-up pods) retire the oldest stand-in instead of growing the cache.
MAX_PROVISIONAL = 10_000


class ProvisionalPlacements:
    def __init__(
        self, snapshot: Snapshot, clock: Clock, ttl_seconds: float = DEFAULT_TTL_SECONDS, limit: int = MAX_PROVISIONAL
    ) -> None:
        self.snapshot = snapshot
        self.clock = clock
        self.ttl_seconds = ttl_seconds
        self.limit = limit
        # pod key -> (node we assumed it on, deadline); insertion order is deadline order (one TTL)
        self._pending: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pending)

    def node_of(self, key: str) -> str | None:
        entry = self._pending.get(key)
        return None if entry is None else entry[0]

    def assume(self, pod: PodInfo, node_name: str) -> None:
        """Count `pod` on `node_name` until its binding is seen (no-op when the pod is already bound)."""
        self.release(pod.key)
        if pod.key in self.snapshot.records or self.snapshot.node_by_name(node_name) is None:
            return
        self.snapshot.assume_pod(pod, node_name, self.clock.now())
        self._pending[pod.key] = (node_name, self.clock.now() + self.ttl_seconds)
        metrics.PROVISIONAL.labels("assumed").inc()
        while len(self._pending) > self.limit:
            oldest, _ = self._pending.popitem(last=False)
            self._drop(oldest, "evicted")

    def release(self, key: str) -> None:
        """Drop our stand-in for a pod (it is being scheduled again, so it is not on any node)."""
        if self._pending.pop(key, None) is not None:
            self._drop(key, "released")

    def _drop(self, key: str, outcome: str) -> None:
        record = self.snapshot.records.get(key)
        if record is not None and record.assumed:
            self.snapshot.remove_pod(key)
            metrics.PROVISIONAL.labels(outcome).inc()

    def settle(self) -> None:
        """Retire stand-ins whose binding arrived (counting whether we guessed the node) or whose TTL passed."""
        now = self.clock.now()
        for key, (node_name, deadline) in list(self._pending.items()):
            record = self.snapshot.records.get(key)
            if record is not None and not record.assumed:
                # The watch delivered the bound pod; the snapshot already accounts it where it really is.
                del self._pending[key]
                landed = self.snapshot.node(record.node_index).name
                metrics.PROVISIONAL.labels("confirmed" if landed == node_name else "moved").inc()
            elif record is None:
                del self._pending[key]  # deleted through the watch meanwhile
            elif deadline <= now:
                del self._pending[key]
                self.snapshot.remove_pod(key)
                metrics.PROVISIONAL.labels("expired").inc()
