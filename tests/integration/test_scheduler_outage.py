"""`loadline scheduler` when the API server goes away and comes back, and without optional CRDs.

The process must neither crash nor log every retry: its watches, its Lease renewal
and its writes each log the outage once, it stops leading (it cannot renew), and once
the API server is back it leads again and schedules what was created meanwhile. A CRD
that is not installed (NodeMetric, either PodGroup group) is logged once, scheduling
goes on without it, and its watch starts when it appears.
"""

from __future__ import annotations

import re
import time

import pytest

from scheduler_plugin.framework.interfaces import watched_by
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.registry import frameworks_from_config
from tests.harness.controlplane import REPO_ROOT, ControlPlane, fake_node
from tests.integration.scheduler_support import (
    Api,
    bound_count,
    create_pods,
    placements,
    pod,
    running_scheduler,
    wait_for,
)
from tests.objects import pod_group

pytestmark = pytest.mark.integration


def test_scheduler_rides_out_an_api_server_restart(fresh_control_plane: ControlPlane) -> None:
    plane = fresh_control_plane
    plane.start_kwok()
    nodes = ["outage-0", "outage-1"]
    plane.apply([fake_node(name, cpu="8", memory="32Gi") for name in nodes])
    plane.kubectl("wait", "--for=condition=Ready", "node", *nodes, "--timeout=120s", timeout=130)
    plane.kubectl("create", "namespace", "work")
    api = Api(plane)
    with running_scheduler(plane, leader_elect=True) as scheduler:
        create_pods(api, [pod("before", "work")])
        wait_for("the first pod to be bound", lambda: bound_count(api, "work") == 1, timeout=60)

        # A burst of pods, and the API server goes away while they are being bound and reported.
        burst = 40
        create_pods(api, [pod(f"burst-{i}", "work") for i in range(burst)])
        wait_for("the burst to start binding", lambda: bound_count(api, "work") > 1, timeout=60, interval=0.02)
        plane.stop_apiserver()
        time.sleep(10)  # longer than the renew deadline (4 s): it stops leading
        assert scheduler.component.alive()
        # still serving, caches kept, not leading
        wait_for("the scheduler to stop leading", lambda: "(standby)" in scheduler.readyz(), timeout=30)
        log_during_outage = scheduler.log()

        plane.start_apiserver()
        create_pods(api, [pod(f"after-{i}", "work") for i in range(3)])
        wait_for("the pods created after the restart to be bound",
                 lambda: bound_count(api, "work") == 4 + burst, timeout=90)
        assert "(leader)" in scheduler.readyz()
        assert scheduler.component.alive()

        # Every bound pod has its Scheduled event, also those bound in the instant the server went away.
        def unreported() -> set[str]:
            reported = {e["regarding"]["name"] for e in api.events("work") if e.get("reason") == "Scheduled"}
            return {p for p, node in placements(api, "work").items() if node} - reported

        wait_for("a Scheduled event for every bound pod", lambda: not unreported(), timeout=60)
        failed_events = re.search(r'^loadline_scheduler_api_errors_total\{call="event"\} (\S+)$',
                                  scheduler.metrics(), re.MULTILINE)
        print(f"event writes that met the outage: {failed_events.group(1) if failed_events else 0}")

    warnings = [line for line in log_during_outage.splitlines() if " W " in line or " E " in line]
    print("\n".join(warnings))
    # One line per watch (nodes, pods, PDBs and what the default plugins watch), a few for events and the Lease.
    frameworks = frameworks_from_config(None, snapshot=Snapshot())
    watches = 3 + len(watched_by(p for f in frameworks.values() for p in f.plugins.values()))
    assert len(warnings) <= watches + 6, f"{len(warnings)} warnings during a 10 s outage ({watches} watches)"
    assert "Traceback" not in log_during_outage


def test_missing_crds_are_logged_once_and_picked_up_when_installed(bare_control_plane: ControlPlane) -> None:
    plane = bare_control_plane
    crds = REPO_ROOT / "deploy" / "crds"
    # every CRD but Koordinator's PodGroup group and NodeMetric
    for present in ("scheduling.x-k8s.io_podgroups.yaml", "slo.koordinator.sh_nodeslos.yaml"):
        plane.kubectl("apply", "--server-side", "-f", str(crds / present))
    plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    plane.start_kwok()
    plane.apply([fake_node("crd-0", cpu="8", memory="32Gi")])
    plane.kubectl("wait", "--for=condition=Ready", "node", "crd-0", "--timeout=120s", timeout=130)
    plane.kubectl("create", "namespace", "work")
    api = Api(plane)
    with running_scheduler(plane, extra_args=("--crd-retry-seconds=2",)) as scheduler:
        create_pods(api, [pod("plain", "work")])
        wait_for("a pod to be bound without the CRDs", lambda: bound_count(api, "work") == 1, timeout=60)
        time.sleep(5)  # a few retry periods
        log = scheduler.log()
        for crd in ("podgroups.scheduling.sigs.k8s.io", "nodemetrics.slo.koordinator.sh"):
            assert log.count(f"CRD {crd} is not installed") == 1, log

        # Koordinator's PodGroup group appears: its gangs are scheduled once the watch has it.
        legacy = REPO_ROOT / "deploy" / "crds" / "scheduling.sigs.k8s.io_podgroups.yaml"
        plane.kubectl("apply", "--server-side", "-f", str(legacy))
        plane.kubectl("wait", "--for=condition=Established", "crd", "podgroups.scheduling.sigs.k8s.io",
                      "--timeout=60s")
        api.create("/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/work/podgroups",
                   pod_group("legacy", 2, namespace="work", group="scheduling.sigs.k8s.io"))
        create_pods(api, [pod(f"legacy-{i}", "work", labels={"pod-group.scheduling.sigs.k8s.io": "legacy"})
                          for i in range(2)])
        wait_for("the legacy gang to be bound", lambda: bound_count(api, "work") == 3, timeout=60)
        assert "CRD podgroups.scheduling.sigs.k8s.io is installed now" in scheduler.log()

        # ... and goes away again: noticed, logged once, scheduling goes on.
        plane.kubectl("delete", "crd", "podgroups.scheduling.sigs.k8s.io")
        wait_for("the removal to be noticed",
                 lambda: "CRD podgroups.scheduling.sigs.k8s.io was removed" in scheduler.log(), timeout=60)
        create_pods(api, [pod("after-removal", "work")])
        wait_for("a pod to be bound after the removal", lambda: bound_count(api, "work") == 4, timeout=60)
        assert scheduler.log().count("CRD podgroups.scheduling.sigs.k8s.io was removed") == 1
