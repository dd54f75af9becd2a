"""PodDisruptionBudgets as the scheduler reads them for preemption (`filterPodsWithPDBViolation`).

The API server enforces budgets when victims are evicted; this only steers the choice,
like kube-scheduler: victims whose eviction would take a budget below zero are counted as
violations and reprieved first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common.api.malformed import MalformedObjectError
from common.api.scheduling import LabelSelector, parse_label_selector
from scheduler_plugin.framework.podinfo import PodInfo


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    namespace: str
    name: str
    selector: LabelSelector | None  # None: an empty or missing selector, which selects no pod here
    disruptions_allowed: int
    disrupted_pods: frozenset[str]  # names the API server already counts as disrupted

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> DisruptionBudget:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise MalformedObjectError("PodDisruptionBudget metadata.name: required")
        raw_selector = spec.get("selector")
        selector = None
        if raw_selector:
            parsed = parse_label_selector(raw_selector, "PodDisruptionBudget spec.selector")
            selector = None if parsed.is_empty else parsed
        allowed = status.get("disruptionsAllowed", 0)
        if not isinstance(allowed, int):
            raise MalformedObjectError("PodDisruptionBudget status.disruptionsAllowed: expected an integer")
        return cls(
            namespace=str(meta.get("namespace") or "default"),
            name=name,
            selector=selector,
            disruptions_allowed=allowed,
            disrupted_pods=frozenset(str(k) for k in (status.get("disruptedPods") or {})),
        )


def split_by_violation(
    victims: Sequence[PodInfo], budgets: Sequence[DisruptionBudget]
) -> tuple[list[PodInfo], list[PodInfo]]:
    """(violating, non-violating), each in the given order: a victim violates when some budget
    selecting it would have fewer than zero disruptions left after it and the victims before it."""
    if not budgets:
        return [], list(victims)
    left = [b.disruptions_allowed for b in budgets]
    violating: list[PodInfo] = []
    fine: list[PodInfo] = []
    for pod in victims:
        violates = False
        for i, budget in enumerate(budgets if pod.labels else ()):  # a pod without labels matches no budget
            if budget.namespace != pod.namespace or budget.selector is None or not budget.selector.matches(pod.labels):
                continue
            if pod.name in budget.disrupted_pods:
                continue  # already counted by the API server
            left[i] -= 1
            if left[i] < 0:
                violates = True
        (violating if violates else fine).append(pod)
    return violating, fine
