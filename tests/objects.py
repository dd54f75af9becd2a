"""Object builders for tests and benches, on the common/api models: one place that knows the wire shape of
each kind (Pod, Node, NodeMetric, NodeSLO, PodGroup) and one RFC 3339 formatter.

    pod("web-0", cpu="500m", node_name="n1", owner=("ReplicaSet", "web"))
    node("n1", cpu="8", labels={"zone": "a"})
    MakeNodeMetric("n1").updated(NOW - 30).system(cpu="500m", memory="2Gi").pod("ns", "a", cpu="300m").obj()

One function per kind, keyword arguments for the variations (as kube-scheduler's `st.MakePod()` wrappers in
pkg/scheduler/testing/wrappers.go); a test that needs a default of its own wraps one in a one-liner.

Builders emit wire dicts and do not validate, so a test can build a malformed object on purpose
(a negative quantity, a garbage time); `valid()` checks the object against the pydantic model.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Self

from common.api.constants import LABEL_QOS_CLASS, SLO_API_VERSION
from common.api.nodemetric import NodeMetric
from common.api.wire import format_time

Obj = dict[str, Any]

T0 = 1_700_000_000.0  # FakeClock's default start: pods are created then unless told otherwise
SCHEDULING_GROUP = "scheduling.x-k8s.io"  # coscheduling's PodGroup


def rfc3339(when: float | datetime | None = None) -> str:
    """metav1.Time's wire text for an epoch (or an aware datetime); now when omitted."""
    return format_time(time.time() if when is None else when)


def resources(cpu: str | None = None, memory: str | None = None, **other: str) -> Obj:
    """A ResourceMap: `{resources: {...}}` with the quantities given (None: left out)."""
    found = {"cpu": cpu, "memory": memory, **other}
    return {"resources": {name: value for name, value in found.items() if value is not None}}


class MakeNodeMetric:
    """A NodeMetric (`slo.koordinator.sh/v1alpha1`) as the agent and the manager write it."""

    def __init__(self, name: str) -> None:
        self._meta: Obj = {"name": name}
        self._spec: Obj | None = None
        self._status: Obj | None = None

    def _status_part(self) -> Obj:
        if self._status is None:
            self._status = {}
        return self._status

    def _node_metric(self) -> Obj:
        info: Obj = self._status_part().setdefault("nodeMetric", {})
        return info

    def resource_version(self, rv: str) -> Self:
        self._meta["resourceVersion"] = rv
        return self

    def report_interval(self, seconds: int | None, aggregate_seconds: int | None = None) -> Self:
        policy: Obj = {}
        if aggregate_seconds is not None:
            policy["aggregateDurationSeconds"] = aggregate_seconds
        if seconds is not None:
            policy["reportIntervalSeconds"] = seconds
        self._spec = {"metricCollectPolicy": policy} if policy else {}
        return self

    def updated(self, when: float | datetime | str | None) -> Self:
        """status.updateTime (an epoch, a datetime or raw text); None leaves it out."""
        status = self._status_part()
        if when is None:
            status.pop("updateTime", None)
        else:
            status["updateTime"] = when if isinstance(when, str) else rfc3339(when)
        return self

    def node_usage(self, cpu: str | None = None, memory: str | None = None) -> Self:
        self._node_metric()["nodeUsage"] = resources(cpu, memory)
        return self

    def system(self, cpu: str | None = None, memory: str | None = None) -> Self:
        self._node_metric()["systemUsage"] = resources(cpu, memory)
        return self

    def aggregated(self, windows: list[Obj]) -> Self:
        """status.nodeMetric.aggregatedNodeUsages as given: [{duration, usage: {p95: ResourceMap}}]."""
        self._node_metric()["aggregatedNodeUsages"] = windows
        return self

    def pod(
        self,
        namespace: str,
        name: str,
        cpu: str | None = None,
        memory: str | None = None,
        *,
        priority: str | None = None,
        qos: str | None = None,
    ) -> Self:
        """One status.podsMetric entry."""
        entry: Obj = {"namespace": namespace, "name": name}
        if priority is not None:
            entry["priority"] = priority
        if qos is not None:
            entry["qos"] = qos
        entry["podUsage"] = resources(cpu, memory)
        self._status_part().setdefault("podsMetric", []).append(entry)
        return self

    def pods(self, entries: list[Obj]) -> Self:
        """status.podsMetric entries as given (e.g. from `pod_usage`)."""
        self._status_part().setdefault("podsMetric", []).extend(entries)
        return self

    def host_app(self, name: str, cpu: str | None = None, memory: str | None = None, *, priority: str = "") -> Self:
        entry = {"name": name, "priority": priority, "usage": resources(cpu, memory)}
        self._status_part().setdefault("hostApplicationMetric", []).append(entry)
        return self

    def prod_reclaimable(self, cpu: str | None = None, memory: str | None = None) -> Self:
        """status.prodReclaimableMetric: what the agent predicts prod pods leave unused."""
        self._status_part()["prodReclaimableMetric"] = {"resource": resources(cpu, memory)}
        return self

    def status(self) -> Obj:
        """Just the status, as the agent PUTs or patches it."""
        return dict(self._status or {})

    def obj(self) -> Obj:
        out: Obj = {"apiVersion": SLO_API_VERSION, "kind": "NodeMetric", "metadata": dict(self._meta)}
        if self._spec is not None:
            out["spec"] = self._spec
        if self._status is not None:
            out["status"] = self._status
        return out

    def valid(self) -> Obj:
        """The object, checked against the NodeMetric model (raises on a malformed one)."""
        obj = self.obj()
        NodeMetric.model_validate(obj)
        return obj


