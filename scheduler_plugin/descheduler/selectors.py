"""metav1.LabelSelector matching for the args' pod and node selectors.

Node affinity and taint toleration are the shared `common.api.scheduling`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from scheduler_plugin.descheduler.args import LabelSelector

LabelMatcher = Callable[[Mapping[str, str]], bool]


def compile_label_selector(selector: LabelSelector | None) -> LabelMatcher:
    """A matcher for a metav1.LabelSelector; None selects everything, like Koordinator's filters."""
    if selector is None:
        return _match_all
    pairs = tuple(selector.match_labels.items())
    exprs = tuple((r.key, r.operator, frozenset(r.values)) for r in selector.match_expressions)

    def matches(labels: Mapping[str, str]) -> bool:
        for key, value in pairs:
            if labels.get(key) != value:
                return False
        for key, op, values in exprs:
            present = key in labels
            if op == "In":
                ok = present and labels[key] in values
            elif op == "NotIn":
                ok = not present or labels[key] not in values
            elif op == "Exists":
                ok = present
            else:  # DoesNotExist
                ok = not present
            if not ok:
                return False
        return True

    return matches


def compile_any_of(selectors: Sequence[LabelSelector | None]) -> LabelMatcher:
    """OR of selectors (LowNodeLoad podSelectors); an empty list selects everything."""
    matchers = [compile_label_selector(s) for s in selectors if s is not None]
    if not matchers:
        return _match_all
    return lambda labels: any(m(labels) for m in matchers)


def _match_all(_labels: Mapping[str, str]) -> bool:
    return True
