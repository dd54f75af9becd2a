"""The shared toleration semantics (common/api/scheduling.py) against the real kube-scheduler.

Pods with the edge-case tolerations (empty key with Exists, empty effect, Exists ignoring the
value, Equal with an empty value) are pinned to tainted kwok nodes; kube-scheduler binds those it
finds tolerated and reports the others Unschedulable. Our matching must agree case by case."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from common.api.scheduling import first_untolerated, parse_taints, parse_tolerations
from tests.harness.controlplane import ControlPlane
from tests.integration.scheduler_support import Api, pod, unique

GPU_TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
MAINTENANCE_TAINT = {"key": "maintenance", "effect": "NoExecute"}

# name -> (toleration or None, which node: "gpu" or "maintenance")
CASES: dict[str, tuple[dict[str, str] | None, str]] = {
    "empty-key-exists": ({"operator": "Exists"}, "gpu"),
    "empty-key-exists-other-effect": ({"operator": "Exists", "effect": "NoExecute"}, "gpu"),
    "key-exists-any-value": ({"key": "dedicated", "operator": "Exists"}, "gpu"),
    "key-exists-same-effect": ({"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}, "gpu"),
    "equal-empty-effect": ({"key": "dedicated", "operator": "Equal", "value": "gpu"}, "gpu"),
    "equal-other-value": ({"key": "dedicated", "operator": "Equal", "value": "cpu"}, "gpu"),
    "equal-empty-value": ({"key": "maintenance", "operator": "Equal"}, "maintenance"),
    "none": (None, "gpu"),
}


def _outcome(api: Api, namespace: str, name: str) -> str | None:
    obj = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    if obj.get("spec", {}).get("nodeName"):
        return "bound"
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
            return "unschedulable"
    return None


def test_tolerations_match_as_kube_scheduler_decides(
    cluster: ControlPlane,
    namespace: str,
    kwok_nodes: Callable[..., list[str]],
    kube_scheduler: Callable[..., Any],
) -> None:
    suite = unique("tol")
    (gpu,) = kwok_nodes(1, labels={"loadline.test/suite": suite, "role": "gpu"}, taints=[GPU_TAINT])
    (maintenance,) = kwok_nodes(1, labels={"loadline.test/suite": suite, "role": "maintenance"},
                                taints=[MAINTENANCE_TAINT])  # fmt: skip
    node_of = {"gpu": gpu, "maintenance": maintenance}
    api = Api(cluster)
    pods = []
    for name, (toleration, role) in CASES.items():
        obj = pod(name, namespace, scheduler="default-scheduler", node_selector={"kubernetes.io/hostname": node_of[role]})
        obj["spec"]["tolerations"] = [toleration] if toleration else []
        pods.append(obj)
    kube_scheduler()
    cluster.apply(pods)

    outcomes: dict[str, str | None] = {}
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        outcomes = {name: _outcome(api, namespace, name) for name in CASES}
        if all(outcomes.values()):
            break
        time.sleep(0.5)
    assert all(outcomes.values()), f"kube-scheduler did not decide every pod: {outcomes}"

    ours = {
        name: "bound"
        if first_untolerated(
            parse_taints([GPU_TAINT if role == "gpu" else MAINTENANCE_TAINT]),
            parse_tolerations([toleration] if toleration else []),
        ) is None
        else "unschedulable"
        for name, (toleration, role) in CASES.items()
    }
    assert ours == outcomes
    # The cases are not all one answer: both outcomes occur.
    assert set(outcomes.values()) == {"bound", "unschedulable"}