def pod_usage(
    namespace: str, name: str, cpu: str | None = None, memory: str | None = None, *, priority: str | None = None
) -> Obj:
    """One status.podsMetric entry on its own (for `MakeNodeMetric.pods`)."""
    built = MakeNodeMetric("_").pod(namespace, name, cpu, memory, priority=priority).status()
    entry: Obj = built["podsMetric"][0]
    return entry


def pod(
    name: str = "p",
    cpu: str | None = "1",
    memory: str | None = "1Gi",
    *,
    namespace: str = "default",
    uid: str | None = None,
    rv: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    koord_qos: str | None = None,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    containers: list[Obj] | None = None,
    image: str | None = None,
    container: str = "c",
    node_name: str | None = None,
    priority: int | None = None,
    created: float | None = T0,
    deleted: float | None = None,
    scheduled_at: float | None = None,
    started: float | None = None,
    phase: str | None = None,
    qos_class: str | None = None,
    ready: bool | None = None,
    owner: tuple[str, str] | tuple[str, str, str] | None = None,
    scheduler_name: str | None = "loadline-scheduler",
    tolerations: list[dict[str, str]] | None = None,
    node_selector: dict[str, str] | None = None,
    affinity: Obj | None = None,
    gates: list[str] | None = None,
    **spec: Any,
) -> Obj:
    """A v1 Pod: one container (`container`, of `image`: an API server wants one) requesting `cpu`/`memory`
    (None: left out) plus `requests`, unless `containers` replaces it. `uid` defaults to `uid-<namespace>-<name>`;
    `koord_qos` is the koordinator.sh/qosClass label, `qos_class` Kubernetes' status.qosClass; `owner` is the
    controller (kind, name[, uid]); `phase` defaults to Running when bound, else Pending; `created`/`deleted`/
    `scheduled_at`/`started` (status.startTime) are epochs (None: left out); `spec` adds (or overrides) spec
    fields. To create it on an API server: `for_api_server(pod(...))`."""
    meta: Obj = {"name": name, "namespace": namespace, "uid": uid if uid is not None else f"uid-{namespace}-{name}"}
    if rv is not None:
        meta["resourceVersion"] = rv
    meta["labels"] = dict(labels or {}) | ({LABEL_QOS_CLASS: koord_qos} if koord_qos else {})
    meta["annotations"] = dict(annotations or {})
    if created is not None:
        meta["creationTimestamp"] = rfc3339(created)
    if deleted is not None:
        meta["deletionTimestamp"] = rfc3339(deleted)
    if owner is not None:
        kind, owner_name, *owner_uid = owner
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": kind, "name": owner_name, "uid": owner_uid[0] if owner_uid
             else f"uid-{owner_name}", "controller": True}
        ]
    if containers is None:
        reqs = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None} | (requests or {})
        wanted: Obj = {"requests": reqs}
        if limits:
            wanted["limits"] = limits
        containers = [{"name": container, "resources": wanted} | ({"image": image} if image is not None else {})]
    body: Obj = {"containers": containers}
    optional = {"schedulerName": scheduler_name, "nodeName": node_name, "priority": priority,
                "tolerations": tolerations, "nodeSelector": node_selector, "affinity": affinity,
                "schedulingGates": [{"name": g} for g in gates] if gates else None}  # fmt: skip
    body.update({key: value for key, value in optional.items() if value is not None and value != []})
    body.update(spec)
    status: Obj = {"phase": phase if phase is not None else ("Running" if node_name else "Pending")}
    if qos_class is not None:
        status["qosClass"] = qos_class
    if started is not None:
        status["startTime"] = rfc3339(started)
    conditions: list[Obj] = []
    if scheduled_at is not None:
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(scheduled_at)})
    if ready is not None:
        conditions.append({"type": "Ready", "status": "True" if ready else "False"})
    if conditions:
        status["conditions"] = conditions
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body, "status": status}


