"""Small random clusters for the differential test against the real kube-scheduler (issue 26).

A `Case` is a handful of nodes (capacity, labels with zones, taints, cordons, images), the pods
already bound to them (requests, priorities, labels, host ports, and with the affinity
dimensions inter-pod (anti-)affinity) and one new pod (requests, priority, node selector and
affinity, tolerations, host ports, images, sidecars, spread constraints); with the volumes
dimension, some cases also have storage and their pods volumes (`differential_volumes`). `generate(seed,
count, dimensions)` is deterministic; each dimension can be switched off, so the test runs with
what Loadline implements (`available_dimensions`).

Rendering makes one copy of a case per scheduler: the same objects but for names, namespace
and schedulerName. The copies (and the cases) stay out of each other's way without adding
anything to the scheduling messages: the new pod's required node affinity pins it to its case's
nodes by `matchFields metadata.name` (both schedulers then report every other node under the one
reason "node(s) didn't satisfy plugin(s) [NodeAffinity]"), each copy has a namespace of its own,
and every label selector a pod carries includes its case's and its copy's labels.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.integration.differential_volumes import (
    GATE,
    GenStorage,
    GenVolume,
    gated,
    generate_storage,
    render_volumes,
)

Obj = dict[str, Any]

DIMENSIONS = ("resources", "taints", "node_affinity", "ports", "images", "preemption", "pod_affinity", "spread",
              "volumes")
NEEDS_PLUGIN = {"pod_affinity": "InterPodAffinity", "spread": "PodTopologySpread", "volumes": "VolumeBinding"}
STORAGE_SHARE = 0.3  # of the cases with the volumes dimension on, those that have storage

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
CASE_LABEL = "diff.loadline.test/case"
COPY_LABEL = "diff.loadline.test/copy"  # which scheduler's copy: selectors over all namespaces stay in their copy
BATCH_LABEL = "diff.loadline.test/batch"
ROLE_LABEL = "diff.loadline.test/role"  # existing | incoming | sentinel
PRIORITIES = range(1, 61)  # existing pods' priorities, distinct within a case
CLASSES = range(1, 62)  # one PriorityClass per value, `diff-<value>` (and `diff-<value>-never`)
MIB = 1024 * 1024
GIB = 1024 * MIB

TAINTS = (
    {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
    {"key": "maintenance", "value": "", "effect": "NoExecute"},
    {"key": "spot", "value": "true", "effect": "PreferNoSchedule"},
    {"key": "noisy", "value": "", "effect": "PreferNoSchedule"},
)
TOLERATIONS = (
    {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
    {"key": "dedicated", "operator": "Exists"},
    {"key": "maintenance", "operator": "Exists", "effect": "NoExecute"},
    {"key": "spot", "operator": "Equal", "value": "true"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
    {"operator": "Exists"},
)
PORTS = (("TCP", 8080, ""), ("TCP", 8080, "10.0.0.1"), ("TCP", 8080, "10.0.0.2"), ("UDP", 8080, ""),
         ("UDP", 53, "127.0.0.1"), ("TCP", 9100, "0.0.0.0"))
# name as pods write it, name as a node reports it, size: large, since the score is scaled by the
# share of the cluster's nodes that have the image (a few out of hundreds)
IMAGES = (("app-a:v1", "app-a:v1", 40 * GIB), ("app-b", "app-b:latest", 120 * GIB),
          ("app-c:2", "app-c:2", 300 * GIB), ("tiny:1", "tiny:1", 10 * MIB), ("untagged", "untagged", 90 * GIB))
APPS = ("web", "db", "cache")


@dataclass
class GenNode:
    milli_cpu: int
    memory: int
    pods: int
    labels: dict[str, str]
    taints: list[Obj]
    unschedulable: bool
    images: list[int]  # indexes into IMAGES


@dataclass
class GenPod:
    name: str
    node: int | None  # the node it is bound to; None for the new pod
    milli_cpu: int
    memory: int
    priority: int
    labels: dict[str, str]
    host_ports: list[tuple[str, int, str]] = field(default_factory=list)
    sidecar_ports: list[tuple[str, int, str]] = field(default_factory=list)
    node_selector: dict[str, str] = field(default_factory=dict)
    required_terms: list[list[Obj]] = field(default_factory=list)  # OR of ANDed matchExpressions
    preferred_terms: list[tuple[int, list[Obj]]] = field(default_factory=list)
    tolerations: list[Obj] = field(default_factory=list)
    images: list[int] = field(default_factory=list)
    preempt_never: bool = False
    pod_affinity: list[Obj] = field(default_factory=list)  # ("affinity" | "anti", required?, weight, selector, key)
    spread: list[Obj] = field(default_factory=list)
    volumes: list[GenVolume] = field(default_factory=list)


@dataclass
class Case:
    index: int
    nodes: list[GenNode]
    existing: list[GenPod]
    incoming: GenPod
    storage: GenStorage | None = None

    def describe(self) -> str:
        lines = [f"case {self.index}:"]
        for i, n in enumerate(self.nodes):
            lines.append(f"  node {i}: {n.milli_cpu}m {n.memory // MIB}Mi pods={n.pods} labels={n.labels} "
                         f"taints={n.taints} unschedulable={n.unschedulable} images={n.images}")
        for p in [*self.existing, self.incoming]:
            where = f"on node {p.node}" if p.node is not None else "NEW"
            lines.append(f"  pod {p.name} {where}: {p.milli_cpu}m {p.memory // MIB}Mi prio={p.priority}"
                         f"{' never' if p.preempt_never else ''} labels={p.labels} ports={p.host_ports}"
                         f" sidecar={p.sidecar_ports} selector={p.node_selector} required={p.required_terms}"
                         f" preferred={p.preferred_terms} tolerations={p.tolerations} images={p.images}"
                         f" podAffinity={p.pod_affinity} spread={p.spread}"
                         + (f" volumes={p.volumes}" if p.volumes else ""))
        if self.storage is not None:
            lines += self.storage.describe()
        return "\n".join(lines)


def available_dimensions(registered: Iterable[str]) -> tuple[str, ...]:
    """The dimensions Loadline can be compared on: those needing a plugin only when it is registered."""
    names = set(registered)
    return tuple(d for d in DIMENSIONS if NEEDS_PLUGIN.get(d, "") in names or d not in NEEDS_PLUGIN)


# --------------------------------------------------------------------------- generation
def generate(seed: int, count: int, dimensions: Sequence[str] = DIMENSIONS) -> list[Case]:
    rng = random.Random(seed)
    on = set(dimensions)
    unknown = on - set(DIMENSIONS)
    if unknown:
        raise ValueError(f"unknown dimensions {sorted(unknown)}; known: {', '.join(DIMENSIONS)}")
    return [_case(rng, i, on) for i in range(count)]


def _case(rng: random.Random, index: int, on: set[str]) -> Case:
    nodes = [_node(rng, on) for _ in range(rng.randint(2, 5))]
    priorities = rng.sample(list(PRIORITIES), len(PRIORITIES))  # distinct: every victim order and best node unique
    # A crowded case fills its nodes with more and larger pods: the new pod then often has to preempt.
    crowded = "preemption" in on and rng.random() < 0.3
    existing = [_existing(rng, on, f"e{i}", rng.randrange(len(nodes)), priorities.pop(), big=crowded)
                for i in range(rng.randint(4, 9) if crowded else rng.randint(0, 6))]
    _drop_port_clashes(existing)
    incoming = _incoming(rng, on, priorities.pop(), len(nodes))
    if crowded:
        incoming.priority = max(PRIORITIES) + 1  # above every existing pod: lower ones are all candidates
    storage = None
    if "volumes" in on and rng.random() < STORAGE_SHARE:
        storage = generate_storage(rng, nodes, existing, incoming)
        if rng.random() < 0.6:  # a new pod that asks little else: what its volumes allow decides
            incoming.milli_cpu, incoming.memory = 100, 128 * MIB
            incoming.node_selector, incoming.required_terms = {}, []
            incoming.tolerations = [{"operator": "Exists"}]
    return Case(index, nodes, existing, incoming, storage)


def _node(rng: random.Random, on: set[str]) -> GenNode:
    labels = {ZONE: rng.choice(("z1", "z2", "z3"))}
    if rng.random() < 0.7:
        labels["disk"] = rng.choice(("ssd", "hdd"))
    if rng.random() < 0.7:
        labels["tier"] = rng.choice(("1", "2", "3"))
    resources = "resources" in on
    return GenNode(
        milli_cpu=rng.choice((1000, 2000, 4000)) if resources else 8000,
        memory=rng.choice((2, 4, 8)) * GIB if resources else 32 * GIB,
        pods=rng.choice((110, 110, 110, 2)) if resources else 110,
        labels=labels,
        taints=rng.sample(TAINTS, rng.choice((0, 0, 1, 2))) if "taints" in on else [],
        unschedulable="taints" in on and rng.random() < 0.1,
        images=rng.sample(range(len(IMAGES)), rng.randint(0, 3)) if "images" in on else [],
    )


def _requests(rng: random.Random, on: set[str], big: bool) -> tuple[int, int]:
    if "resources" not in on:
        return 100, 128 * MIB
    cpus = (0, 100, 250, 500, 1000) + ((1500, 3000) if big else ())
    memories = (0, 128 * MIB, 512 * MIB, GIB) + ((3 * GIB, 6 * GIB) if big else ())
    return rng.choice(cpus), rng.choice(memories)


def _ports(rng: random.Random, chance: float) -> list[tuple[str, int, str]]:
    return rng.sample(PORTS, rng.randint(1, 2)) if rng.random() < chance else []


def _existing(rng: random.Random, on: set[str], name: str, node: int, priority: int, *, big: bool) -> GenPod:
    cpu, memory = _requests(rng, on, big=big)
    pod = GenPod(name, node, cpu, memory, priority if "preemption" in on else 0, {"app": rng.choice(APPS)})
    if "ports" in on:
        pod.host_ports = _ports(rng, 0.35)
    if "pod_affinity" in on and rng.random() < 0.3:
        pod.pod_affinity = [_affinity_term(rng, required=rng.random() < 0.5)]
    # Constraints of pods already bound bind nobody (kube-scheduler has no symmetry for these): both must ignore them.
    if "node_affinity" in on and rng.random() < 0.15:
        pod.required_terms = [[_expression(rng)]]
    if "spread" in on and rng.random() < 0.15:
        pod.spread = [_spread(rng)]
    return pod


def _drop_port_clashes(pods: list[GenPod]) -> None:
    """Two pods on one node never hold the same host port (the kubelet admits only one of them)."""
    held: dict[int, list[tuple[str, int, str]]] = {}
    for pod in pods:
        assert pod.node is not None
        kept = []
        for port in pod.host_ports:
            if not any(_clash(port, other) for other in held.get(pod.node, [])):
                kept.append(port)
        pod.host_ports = kept
        held.setdefault(pod.node, []).extend(kept)


def _clash(a: tuple[str, int, str], b: tuple[str, int, str]) -> bool:
    wildcard = ("", "0.0.0.0")
    return a[0] == b[0] and a[1] == b[1] and (a[2] in wildcard or b[2] in wildcard or a[2] == b[2])


def _incoming(rng: random.Random, on: set[str], priority: int, num_nodes: int) -> GenPod:
    cpu, memory = _requests(rng, on, big=True)
    pod = GenPod("new", None, cpu, memory, 0, {"app": rng.choice(APPS)})
    if "preemption" in on:
        pod.priority = max(PRIORITIES) if rng.random() < 0.5 else priority
        pod.preempt_never = rng.random() < 0.15
    if "ports" in on:
        pod.host_ports = _ports(rng, 0.4)
        if rng.random() < 0.1:
            pod.sidecar_ports = _ports(rng, 1.0)
    if "node_affinity" in on:
        if rng.random() < 0.2:
            pod.node_selector = {"disk": rng.choice(("ssd", "hdd"))}
        if rng.random() < 0.3:
            pod.required_terms = [[_expression(rng) for _ in range(rng.randint(1, 2))]
                                  for _ in range(rng.randint(1, 2))]
        if rng.random() < 0.3:
            pod.preferred_terms = [(rng.randint(1, 100), [_expression(rng)]) for _ in range(rng.randint(1, 2))]
    if "taints" in on:
        pod.tolerations = rng.sample(TOLERATIONS, rng.choice((0, 1, 1, 2)))
    if "images" in on:
        pod.images = [rng.randrange(len(IMAGES)) for _ in range(rng.randint(1, 3))]
    if "pod_affinity" in on and rng.random() < 0.5:
        pod.pod_affinity = [_affinity_term(rng, required=rng.random() < 0.6) for _ in range(rng.randint(1, 2))]
    if "spread" in on and rng.random() < 0.5:
        # At most one constraint per (topologyKey, whenUnsatisfiable), as the API server validates.
        constraints = {(s["key"], s["when"]): s for s in (_spread(rng) for _ in range(rng.randint(1, 2)))}
        pod.spread = list(constraints.values())
    return pod


def _expression(rng: random.Random) -> Obj:
    key = rng.choice(("disk", "tier", ZONE))
    if key == "tier" and rng.random() < 0.5:
        return {"key": key, "operator": rng.choice(("Gt", "Lt")), "values": [rng.choice(("1", "2"))]}
    operator = rng.choice(("In", "In", "NotIn", "Exists", "DoesNotExist"))
    if operator in ("Exists", "DoesNotExist"):
        return {"key": key, "operator": operator}
    values = {"disk": ("ssd", "hdd"), "tier": ("1", "2", "3"), ZONE: ("z1", "z2", "z3")}[key]
    return {"key": key, "operator": operator, "values": rng.sample(values, rng.randint(1, 2))}


def _affinity_term(rng: random.Random, *, required: bool) -> Obj:
    return {"kind": rng.choice(("affinity", "anti")), "required": required, "weight": rng.randint(1, 100),
            "app": rng.choice(APPS), "key": rng.choice((HOSTNAME, ZONE)),
            # whose pods: the pod's namespace, named, all namespaces (the copy label keeps copies apart)
            "namespaces": rng.choice(("own", "own", "named", "all")),
            # app from the pod's own labels instead of the selector (matchLabelKeys / mismatchLabelKeys)
            "label_keys": rng.choice(("", "", "", "match", "mismatch"))}


def _spread(rng: random.Random) -> Obj:
    when = rng.choice(("DoNotSchedule", "DoNotSchedule", "ScheduleAnyway"))
    return {"maxSkew": rng.choice((1, 1, 2)), "key": rng.choice((HOSTNAME, ZONE)), "when": when,
            "app": rng.choice(APPS),
            "minDomains": rng.choice((0, 0, 0, 2, 4)) if when == "DoNotSchedule" else 0,
            "nodeAffinityPolicy": rng.choice(("", "", "Honor", "Ignore")),
            "nodeTaintsPolicy": rng.choice(("", "", "Honor", "Ignore")),
            "matchLabelKeys": rng.random() < 0.2}


# --------------------------------------------------------------------------- rendering
@dataclass(frozen=True)
class Copy:
    """Where one scheduler's copy of a batch lives."""

    tag: str  # "k" (kube-scheduler) or "l" (Loadline)
    namespace: str
    scheduler: str
    batch: int

    def node_name(self, case: int, node: int) -> str:
        return f"b{self.batch}-c{case}-{self.tag}-{node}"

    def image(self, index: int, *, as_node_reports: bool) -> str:
        pod_name, node_name, _ = IMAGES[index]
        # A name of this batch only: image states are cluster-wide, and other batches' must not count.
        return f"reg.example/b{self.batch}/{node_name if as_node_reports else pod_name}"


