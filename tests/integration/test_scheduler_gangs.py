"""`loadline scheduler` on the real API server: gang scheduling with PodGroups (issue 4, tests b and c).

Every kwok node here has 2 cores and every pod asks for 1.5, so a node holds exactly one
pod and "room for k" means k nodes. Pods are confined to the test's nodes by a label.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tests.harness.controlplane import ControlPlane, fake_node
from tests.integration.scheduler_support import (
    PG_LABEL,
    SUITE,
    Api,
    bound_count,
    create_pods,
    placements,
    pod,
    running_scheduler,
    unique,
    wait_for,
)
from tests.objects import pod_group

pytestmark = pytest.mark.integration

def gang(name: str, namespace: str, size: int, suite: str) -> list[dict[str, object]]:
    return [
        pod(f"{name}-{i}", namespace, cpu="1500m", memory="1Gi", labels={PG_LABEL: name}, node_selector={SUITE: suite})
        for i in range(size)
    ]


def assert_nothing_bound_for(api: Api, namespace: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        bound = {p: n for p, n in placements(api, namespace).items() if n}
        assert not bound, f"pods were bound while the gang could not be complete: {bound}"
        time.sleep(0.5)


def test_gang_of_four_waits_for_room_then_binds_together(
    cluster: ControlPlane, namespace: str, kwok_nodes: object
) -> None:
    suite = unique("gang")
    kwok_nodes(3, cpu="2", memory="8Gi", labels={SUITE: suite})  # type: ignore[operator]
    api = Api(cluster)
    with running_scheduler(cluster) as scheduler:
        api.create(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups",
                   pod_group("job", 4, namespace=namespace))
        create_pods(api, gang("job", namespace, 4, suite))
        assert_nothing_bound_for(api, namespace, 10)

        status, doc = scheduler.get_json(f"/explain/{namespace}/job-0")
        assert status == 200 and doc["gang"]["minMember"] == 4 and doc["gang"]["bound"] == []
        assert doc["state"].startswith("queued:"), doc["state"]

        # Room appears: a fourth node (the scheduler does not wait for kwok to report it Ready).
        fourth = f"{suite}-extra"
        try:
            added = time.monotonic()
            cluster.apply([fake_node(fourth, cpu="2", memory="8Gi", labels={SUITE: suite})])
            wait_for("all four members to be bound", lambda: bound_count(api, namespace) == 4, timeout=60)
            elapsed = time.monotonic() - added
            print(f"gang bound {elapsed:.1f}s after the fourth node was sent to the API server (kubectl included)")
            assert len(set(placements(api, namespace).values())) == 4
            assert elapsed < 20
        finally:
            cluster.kubectl("delete", "node", fourth, "--wait=false", check=False)


def test_two_gangs_on_room_for_six_end_as_one_bound_and_one_pending(
    cluster: ControlPlane, namespace: str, kwok_nodes: object
) -> None:
    suite = unique("deadlock")
    kwok_nodes(6, cpu="2", memory="8Gi", labels={SUITE: suite})  # type: ignore[operator]
    api = Api(cluster)
    for name in ("alpha", "beta"):
        api.create(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups",
                   pod_group(name, 4, namespace=namespace))
    # Both gangs arrive together, interleaved, before the scheduler starts and while it runs.
    create_pods(api, [p for pair in zip(gang("alpha", namespace, 2, suite), gang("beta", namespace, 2, suite),
                                        strict=True) for p in pair])
    with running_scheduler(cluster) as scheduler:
        create_pods(api, [p for pair in zip(gang("alpha", namespace, 4, suite)[2:], gang("beta", namespace, 4, suite)[2:],
                                            strict=True) for p in pair])
        wait_for("one gang to be bound", lambda: bound_count(api, namespace) >= 4, timeout=60)
        deadline = time.monotonic() + 15  # and it stays that way: never 3 + 3, never a second gang half placed
        while time.monotonic() < deadline:
            per_gang = Counter(name.rsplit("-", 1)[0] for name, node in placements(api, namespace).items() if node)
            assert sorted(per_gang.values()) == [4], per_gang
            time.sleep(0.5)
        winner = next(iter(per_gang))
        loser = "beta" if winner == "alpha" else "alpha"
        status, doc = scheduler.get_json(f"/explain/{namespace}/{loser}-0")
        assert status == 200
        assert doc["gang"]["bound"] == [] and doc["gang"]["waitingOnPermit"] == []
        assert len(doc["gang"]["pending"]) == 4
