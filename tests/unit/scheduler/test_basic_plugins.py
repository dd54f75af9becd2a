"""NodeResourcesFit, NodeAffinity/nodeSelector, TaintToleration, NodeUnschedulable, NodeName — hand-computed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from scheduler_plugin.framework.clock import FakeClock
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.filterresult import FilterResult
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.runtime import Framework
from scheduler_plugin.framework.schedule_one import scheduling_cycle
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.framework.status import Code
from scheduler_plugin.plugins.nodeaffinity import NodeAffinity
from scheduler_plugin.plugins.nodename import NodeName
from scheduler_plugin.plugins.noderesources import NodeResourcesFit, NodeResourcesFitArgs
from scheduler_plugin.plugins.noderesources.formulas import least_requested_score, most_requested_score
from scheduler_plugin.plugins.nodeunschedulable import NodeUnschedulable
from scheduler_plugin.plugins.tainttoleration import TaintToleration
from tests.objects import node, pod
from tests.unit.scheduler.builders import default_framework

Obj = dict[str, Any]


def reasons(result: FilterResult, snap: Snapshot, rows: np.ndarray) -> dict[str, list[str]]:
    """node name -> reasons it was rejected for."""
    out: dict[str, list[str]] = {}
    for r in result.rejections:
        for row in rows[r.mask]:
            out.setdefault(snap.node_name(int(row)), []).append(r.reason)
    return out


def run_filter(plugin: Any, snap: Snapshot, p: Obj) -> tuple[FilterResult, np.ndarray, PodInfo]:
    info = PodInfo.from_dict(p)
    state = CycleState()
    if hasattr(plugin, "pre_filter"):
        plugin.pre_filter(state, info, snap)
    rows = snap.node_indices()
    return plugin.filter(state, info, snap, rows), rows, info


# --------------------------------------------------------------------------- NodeResourcesFit
def test_fit_filter_reports_every_insufficient_resource_and_pod_count() -> None:
    snap = Snapshot.from_objects(
        nodes=[
            node("small", cpu="1", memory="1Gi"),
            node("full", cpu="8", memory="16Gi", pods="1"),
            node("batchy", cpu="8", memory="16Gi", extra={"kubernetes.io/batch-cpu": "3000"}),
            node("big", cpu="8", memory="16Gi", extra={"kubernetes.io/batch-cpu": "6000"}),
        ],
        pods=[pod("existing", cpu="100m", memory="1Mi", node_name="full")],
    )
    plugin = NodeResourcesFit(NodeResourcesFitArgs())
    batch_pod = pod("p", cpu="2", memory="2Gi", requests={"kubernetes.io/batch-cpu": "4000"})
    result, rows, _ = run_filter(plugin, snap, batch_pod)
    assert reasons(result, snap, rows) == {
        "small": ["Insufficient cpu", "Insufficient memory", "Insufficient kubernetes.io/batch-cpu"],
        "full": ["Too many pods", "Insufficient kubernetes.io/batch-cpu"],
        "batchy": ["Insufficient kubernetes.io/batch-cpu"],
    }
    assert result.feasible is not None and rows[result.feasible].tolist() == [snap.node_by_name("big").index]  # type: ignore[union-attr]


def test_fit_filter_counts_assumed_pods_and_ignored_resources() -> None:
    snap = Snapshot.from_objects(nodes=[node("n", cpu="2", memory="4Gi", extra={"example.com/foo": "1"})])
    snap.assume_pod(PodInfo.from_dict(pod("a", cpu="1500m", memory="1Gi")), "n", 0.0)
    p = pod("p", cpu="600m", memory="1Gi", requests={"example.com/foo": "2"})
    result, rows, _ = run_filter(NodeResourcesFit(NodeResourcesFitArgs()), snap, p)
    assert reasons(result, snap, rows) == {"n": ["Insufficient cpu", "Insufficient example.com/foo"]}
    ignoring = NodeResourcesFit(NodeResourcesFitArgs(ignored_resource_groups=["example.com"]))
    result, rows, _ = run_filter(ignoring, snap, p)
    assert reasons(result, snap, rows) == {"n": ["Insufficient cpu"]}


def test_least_and_most_requested_formulas() -> None:
    requested = np.array([1000, 3000, 5000, 0], np.int64)
    capacity = np.array([4000, 4000, 4000, 0], np.int64)
    # (4000-1000)*100/4000 = 75, (4000-3000)*100/4000 = 25, over capacity = 0, no capacity = 0
    assert least_requested_score(requested, capacity).tolist() == [75, 25, 0, 0]
    # 1000*100/4000 = 25, 75, capped at capacity = 100, 0
    assert most_requested_score(requested, capacity).tolist() == [25, 75, 100, 0]


def test_least_allocated_score_uses_nonzero_requests() -> None:
    # n1: 4 cpu / 8Gi, holds a pod without requests (counts as 100m / 200Mi for scoring).
    # Incoming pod: 1 cpu, 1Gi.
    # cpu:    (4000 - (100 + 1000)) * 100 / 4000 = 72 (72.5 floored)
    # memory: (8Gi - (200Mi + 1Gi)) * 100 / 8Gi = (8192 - 1224) * 100 / 8192 = 85 (85.06 floored)
    # total:  (72 + 85) / 2 = 78 (78.5 floored)
    snap = Snapshot.from_objects(nodes=[node("n1"), node("n2", cpu="2", memory="2Gi")],
                                 pods=[pod("bare", cpu=None, memory=None, node_name="n1")])
    plugin = NodeResourcesFit(NodeResourcesFitArgs())
    info = PodInfo.from_dict(pod("p", cpu="1", memory="1Gi"))
    scores = plugin.score(CycleState(), info, snap, snap.node_indices())
    # n2: cpu (2000-1000)*100/2000 = 50, memory (2048-1024)*100/2048 = 50 -> 50
    assert scores.tolist() == [78, 50]


def test_most_allocated_with_weights() -> None:
    args = NodeResourcesFitArgs.model_validate({"scoringStrategy": {"type": "MostAllocated", "resources": [
        {"name": "cpu", "weight": 3}, {"name": "memory", "weight": 1}]}})
    snap = Snapshot.from_objects(nodes=[node("n1")])
    info = PodInfo.from_dict(pod("p", cpu="1", memory="2Gi"))
    # cpu 1000*100/4000 = 25 (w3), memory 2Gi*100/8Gi = 25 (w1) -> (75 + 25) / 4 = 25
    assert NodeResourcesFit(args).score(CycleState(), info, snap, snap.node_indices()).tolist() == [25]


# --------------------------------------------------------------------------- NodeAffinity
LABELLED = [
    node("a", labels={"zone": "z1", "gen": "5", "gpu": "yes"}),
    node("b", labels={"zone": "z2", "gen": "3"}),
    node("c", labels={"zone": "z3", "gen": "x7"}),
    node("d", labels={}),
]


def required(*expressions: Obj, fields: list[Obj] | None = None) -> Obj:
    term: Obj = {"matchExpressions": list(expressions)}
    if fields:
        term["matchFields"] = fields
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


@pytest.mark.parametrize(("expression", "matching"), [
    ({"key": "zone", "operator": "In", "values": ["z1", "z3", "z9"]}, ["a", "c"]),
    ({"key": "zone", "operator": "NotIn", "values": ["z1"]}, ["b", "c", "d"]),  # NotIn matches nodes without the label
    ({"key": "gpu", "operator": "Exists"}, ["a"]),
    ({"key": "gpu", "operator": "DoesNotExist"}, ["b", "c", "d"]),
    ({"key": "gen", "operator": "Gt", "values": ["3"]}, ["a"]),  # "x7" is not an integer: no match
    ({"key": "gen", "operator": "Lt", "values": ["5"]}, ["b"]),
])
def test_node_affinity_operators(expression: Obj, matching: list[str]) -> None:
    snap = Snapshot.from_objects(nodes=LABELLED)
    result, rows, _ = run_filter(NodeAffinity(), snap, pod("p", affinity=required(expression)))
    rejected = reasons(result, snap, rows)
    assert sorted(set("abcd") - set(rejected)) == matching
    assert all(r == ["node(s) didn't match Pod's node affinity/selector"] for r in rejected.values())
    assert all(x.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE for x in result.rejections)


def test_terms_are_ored_expressions_anded_and_node_selector_anded() -> None:
    snap = Snapshot.from_objects(nodes=LABELLED)
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]},
                              {"key": "gen", "operator": "In", "values": ["3"]}]},  # matches nothing
        {"matchExpressions": [{"key": "gen", "operator": "Exists"}]},  # a, b, c
    ]}}}
    result, rows, _ = run_filter(NodeAffinity(), snap, pod("p", affinity=affinity, node_selector={"zone": "z2"}))
    assert sorted(set("abcd") - set(reasons(result, snap, rows))) == ["b"]


def test_match_fields_narrows_in_prefilter() -> None:
    snap = Snapshot.from_objects(nodes=LABELLED)
    fields = [{"key": "metadata.name", "operator": "In", "values": ["b", "d"]}]
    info = PodInfo.from_dict(pod("p", affinity=required(fields=fields)))
    narrowed, status = NodeAffinity().pre_filter(CycleState(), info, snap)
    assert status.is_success() and narrowed is not None and narrowed.node_names == {"b", "d"}


def test_preferred_affinity_scores_are_weight_sums_normalised() -> None:
    snap = Snapshot.from_objects(nodes=LABELLED)
    affinity = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 30, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1", "z2"]}]}},
        {"weight": 10, "preference": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}},
    ]}}
    info = PodInfo.from_dict(pod("p", affinity=affinity))
    plugin = NodeAffinity()
    raw = plugin.score(CycleState(), info, snap, snap.node_indices())
    assert raw.tolist() == [40, 30, 0, 0]
    # DefaultNormalizeScore: score * 100 / max -> 100, 75, 0, 0
    assert plugin.normalize_score(CycleState(), info, raw).tolist() == [100, 75, 0, 0]


def test_affinity_without_constraints_skips() -> None:
    snap = Snapshot.from_objects(nodes=LABELLED)
    _, status = NodeAffinity().pre_filter(CycleState(), PodInfo.from_dict(pod("p")), snap)
    assert status.is_skip()


# --------------------------------------------------------------------------- TaintToleration
TAINTED = [
    node("clean"),
    node("gpu", taints=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}]),
    node("evict", taints=[{"key": "maint", "value": "", "effect": "NoExecute"}]),
    node("soft2", taints=[{"key": "a", "value": "1", "effect": "PreferNoSchedule"},
                          {"key": "b", "value": "2", "effect": "PreferNoSchedule"}]),
    node("soft1", taints=[{"key": "a", "value": "1", "effect": "PreferNoSchedule"}]),
]


def test_taint_filter_reasons_and_tolerations() -> None:
    snap = Snapshot.from_objects(nodes=TAINTED)
    result, rows, _ = run_filter(TaintToleration(), snap, pod("p"))
    assert reasons(result, snap, rows) == {
        "gpu": ["node(s) had untolerated taint(s)"],  # kube-scheduler v1.36's words: no taint named
        "evict": ["node(s) had untolerated taint(s)"],
    }
    tolerant = pod("p", tolerations=[{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
                                     {"key": "maint", "operator": "Exists"}])
    result, rows, _ = run_filter(TaintToleration(), snap, tolerant)
    assert result.feasible is None  # everything passes
    wrong_value = pod("p", tolerations=[{"key": "gpu", "operator": "Equal", "value": "false"}])
    result, rows, _ = run_filter(TaintToleration(), snap, wrong_value)
    assert "gpu" in reasons(result, snap, rows)


def test_prefer_no_schedule_scoring_reversed() -> None:
    snap = Snapshot.from_objects(nodes=TAINTED)
    plugin = TaintToleration()
    info = PodInfo.from_dict(pod("p", tolerations=[{"key": "b", "operator": "Exists", "effect": "PreferNoSchedule"}]))
    raw = plugin.score(CycleState(), info, snap, snap.node_indices())
    assert raw.tolist() == [0, 0, 0, 1, 1]  # soft2's "b" is tolerated
    info2 = PodInfo.from_dict(pod("p"))
    raw2 = plugin.score(CycleState(), info2, snap, snap.node_indices())
    assert raw2.tolist() == [0, 0, 0, 2, 1]
    # reverse normalisation: 100 - count*100/max -> 100, 100, 100, 0, 50
    assert plugin.normalize_score(CycleState(), info2, raw2).tolist() == [100, 100, 100, 0, 50]


# --------------------------------------------------------------------------- NodeUnschedulable / NodeName
def test_node_unschedulable() -> None:
    snap = Snapshot.from_objects(nodes=[node("cordoned", unschedulable=True), node("ok")])
    result, rows, _ = run_filter(NodeUnschedulable(), snap, pod("p"))
    assert reasons(result, snap, rows) == {"cordoned": ["node(s) were unschedulable"]}
    tolerant = pod("p", tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                      "effect": "NoSchedule"}])
    result, _, _ = run_filter(NodeUnschedulable(), snap, tolerant)
    assert result.feasible is None


def test_node_name() -> None:
    snap = Snapshot.from_objects(nodes=[node("a"), node("b")])
    info = pod("p", node_name="b")
    result, rows, _ = run_filter(NodeName(), snap, info)
    assert reasons(result, snap, rows) == {"a": ["node(s) didn't match the requested node name"]}


# --------------------------------------------------------------------------- through the default profile
def test_default_profile_fit_error_message() -> None:
    snap = Snapshot.from_objects(nodes=[
        node("a", cpu="1"), node("b", cpu="1"),
        node("c", taints=[{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]),
        node("d", unschedulable=True),
    ])
    fw, _, _ = default_framework(snap)
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p", cpu="2")))
    assert result.status.message == (
        "0/4 nodes are available: 1 node(s) had untolerated taint(s), "
        "1 node(s) were unschedulable, 2 Insufficient cpu. "
        # a and b are smaller than the pod (unresolvable since kube-scheduler v1.32), taints and cordons are not
        # preemption's business either.
        "preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
    )


def test_a_request_beyond_allocatable_is_unresolvable() -> None:
    """kube-scheduler's fitsRequest: Unresolvable when the pod asks for more than the node has at all, so
    preemption looks only where evicting pods can make room."""
    snap = Snapshot.from_objects(nodes=[node("small", cpu="1"), node("full", cpu="4")],
                                 pods=[pod("other", cpu="3", node_name="full")])
    result, rows, _ = run_filter(NodeResourcesFit(NodeResourcesFitArgs()), snap, pod("p", cpu="2"))
    codes = {(snap.node_name(int(r)), rej.code) for rej in result.rejections for r in rows[rej.mask]}
    assert codes == {("small", Code.UNSCHEDULABLE_AND_UNRESOLVABLE), ("full", Code.UNSCHEDULABLE)}
    fw, _, _ = default_framework(snap)
    message = scheduling_cycle(fw, PodInfo.from_dict(pod("p", cpu="2"))).status.message
    assert message == ("0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: "
                       "1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling.")


def test_default_profile_prefers_least_allocated_and_counts_assumed_pods() -> None:
    snap = Snapshot.from_objects(nodes=[node("a"), node("b"), node("c")])
    fw: Framework
    fw, clock, _ = default_framework(snap, clock=FakeClock())
    placed = [scheduling_cycle(fw, PodInfo.from_dict(pod(f"p{i}", cpu="1", memory="1Gi"))).node_name for i in range(6)]
    # Each node gets one pod before any gets a second (which of the tied nodes comes first is random).
    assert sorted(placed[:3]) == sorted(placed[3:]) == ["a", "b", "c"]
    assert clock.now() > 0


def test_explain_lists_rejections_and_weighted_scores() -> None:
    from scheduler_plugin.framework.explain import explain

    snap = Snapshot.from_objects(nodes=[
        node("small", cpu="1"), node("tainted", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]),
        node("a"), node("b", cpu="8"),
    ])
    fw, _, _ = default_framework(snap)
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p", cpu="2", memory="1Gi")), record=True)
    lines = [e.line() for e in explain(result, snap)]
    # b: cpu (8000 − 2000) × 100 / 8000 = 75, memory (8Gi − 1Gi) × 100 / 8Gi = 87 → 81; a: 50 and 87 → 68.
    # TaintToleration gives every feasible node 100 (×3); LoadAware 0 (no NodeMetric); NodeAffinity
    # skips scoring (no preferred terms), ImageLocality too (no node has the pod's image).
    # BalancedAllocation: b goes from fractions (0, 0), balance 100, to (0.25, 0.125): std 0.0625, 93;
    # 50 + (50 + 93 − 100) / 2 = 71. a: (0.5, 0.125), std 0.1875, 81 → 50 + 31 / 2 = 65.
    balanced = "NodeResourcesBalancedAllocation"
    assert lines == [
        f"b: total 452 (TaintToleration=100×3, NodeResourcesFit=81×1, LoadAwareScheduling=0×1, {balanced}=71×1) (chosen)",
        f"a: total 433 (TaintToleration=100×3, NodeResourcesFit=68×1, LoadAwareScheduling=0×1, {balanced}=65×1)",
        "small: rejected by NodeResourcesFit: Insufficient cpu",
        "tainted: rejected by TaintToleration: node(s) had untolerated taint(s)",
    ]
