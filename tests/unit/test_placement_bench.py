"""The pure parts of bench/placement_bench.py: its workload and the descheduler configuration both deschedulers read."""

from __future__ import annotations

from pathlib import Path

from bench.placement_bench import REAL_CPU, Moves, true_utilisation, workload
from bench.placement_components import HOT_PERCENT, LOW_PERCENT, descheduler_configuration
from scheduler_plugin.descheduler.config import args_from_document
from tests import objects


def test_workload_is_replicasets_of_at_least_two_adding_up_to_the_pods() -> None:
    for pods in (2, 3, 9, 200, 1000):
        specs = workload(pods, 40.0, seed=7)
        assert sum(s.replicas for s in specs) == pods
        assert min(s.replicas for s in specs) >= 2  # a ReplicaSet of one is never descheduled
        arrivals = [s.arrival for s in specs]
        assert arrivals == sorted(arrivals) and arrivals[0] == 0.0 and arrivals[-1] < 40.0
    assert workload(1000, 40.0, seed=7) == workload(1000, 40.0, seed=7)


def test_loadline_reads_the_koordinator_configuration_with_the_same_thresholds_and_namespace() -> None:
    document = descheduler_configuration(Path("/nowhere/kubeconfig"), "bench-loadline", 10.0)
    args = args_from_document(document)
    assert args.high_thresholds == {"cpu": HOT_PERCENT}
    assert args.low_thresholds == {"cpu": LOW_PERCENT}
    assert args.descheduling_interval == 10.0
    assert args.evictable_namespaces.include == ["bench-loadline"]
    assert args.anomaly_condition.consecutive_abnormalities == 2


def _pod(uid: str, node: str, owner: str, cpu: int, *, leaving: bool = False) -> dict[str, object]:
    return objects.pod(uid, uid=uid, annotations={REAL_CPU: f"{cpu}m"}, owner=("ReplicaSet", owner),
                       node_name=node or None, deleted=objects.T0 if leaving else None)  # fmt: skip


def test_utilisation_leaves_out_terminating_and_unbound_pods() -> None:
    pods = [_pod("a", "n1", "rs", 3200), _pod("b", "n1", "rs", 3200, leaving=True), _pod("c", "", "rs", 9000)]
    assert true_utilisation(pods, {"n1": 3200, "n2": 0}) == {"n1": 20.0, "n2": 0.0}


def test_moves_count_evictions_replacements_and_the_ping_pong() -> None:
    moves = Moves()
    moves.on_event("DELETED", _pod("early", "n1", "rs-a", 100), None)  # before the steady phase: not counted
    moves.arm({"a": _pod("a", "n1", "rs-a", 500), "b": _pod("b", "n1", "rs-b", 700)})
    moves.on_event("MODIFIED", _pod("a", "n1", "rs-a", 500, leaving=True), None)
    moves.on_event("DELETED", _pod("a", "n1", "rs-a", 500), None)  # the same eviction seen twice
    moves.on_event("DELETED", _pod("b", "n1", "rs-b", 700), None)
    moves.on_event("ADDED", _pod("a2", "", "rs-a", 500), None)  # unbound: not yet a replacement
    moves.on_event("MODIFIED", _pod("a2", "n2", "rs-a", 500), None)
    moves.on_event("MODIFIED", _pod("b2", "n1", "rs-b", 700), None)  # back where rs-b left
    assert len(moves.evicted) == 2
    assert sum(cpu for _, _, cpu in moves.evicted.values()) == 1200
    assert len(moves.replaced) == 2
    assert moves.back_on_same_node == 1
