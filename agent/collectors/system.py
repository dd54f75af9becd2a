"""System usage as Koordinator defines it: node - sum(pods) - sum(host applications), clamped at 0.

What the kubelet, container runtime, kernel threads and anything outside kubepods use. Clamped because
node and pod readings are taken microseconds apart from different sources and can cross when the node is
almost entirely pods.
"""

from __future__ import annotations

from collections.abc import Iterable


def system_usage(node: float, pods: Iterable[float], host_applications: Iterable[float] = ()) -> float:
    return max(node - sum(pods) - sum(host_applications), 0.0)
