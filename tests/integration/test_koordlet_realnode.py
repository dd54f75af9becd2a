"""koordlet v1.8.0 and Loadline's agent side by side on the real node (issue 30): the same machine and pods,
measured by both, their NodeMetrics agree within ±5 %.

koordlet (built by the harness with cgo and libpfm4) runs on the host for a view of the real node and writes its own
NodeMetric; Loadline's view comes from an agent process of the same code, read at the moment koordlet's report
appears, over koordlet's window (60 s, its minimum); tests/integration/koordlet_beside.py says why and how. Two
burner pods give the pods something to measure; the session's Loadline pods are compared too, with absolute
floors for values that small (10 millicores, 4 MiB). The long side-by-side run (footprint ratios, prodReclaimable
over time) is bench/agent_vs_koordlet.py, not a test.
"""

from __future__ import annotations

import time

import pytest

from tests.integration.koordlet_beside import KoordletBeside, LocalAgent, Tolerances, compare, paired_readings
from tests.integration.realnode_cluster import RealCluster, burner_pod, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

WINDOW_SECONDS = 60  # koordlet's minimum aggregateDurationSeconds; the aggregated window is the same minute
BURNERS = (("steady-a", 0.4, 160), ("steady-b", 0.2, 240))  # name, cores, MiB


def test_koordlet_and_the_agent_report_the_same_node_and_pods(real_cluster: RealCluster, workload_ns: str) -> None:
    cluster, ns = real_cluster, workload_ns
    pods = []
    for name, cores, mib in BURNERS:
        resources = {"requests": {"cpu": f"{int(cores * 1000)}m", "memory": f"{mib + 64}Mi"}}
        pods.append(burner_pod(name, ns, cores=cores, mib=mib, image=cluster.image, resources=resources))
    cluster.plane.apply(pods)
    for name, _, _ in BURNERS:
        cluster.plane.kubectl("wait", "-n", ns, "--for=condition=Ready", f"pod/{name}", "--timeout=120s", timeout=130)

    with (
        LocalAgent(cluster, aggregate_seconds=WINDOW_SECONDS, windows=(WINDOW_SECONDS,)) as ours,
        KoordletBeside(cluster, report_seconds=30, aggregate_seconds=WINDOW_SECONDS, windows=("1m0s",)) as theirs,
    ):
        # both windows full: a minute of samples after the later of the two started, and a margin for koordlet's
        # first collection round
        full_from = time.time() + WINDOW_SECONDS + 5
        pairs = paired_readings(ours, theirs, count=2, timeout=240, after=full_from)

    failures = []
    for i, (mine, koord) in enumerate(pairs):
        rows = compare(mine, koord, Tolerances())
        print(f"\n--- pair {i + 1}: loadline at {mine.update_time:.1f}, koordlet at {koord.update_time:.1f} ---")
        print("\n".join(row.line() for row in rows))
        names = {row.what for row in rows}
        for name, _, _ in BURNERS:
            assert f"podsMetric {ns}/{name} cpu" in names, f"{name} missing from one of the two NodeMetrics"
        assert "nodeUsage cpu" in names and "aggregatedNodeUsages 1m0s p50 cpu" in names
        failures += [row.line() for row in rows if not row.ok]
    assert not failures, "outside ±5 %:\n" + "\n".join(failures)
    for name, _, _ in BURNERS:
        cluster.plane.kubectl("delete", "pod", "-n", ns, name, "--wait=false")
    wait_for("view node gone", lambda: cluster.plane.kubectl(
        "get", "node", f"{cluster.node.name}-koordlet", check=False).returncode != 0, 30)  # fmt: skip
