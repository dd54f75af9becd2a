"""`loadline scheduler` on the real API server with kwok nodes: inter-pod affinity and topology spread (issue 26).

The issue's examples, on ten kwok nodes of this test's suite, one scheduler process for all of them:
1. eleven pods with required anti-affinity on kubernetes.io/hostname: ten land on ten different nodes, the
   eleventh stays pending with kube-scheduler's reason in its FailedScheduling event;
2. ten pods with topologySpreadConstraints maxSkew 1 on the hostname (DoNotSchedule): one per node;
3. topology keys no node has: required affinity on such a key is refused with kube-scheduler's reason (also in
   `loadline explain`), anti-affinity on it constrains nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
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

HOST = "kubernetes.io/hostname"
MISSING_KEY = "example.com/no-node-has-this"


def term(app: str, key: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}


def failed_note(api: Api, namespace: str, name: str) -> str:
    events = events_for(api, namespace, name, "FailedScheduling")
    return str(events[-1].get("note") or "") if events else ""


def test_anti_affinity_spread_and_missing_topology_keys(
    cluster: ControlPlane, namespace: str, kwok_nodes: Callable[..., list[str]]
) -> None:
    suite = unique("interpod")
    nodes = kwok_nodes(10, cpu="8", memory="16Gi", labels={SUITE: suite})
    api = Api(cluster)
    mine = {SUITE: suite}

    def app_pods(app: str, count: int, **spec: Any) -> list[dict[str, Any]]:
        out = []
        for i in range(count):
            obj = pod(f"{app}-{i}", namespace, labels={"app": app}, node_selector=mine,
                      affinity=spec.get("affinity"))
            if "spread" in spec:
                obj["spec"]["topologySpreadConstraints"] = spec["spread"]
            out.append(obj)
        return out

    with running_scheduler(cluster) as scheduler:
        # 1. required anti-affinity on the hostname: one per node, the eleventh refused.
        anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("web", HOST)]}}
        create_pods(api, app_pods("web", 11, affinity=anti))
        web = [f"web-{i}" for i in range(11)]
        wait_for("ten web pods bound", lambda: sum(1 for n in web if placements(api, namespace).get(n)) == 10, 60)
        wait_for("the eleventh's FailedScheduling", lambda: failed_note(api, namespace, "web-10"), 30)
        where = placements(api, namespace)
        bound = [where[n] for n in web if where[n]]
        assert sorted(bound) == sorted(nodes), "one web pod per node"
        note = failed_note(api, namespace, "web-10")
        assert "10 node(s) didn't match pod anti-affinity rules" in note, note
        assert note.startswith("0/") and " preemption: " in note, note

        # 2. maxSkew 1 on the hostname: ten pods, one per node (the web pods' anti-affinity is about app=web only).
        spread = [{"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule",
                   "labelSelector": {"matchLabels": {"app": "spread"}}}]
        create_pods(api, app_pods("spread", 10, spread=spread))
        names = [f"spread-{i}" for i in range(10)]
        wait_for("ten spread pods bound", lambda: all(placements(api, namespace).get(n) for n in names), 60)
        where = placements(api, namespace)
        assert sorted(Counter(where[n] for n in names).values()) == [1] * 10, where

        # 3. a topology key no node has: required affinity is refused (UnschedulableAndUnresolvable), with the
        #    reason in the event and in `loadline explain`; anti-affinity on it constrains nothing.
        together = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("lonely", MISSING_KEY)]}}
        apart = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term("free", MISSING_KEY)]}}
        create_pods(api, app_pods("lonely", 1, affinity=together) + app_pods("free", 2, affinity=apart))
        wait_for("the free pods bound", lambda: placements(api, namespace).get("free-1"), 30)
        assert placements(api, namespace).get("free-0")
        wait_for("lonely's FailedScheduling", lambda: failed_note(api, namespace, "lonely-0"), 30)
        note = failed_note(api, namespace, "lonely-0")
        assert "10 node(s) didn't match pod affinity rules" in note, note
        assert not placements(api, namespace).get("lonely-0")
        explained = scheduler.explain_cli(namespace, "lonely-0")
        assert explained.returncode == 0, explained.stderr
        assert "10  InterPodAffinity: node(s) didn't match pod affinity rules" in explained.stdout, explained.stdout
