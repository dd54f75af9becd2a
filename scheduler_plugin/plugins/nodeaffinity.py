"""NodeAffinity: `spec.nodeSelector` and required node affinity filter; preferred node
affinity scores (sum of the weights of matching terms, normalised so the best is 100).

Matching is vectorised through the snapshot's label columns: each label key becomes an
integer code per node row, so In/NotIn are `isin` over codes, Exists/DoesNotExist a
sign test, Gt/Lt a comparison on the parsed integer column.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from common.api.scheduling import Requirement, SelectorTerm
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.events import NODE_CHANGES
from scheduler_plugin.framework.filterresult import ALL_PASS, FilterResult
from scheduler_plugin.framework.interfaces import FrameworkHandle, PreFilterResult, default_normalize_score
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import BoolArray, IndexArray, IntArray, Snapshot
from scheduler_plugin.framework.status import SUCCESS, Code, Status

NAME = "NodeAffinity"
REASON = "node(s) didn't match Pod's node affinity/selector"


def requirement_mask(snapshot: Snapshot, rows: IndexArray, req: Requirement) -> BoolArray:
    column = snapshot.label_column(req.key)
    codes = column.codes[rows]
    if req.operator in ("In", "NotIn"):
        wanted = [column.vocab[v] for v in req.values if v in column.vocab]
        found = np.isin(codes, wanted) if wanted else np.zeros(rows.size, np.bool_)
        return found if req.operator == "In" else ~found  # NotIn also matches nodes without the label
    if req.operator == "Exists":
        return codes >= 0
    if req.operator == "DoesNotExist":
        return codes < 0
    assert req.number is not None  # Gt/Lt carry their parsed integer
    numbers, valid = column.numbers[rows], column.is_number[rows]
    return valid & (numbers > req.number if req.operator == "Gt" else numbers < req.number)


def field_mask(snapshot: Snapshot, rows: IndexArray, req: Requirement) -> BoolArray:
    """matchFields: only `metadata.name`, with In/NotIn."""
    named = [info.index for v in req.values if (info := snapshot.node_by_name(v)) is not None]
    found = np.isin(rows, named) if named else np.zeros(rows.size, np.bool_)
    return found if req.operator == "In" else ~found


def term_mask(snapshot: Snapshot, rows: IndexArray, term: SelectorTerm) -> BoolArray:
    if term.is_empty:
        return np.zeros(rows.size, np.bool_)  # an empty term matches no node
    mask = np.ones(rows.size, np.bool_)
    for req in term.match_expressions:
        mask &= requirement_mask(snapshot, rows, req)
    for req in term.match_fields:
        mask &= field_mask(snapshot, rows, req)
    return mask


def required_mask(snapshot: Snapshot, rows: IndexArray, pod: PodInfo) -> BoolArray:
    """nodeSelector AND (any required term)."""
    mask = np.ones(rows.size, np.bool_)
    for key, value in pod.node_selector.items():
        column = snapshot.label_column(key)
        mask &= column.codes[rows] == column.vocab.get(value, -2)
    if pod.required_affinity is not None:
        any_term = np.zeros(rows.size, np.bool_)
        for term in pod.required_affinity:
            any_term |= term_mask(snapshot, rows, term)
        mask &= any_term
    return mask


class NodeAffinity:
    name = NAME

    @classmethod
    def new(cls, _args: BaseModel | None, _handle: FrameworkHandle) -> NodeAffinity:
        return cls()

    def events_to_register(self) -> frozenset[str]:
        return NODE_CHANGES  # a node's labels changed, or a node was added

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        if not pod.node_selector and pod.required_affinity is None:
            return None, Status.skip()
        # Terms that pin node names (matchFields metadata.name In) narrow the candidates up front.
        terms = pod.required_affinity or ()
        if terms and all(_pinned_names(t) is not None for t in terms):
            names: set[str] = set()
            for t in terms:
                names |= _pinned_names(t) or set()
            return PreFilterResult(frozenset(names)), SUCCESS
        return None, SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> FilterResult:
        ok = required_mask(snapshot, candidates, pod)
        if ok.all():
            return ALL_PASS
        return FilterResult.rejecting(REASON, ~ok, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    def pre_score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> Status:
        return SUCCESS if pod.preferred_affinity else Status.skip()

    def score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> IntArray:
        total = np.zeros(candidates.size, np.int64)
        for preferred in pod.preferred_affinity:
            total += preferred.weight * term_mask(snapshot, candidates, preferred.term)
        return total

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: IntArray) -> IntArray:
        return default_normalize_score(scores)


def _pinned_names(term: SelectorTerm) -> set[str] | None:
    for req in term.match_fields:
        if req.operator == "In":
            return set(req.values)
    return None
