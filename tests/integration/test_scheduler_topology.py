"""`loadline scheduler` on the real API server: InfiniBand leaf-group placement (issue 4, test d; seed 004).

Four leaf groups with 4, 3, 2 and 1 free servers (kwok nodes holding one pod each), so
su(m) ≥ … ≥ su(m−3) = 4 ≥ 3 ≥ 2 ≥ 1 and 10 servers in all. A job of n pods is one gang
(PodGroup, minMember n). The seed's four cases, one after the other on the same nodes:
1. n = 11 > 10: nothing is placed (the gang stays pending, nothing bound);
2. n = 1 ≤ the smallest group: all from the smallest group (l3);
3. n = 3 fits l1 (3) and l0 (4) but not l2: the smallest group that fits, l1;
4. n = 6 fits no single group: from the largest down, l0 (4) then l1 (2).
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tests.harness.controlplane import ControlPlane
from tests.integration.scheduler_support import (
    PG_LABEL,
    SUITE,
    Api,
    create_pods,
    placements,
    pod,
    running_scheduler,
    scheduler_config,
    unique,
    wait_for,
)
from tests.objects import pod_group

pytestmark = pytest.mark.integration

LEAF = "loadline.test/ib-leaf-group"
FREE = {"l0": 4, "l1": 3, "l2": 2, "l3": 1}


def run_job(api: Api, namespace: str, suite: str, name: str, n: int) -> list[str]:
    api.create(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups", pod_group(name, n, namespace=namespace))
    pods = [
        pod(f"{name}-{i}", namespace, cpu="1500m", memory="1Gi", labels={PG_LABEL: name}, node_selector={SUITE: suite})
        for i in range(n)
    ]
    create_pods(api, pods)
    return [p["metadata"]["name"] for p in pods]


def groups_used(api: Api, namespace: str, names: list[str], leaf_of: dict[str, str]) -> Counter[str]:
    where = placements(api, namespace)
    return Counter(leaf_of[where[n]] for n in names if where.get(n))


def delete_job(api: Api, namespace: str, names: list[str]) -> None:
    for name in names:
        api.delete_now(f"/api/v1/namespaces/{namespace}/pods/{name}")
    wait_for("the job's pods to be gone", lambda: not set(names) & set(placements(api, namespace)), timeout=60)


def test_seed_004_leaf_group_cases(cluster: ControlPlane, namespace: str, kwok_nodes: object) -> None:
    suite = unique("leaf")
    leaf_of: dict[str, str] = {}
    for group, free in FREE.items():
        for node in kwok_nodes(free, cpu="2", memory="8Gi", labels={SUITE: suite, LEAF: group}):  # type: ignore[operator]
            leaf_of[node] = group
    api = Api(cluster)
    config = scheduler_config({
        "plugins": {"multiPoint": {"enabled": [{"name": "NetworkTopology"}]}},
        "pluginConfig": [{"name": "NetworkTopology", "args": {"leafGroupLabelKey": LEAF}}],
    })  # fmt: skip
    with running_scheduler(cluster, config) as scheduler:
        # Case 1: more pods than free servers — nothing bound, for as long as we watch.
        names = run_job(api, namespace, suite, "case1", 11)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            assert groups_used(api, namespace, names, leaf_of) == Counter()
            time.sleep(0.5)
        status, doc = scheduler.get_json(f"/explain/{namespace}/case1-0")
        assert status == 200 and doc["attempt"]["outcome"] == "unschedulable", doc.get("attempt")
        delete_job(api, namespace, names)

        cases = [("case2", 1, Counter({"l3": 1})), ("case3", 3, Counter({"l1": 3})), ("case4", 6, Counter({"l0": 4, "l1": 2}))]
        for name, n, expected in cases:
            names = run_job(api, namespace, suite, name, n)
            wait_for(f"{name} to be bound", lambda names=names: sum(groups_used(api, namespace, names, leaf_of).values()) == len(names),  # type: ignore[misc]
                     timeout=60)
            used = groups_used(api, namespace, names, leaf_of)
            print(f"{name} (n={n}): {dict(used)}")
            assert used == expected, (name, used)
            delete_job(api, namespace, names)