def storage_labels(case: Case, copy: Copy) -> dict[str, str]:
    """The labels of a case's storage objects: deleted with their batch."""
    return {BATCH_LABEL: str(copy.batch), CASE_LABEL: str(case.index)}


def pod_name(case: Case, pod: GenPod, copy: Copy) -> str:
    return f"b{copy.batch}-c{case.index}-{pod.name}"


def render_node(case: Case, index: int, copy: Copy) -> Obj:
    node = case.nodes[index]
    name = copy.node_name(case.index, index)
    allocatable = {"cpu": f"{node.milli_cpu}m", "memory": str(node.memory), "pods": str(node.pods)}
    images = [{"names": [copy.image(i, as_node_reports=True)], "sizeBytes": IMAGES[i][2]} for i in node.images]
    spec: Obj = {}
    if node.taints:
        spec["taints"] = node.taints
    if node.unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {**node.labels, HOSTNAME: name, BATCH_LABEL: str(copy.batch),
                                              CASE_LABEL: str(case.index)}},
        "spec": spec,
        "status": {"allocatable": allocatable, "capacity": allocatable, "images": images},
    }


def _container_ports(ports: Sequence[tuple[str, int, str]]) -> list[Obj]:
    out = []
    for protocol, port, ip in ports:
        entry: Obj = {"containerPort": port, "hostPort": port, "protocol": protocol}
        if ip:
            entry["hostIP"] = ip
        out.append(entry)
    return out


