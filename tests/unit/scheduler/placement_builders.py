"""Builders and a harness for InterPodAffinity and PodTopologySpread tests (kube-scheduler's `st.MakePod()`
PodAffinityIn/PodAntiAffinityExists/SpreadConstraint wrappers, as plain dicts), and a runner that asks a plugin
what kube-scheduler's tables ask: PreFilter's status, then Filter's verdict per node, or the normalised scores."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.interfaces import FilterPlugin, NormalizeScorePlugin, PreFilterPlugin, ScorePlugin
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.framework.status import Code, Status
from scheduler_plugin.plugins.interpodaffinity.namespaces import Namespaces
from tests.objects import node, pod

Obj = dict[str, Any]


def expr(key: str, operator: str, *values: str) -> Obj:
    """One matchExpressions requirement."""
    out: Obj = {"key": key, "operator": operator}
    if values:
        out["values"] = list(values)
    return out


def selector(*exprs: Obj, labels: dict[str, str] | None = None) -> Obj:
    out: Obj = {}
    if exprs:
        out["matchExpressions"] = list(exprs)
    if labels:
        out["matchLabels"] = labels
    return out


def term(*exprs: Obj, topology: str, namespaces: Sequence[str] | None = None,
         namespace_selector: Obj | None = None, labels: dict[str, str] | None = None) -> Obj:
    """A PodAffinityTerm (labelSelector from `exprs`/`labels`)."""
    out: Obj = {"labelSelector": selector(*exprs, labels=labels), "topologyKey": topology}
    if namespaces is not None:
        out["namespaces"] = list(namespaces)
    if namespace_selector is not None:
        out["namespaceSelector"] = namespace_selector
    return out


def affinity(required: Sequence[Obj] = (), preferred: Sequence[tuple[int, Obj]] = (),
             anti_required: Sequence[Obj] = (), anti_preferred: Sequence[tuple[int, Obj]] = ()) -> Obj:
    out: Obj = {}
    for kind, hard, soft in (("podAffinity", required, preferred), ("podAntiAffinity", anti_required, anti_preferred)):
        section: Obj = {}
        if hard:
            section["requiredDuringSchedulingIgnoredDuringExecution"] = list(hard)
        if soft:
            section["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": w, "podAffinityTerm": t} for w, t in soft
            ]
        if section:
            out[kind] = section
    return out


def spread(max_skew: int, key: str, action: str = "DoNotSchedule", *, match: Obj | None = None,
           min_domains: int | None = None, node_affinity_policy: str | None = None,
           node_taints_policy: str | None = None, match_label_keys: Sequence[str] = ()) -> Obj:
    """A TopologySpreadConstraint (kube-scheduler's st.SpreadConstraint)."""
    out: Obj = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": action}
    if match is not None:
        out["labelSelector"] = match
    if min_domains is not None:
        out["minDomains"] = min_domains
    if node_affinity_policy is not None:
        out["nodeAffinityPolicy"] = node_affinity_policy
    if node_taints_policy is not None:
        out["nodeTaintsPolicy"] = node_taints_policy
    if match_label_keys:
        out["matchLabelKeys"] = list(match_label_keys)
    return out


def a_pod(name: str = "p", *, namespace: str = "default", labels: dict[str, str] | None = None,
          node_name: str | None = None, aff: Obj | None = None, constraints: Sequence[Obj] = (),
          **kw: Any) -> Obj:
    """A pod of 1 cpu / 1Gi (`builders.pod`) with pod affinity and/or topology spread constraints."""
    obj = pod(name, namespace=namespace, labels=labels, node_name=node_name, affinity=aff or None, **kw)
    if constraints:
        obj["spec"]["topologySpreadConstraints"] = list(constraints)
    return obj


def existing(pods: Sequence[Obj]) -> list[Obj]:
    """Existing pods with unique names (kube-scheduler's tables leave most unnamed)."""
    return [dict(obj, metadata=dict(obj["metadata"], name=f"{obj['metadata']['name']}-{i}",
                                    uid=f"uid-{obj['metadata']['name']}-{i}"))
            for i, obj in enumerate(pods)]


def namespace(name: str, **labels: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


# scoring_test.go's `namespaces`: two teams of two sub-teams
TEAM_NAMESPACES = [
    namespace("subteam1.team1", team="team1"), namespace("subteam2.team1", team="team1"),
    namespace("subteam1.team2", team="team2"), namespace("subteam2.team2", team="team2"),
]


def nodes_with(labels: dict[str, dict[str, str]]) -> list[Obj]:
    return [node(name, labels=lab) for name, lab in labels.items()]


def snapshot_of(nodes: Sequence[Obj], pods: Sequence[Obj], namespaces: Sequence[Obj] = TEAM_NAMESPACES) -> Snapshot:
    return Snapshot.from_objects(nodes=nodes, pods=existing(pods), stores={Namespaces: namespaces})


Verdict = tuple[Code, str] | None  # None: the node passes


def filter_verdicts(plugin: Any, snap: Snapshot, incoming: Obj, state: CycleState | None = None
                    ) -> tuple[Status, list[Verdict]]:
    """PreFilter's status and, unless it rejected or skipped, Filter's verdict per node (in node order)."""
    assert isinstance(plugin, PreFilterPlugin) and isinstance(plugin, FilterPlugin)
    info = PodInfo.from_dict(incoming)
    state = state if state is not None else CycleState()
    _, status = plugin.pre_filter(state, info, snap)
    if not status.is_success():
        return status, []
    return status, verdicts(plugin, state, info, snap)


def verdicts(plugin: Any, state: CycleState, info: PodInfo, snap: Snapshot) -> list[Verdict]:
    rows = snap.node_indices()
    result = plugin.filter(state, info, snap, rows)
    out: list[Verdict] = [None] * rows.size
    for rejection in result.rejections:
        for i in np.flatnonzero(rejection.mask):
            assert out[i] is None, "a node got two reasons from one plugin"
            out[i] = (rejection.code, rejection.reason)
    return out


def scores(plugin: Any, snap: Snapshot, incoming: Obj, rows: Sequence[str] | None = None
           ) -> tuple[Status, list[int]]:
    """PreScore's status and, when it succeeded, the normalised scores of the nodes (all, or those named)."""
    assert isinstance(plugin, ScorePlugin) and isinstance(plugin, NormalizeScorePlugin)
    info = PodInfo.from_dict(incoming)
    state = CycleState()
    candidates = snap.node_indices()
    if rows is not None:
        found = [snap.node_by_name(n) for n in rows]
        candidates = np.asarray([i.index for i in found if i is not None], np.intp)
    status = plugin.pre_score(state, info, snap, candidates)  # type: ignore[attr-defined]
    if not status.is_success():
        return status, []
    raw = plugin.score(state, info, snap, candidates)
    return status, [int(x) for x in plugin.normalize_score(state, info, raw)]
