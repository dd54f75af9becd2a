"""The incoming pod's (anti-)affinity terms as InterPodAffinity evaluates them, and matching pods against terms.

kube-scheduler turns an incoming pod's namespaceSelector into the namespaces it selects when the cycle
starts (mergeAffinityTermNamespacesIfNotEmpty): a term then holds a set of namespaces, or, with an empty
namespaceSelector ({}), every namespace. Existing pods' terms keep their namespaceSelector and are matched
against the incoming pod's namespace labels (`term_matches`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from common.api.scheduling import LabelSelector, PodAffinityTerm
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.podmatch import Clause, PodFilter, selector_matcher
from scheduler_plugin.plugins.interpodaffinity.namespaces import Namespaces

# kube-scheduler evaluates any number of terms. Each costs Loadline a pass over the nodes per cycle and a kept
# count per node row; a real pod carries a handful, and a pod over this many is refused with this reason.
MAX_POD_AFFINITY_TERMS = 256
TOO_MANY_TERMS = (
    "pod has {count} pod affinity/anti-affinity terms; Loadline evaluates at most {limit} per pod: use fewer terms "
    "or another scheduler"
)


@dataclass(frozen=True, slots=True)
class IncomingTerm:
    namespaces: frozenset[str] | None  # None: every namespace
    selector: LabelSelector | None  # None: matches no pod
    topology_key: str
    weight: int = 0  # preferred terms

    @property
    def clause(self) -> Clause | None:
        """The term as a `PodFilter` clause; None when it matches no pod."""
        return None if self.selector is None else (self.namespaces, self.selector)

    def matches(self, pod: PodInfo) -> bool:
        """AffinityTerm.Matches for an incoming pod's term (its namespaceSelector already merged)."""
        if self.selector is None or (self.namespaces is not None and pod.namespace not in self.namespaces):
            return False
        return selector_matcher(self.selector)(pod.labels)

    def filter(self) -> PodFilter | None:
        clause = self.clause
        return None if clause is None else PodFilter((clause,))


@dataclass(frozen=True, slots=True)
class IncomingTerms:
    required_affinity: tuple[IncomingTerm, ...] = ()
    required_anti_affinity: tuple[IncomingTerm, ...] = ()
    preferred_affinity: tuple[IncomingTerm, ...] = ()
    preferred_anti_affinity: tuple[IncomingTerm, ...] = ()

    def affinity_filter(self) -> PodFilter | None:
        """Pods matching every required affinity term (kube-scheduler counts only those); None: no pod can."""
        clauses = [t.clause for t in self.required_affinity]
        if not clauses or any(c is None for c in clauses):
            return None
        return PodFilter(tuple(c for c in clauses if c is not None))

    def matches_all_required(self, pod: PodInfo) -> bool:
        """podMatchesAllAffinityTerms: the pod matches every required affinity term (False without terms)."""
        return bool(self.required_affinity) and all(t.matches(pod) for t in self.required_affinity)


NO_TERMS = IncomingTerms()


def resolve(term: PodAffinityTerm, namespaces: Namespaces, weight: int = 0) -> IncomingTerm:
    selector = term.namespace_selector
    if selector is None:
        names: frozenset[str] | None = term.namespaces
    elif selector.is_empty:
        names = None  # labels.Everything(): every namespace
    else:
        matches = selector_matcher(selector)
        names = term.namespaces | {name for name, labels in namespaces.items() if matches(labels)}
    return IncomingTerm(names, term.selector, term.topology_key, weight)


def incoming_terms(pod: PodInfo, namespaces: Namespaces) -> IncomingTerms:
    """The pod's terms with their namespaceSelectors resolved (memoised on the pod per namespaces' generation)."""
    affinity = pod.pod_affinity
    if affinity is None:
        return NO_TERMS
    cached = pod.memo.get("incoming_affinity_terms")
    if cached is not None and cached[0] is namespaces and cached[1] == namespaces.generation:
        terms: IncomingTerms = cached[2]
        return terms
    terms = IncomingTerms(
        tuple(resolve(t, namespaces) for t in affinity.required_affinity),
        tuple(resolve(t, namespaces) for t in affinity.required_anti_affinity),
        tuple(resolve(w.term, namespaces, w.weight) for w in affinity.preferred_affinity),
        tuple(resolve(w.term, namespaces, w.weight) for w in affinity.preferred_anti_affinity),
    )
    pod.memo["incoming_affinity_terms"] = (namespaces, namespaces.generation, terms)
    return terms


def term_matches(term: PodAffinityTerm, pod: PodInfo, namespace_labels: Mapping[str, str]) -> bool:
    """An existing pod's term against the incoming pod (AffinityTerm.Matches with the pod's namespace labels)."""
    if term.selector is None or not term.matches_namespace(pod.namespace, namespace_labels):
        return False
    return selector_matcher(term.selector)(pod.labels)
