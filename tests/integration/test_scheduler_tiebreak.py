"""Ties between equally good nodes are broken at random, as kube-scheduler's selectHost does (issue 13 §3).

Twelve identical pods on ten identical empty kwok nodes, placed by `loadline scheduler` with
three tie-break seeds and by the real kube-scheduler on the same nodes: every node gets one pod
before any gets a second, both schedulers end with the same spread, and which nodes take the
two extra pods changes with the seed (with the old alphabetical tie-break it was always the
first two names). `loadline explain` says the first pod's node was one of ten tied.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable

import pytest

from tests.harness.controlplane import ControlPlane
from tests.integration.scheduler_support import (
    SUITE,
    Api,
    LoadlineScheduler,
    bound_count,
    create_pods,
    placements,
    pod,
    running_scheduler,
    unique,
    wait_for,
)

pytestmark = pytest.mark.integration

PODS = 12
NODES = 10


def _place(api: Api, namespace: str, suite: str, scheduler: str, before_rest: Callable[[], None] | None = None) -> Counter[str]:
    """Create the pods (the first alone), wait until all are bound, return pods per node, delete them."""
    selector = {SUITE: suite}
    pods = [pod(f"p-{i}", namespace, cpu="1", memory="1Gi", node_selector=selector, scheduler=scheduler)
            for i in range(PODS)]
    create_pods(api, pods[:1])
    wait_for("the first pod to be bound", lambda: bound_count(api, namespace) == 1, timeout=60)
    if before_rest is not None:
        before_rest()
    create_pods(api, pods[1:])
    wait_for(f"{PODS} pods to be bound", lambda: bound_count(api, namespace) == PODS, timeout=120)
    per_node = Counter(placements(api, namespace).values())
    for obj in pods:
        api.delete_now(f"/api/v1/namespaces/{namespace}/pods/{obj['metadata']['name']}")
    wait_for("the pods to be deleted", lambda: not api.pods(namespace), timeout=60)
    time.sleep(1.0)  # let the scheduler caches see the deletions before the next run
    return per_node


def _explain_first_pod(scheduler: LoadlineScheduler, namespace: str) -> None:
    """The first pod had every node to choose from, all scoring the same."""
    result = scheduler.explain_cli(namespace, "p-0")
    assert result.returncode == 0, result.stderr
    assert f"one of {NODES} tied at the best total" in result.stdout, result.stdout
    status, doc = scheduler.get_json(f"/explain/{namespace}/p-0")
    assert status == 200 and doc["attempt"]["tiedNodes"] == NODES, doc


def _spread(per_node: Counter[str], nodes: list[str]) -> list[int]:
    counts = [per_node[n] for n in nodes]
    assert sum(counts) == PODS
    return sorted(counts)


def test_identical_pods_spread_over_identical_nodes_like_kube_scheduler(
    cluster: ControlPlane, namespace: str, kwok_nodes: object
) -> None:
    suite = unique("tie")
    nodes = kwok_nodes(NODES, cpu="8", memory="32Gi", labels={SUITE: suite})  # type: ignore[operator]
    api = Api(cluster)
    even = [1] * (NODES - (PODS - NODES)) + [2] * (PODS - NODES)  # no node gets 2 while another has 0

    doubled: list[frozenset[str]] = []
    for seed in (1, 2, 3):
        with running_scheduler(cluster, extra_args=(f"--tie-break-seed={seed}",)) as scheduler:
            check = functools.partial(_explain_first_pod, scheduler, namespace) if seed == 1 else None
            per_node = _place(api, namespace, suite, "loadline-scheduler", check)
        print(f"loadline seed {seed}:", {n: per_node[n] for n in nodes})
        assert _spread(per_node, nodes) == even, per_node
        doubled.append(frozenset(n for n in nodes if per_node[n] == 2))
    # Alphabetical ties would put the extra pods on nodes[0] and nodes[1] every time.
    assert len(set(doubled)) > 1, doubled

    kube_name = unique("kube-tie")
    kube = cluster.start_kube_scheduler([{"schedulerName": kube_name}], name=kube_name)
    try:
        per_node = _place(api, namespace, suite, kube_name)
    finally:
        cluster.stop_component(kube)
    print("kube-scheduler:", {n: per_node[n] for n in nodes})
    assert _spread(per_node, nodes) == even, per_node
