"""DefaultPreemption over a snapshot: victim selection, candidate order, budgets, LoadAware, sampling.

Nodes have 4 cpu / 8Gi. Priorities: prod 9000, batch 5000, free 3000. kube-scheduler's
rules decide the expected numbers: victims are reprieved from the most important down
(higher priority, then earlier start), and the node is chosen by fewest budget violations,
then lowest highest-victim priority, smallest priority sum (each + 2^31), fewest victims.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_plugin.framework.clock import FakeClock
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.runtime import Framework
from scheduler_plugin.framework.schedule_one import ScheduleResult, scheduling_cycle
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.framework.status import Code
from scheduler_plugin.plugins.defaultpreemption import DECISION, DefaultPreemption, PreemptionDecision
from scheduler_plugin.plugins.defaultpreemption.ordering import (
    PRIORITY_OFFSET,
    VictimSummary,
    num_candidates,
    pick_one,
    rank,
)
from scheduler_plugin.plugins.loadaware.nodeload import NodeLoads
from tests.objects import T0, node, node_metric, pod, rfc3339
from tests.unit.scheduler.builders import default_framework, gang_labels, pod_metric

Obj = dict[str, Any]
PROD, BATCH, FREE = 9000, 5000, 3000

CONFIG = {
    "profiles": [{
        "schedulerName": "loadline-scheduler",
        "plugins": {"multiPoint": {"enabled": [{"name": "DefaultPreemption"}]}},
    }]
}


def running(name: str, node_name: str, cpu: str, priority: int, started: float, **kw: Any) -> Obj:
    obj = pod(name, cpu, "1Gi", node_name=node_name, priority=priority, scheduled_at=started, **kw)
    obj["status"]["startTime"] = rfc3339(started)
    return obj


def full_cluster() -> list[Obj]:
    """n1: four 1-cpu batch pods; n2: two 2-cpu batch pods; n3: four 1-cpu free pods."""
    pods = [running(f"b1-{i}", "n1", "1", BATCH, T0 - 100 + i) for i in range(4)]
    pods += [running(f"b2-{i}", "n2", "2", BATCH, T0 - 100 + i) for i in range(2)]
    pods += [running(f"f3-{i}", "n3", "1", FREE, T0 - 100 + i) for i in range(4)]
    return pods


def framework(pods: list[Obj], *, metrics: list[Obj] | None = None, budgets: list[Obj] | None = None,
              nodes: list[Obj] | None = None) -> tuple[Framework, Snapshot]:
    snap = Snapshot.from_objects(
        nodes=nodes or [node("n1"), node("n2"), node("n3")], pods=pods, stores={NodeLoads: metrics or []},
        disruption_budgets=budgets or [],
    )
    fw, _, _ = default_framework(snap, CONFIG, FakeClock(T0 + 10))
    return fw, snap


def schedule(fw: Framework, obj: Obj) -> tuple[ScheduleResult, PreemptionDecision | None]:
    result = scheduling_cycle(fw, PodInfo.from_dict(obj))
    assert result.state is not None
    return result, result.state.get(DECISION, PreemptionDecision)


def victims_of(decision: PreemptionDecision) -> dict[str, list[str]]:
    return {c.node_name: sorted(v.name for v in c.victims) for c in decision.candidates}


def budget(name: str, labels: dict[str, str], allowed: int) -> Obj:
    return {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": labels}},
        "status": {"disruptionsAllowed": allowed},
    }


# ---------------------------------------------------------------------- pure ordering
def test_num_candidates_is_kube_schedulers() -> None:
    assert num_candidates(1000, 10, 100) == 100
    assert num_candidates(5000, 10, 100) == 500
    assert num_candidates(50, 10, 100) == 50
    assert num_candidates(1000, 0, 7) == 7


def summary(violations: int, highest: int, priorities: list[int], earliest: float = 0.0) -> VictimSummary:
    return VictimSummary(violations, highest, sum(p + PRIORITY_OFFSET for p in priorities), len(priorities), earliest)


def test_rank_applies_the_criteria_in_turn() -> None:
    a = summary(1, 3000, [3000])  # a budget violation loses to anything without
    b = summary(0, 5000, [5000])
    c = summary(0, 3000, [3000, 3000])  # lower highest priority beats b
    d = summary(0, 3000, [3000, 1000])  # same highest, smaller sum beats c
    assert rank([a, b, c, d]) == [3, 2, 1, 0]
    # The offset makes more victims of a negative priority cost more, not less.
    assert pick_one([summary(0, -10, [-10, -10]), summary(0, -10, [-10])]) == 1
    # Equal up to the count: latest start of the earliest highest-priority victim wins; then the first.
    early, late = summary(0, 5000, [5000], earliest=T0 - 50), summary(0, 5000, [5000], earliest=T0 - 5)
    assert pick_one([early, late]) == 1
    assert pick_one([late, late]) == 0


# ---------------------------------------------------------------------- victims and node
def test_minimal_victims_on_the_cheapest_node() -> None:
    fw, snap = framework(full_cluster())
    result, decision = schedule(fw, pod("prod", "2", "1Gi", priority=PROD))
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.nominated_node_name == "n3"
    assert decision is not None
    # n3's free pods have the lowest priority; the two started last are the least important.
    assert victims_of(decision) == {"n1": ["b1-2", "b1-3"], "n2": ["b2-1"], "n3": ["f3-2", "f3-3"]}
    assert [c.node_name for c in decision.candidates] == ["n3", "n2", "n1"]
    assert decision.potential_nodes == decision.examined_nodes == 3
    assert snap.requested[0].tolist() == [4000, 4000, 4000]  # the snapshot itself is untouched


def test_only_lower_priority_pods_are_victims() -> None:
    pods = [running(f"p{n}-{i}", f"n{n}", "2", PROD, T0 - 100) for n in (1, 2, 3) for i in range(2)]
    fw, _ = framework(pods)
    result, decision = schedule(fw, pod("prod", "2", "1Gi", priority=PROD))
    assert decision is None and result.nominated_node_name == ""
    assert result.status.message == (
        "0/3 nodes are available: 3 Insufficient cpu. "
        "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
    )


def test_preemption_policy_never_waits() -> None:
    fw, _ = framework(full_cluster())
    never = pod("prod", "2", "1Gi", priority=PROD)
    never["spec"]["preemptionPolicy"] = "Never"
    result, decision = schedule(fw, never)
    assert decision is None
    assert result.status.message.endswith("preemption: not eligible due to preemptionPolicy=Never.")


def test_budget_protecting_the_cheapest_victims_moves_preemption() -> None:
    pods = full_cluster()
    for p in pods:
        if p["metadata"]["name"].startswith("f3-"):
            p["metadata"]["labels"] = {"app": "free"}
    fw, _ = framework(pods, budgets=[budget("keep-free", {"app": "free"}, 1)])
    result, decision = schedule(fw, pod("prod", "2", "1Gi", priority=PROD))
    assert decision is not None
    assert result.nominated_node_name == "n2"
    n3 = next(c for c in decision.candidates if c.node_name == "n3")
    # Budget-violating victims (all but the most important f3-0) are reprieved first: f3-1 and f3-2
    # come back, f3-3 (a violation) and then f3-0 are evicted.
    assert sorted(v.name for v in n3.victims) == ["f3-0", "f3-3"]
    assert n3.num_pdb_violations == 1
    assert [c.node_name for c in decision.candidates] == ["n2", "n1", "n3"]


def test_a_gang_never_preempts_its_own_members() -> None:
    labels = {"pod-group.scheduling.sigs.k8s.io/name": "g", "pod-group.scheduling.sigs.k8s.io/min-available": "1"}
    pods = [running(f"g{n}-{i}", f"n{n}", "2", BATCH, T0 - 100, labels=labels) for n in (1, 2, 3) for i in range(2)]
    fw, _ = framework(pods)
    high = pod("leader", "2", "1Gi", priority=PROD, labels=labels)
    _, decision = schedule(fw, high)
    assert decision is None


# ---------------------------------------------------------------------- LoadAware
def load_cluster(pod_usages: bool) -> tuple[list[Obj], list[Obj]]:
    """n3 measures 3600m cpu (90% > the 65% threshold). Its pods ran long before the report."""
    pods = full_cluster()
    reported = [pod_metric(f"f3-{i}", "900m") for i in range(4)] if pod_usages else []
    metrics = [node_metric("n1", cpu="500m"), node_metric("n2", cpu="500m"),
               node_metric("n3", cpu="3600m", pods=reported)]
    return pods, metrics


def test_node_staying_over_the_load_threshold_without_victims_is_not_chosen() -> None:
    # No per-pod usage for n3's pods: removing them removes nothing measured, n3 stays at 90%.
    pods, metrics = load_cluster(pod_usages=False)
    fw, _ = framework(pods, metrics=metrics)
    result, decision = schedule(fw, pod("prod", "2", "1Gi", priority=PROD))
    assert decision is not None
    assert result.nominated_node_name == "n2"
    assert "n3" not in victims_of(decision)


def test_victims_measured_usage_is_removed_for_load_aware() -> None:
    # n3's pods report 900m each: without two of them n3 estimates 3600 − 1800 + 1700 (the prod
    # pod's estimate) = 3500m = 87.5%, still over; without three, 2600m = 65% — fits (65 ≤ 65).
    pods, metrics = load_cluster(pod_usages=True)
    fw, _ = framework(pods, metrics=metrics)
    result, decision = schedule(fw, pod("prod", "2", "1Gi", priority=PROD))
    assert decision is not None
    assert victims_of(decision)["n3"] == ["f3-1", "f3-2", "f3-3"]
    assert result.nominated_node_name == "n3"  # lowest victim priority still wins


# ---------------------------------------------------------------------- sampling
def test_dry_run_stops_after_enough_candidates() -> None:
    nodes = [node(f"n{i:03d}", cpu="2") for i in range(300)]
    pods = [running(f"b{i:03d}", f"n{i:03d}", "2", BATCH, T0 - 100) for i in range(300)]
    snap = Snapshot.from_objects(nodes=nodes, pods=pods)
    config = {"profiles": [{
        "schedulerName": "loadline-scheduler",
        "plugins": {"multiPoint": {"enabled": [{"name": "DefaultPreemption"}]}},
        "pluginConfig": [{"name": "DefaultPreemption",
                          "args": {"minCandidateNodesPercentage": 5, "minCandidateNodesAbsolute": 3}}],
    }]}
    fw, _, _ = default_framework(snap, config)
    plugin = fw.plugins["DefaultPreemption"]
    assert isinstance(plugin, DefaultPreemption)
    plugin.rng.seed(7)
    _, decision = schedule(fw, pod("prod", "2", "1Gi", priority=PROD))
    assert decision is not None
    assert decision.potential_nodes == 300
    assert decision.examined_nodes == len(decision.candidates) == 15  # 5% of 300


def test_bad_args_name_the_field() -> None:
    from scheduler_plugin.plugins.defaultpreemption import DefaultPreemptionArgs

    with pytest.raises(ValueError, match="cannot both be zero"):
        DefaultPreemptionArgs.model_validate({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0})
    with pytest.raises(ValueError, match="minCandidateNodesPercentage"):
        DefaultPreemptionArgs.model_validate({"minCandidateNodesPercentage": 101})


def test_the_simulation_stays_in_a_cloned_state() -> None:
    fw, _ = framework(full_cluster())
    result, decision = schedule(fw, pod("prod", "2", "1Gi", priority=PROD))
    assert decision is not None and result.state is not None
    assert result.state.get("NodeResourcesFit/simulated", object) is None
    assert result.state.get("LoadAwareScheduling/simulated", object) is None


# ---------------------------------------------------------------------- gangs
def gang_cluster(hot_node: bool) -> tuple[Framework, Snapshot]:
    """n1..n3 full with four 1-cpu batch pods each; with `hot_node`, n2 and n3 measure 95 % cpu."""
    pods = [running(f"b{n}-{i}", f"n{n}", "1", BATCH, T0 - 100 + i) for n in (1, 2, 3) for i in range(4)]
    metrics = [node_metric("n2", cpu="3800m"), node_metric("n3", cpu="3800m")] if hot_node else []
    return framework(pods, metrics=metrics)


def gang_member(i: int, size: int) -> Obj:
    return pod(f"g-{i}", "2", "1Gi", priority=PROD, labels=gang_labels("train", size))


def test_a_gang_preempts_for_all_its_missing_members_at_once() -> None:
    fw, snap = gang_cluster(hot_node=False)
    for i in range(4):
        snap.upsert_pod(gang_member(i, 4))
    result, decision = schedule(fw, gang_member(0, 4))
    assert decision is not None
    # Four 2-cpu members need eight 1-cpu victims; each member gets a node with room made for it.
    assert len(decision.best.victims) == 8
    assert sorted(decision.nominations) == ["default/g-0", "default/g-1", "default/g-2", "default/g-3"]
    per_node: dict[str, int] = {}
    for node_name in decision.nominations.values():
        per_node[node_name] = per_node.get(node_name, 0) + 1
    victims_per_node: dict[str, int] = {}
    for victim in decision.best.victims:
        where = snap.node_of(victim.key) or ""
        victims_per_node[where] = victims_per_node.get(where, 0) + 1
    assert {n: 2 * c for n, c in per_node.items()} == victims_per_node
    assert result.nominated_node_name == decision.nominations["default/g-0"]


def test_a_gang_that_cannot_be_completed_preempts_nothing() -> None:
    # Only n1 can take members (n2, n3 stay over LoadAware's threshold without their pods): two of four.
    fw, snap = gang_cluster(hot_node=True)
    for i in range(4):
        snap.upsert_pod(gang_member(i, 4))
    result, decision = schedule(fw, gang_member(0, 4))
    assert decision is None and result.nominated_node_name == ""
    assert "pod group default/train needs 4 more member(s) placed, only 2 fit even after preemption" \
        in result.status.message
