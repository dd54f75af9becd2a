"""`loadline scheduler` on the real API server: load-aware placement from NodeMetrics (issue 4, test a).

Five kwok nodes with 8 cores; their NodeMetrics (written like the agent writes them) put
one at 80 % CPU and the others nearly idle. The hot node is over LoadAware's 65 % threshold
and gets nothing; a burst of 50 pods is spread over the idle nodes, because the assign
cache counts the pods placed since the last NodeMetric. NodeResourcesFit's score is off in
this profile, so without the assign cache every pod would go to the coldest node.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.harness.controlplane import ControlPlane
from tests.integration.scheduler_support import (
    NM_PATH,
    SUITE,
    Api,
    bound_count,
    create_pods,
    placements,
    pod,
    running_scheduler,
    scheduler_config,
    unique,
    wait_for,
    write_node_metric,
)

pytestmark = pytest.mark.integration

def test_hot_node_is_avoided_and_a_burst_does_not_pile_onto_the_coldest_node(
    cluster: ControlPlane, namespace: str, kwok_nodes: object
) -> None:
    suite = unique("load")
    nodes = kwok_nodes(5, cpu="8", memory="32Gi", labels={SUITE: suite})  # type: ignore[operator]
    hot, coldest = nodes[0], nodes[1]
    api = Api(cluster)
    usage = {hot: "6400m", coldest: "100m", nodes[2]: "500m", nodes[3]: "900m", nodes[4]: "1300m"}
    try:
        for node, cpu in usage.items():
            write_node_metric(api, node, cpu=cpu, memory="4Gi")
        config = scheduler_config({"plugins": {"score": {"disabled": [{"name": "NodeResourcesFit"}]}}})
        with running_scheduler(cluster, config) as scheduler:
            selector = {SUITE: suite}
            create_pods(api, [pod("first", namespace, cpu="200m", memory="256Mi", node_selector=selector)])
            wait_for("the first pod to be bound", lambda: bound_count(api, namespace) == 1, timeout=60)
            assert placements(api, namespace)["first"] == coldest

            burst = [pod(f"burst-{i}", namespace, cpu="200m", memory="256Mi", node_selector=selector) for i in range(50)]
            create_pods(api, burst)
            wait_for("the burst to be bound", lambda: bound_count(api, namespace) == 51, timeout=180)
            per_node = Counter(placements(api, namespace).values())
            print("pods per node:", {n: per_node[n] for n in nodes})
            assert per_node[hot] == 0
            assert max(per_node.values()) <= 25, per_node  # not piled onto the coldest node
            assert all(per_node[n] >= 5 for n in nodes[1:]), per_node

            status, doc = scheduler.get_json(f"/explain/{namespace}/burst-0")
            assert status == 200 and doc["state"] == "bound"
            verdicts = {entry["node"]: entry for entry in doc["nodes"]}
            assert verdicts[hot]["rejectedBy"] == "LoadAwareScheduling"
            assert verdicts[hot]["reasons"] == ["node(s) cpu usage exceed threshold"]
            chosen = [entry for entry in doc["nodes"] if entry["chosen"]]
            assert len(chosen) == 1 and "LoadAwareScheduling" in chosen[0]["scores"]

            metrics = scheduler.metrics()
            assert 'loadline_scheduler_schedule_attempts_total{profile="loadline-scheduler",result="scheduled"} 51.0' in metrics
            assert "loadline_scheduler_plugin_execution_duration_seconds_bucket" in metrics
            assert 'extension_point="Filter"' in metrics
    finally:
        for node in nodes:
            api.delete(f"{NM_PATH}/{node}")