def _selector(case: Case, copy: Copy, app: str | None) -> Obj:
    labels = {CASE_LABEL: str(case.index), COPY_LABEL: copy.tag}
    if app is not None:
        labels["app"] = app
    return {"matchLabels": labels}


def _affinity_body(case: Case, copy: Copy, term: Obj) -> Obj:
    keyed = term["label_keys"]
    body: Obj = {"labelSelector": _selector(case, copy, None if keyed else term["app"]), "topologyKey": term["key"]}
    if keyed:
        body[f"{keyed}LabelKeys"] = ["app"]
    if term["namespaces"] == "named":
        body["namespaces"] = [copy.namespace]
    elif term["namespaces"] == "all":
        body["namespaceSelector"] = {}
    return body


def _spread_constraint(case: Case, copy: Copy, spread: Obj) -> Obj:
    out: Obj = {"maxSkew": spread["maxSkew"], "topologyKey": spread["key"], "whenUnsatisfiable": spread["when"],
                "labelSelector": _selector(case, copy, None if spread["matchLabelKeys"] else spread["app"])}
    if spread["matchLabelKeys"]:
        out["matchLabelKeys"] = ["app"]
    if spread["minDomains"]:
        out["minDomains"] = spread["minDomains"]
    for policy in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
        if spread[policy]:
            out[policy] = spread[policy]
    return out


