"""The API server's audit of `make demo`'s story shows no 403 for any Loadline component (issue 16): the chart's
RBAC is sufficient as well as minimal (test_security_rbac.py's tables show the minimal half).

The story is the demo's own (tests/harness/demo.py, `Demo.story`), played on the session's real cluster
(tests/integration/realnode_cluster.py: no second control plane, the machine's one real node) in a namespace of
its own, with what the demo's keeper adds for it: the simulated agent writing the kwok nodes' NodeMetrics, and
LowNodeLoad's thresholds and node selector at the demo's. The audit is counted as `make demo` prints it.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from tests.harness import demo
from tests.integration.realnode_cluster import (
    IDLE_HIGH_THRESHOLDS,
    LOW_THRESHOLDS,
    RealCluster,
    idle_nodemetric,
    set_descheduler_thresholds,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]


def test_the_demo_story_gets_no_403_for_any_loadline_component(real_cluster: RealCluster, workload_ns: str) -> None:
    cluster = real_cluster
    state = demo.cluster_state(cluster.plane, cluster.plane.root / "demo-bin", cluster.node.name, cluster.kwok_nodes)
    story = demo.Demo(state, namespace=workload_ns)
    started, since = time.monotonic(), datetime.now(UTC)
    simulated = demo.start_simulated_agent(cluster.plane)
    try:
        thresholds = demo.DESCHEDULER
        set_descheduler_thresholds(cluster, low=thresholds["lowThresholds"], high=thresholds["highThresholds"],
                                   node_selector=thresholds["nodeSelector"])  # fmt: skip
        seen = story.story(cluster.image)
        calls = story.audit(since)
    finally:
        simulated.stop()
        # The kwok nodes' NodeMetrics would keep the story's simulated load: idle ones leave later tests room.
        for node in cluster.kwok_nodes:
            idle_nodemetric(cluster, node)
        set_descheduler_thresholds(cluster, low=LOW_THRESHOLDS, high=IDLE_HIGH_THRESHOLDS)
        # The batch job's namespace and the profile that selects it (the demo keeps them for a look).
        cluster.plane.kubectl("delete", "namespace", story.batch_namespace, "--wait=false", check=False)
        cluster.plane.kubectl("delete", "clustercolocationprofile", demo.BATCH_PROFILE["metadata"]["name"], check=False)
    print(f"\nthe demo's story on the real cluster: {time.monotonic() - started:.0f}s; requests {calls.requests}")
    # The audit covers the whole story only if the story played: each step is one component's work.
    assert all(seen.values()), f"story steps not seen: {[step for step, ok in seen.items() if not ok]}"
    assert calls.silent() == [], f"components with no request in the audit: {calls.requests}"
    assert calls.refused_calls() == [], "Loadline's calls refused by RBAC:\n" + "\n".join(calls.refused_calls())
