"""Loadline writes, Koordinator reads, on the real node (issue 17 §2): the NodeMetric Loadline's agent pod publishes
for this machine drives Koordinator v1.8.0's own koord-scheduler.

Uses the session's real cluster (tests/integration/realnode_cluster.py; installs Loadline if no earlier test has,
through the `workload_ns` fixture of tests/integration/conftest.py). koord-scheduler runs beside it on
the same control plane with LoadAwareScheduling thresholds below what one real burner pod uses:

- `usageThresholds` (node usage, for non-prod pods): the agent's `nodeUsage` is the whole host's busy CPU, which on
  this shared machine is anything up to 100 % whatever the test does; the host is never below the burner's own use,
  so "hot" is certain while the burner runs, "cool" never is. Only the filtering is asserted on this path.
- `prodUsageThresholds` (prod pods): the sum of the prod pods' `podsMetric` entries, the burner's own measured use
  (it runs in kubepods, whose large CPU weight lets it take its core from the rest of the machine), so both ways
  are certain: placed when cool, filtered when hot, placed again once the burner is gone.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.harness import koordinator
from tests.integration.realnode_cluster import RealCluster, burner_pod, cpu_cores, update_time, wait_for
from tests.integration.scheduler_support import Api, events_for
from tests.integration.test_koordinator_compat import LOAD_AWARE_REASON

# The fixtures (Loadline installed; a namespace of the test's own), re-exported by name so pytest finds them here.

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]
BURN_CORES = 1.0  # the burner is one Python thread: at most one core
# The thresholds sit at this share of what the burner adds: hot by a margin the agent's ±10 % cannot close, while
# Loadline's own (prod) pods and the probe's estimate stay well below them when the burner is not there.
THRESHOLD_SHARE = 0.7
SMALL = {"requests": {"cpu": "50m", "memory": "32Mi"}}


def node_of(api: Api, namespace: str, name: str) -> str:
    return str((api.get(f"/api/v1/namespaces/{namespace}/pods/{name}").get("spec") or {}).get("nodeName") or "")


def reporters(api: Api, namespace: str, name: str, reason: str) -> set[str]:
    return {str(e.get("reportingController") or "") for e in events_for(api, namespace, name, reason)}


def node_usage(nodemetric: dict[str, Any]) -> float:
    return cpu_cores(nodemetric["status"]["nodeMetric"]["nodeUsage"]["resources"])


def pod_usage(nodemetric: dict[str, Any], namespace: str) -> dict[str, float]:
    """podsMetric cpu (cores) of the pods of one namespace, by name (an entry whose cpu is 0 has no cpu key: a pod
    that just started, the idle probe)."""
    return {p["name"]: cpu_cores({"cpu": "0", **p["podUsage"]["resources"]})
            for p in nodemetric["status"].get("podsMetric") or [] if p.get("namespace") == namespace}  # fmt: skip


def test_koord_scheduler_filters_the_real_node_loadline_reports_hot(
    real_cluster: RealCluster, workload_ns: str
) -> None:
    cluster, node, namespace = real_cluster, real_cluster.node.name, workload_ns
    api = Api(cluster.plane)
    allocatable = cpu_cores(cluster.kubectl_json("get", "node", node)["status"]["allocatable"])
    threshold = round(100 * THRESHOLD_SHARE * BURN_CORES / allocatable)
    limit = threshold * allocatable / 100  # in cores
    args = {"usageThresholds": {"cpu": threshold, "memory": 95}, "prodUsageThresholds": {"cpu": threshold}}
    print(f"\nreal node {node}: {allocatable:g} cores allocatable; koord-scheduler cpu thresholds {threshold} % "
          f"(node and prod usage), burner {BURN_CORES:g} core = {100 * BURN_CORES / allocatable:.0f} %")  # fmt: skip

    def nodemetric_line() -> str:
        nm = cluster.nodemetric()
        return (f"NodeMetric at {nm['status'].get('updateTime')}: nodeUsage {node_usage(nm):.3f} cores, "
                f"podsMetric here {pod_usage(nm, namespace)}")  # fmt: skip

    with koordinator.start_koord_scheduler(cluster.plane, load_aware_args=args) as koord:

        def context() -> str:
            return f"{nodemetric_line()}\n--- koord-scheduler ---\n{koord.log_tail()}"

        def placed(name: str) -> bool:
            assert koord.alive(), f"koord-scheduler exited\n{koord.log_tail()}"
            return node_of(api, namespace, name) == node

        # Cool: koord-scheduler places the (prod) burner itself; nothing else prod of any weight runs here.
        started = time.monotonic()
        cluster.plane.apply(burner_pod(
            "burner", namespace, cores=BURN_CORES, mib=16, image=cluster.image, priority_class="koord-prod",
            labels={"koordinator.sh/qosClass": "LS"}, scheduler=koord.scheduler_name,
            resources={"requests": {"cpu": "100m", "memory": "64Mi"}},
        ))  # fmt: skip
        wait_for("koord-scheduler to place the burner", lambda: placed("burner"), 180, context=context)
        # koord-scheduler writes its events after the binding, asynchronously: wait for the event.
        wait_for(f"the Scheduled event of burner from {koord.scheduler_name}",
                 lambda: reporters(api, namespace, "burner", "Scheduled") == {koord.scheduler_name}, 30,
                 context=context)  # fmt: skip
        print(f"cool: koord-scheduler placed the burner on {node} in {time.monotonic() - started:.1f}s")

        # Hot: Loadline's agent measures the burner (podsMetric, prod) and the host (nodeUsage) over the threshold.
        burning_at = time.time()

        def hot() -> dict[str, Any] | None:
            nm = cluster.nodemetric()
            fresh = update_time(nm) >= burning_at
            return (
                nm if fresh and node_usage(nm) > limit and pod_usage(nm, namespace).get("burner", 0) > limit else None
            )

        nm = wait_for("the agent's NodeMetric to show the burner over the threshold", hot, 120, context=context)
        entry = next(p for p in nm["status"]["podsMetric"] if p["name"] == "burner")
        assert entry["priority"] == "koord-prod", entry
        print(f"hot after {time.time() - burning_at:.1f}s: {nodemetric_line()}")

        # Two probes: a prod one (prod usage) and a koord-mid one (node usage); the real node is the only one their
        # node selector allows, so each stays Pending with koord-scheduler's LoadAware message.
        probes = {"prod-probe": "koord-prod", "mid-probe": "koord-mid"}
        for name, priority in probes.items():
            cluster.plane.apply(burner_pod(name, namespace, cores=0.01, mib=1, image=cluster.image,
                                           priority_class=priority, scheduler=koord.scheduler_name,
                                           resources=SMALL))  # fmt: skip
        filtered_at = time.monotonic()

        def filtered(name: str) -> bool:
            notes = [str(e.get("note") or "") for e in events_for(api, namespace, name, "FailedScheduling")]
            return any(f"1 {LOAD_AWARE_REASON}" in n for n in notes)

        wait_for("FailedScheduling for both probes", lambda: all(filtered(n) for n in probes), 60, context=context)
        for name in probes:
            assert node_of(api, namespace, name) == "", f"{name} was placed on the hot node\n{context()}"
            assert reporters(api, namespace, name, "FailedScheduling") == {koord.scheduler_name}
            conditions = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")["status"].get("conditions") or []
            scheduled = next(c for c in conditions if c["type"] == "PodScheduled")
            assert scheduled["status"] == "False" and LOAD_AWARE_REASON in scheduled["message"], scheduled
        note = events_for(api, namespace, "prod-probe", "FailedScheduling")[-1]["note"]
        print(f"hot: both probes filtered within {time.monotonic() - filtered_at:.1f}s: {note}")

        # Cool again: without the burner the prod probe fits under the prod threshold and koord-scheduler places it.
        cluster.plane.kubectl("delete", "pod", "burner", "-n", namespace, "--wait=true", "--timeout=60s", timeout=90)
        freed_at = time.monotonic()
        wait_for("koord-scheduler to place the prod probe once the burner is gone", lambda: placed("prod-probe"), 120,
                 context=context)  # fmt: skip
        # koord-scheduler writes its events after the binding, asynchronously: wait for the event.
        wait_for(f"the Scheduled event of prod-probe from {koord.scheduler_name}",
                 lambda: reporters(api, namespace, "prod-probe", "Scheduled") == {koord.scheduler_name}, 30,
                 context=context)  # fmt: skip
        print(f"cool again: prod probe placed {time.monotonic() - freed_at:.1f}s after the burner was deleted; "
              f"{nodemetric_line()}")  # fmt: skip
    assert not koord.alive(), "koord-scheduler still running after its block"
