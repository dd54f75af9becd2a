"""Label selectors, required node affinity and taint toleration, as kube-scheduler evaluates them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from scheduler_plugin.descheduler.args import LabelSelector
from scheduler_plugin.descheduler.model import NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration

LabelMatcher = Callable[[Mapping[str, str]], bool]

# Effects a pod must tolerate to be placed; PreferNoSchedule only affects scoring.
_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


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


def _requirement_matches(req: NodeSelectorRequirement, value: str | None) -> bool:
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if value is None or len(req.values) != 1:
            return False
        try:
            have, want = int(value), int(req.values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False  # unknown operator: kube-scheduler rejects the term


def _term_matches(term: NodeSelectorTerm, node_name: str, labels: Mapping[str, str]) -> bool:
    # An empty term matches no node (k8s semantics).
    if not term.match_expressions and not term.match_fields:
        return False
    for req in term.match_expressions:
        if not _requirement_matches(req, labels.get(req.key)):
            return False
    for req in term.match_fields:
        if req.key != "metadata.name" or not _requirement_matches(req, node_name):
            return False
    return True


def node_matches_pod_constraints(
    node_name: str,
    node_labels: Mapping[str, str],
    node_selector: Mapping[str, str],
    required_affinity: Sequence[NodeSelectorTerm],
) -> bool:
    """spec.nodeSelector AND (any required node affinity term)."""
    for key, value in node_selector.items():
        if node_labels.get(key) != value:
            return False
    return not required_affinity or any(_term_matches(t, node_name, node_labels) for t in required_affinity)


def _tolerates(toleration: Toleration, taint: Taint) -> bool:
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.operator == "Exists":
        return not toleration.key or toleration.key == taint.key
    return toleration.key == taint.key and toleration.value == taint.value


def tolerates_all_blocking_taints(tolerations: Sequence[Toleration], taints: Sequence[Taint]) -> bool:
    for taint in taints:
        if taint.effect not in _BLOCKING_EFFECTS:
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return False
    return True
