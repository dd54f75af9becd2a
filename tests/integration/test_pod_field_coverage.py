"""Nothing a pod asks for is ignored silently (issue 26).

The field table (scheduler_plugin/framework/podfields.py) must classify every field of the pod
types as the real API server publishes them: its OpenAPI (/openapi/v3/api/v1) is walked from
io.k8s.api.core.v1.PodSpec through the rows marked Split; a field without a row (a Kubernetes
release added one: decide whether it matters to placement) or a row without a field fails.
Then a pod with refused fields meets `loadline scheduler`: PodScheduled=False and a
FailedScheduling event naming the fields and telling the user to use another scheduler."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from scheduler_plugin.framework.podfields import FIELDS, ROOT_TYPE, Split
from tests.harness.controlplane import ControlPlane
from tests.integration.scheduler_support import Api, events_for, pod, running_scheduler, wait_for

pytestmark = pytest.mark.integration

PREFIX = "io.k8s.api.core.v1."
Obj = dict[str, Any]


def _ref(schema: Obj) -> str | None:
    """The type a property refers to: directly, through allOf (OpenAPI v3 wraps $refs so), or its items'."""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    for part in schema.get("allOf") or []:
        if "$ref" in part:
            return str(part["$ref"]).rsplit("/", 1)[-1]
    items = schema.get("items")
    return _ref(items) if isinstance(items, dict) else None


def walk(schemas: Obj) -> tuple[list[str], list[str], set[str]]:
    """(fields without a row, Split rows whose property refers to another type, the keys the walk saw)."""
    unclassified: list[str] = []
    wrong_type: list[str] = []
    seen: set[str] = set()
    pending = [ROOT_TYPE]
    done: set[str] = set()
    while pending:
        type_name = pending.pop()
        if type_name in done:
            continue
        done.add(type_name)
        properties = schemas[PREFIX + type_name]["properties"]
        for field, schema in sorted(properties.items()):
            key = f"{type_name}.{field}"
            seen.add(key)
            rule = FIELDS.get(key)
            if rule is None:
                unclassified.append(key)
            elif isinstance(rule, Split):
                target = _ref(schema)
                if target != PREFIX + rule.type_name:
                    wrong_type.append(f"{key}: the API says {target}, the table {rule.type_name}")
                pending.append(rule.type_name)
    return unclassified, wrong_type, seen


def test_every_pod_field_is_implemented_refused_or_irrelevant(cluster: ControlPlane) -> None:
    schemas = Api(cluster).get("/openapi/v3/api/v1")["components"]["schemas"]
    unclassified, wrong_type, seen = walk(schemas)
    assert not unclassified, (
        f"pod fields without a row in scheduler_plugin/framework/podfields.py: {unclassified}; decide for each "
        "whether Loadline implements it, refuses pods that set it, or it does not affect placement")
    assert not wrong_type, wrong_type
    stale = sorted(set(FIELDS) - seen)
    assert not stale, f"rows for fields the API server does not have: {stale}"
    # The walk covered what a pod is made of, not just the top level.
    assert {"Container.ports", "ContainerPort.hostIP", "Volume.persistentVolumeClaim", "Affinity.podAffinity",
            "ResourceRequirements.requests"} <= seen


def test_a_pod_with_refused_fields_is_told_to_use_another_scheduler(
    cluster: ControlPlane, namespace: str, kwok_nodes: Callable[..., list[str]]
) -> None:
    kwok_nodes(1)  # (with no node at all the answer would be "no nodes available to schedule pods")
    api = Api(cluster)
    obj = pod("stateful", namespace)
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}]
    with running_scheduler(cluster):
        api.create(f"/api/v1/namespaces/{namespace}/pods", obj)
        wait_for("a FailedScheduling event", lambda: bool(events_for(api, namespace, "stateful", "FailedScheduling")))
        note = events_for(api, namespace, "stateful", "FailedScheduling")[0]["note"]
        print("FailedScheduling:", note)
        assert " nodes are available: pod uses field loadline-scheduler does not implement " in note
        assert "spec.resourceClaims: Dynamic Resource Allocation" in note
        assert "set spec.schedulerName to a scheduler that implements it" in note
        current = api.get(f"/api/v1/namespaces/{namespace}/pods/stateful")
        condition = next(c for c in current["status"]["conditions"] if c["type"] == "PodScheduled")
        assert (condition["status"], condition["reason"], condition["message"]) == ("False", "Unschedulable", note)
        assert not current["spec"].get("nodeName")
