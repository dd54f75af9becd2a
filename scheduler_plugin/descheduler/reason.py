"""Koordinator's eviction reason and ``Descheduled`` event message, byte for byte."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler_plugin.descheduler.usage import FloatArray

EVENT_REASON = "Descheduled"
EVENT_ACTION = "Migrating"


def overutilized_reason(
    resources: Sequence[str],
    *,
    usage: FloatArray,
    allocatable: FloatArray,
    threshold_qty: FloatArray,
    threshold_pct: FloatArray,
    prod: bool,
) -> str:
    """``node is overutilized, node cpu usage(82.35%)>threshold(75.00%), node memory ...``

    Only resources over their threshold are listed, sorted by name, with %.2f; the prod pass
    writes ``prod`` instead of ``node`` before each resource.
    """
    scope = "prod" if prod else "node"
    parts = []
    for j in sorted(range(len(resources)), key=lambda k: resources[k]):
        if usage[j] > threshold_qty[j]:
            pct = 100.0 * usage[j] / allocatable[j] if allocatable[j] > 0 else 0.0
            parts.append(f"{scope} {resources[j]} usage({pct:.2f}%)>threshold({threshold_pct[j]:.2f}%)")
    return "node is overutilized, " + ", ".join(parts)


def descheduled_event_message(node_name: str, reason: str) -> str:
    """Message of the ``Descheduled`` event written on the evicted pod."""
    return f'Pod evicted from node "{node_name}" by the reason "{reason}"'
