"""metav1.LabelSelector matching, compiled once per config entry so per-node matching is cheap."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

SelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist"]


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: SelectorOperator
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            return labels.get(self.key) not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels


@dataclass(frozen=True, slots=True)
class CompiledSelector:
    """A valid LabelSelector. The empty selector matches every node.

    A *missing* selector is represented by None at the call sites and matches no node,
    as `metav1.LabelSelectorAsSelector(nil)` returns `labels.Nothing()`.
    """

    match_labels: tuple[tuple[str, str], ...] = ()
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        return all(req.matches(labels) for req in self.requirements)


def selector_matches(selector: CompiledSelector | None, labels: Mapping[str, str]) -> bool:
    return selector is not None and selector.matches(labels)


def first_match(selectors: tuple[CompiledSelector | None, ...], labels: Mapping[str, str]) -> int:
    """Index of the first selector matching `labels`, or -1: the first match wins, as in Koordinator."""
    for index, selector in enumerate(selectors):
        if selector is not None and selector.matches(labels):
            return index
    return -1
