"""scheduler_perf's workload shapes for the backlog bench (k8s.io/kubernetes@v1.36.3 test/integration/scheduler_perf:
affinity/, topology_spreading/ and misc/performance-config.yaml and their templates/).

A shape is: the zone label its nodes carry (labelNodePrepareStrategy), the pods already bound before the drain
("initPods", created with spec.nodeName set: both schedulers find them in their caches at start), and the backlog
of pending pods the schedulers drain ("measurePods"). Counts follow scheduler_perf's 5000Nodes workloads scaled to
the node count (anti-affinity: 1,000 + 2,000 at 5,000 nodes, so every replica has a node of its own), times
`scale`. Pods are the templates' (100m / 500Mi, `color` labels, terms over both namespaces); scheduler_perf's
sched-1 is the bench's NAMESPACE and sched-0 is INIT_NAMESPACE. SchedulingBasic ("basic") keeps the backlog
bench's own workload (scheduler_e2e_bench.workload), as before.

kube-scheduler's own throughput floors on its CI machines (scheduler_perf `threshold`, 5,000 nodes), the
reference line of the tables: FLOORS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.scheduler_e2e_bench import NAMESPACE, pod_object, workload

JSON = dict[str, Any]
INIT_NAMESPACE = "sched-0"
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
TERM_NAMESPACES = [NAMESPACE, INIT_NAMESPACE]  # the templates' ["sched-1", "sched-0"]

# pods/s at 5,000 nodes (scheduler_perf thresholds; "basic" is misc/ SchedulingBasic 5000Nodes_10000Pods)
FLOORS = {
    "basic": 680, "node-affinity": 220, "pod-anti-affinity": 60, "pod-affinity": 35, "preferred-pod-affinity": 90,
    "preferred-pod-anti-affinity": 90, "topology-spreading": 85, "mixed": 140,
}


def _term(color: str, key: str) -> JSON:
    return {"labelSelector": {"matchLabels": {"color": color}}, "topologyKey": key, "namespaces": TERM_NAMESPACES}


# template -> (labels, affinity, topologySpreadConstraints), as in scheduler_perf/templates/
TEMPLATES: dict[str, tuple[dict[str, str], JSON | None, list[JSON] | None]] = {
    "default": ({}, None, None),  # pod-default.yaml
    "anti": ({"color": "green"}, {"podAntiAffinity": {  # pod-with-pod-anti-affinity.yaml
        "requiredDuringSchedulingIgnoredDuringExecution": [_term("green", HOSTNAME)]}}, None),
    "affinity": ({"color": "blue"}, {"podAffinity": {  # pod-with-pod-affinity.yaml
        "requiredDuringSchedulingIgnoredDuringExecution": [_term("blue", ZONE)]}}, None),
    "preferred": ({"color": "red"}, {"podAffinity": {  # pod-with-preferred-pod-affinity.yaml
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": _term("red", HOSTNAME)}]}},
        None),
    "preferred-anti": ({"color": "yellow"}, {"podAntiAffinity": {  # pod-with-preferred-pod-anti-affinity.yaml
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "podAffinityTerm": _term("yellow", HOSTNAME)}]}}, None),
    "node-affinity": ({}, {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {  # pod-with-node-aff..
        "nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone1", "zone2"]}]}]}}},
        None),
    "spread": ({"color": "blue"}, None, [{  # pod-with-topology-spreading.yaml
        "maxSkew": 5, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"color": "blue"}}}]),
}


def template_pod(template: str, name: str, namespace: str, scheduler_name: str, node: str | None = None) -> JSON:
    labels, affinity, spread = TEMPLATES[template]
    spec: JSON = {
        "schedulerName": scheduler_name,
        "containers": [{"name": "pause", "image": "fake", "ports": [{"containerPort": 80}], "resources": {
            "requests": {"cpu": "100m", "memory": "500Mi"}, "limits": {"cpu": "100m", "memory": "500Mi"}}}],
        "terminationGracePeriodSeconds": 0,
    }  # fmt: skip
    if affinity is not None:
        spec["affinity"] = affinity
    if spread is not None:
        spec["topologySpreadConstraints"] = spread
    if node is not None:
        spec["nodeName"] = node  # bound at creation: no scheduler involved
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec,
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": "e2e-bench", **labels}}}


@dataclass(frozen=True)
class Shape:
    name: str
    scheduler_perf: str  # the workload it follows
    zones: tuple[str, ...]  # zone label values given to the nodes round robin; () leaves them as they are
    init: Callable[[int], list[tuple[str, int]]]  # nodes -> (template, count) bound before the drain
    measure: Callable[[int], tuple[str, int]]  # nodes -> (template, count) of the backlog

    def init_pods(self, nodes: list[str], scale: float) -> list[JSON]:
        """The bound pods, round robin over the nodes per template (so anti-affinity replicas never share one)."""
        out = []
        for template, count in self.init(len(nodes)):
            for i in range(int(count * scale)):
                out.append(template_pod(template, f"init-{template}-{i:05d}", INIT_NAMESPACE, "none",
                                        node=nodes[i % len(nodes)]))
        return out

    def backlog(self, nodes: int, scale: float, pods: int, seed: int) -> Callable[[str, str], list[JSON]]:
        """(name prefix, schedulerName) -> the pending pods of one drain."""
        if self.name == "basic":
            specs = workload(pods, seed)
            return lambda prefix, scheduler: [pod_object(s, prefix, scheduler) for s in specs]
        template, count = self.measure(nodes)
        total = int(count * scale)
        return lambda prefix, scheduler: [template_pod(template, f"{prefix}-{i:05d}", NAMESPACE, scheduler)
                                          for i in range(total)]


def _fifth(n: int) -> int:
    return max(n // 5, 1)


SHAPES = {s.name: s for s in (
    Shape("basic", "SchedulingBasic (the bench's own requests)", (), lambda n: [], lambda n: ("default", 0)),
    Shape("pod-anti-affinity", "SchedulingPodAntiAffinity 5000Nodes_2000Pods", (),
          lambda n: [("anti", _fifth(n))], lambda n: ("anti", 2 * _fifth(n))),
    Shape("preferred-pod-affinity", "SchedulingPreferredPodAffinity 5000Nodes_5000Pods", (),
          lambda n: [("preferred", n)], lambda n: ("preferred", n)),
    Shape("preferred-pod-anti-affinity", "SchedulingPreferredPodAntiAffinity 5000Nodes_5000Pods", (),
          lambda n: [("preferred-anti", n)], lambda n: ("preferred-anti", n)),
    Shape("node-affinity", "SchedulingNodeAffinity 5000Nodes_10000Pods", ("zone1",),
          lambda n: [("default", n)], lambda n: ("node-affinity", 2 * n)),
    Shape("pod-affinity", "SchedulingPodAffinity 5000Nodes_5000Pods", ("zone1",),
          lambda n: [("affinity", n)], lambda n: ("affinity", n)),
    Shape("mixed", "MixedSchedulingBasePod 5000Nodes_5000Pods", ("zone1",),
          lambda n: [(t, 2 * _fifth(n)) for t in ("default", "affinity", "anti", "preferred", "preferred-anti")],
          lambda n: ("default", n)),
    Shape("topology-spreading", "TopologySpreading 5000Nodes_5000Pods", ("moon-1", "moon-2", "moon-3"),
          lambda n: [("default", n)], lambda n: ("spread", n)),
)}
