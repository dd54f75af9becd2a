"""Two `loadline scheduler` replicas with Lease leader election (issue 4, test g).

Only the leader schedules (every Scheduled event names it as reporting instance); the
standby is ready with warm caches. SIGKILL the leader — it cannot release its Lease —
and the standby takes over once the Lease expires (6 s here), then schedules the pods
created while nobody was leading.
"""

from __future__ import annotations

import contextlib
import time

import pytest

from tests.harness.controlplane import ControlPlane
from tests.integration.scheduler_support import (
    SUITE,
    Api,
    LoadlineScheduler,
    bound_count,
    create_pods,
    events_for,
    pod,
    running_scheduler,
    unique,
    wait_for,
)

pytestmark = pytest.mark.integration

def leader_of(replicas: dict[str, LoadlineScheduler]) -> list[str]:
    return [name for name, replica in replicas.items() if "(leader)" in replica.readyz()]


def test_standby_takes_over_when_the_leader_is_killed(
    cluster: ControlPlane, namespace: str, kwok_nodes: object
) -> None:
    suite = unique("ha")
    kwok_nodes(2, cpu="8", memory="32Gi", labels={SUITE: suite})  # type: ignore[operator]
    api = Api(cluster)
    selector = {SUITE: suite}
    lease = unique("lease")
    with contextlib.ExitStack() as stack:
        replicas = {
            name: stack.enter_context(
                running_scheduler(cluster, leader_elect=True, lease_name=lease, extra_args=(f"--identity={name}",))
            )
            for name in ("replica-a", "replica-b")
        }
        wait_for("one leader", lambda: len(leader_of(replicas)) == 1, timeout=30)
        time.sleep(2)  # and only one, also after a few renewals
        leaders = leader_of(replicas)
        assert len(leaders) == 1, leaders
        leader = leaders[0]
        standby = next(name for name in replicas if name != leader)
        assert "(standby)" in replicas[standby].readyz()

        create_pods(api, [pod(f"before-{i}", namespace, node_selector=selector) for i in range(5)])
        wait_for("the leader to bind the first pods", lambda: bound_count(api, namespace) == 5, timeout=60)
        wait_for("their Scheduled events", lambda: all(events_for(api, namespace, f"before-{i}", "Scheduled")
                                                       for i in range(5)))
        instances = {e["reportingInstance"] for i in range(5) for e in events_for(api, namespace, f"before-{i}", "Scheduled")}
        assert instances == {leader}

        replicas[leader].component.kill()  # SIGKILL: the Lease is not released
        killed = time.monotonic()
        create_pods(api, [pod(f"after-{i}", namespace, node_selector=selector) for i in range(5)])
        wait_for("the standby to bind the pods created after the leader died",
                 lambda: bound_count(api, namespace) == 10, timeout=90)
        print(f"failover: pods bound {time.monotonic() - killed:.1f}s after the leader was killed (lease 6s)")
        assert "(leader)" in replicas[standby].readyz()
        wait_for("the new Scheduled events", lambda: all(events_for(api, namespace, f"after-{i}", "Scheduled")
                                                         for i in range(5)))
        instances = {e["reportingInstance"] for i in range(5) for e in events_for(api, namespace, f"after-{i}", "Scheduled")}
        assert instances == {standby}
        assert "became leader" in replicas[standby].log()
