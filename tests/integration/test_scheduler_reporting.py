"""What `loadline scheduler` tells users, on the real API server: Scheduled and FailedScheduling
events (events.k8s.io/v1), the PodScheduled=False condition with kube-scheduler's
"0/N nodes are available: …" message, `loadline explain` for a pending pod, and the retry
of an unschedulable pod on the cluster event that makes it fit (not on a timer)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.harness.controlplane import ControlPlane
from tests.integration.scheduler_support import (
    SUITE,
    Api,
    create_pods,
    events_for,
    placements,
    pod,
    running_scheduler,
    unique,
    wait_for,
)

pytestmark = pytest.mark.integration

def scheduled_condition(api: Api, namespace: str, name: str) -> dict[str, Any] | None:
    obj = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return next((c for c in obj.get("status", {}).get("conditions") or [] if c.get("type") == "PodScheduled"), None)


def test_failed_scheduling_event_condition_explain_and_retry_on_node_add(
    cluster: ControlPlane, namespace: str, kwok_nodes: object
) -> None:
    suite = unique("report")
    kwok_nodes(2, cpu="2", memory="8Gi", labels={SUITE: suite})  # type: ignore[operator]
    api = Api(cluster)
    selector = {SUITE: suite}
    with running_scheduler(cluster, extra_args=("--unschedulable-timeout=600",)) as scheduler:
        create_pods(api, [pod("too-big", namespace, cpu="4", node_selector=selector),
                          pod("fits", namespace, cpu="500m", node_selector=selector)])
        wait_for("fits to be bound", lambda: bool(placements(api, namespace)["fits"]), timeout=60)
        wait_for("a FailedScheduling event", lambda: bool(events_for(api, namespace, "too-big", "FailedScheduling")))

        event = events_for(api, namespace, "too-big", "FailedScheduling")[0]
        note = event["note"]
        print("FailedScheduling:", note)
        assert note.startswith("0/") and " nodes are available: " in note
        assert "2 Insufficient cpu" in note
        assert (event["type"], event["action"], event["reportingController"]) == (
            "Warning", "Scheduling", "loadline-scheduler"
        )
        condition = scheduled_condition(api, namespace, "too-big")
        assert condition is not None
        assert (condition["status"], condition["reason"], condition["message"]) == ("False", "Unschedulable", note)

        node = placements(api, namespace)["fits"]
        scheduled = events_for(api, namespace, "fits", "Scheduled")
        assert [e["note"] for e in scheduled] == [f"Successfully assigned {namespace}/fits to {node}"]
        assert scheduled[0]["action"] == "Binding" and scheduled[0]["type"] == "Normal"

        # `loadline explain` names the plugin that rejected each node.
        shown = scheduler.explain_cli(namespace, "too-big")
        print(shown.stdout)
        assert shown.returncode == 0, shown.stderr
        assert "0/" in shown.stdout and "nodes are available" in shown.stdout
        lines = [line for line in shown.stdout.splitlines() if " rejected " in line]
        assert sum("NodeResourcesFit" in line and "Insufficient cpu" in line for line in lines) == 2
        assert "queued:unschedulable" in shown.stdout
        assert scheduler.explain_cli(namespace, "no-such-pod").returncode == 1
        assert "<namespace>/<pod>" in scheduler.explain_cli(namespace, "x", "--help").stdout

        # Room appears: the pod is retried because a node was added, long before any timer.
        added = time.monotonic()
        kwok_nodes(1, cpu="8", memory="8Gi", labels={SUITE: suite})  # type: ignore[operator]
        wait_for("too-big to be bound after the node was added",
                 lambda: bool(placements(api, namespace)["too-big"]), timeout=30)
        print(f"bound {time.monotonic() - added:.1f}s after the node was created")
        condition = scheduled_condition(api, namespace, "too-big")
        assert condition is not None and condition["status"] == "True"
        metrics = scheduler.metrics()
        assert 'loadline_scheduler_queue_moves_total{event="NodeAdd"}' in metrics
