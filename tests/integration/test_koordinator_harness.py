"""Each of Koordinator's components starts against a harness control plane, becomes ready (and leader when
asked), does its job once, and is gone after `stop()`."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import module_plane
from tests.harness import koordinator
from tests.harness.controlplane import ControlPlane, fake_node
from tests.harness.processes import wait_until

pytestmark = pytest.mark.integration


def _one_node(plane: ControlPlane) -> None:
    plane.apply([fake_node("koord-h-0", cpu="8", memory="16Gi")])
    plane.kubectl("wait", "--for=condition=Ready", "node/koord-h-0", "--timeout=120s", timeout=130)


# A plane of its own: koord-manager writes NodeMetrics, NodeSLOs and batch resources for every node it sees.
own_plane, plane = module_plane(_one_node)


def _stopped(process: koordinator.KoordProcess) -> None:
    assert not process.alive()
    assert process.proc is not None and process.proc.returncode is not None


def test_koord_scheduler_leads_and_binds_a_pod(plane: ControlPlane) -> None:
    with koordinator.start_koord_scheduler(plane, leader_elect=True) as koord:
        assert koord.alive() and koord.scheduler_name == "koord-scheduler"
        wait_until("koord-scheduler holds its Lease", lambda: bool(koordinator.lease_holder(plane, koord.name)), 60)
        pod = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "koord-h-pod", "namespace": "default"},
            "spec": {"schedulerName": koord.scheduler_name, "containers": [
                {"name": "c", "image": "x", "resources": {"requests": {"cpu": "100m"}}}]},
        }  # fmt: skip
        plane.apply(pod)
        try:
            wait_until("the pod bound by koord-scheduler", lambda: _node_of(plane, "koord-h-pod") == "koord-h-0", 60)
        finally:
            plane.kubectl("delete", "pod", "koord-h-pod", "--grace-period=0", "--force", check=False)
    _stopped(koord)


def test_koord_descheduler_leads(plane: ControlPlane) -> None:
    with koordinator.start_koord_descheduler(plane, leader_elect=True, dry_run=True) as koord:
        wait_until("koord-descheduler holds its Lease", lambda: bool(koordinator.lease_holder(plane, koord.name)), 60)
        # a balance round ran: LowNodeLoad refuses a one-node cluster, and says so each interval
        wait_until("a descheduling round", lambda: "cluster size is 0 or 1" in koord.log_tail(200), 30, alive=[koord])
    _stopped(koord)


def test_koord_manager_writes_nodemetric_and_nodeslo(plane: ControlPlane) -> None:
    started = time.monotonic()
    with koordinator.start_koord_manager(plane) as koord:
        for kind in ("nodemetric", "nodeslo"):
            wait_until(
                f"koord-manager's {kind}",
                lambda kind=kind: plane.kubectl("get", kind, "koord-h-0", check=False).returncode == 0,
                60,
                alive=[koord],
            )
    _stopped(koord)
    print(f"\n[koord-manager] NodeMetric and NodeSLO in {time.monotonic() - started:.1f}s")


def _node_of(plane: ControlPlane, pod: str) -> str:
    out = plane.kubectl("get", "pod", pod, "-n", "default", "-o", "json")
    return str(json.loads(out.stdout)["spec"].get("nodeName") or "")