def render_pod(case: Case, pod: GenPod, copy: Copy) -> Obj:
    requests: Obj = {}
    if pod.milli_cpu:
        requests["cpu"] = f"{pod.milli_cpu}m"
    if pod.memory:
        requests["memory"] = str(pod.memory)
    images = pod.images or [3]
    containers: list[Obj] = [
        {"name": f"c{i}", "image": copy.image(image, as_node_reports=False),
         "resources": {"requests": requests} if i == 0 and requests else {}}
        for i, image in enumerate(images)
    ]
    if pod.host_ports:
        containers[0]["ports"] = _container_ports(pod.host_ports)
    spec: Obj = {"schedulerName": copy.scheduler, "containers": containers, "terminationGracePeriodSeconds": 30}
    if pod.sidecar_ports:
        spec["initContainers"] = [{"name": "sidecar", "image": "sidecar:1", "restartPolicy": "Always",
                                   "ports": _container_ports(pod.sidecar_ports)}]
    if pod.priority:
        spec["priorityClassName"] = f"diff-{pod.priority}" + ("-never" if pod.preempt_never else "")
    if pod.node is not None:
        spec["nodeName"] = copy.node_name(case.index, pod.node)
    if pod.node_selector:
        spec["nodeSelector"] = dict(pod.node_selector)
    if pod.tolerations:
        spec["tolerations"] = list(pod.tolerations)
    affinity: Obj = {}
    terms = [{"matchExpressions": list(t)} for t in pod.required_terms]
    if pod.node is None:
        # The pin: every required term also names one of the case's nodes of this copy (matchFields takes a
        # single name per requirement, so a term per node; terms are ORed).
        names = [copy.node_name(case.index, i) for i in range(len(case.nodes))]
        terms = [{**t, "matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}
                 for t in (terms or [{}]) for name in names]
    if terms:
        node_affinity: Obj = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
        if pod.preferred_terms:
            node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": w, "preference": {"matchExpressions": list(t)}} for w, t in pod.preferred_terms]
        affinity["nodeAffinity"] = node_affinity
    for term in pod.pod_affinity:
        kind = "podAffinity" if term["kind"] == "affinity" else "podAntiAffinity"
        body = _affinity_body(case, copy, term)
        if term["required"]:
            affinity.setdefault(kind, {}).setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append(body)
        else:
            affinity.setdefault(kind, {}).setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append(
                {"weight": term["weight"], "podAffinityTerm": body})
    if affinity:
        spec["affinity"] = affinity
    if pod.spread:
        spec["topologySpreadConstraints"] = [_spread_constraint(case, copy, s) for s in pod.spread]
    if pod.volumes:
        spec["volumes"] = render_volumes(case, pod, copy)
        if gated(pod) and pod.node is None:
            spec["schedulingGates"] = [{"name": GATE}]
    role = "incoming" if pod.node is None else "existing"
    labels = {**pod.labels, CASE_LABEL: str(case.index), COPY_LABEL: copy.tag, BATCH_LABEL: str(copy.batch),
              ROLE_LABEL: role}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name(case, pod, copy), "namespace": copy.namespace, "labels": labels},
            "spec": spec}