def for_api_server(obj: Obj) -> Obj:
    """A built object as a client sends it to be created: without what the API server sets (uid, creation time,
    resourceVersion, status). Server-side apply refuses a uid that names no existing object."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("uid", "creationTimestamp", "resourceVersion")}
    return {k: v for k, v in obj.items() if k != "status"} | {"metadata": meta}


def node(
    name: str = "n1",
    *,
    cpu: str | None = "4",
    memory: str | None = "8Gi",
    pods: str | None = "110",
    extra: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    rv: str | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    status: Obj | None = None,
) -> Obj:
    """A v1 Node whose allocatable and capacity are `cpu`, `memory`, `pods` (None: left out) and `extra`
    (e.g. batch resources); `status` replaces the whole status (to build a malformed one)."""
    allocatable = {k: v for k, v in (("cpu", cpu), ("memory", memory), ("pods", pods)) if v is not None}
    allocatable |= extra or {}
    meta: Obj = {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {})}
    if rv is not None:
        meta["resourceVersion"] = rv
    spec: Obj = {"taints": list(taints or [])}
    if unschedulable:
        spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec,
            "status": status if status is not None else {"allocatable": allocatable, "capacity": dict(allocatable)}}


def node_metric(
    name: str,
    cpu: str | None = None,
    memory: str | None = None,
    *,
    updated: float | datetime | str | None = T0,
    report_interval: int | None = 60,
    aggregated: list[Obj] | None = None,
    pods: list[Obj] | None = None,
    system: dict[str, str] | None = None,
    rv: str | None = None,
) -> Obj:
    """A NodeMetric in one call: node usage `cpu`/`memory`, `system` usage, podsMetric `pods` (`pod_usage`
    entries); MakeNodeMetric for anything else."""
    built = MakeNodeMetric(name).report_interval(report_interval).node_usage(cpu, memory).updated(updated)
    if rv is not None:
        built.resource_version(rv)
    if aggregated is not None:
        built.aggregated(aggregated)
    if system is not None:
        built.system(system.get("cpu"), system.get("memory"))
    return built.pods(pods or []).obj()


def node_slo(name: str, *, rv: str | None = None, **spec: Any) -> Obj:
    """A NodeSLO with the spec fields given (e.g. `resourceUsedThresholdWithBE={...}`)."""
    meta: Obj = {"name": name}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"apiVersion": SLO_API_VERSION, "kind": "NodeSLO", "metadata": meta, "spec": spec}


def pod_group(
    name: str,
    min_member: int,
    *,
    namespace: str = "default",
    created: float | None = T0,
    min_resources: dict[str, str] | None = None,
    timeout: int | None = None,
    group: str = SCHEDULING_GROUP,
    **spec_fields: Any,
) -> Obj:
    """A coscheduling PodGroup (`scheduling.x-k8s.io/v1alpha1`, or another API `group`'s v1alpha1); `spec_fields`
    adds (or overrides) spec fields."""
    spec: Obj = {"minMember": min_member}
    if min_resources:
        spec["minResources"] = min_resources
    if timeout is not None:
        spec["scheduleTimeoutSeconds"] = timeout
    meta: Obj = {"name": name, "namespace": namespace}
    if created is not None:
        meta["creationTimestamp"] = rfc3339(created)
    return {"apiVersion": f"{group}/v1alpha1", "kind": "PodGroup", "metadata": meta, "spec": spec | spec_fields}
