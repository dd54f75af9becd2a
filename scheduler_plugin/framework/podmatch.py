"""Per node row, how many of the pods accounted there match a filter, kept current as pods come and go.

InterPodAffinity and PodTopologySpread count pods per topology domain. kube-scheduler walks every pod of
every node in their PreFilter and PreScore (interpodaffinity/filtering.go, podtopologyspread/filtering.go),
in parallel Go. Here the snapshot keeps, for each filter a plugin asked about, one integer per node row,
updated when a pod is accounted on a node or leaves it; a cycle reads those counts and folds them into
topology domains with one numpy bincount per topology key (`domain_totals`): O(nodes) array work per
cycle, no Python loop over pods.

Two indexes, both by node row:
* `counts(PodFilter)`: pods matching every clause (namespaces, label selector) of a filter: the incoming
  pod's terms and spread selectors. Built on first use from the accounted pods, then updated; at most
  MAX_COUNTED_FILTERS are kept (the least recently used goes). A pod added is matched only against the
  filters whose anchor (a label the selector requires) it carries, plus the few without an anchor.
* `carried(kind)`: for each distinct pod (anti-)affinity term that accounted pods carry, how many of its
  carriers sit on each row: the existing pods' side of the rules (symmetric anti-affinity, their
  preferences in scoring). Terms are few and shared (every replica of a Deployment carries the same), so a
  cycle checks each distinct term against the incoming pod once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
from numpy.typing import NDArray

from common.api.scheduling import LabelSelector, PodAffinityTerm
from scheduler_plugin.framework.nodecolumns import IntArray, NodeColumns, PodRecord
from scheduler_plugin.framework.podinfo import PodInfo


class AccountedPods(Protocol):
    """What the index reads of the snapshot (scheduler_plugin/framework/snapshot.py) that owns it."""

    @property
    def num_slots(self) -> int: ...

    @property
    def records(self) -> Mapping[str, PodRecord]: ...  # pods accounted on a node

# Every kept filter is matched against each pod accounted or unaccounted that carries its anchor label: a
# bound on that per-pod work (and on the memory, one integer per node each) when pods' selectors are many.
MAX_COUNTED_FILTERS = 1024
# An `In` requirement anchors its selector on each of its values; one with more values is not worth it.
MAX_ANCHOR_VALUES = 16

Namespaces = frozenset[str] | None  # None: any namespace
Clause = tuple[Namespaces, LabelSelector]
TermKind = Literal["required_affinity", "required_anti_affinity", "preferred_affinity", "preferred_anti_affinity"]
TERM_KINDS: tuple[TermKind, ...] = (
    "required_affinity", "required_anti_affinity", "preferred_affinity", "preferred_anti_affinity",
)


# --------------------------------------------------------------------------- label selector matching
Matcher = Callable[[Mapping[str, str]], bool]
_compiled: dict[LabelSelector, Matcher] = {}
MAX_COMPILED_SELECTORS = 4096  # a cache: cleared when full


def selector_matcher(selector: LabelSelector) -> Matcher:
    """`selector.matches` with its value lists as sets (an `In` of thousands of values stays O(1))."""
    found = _compiled.get(selector)
    if found is not None:
        return found
    pairs = selector.match_labels
    checks: list[tuple[str, str, frozenset[str]]] = [(r.key, r.operator, frozenset(r.values))
                                                     for r in selector.match_expressions]

    def matches(labels: Mapping[str, str]) -> bool:
        for key, value in pairs:
            if labels.get(key) != value:
                return False
        for key, op, values in checks:
            have = labels.get(key)
            if op == "In":
                if have is None or have not in values:
                    return False
            elif op == "NotIn":
                if have is not None and have in values:
                    return False
            elif op == "Exists":
                if have is None:
                    return False
            elif have is not None:  # DoesNotExist
                return False
        return True

    if len(_compiled) >= MAX_COMPILED_SELECTORS:
        _compiled.clear()
    _compiled[selector] = matches
    return matches


@dataclass(frozen=True, slots=True)
class PodFilter:
    """Pods matching every clause: namespace in the clause's set (None: any) and labels matching its selector;
    with `skip_deleting`, not pods being deleted (PodTopologySpread's countPodsMatchSelector).

    The hash and the compiled selectors are computed once: a selector may hold thousands of values, and a
    filter is hashed on every lookup and matched against every pod accounted."""

    clauses: tuple[Clause, ...]
    skip_deleting: bool = False
    _matchers: tuple[tuple[Namespaces, Matcher], ...] = field(init=False, compare=False, repr=False)
    _hash: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_matchers", tuple((ns, selector_matcher(sel)) for ns, sel in self.clauses))
        object.__setattr__(self, "_hash", hash((self.clauses, self.skip_deleting)))

    def __hash__(self) -> int:
        return self._hash

    def matches(self, pod: PodInfo) -> bool:
        if self.skip_deleting and pod.deleting:
            return False
        for namespaces, matches in self._matchers:
            if namespaces is not None and pod.namespace not in namespaces:
                return False
            if not matches(pod.labels):
                return False
        return True

    def anchor(self) -> tuple[str, tuple[str | None, ...]] | None:
        """A label key every matching pod carries, and the values it may have (None: any value)."""
        for _, selector in self.clauses:
            if selector.match_labels:
                key, value = selector.match_labels[0]
                return key, (value,)
            for req in selector.match_expressions:
                if req.operator == "In" and len(req.values) <= MAX_ANCHOR_VALUES:
                    return req.key, req.values
            for req in selector.match_expressions:
                if req.operator == "Exists":
                    return req.key, (None,)
        return None


class _Counted:
    __slots__ = ("anchor", "counts", "filter")

    def __init__(self, flt: PodFilter, counts: IntArray) -> None:
        self.filter = flt
        self.counts = counts
        self.anchor = flt.anchor()


class CarriedTerm:
    """One distinct term as accounted pods carry it: how many carriers on each row, and in all."""

    __slots__ = ("counts", "term", "total", "weight")

    def __init__(self, term: PodAffinityTerm, weight: int, rows: int) -> None:
        self.term = term
        self.weight = weight
        self.counts = np.zeros(rows, np.int64)
        self.total = 0


def _grown(counts: IntArray, row: int) -> IntArray:
    if row < counts.size:
        return counts
    out = np.zeros(max(row + 1, 2 * counts.size, 16), np.int64)
    out[: counts.size] = counts
    return out


def fit(counts: IntArray, rows: int) -> IntArray:
    """`counts` as exactly `rows` entries (rows added since it was sized hold no pod yet)."""
    if counts.size >= rows:
        return counts[:rows]
    out = np.zeros(rows, np.int64)
    out[: counts.size] = counts
    return out


class PodMatchIndex:
    """The snapshot's counts of accounted pods per node row, by filter and by carried term."""

    def __init__(self, snapshot: AccountedPods) -> None:
        self._snapshot = snapshot
        self._filters: OrderedDict[PodFilter, _Counted] = OrderedDict()  # least recently used first
        self._by_anchor: dict[str, dict[str | None, list[_Counted]]] = {}
        self._unanchored: list[_Counted] = []
        self._carried: dict[TermKind, dict[tuple[PodAffinityTerm, int], CarriedTerm]] = {k: {} for k in TERM_KINDS}

    # ------------------------------------------------------------------ reading
    def counts(self, flt: PodFilter) -> IntArray:
        """Per row (`snapshot.num_slots` entries), the accounted pods `flt` matches. Read-only."""
        counted = self._filters.get(flt)
        if counted is None:
            counted = self._build(flt)
        else:
            self._filters.move_to_end(flt)
        return fit(counted.counts, self._snapshot.num_slots)

    def carried(self, kind: TermKind) -> Iterator[CarriedTerm]:
        """The distinct terms of that kind accounted pods carry (each with at least one carrier)."""
        return iter(self._carried[kind].values())

    def has_carried(self, kind: TermKind) -> bool:
        return bool(self._carried[kind])

    def __len__(self) -> int:
        return len(self._filters)

    # ------------------------------------------------------------------ upkeep (called by the snapshot)
    def add(self, pod: PodInfo, row: int) -> None:
        self._update(pod, row, 1)

    def remove(self, pod: PodInfo, row: int) -> None:
        self._update(pod, row, -1)

    def replace(self, old: PodInfo, new: PodInfo, row: int) -> None:
        """The accounted pod changed in place (a status update): re-count it if what filters read changed."""
        if (old is new or (old.labels == new.labels and old.deleting == new.deleting
                           and old.namespace == new.namespace and old.pod_affinity == new.pod_affinity)):
            return
        self._update(old, row, -1)
        self._update(new, row, 1)

    def _update(self, pod: PodInfo, row: int, sign: int) -> None:
        if self._filters:
            labels = pod.labels
            for key, by_value in self._by_anchor.items():
                value = labels.get(key)
                if value is None:
                    continue
                for counted in (*by_value.get(value, ()), *by_value.get(None, ())):
                    self._count(counted, pod, row, sign)
            for counted in self._unanchored:
                self._count(counted, pod, row, sign)
        affinity = pod.pod_affinity
        if affinity is not None:
            self._carry("required_affinity", ((t, 0) for t in affinity.required_affinity), row, sign)
            self._carry("required_anti_affinity", ((t, 0) for t in affinity.required_anti_affinity), row, sign)
            self._carry("preferred_affinity", ((w.term, w.weight) for w in affinity.preferred_affinity), row, sign)
            self._carry("preferred_anti_affinity", ((w.term, w.weight) for w in affinity.preferred_anti_affinity),
                        row, sign)

    @staticmethod
    def _count(counted: _Counted, pod: PodInfo, row: int, sign: int) -> None:
        if counted.filter.matches(pod):
            counted.counts = _grown(counted.counts, row)
            counted.counts[row] += sign

    def _carry(self, kind: TermKind, terms: Iterator[tuple[PodAffinityTerm, int]], row: int, sign: int) -> None:
        table = self._carried[kind]
        for term, weight in terms:
            entry = table.get((term, weight))
            if entry is None:
                if sign < 0:
                    continue  # (never counted: nothing to take away)
                entry = table[(term, weight)] = CarriedTerm(term, weight, self._snapshot.num_slots)
            entry.counts = _grown(entry.counts, row)
            entry.counts[row] += sign
            entry.total += sign
            if entry.total <= 0:
                del table[(term, weight)]

    # ------------------------------------------------------------------ filters kept
    def _build(self, flt: PodFilter) -> _Counted:
        snapshot = self._snapshot
        counts = np.zeros(max(snapshot.num_slots, 1), np.int64)
        for record in snapshot.records.values():
            if flt.matches(record.pod):
                counts[record.node_index] += 1
        counted = _Counted(flt, counts)
        while len(self._filters) >= MAX_COUNTED_FILTERS:
            _, evicted = self._filters.popitem(last=False)
            self._unlink(evicted)
        self._filters[flt] = counted
        if counted.anchor is None:
            self._unanchored.append(counted)
        else:
            key, values = counted.anchor
            by_value = self._by_anchor.setdefault(key, {})
            for value in values:
                by_value.setdefault(value, []).append(counted)
        return counted

    def _unlink(self, counted: _Counted) -> None:
        if counted.anchor is None:
            self._unanchored.remove(counted)
            return
        key, values = counted.anchor
        by_value = self._by_anchor[key]
        for value in values:
            entries = by_value[value]
            entries.remove(counted)
            if not entries:
                del by_value[value]
        if not by_value:
            del self._by_anchor[key]


# --------------------------------------------------------------------------- topology domains
@dataclass(frozen=True, slots=True)
class Domains:
    """One topology key over the node rows: each row's domain code (-1: the node has no such label) and the
    number of codes (the label's vocabulary; codes of removed nodes' values simply hold nothing)."""

    key: str
    codes: NDArray[np.int32]  # num_slots entries
    size: int
    blank: int = -1  # the code of the value "" (-1: no node has it)

    def totals(self, row_values: IntArray, include: NDArray[np.bool_] | None = None) -> IntArray:
        """Per domain code, the sum of `row_values` over the rows in it (only `include`d rows)."""
        mask = self.codes >= 0
        if include is not None:
            mask &= include
        summed = np.bincount(self.codes[mask], weights=row_values[mask], minlength=self.size)
        return summed.astype(np.int64)

    def at(self, domain_values: IntArray, rows: NDArray[np.intp]) -> IntArray:
        """Per row, its domain's value (0 for rows without the label)."""
        codes = self.codes.take(rows)
        out: IntArray = np.where(codes >= 0, domain_values.take(np.maximum(codes, 0)), 0)
        return out


def domains_of(snapshot: NodeColumns, key: str) -> Domains | None:
    """The rows' domains for `key`, or None when no node has the label (no column is made for it)."""
    if not snapshot.has_label_key(key):
        return None
    column = snapshot.label_column(key)
    return Domains(key, column.codes[: snapshot.num_slots], max(len(column.vocab), 1), column.vocab.get("", -1))
