"""Object builders for tests, on the common/api models (as kube-scheduler's `st.MakeNodeMetric()`-style
wrappers): one place that knows the wire shape of a NodeMetric, and one RFC 3339 formatter.

    MakeNodeMetric("n1").updated(NOW - 30).system(cpu="500m", memory="2Gi").pod("ns", "a", cpu="300m").obj()

Builders emit wire dicts and do not validate, so a test can build a malformed object on purpose
(a negative quantity, a garbage time); `valid()` checks the object against the pydantic model.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Self

from common.api.constants import SLO_API_VERSION
from common.api.nodemetric import NodeMetric
from common.api.wire import format_time

Obj = dict[str, Any]


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
