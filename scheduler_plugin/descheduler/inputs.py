"""The round's input records, built from the reflectors' stores.

Objects are converted once per change and reused across rounds; a round only walks the stores
and looks the conversions up, so 100k unchanged pods cost a dict lookup each, not a parse.

One deliberate difference from Koordinator: a podsMetric entry counts towards its node's usage
only while that pod is still on the node and not terminating. Koordinator sums every entry
until the next report, so in the window between an eviction and the next NodeMetric the node
still looks hot and only the anomaly streak restarting after a drain keeps it from evicting
more; here an evicted pod stops counting as soon as the API server says it is leaving, which is
what the round's own accounting assumed when it planned the eviction.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from common.api.nodedigest import digest_node
from common.api.nodemetric_digest import NodeMetricDigest, digest_node_metric
from common.api.poddigest import PodDigest, digest_pod
from common.kube.malformed import MalformedObjects
from scheduler_plugin.descheduler.adapters import (
    malformed_problem,
    node_snapshot,
    pod_snapshot,
    round_node_metric,
    workload_replicas,
)
from scheduler_plugin.descheduler.model import NodeMetricSnapshot, NodeSnapshot, PodSnapshot

JSON = Mapping[str, Any]
_TERMINAL = frozenset({"Succeeded", "Failed"})
# Per pod: the store's object, its conversion (or why it failed), and its (namespace, name).
# Reused as is while the object is unchanged, so a steady round allocates next to nothing per pod:
# at 100k pods, per-round garbage is what drives the cyclic GC's cost.
_PodEntry = tuple[JSON, "PodSnapshot | str", tuple[str, str] | None]


@dataclass(slots=True)
class RoundInputs:
    nodes: list[NodeSnapshot]
    pods: list[PodSnapshot]
    node_metrics: dict[str, NodeMetricSnapshot]
    # Nodes the round must leave alone although the core might measure them: node -> reason (a
    # NodeMetric or one of the node's objects that could not be read). The core sees no metric.
    node_problems: dict[str, str]
    # Store key ("namespace/name") -> (object, conversion, (namespace, name)) as of this round.
    pod_entries: Mapping[str, _PodEntry] = field(default_factory=dict)

    def pod_object(self, key: tuple[str, str]) -> JSON | None:
        """The pod object the round planned with (its uid goes into the eviction)."""
        entry = self.pod_entries.get(f"{key[0]}/{key[1]}")
        return entry[0] if entry is not None else None


def _replicas_of(digest: PodDigest, replicas: Mapping[str, int]) -> int | None:
    owner = digest.controller
    return replicas.get(owner.uid) if owner is not None and owner.uid else None


def _node_of(obj: JSON) -> str:
    spec = obj.get("spec")
    return str(spec.get("nodeName") or "") if isinstance(spec, Mapping) else ""


class InputCache:
    """Conversions per object key, reused while the store holds the very same object.

    Reflectors replace an object's dict on every change, so identity says "unchanged" for the
    cost of one comparison; a round over 100k unchanged pods is a walk over the store, not a parse.
    Entries of deleted objects are dropped.

    The adapters do not raise on anything the API server can hold; should one still do so, the
    object's node is left out of the round with the error as its reason instead of failing every
    round from now on.

    ``build`` hands the event loop back every ``YIELD_EVERY`` units of work (a conversion costs
    ``CONVERSION_COST`` units, a reuse one): the first round of a 100k-pod cluster converts every
    pod, and health probes, watches and Lease renewals must not wait for that. The stores are
    copied to lists first, so watch events arriving meanwhile cannot disturb the walk.
    """

    YIELD_EVERY = 5000
    CONVERSION_COST = 25

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[JSON, NodeSnapshot | str]] = {}
        self._pods: dict[str, _PodEntry] = {}
        self._metrics: dict[str, tuple[JSON, NodeMetricDigest | str]] = {}
        self._replicas: dict[str, int] = {}
        self._work = 0
        self.malformed = MalformedObjects(("NodeMetric", "Node", "Pod"))

    async def build(
        self,
        nodes: Mapping[str, JSON],
        pods: Mapping[str, JSON],
        node_metrics: Mapping[str, JSON],
        workloads: Iterable[Mapping[str, JSON]] = (),
    ) -> RoundInputs:
        replicas: dict[str, int] = {}
        for store in workloads:
            for obj in store.values():
                found = workload_replicas(obj)
                if found is not None:
                    replicas[found[0]] = found[1]
        replicas_changed = replicas != self._replicas
        self._replicas = replicas

        problems: dict[str, str] = {}
        self._work = 0
        node_list = await self._convert_nodes(list(nodes.items()), problems)
        # staying: pods that still hold resources on each node (see the module docstring).
        pod_list, entries, staying = await self._convert_pods(list(pods.items()), replicas, replicas_changed, problems)

        metrics: dict[str, NodeMetricSnapshot] = {}
        fresh: dict[str, tuple[JSON, NodeMetricDigest | str]] = {}
        for key, obj in list(node_metrics.items()):
            cached = self._metrics.get(key)
            if cached is not None and cached[0] is obj:
                digest = cached[1]
            else:
                await self._spend(self.CONVERSION_COST)
                try:
                    digest = digest_node_metric(obj)
                except Exception as exc:  # see the class docstring
                    digest = f"NodeMetric malformed: {type(exc).__name__}: {exc}"
                    self.malformed.report("NodeMetric", key, obj, exc)
                else:
                    if digest.problem is not None:
                        self.malformed.report("NodeMetric", key, obj, digest.problem)
                    else:
                        self.malformed.clear("NodeMetric", key)
            fresh[key] = (obj, digest)
            if isinstance(digest, str):
                problems.setdefault(key, digest)
            elif (problem := malformed_problem(digest)) is not None:
                problems.setdefault(digest.node_name, problem)
            else:
                metrics[digest.node_name] = round_node_metric(digest, staying.get(digest.node_name, frozenset()))
        self._metrics = fresh
        for node in problems:
            metrics.pop(node, None)
        return RoundInputs(node_list, pod_list, metrics, problems, entries)

    async def _spend(self, units: int) -> None:
        self._work += units
        if self._work >= self.YIELD_EVERY:
            self._work = 0
            await asyncio.sleep(0)

    async def _convert_nodes(self, nodes: list[tuple[str, JSON]], problems: dict[str, str]) -> list[NodeSnapshot]:
        fresh: dict[str, tuple[JSON, NodeSnapshot | str]] = {}
        out: list[NodeSnapshot] = []
        for key, obj in nodes:
            cached = self._nodes.get(key)
            if cached is not None and cached[0] is obj:
                snap = cached[1]
            else:
                await self._spend(self.CONVERSION_COST)
                try:
                    digest = digest_node(obj)
                    snap = node_snapshot(obj, digest)
                    # An annotation that does not read (raw-allocatable, reservation) is absent: counted, and the
                    # node's status.allocatable is its size, as in Koordinator.
                    self.malformed.account("Node", key, obj, None, digest.part_problem)
                except Exception as exc:  # see the class docstring
                    snap = f"Node malformed: {type(exc).__name__}: {exc}"
                    self.malformed.report("Node", key, obj, exc)
            fresh[key] = (obj, snap)
            if isinstance(snap, str):
                problems[key] = snap
            else:
                out.append(snap)
        self._nodes = fresh
        return out

    async def _convert_pods(
        self,
        pods: list[tuple[str, JSON]],
        replicas: Mapping[str, int],
        replicas_changed: bool,
        problems: dict[str, str],
    ) -> tuple[list[PodSnapshot], dict[str, _PodEntry], dict[str, set[tuple[str, str]]]]:
        fresh: dict[str, _PodEntry] = {}
        out: list[PodSnapshot] = []
        staying: dict[str, set[tuple[str, str]]] = {}
        previous = self._pods
        for i, (key, obj) in enumerate(pods):
            if i % self.YIELD_EVERY == self.YIELD_EVERY - 1:
                await self._spend(self.YIELD_EVERY)  # the reuse path's share
            entry = previous.get(key)
            if entry is None or entry[0] is not obj or replicas_changed:
                entry = await self._convert_pod(key, obj, entry, replicas)
            fresh[key] = entry
            snap = entry[1]
            if isinstance(snap, str):
                node = _node_of(obj)
                if node:
                    problems.setdefault(node, snap)
                continue
            out.append(snap)
            pod_key = entry[2]
            if pod_key is not None and snap.node_name and not snap.terminating and snap.phase not in _TERMINAL:
                bucket = staying.get(snap.node_name)
                if bucket is None:
                    staying[snap.node_name] = {pod_key}
                else:
                    bucket.add(pod_key)
        self._pods = fresh
        return out, fresh, staying

    async def _convert_pod(
        self, key: str, obj: JSON, previous: _PodEntry | None, replicas: Mapping[str, int]
    ) -> _PodEntry:
        if previous is not None and previous[0] is obj:
            snap = previous[1]  # unchanged pod, changed workload sizes
        else:
            await self._spend(self.CONVERSION_COST)
            try:
                digest = digest_pod(obj)
                snap = pod_snapshot(obj, _replicas_of(digest, replicas), digest)
                self.malformed.account("Pod", key, obj, None, digest.part_problem)
            except Exception as exc:  # see the class docstring
                self.malformed.report("Pod", key, obj, exc)
                return (obj, f"pod {key} malformed: {type(exc).__name__}: {exc}", None)
        if isinstance(snap, str):
            return (obj, snap, None)
        owner = snap.owner
        count = replicas.get(owner.uid) if owner is not None and owner.uid else None
        if count != snap.workload_replicas:
            snap = dataclasses.replace(snap, workload_replicas=count)
        return (obj, snap, snap.key)
