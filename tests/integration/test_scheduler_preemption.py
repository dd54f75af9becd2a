"""Priority preemption by `loadline scheduler` on the real API server with kwok nodes (issue 15),
and the real kube-scheduler given the same scenarios as the reference.

Nodes have 4 cpu and are full of pods bound directly (spec.nodeName) with priorities from
PriorityClasses in koord-batch's range (5000-5999) or koord-free's (3000-3999); a pod of
koord-prod's priority (9000) arrives and fits nowhere. Every filler pod has its own priority,
so kube-scheduler's order of victims is total and the best node is unique: both schedulers
must evict exactly the same pods on the same node.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.harness.controlplane import ControlPlane
from tests.integration.scheduler_support import (
    NM_PATH,
    PG_LABEL,
    SUITE,
    Api,
    ApiError,
    events_for,
    pod,
    running_scheduler,
    scheduler_config,
    unique,
    wait_for,
    write_node_metric,
)
from tests.objects import pod_group

pytestmark = pytest.mark.integration

PC_PATH = "/apis/scheduling.k8s.io/v1/priorityclasses"
PDB_PATH = "/apis/policy/v1/namespaces/{}/poddisruptionbudgets"
PROD = 9000

Obj = dict[str, Any]


@contextlib.contextmanager
def priority_classes(api: Api, suite: str, values: set[int], never: set[int] = frozenset()) -> Iterator[None]:  # type: ignore[assignment]
    """One PriorityClass per value (`<suite>-<value>`, or `-never` with preemptionPolicy Never); removed afterwards."""
    names = []
    try:
        for value in sorted(values):
            name = f"{suite}-{value}"
            api.create(PC_PATH, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                 "metadata": {"name": name}, "value": value})
            names.append(name)
        for value in sorted(never):
            name = f"{suite}-{value}-never"
            api.create(PC_PATH, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                 "metadata": {"name": name}, "value": value, "preemptionPolicy": "Never"})
            names.append(name)
        yield
    finally:
        for name in names:
            api.delete(f"{PC_PATH}/{name}")


def filler(name: str, namespace: str, node: str, *, cpu: str, priority_class: str, labels: Obj | None = None) -> Obj:
    obj = pod(name, namespace, cpu=cpu, memory="256Mi", labels=labels)
    obj["spec"]["nodeName"] = node
    obj["spec"]["priorityClassName"] = priority_class
    return obj


def preemptor(name: str, namespace: str, group: str, *, priority_class: str, scheduler: str, cpu: str) -> Obj:
    obj = pod(name, namespace, cpu=cpu, memory="256Mi", node_selector={SUITE: group}, scheduler=scheduler)
    obj["spec"]["priorityClassName"] = priority_class
    return obj


@dataclass
class Case:
    """Node index -> [(filler index, cpu, priority)] and the preemptor's cpu."""

    nodes: list[list[tuple[int, str, int]]]
    cpu: str
    group: dict[str, str] = field(default_factory=dict)  # scheduler -> node-group label value


def generated_cases(seed: int, count: int) -> list[Case]:
    rng = random.Random(seed)
    priorities = rng.sample(range(3000, 6000), 64)  # distinct: every victim order and every best node is unique
    cases = []
    for _ in range(count):
        nodes = []
        for _n in range(3):
            sizes = rng.choice([["1", "1", "1", "1"], ["2", "1", "1"], ["2", "2"], ["1", "1", "2"]])
            nodes.append([(len(nodes) * 10 + i, cpu, priorities.pop()) for i, cpu in enumerate(sizes)])
        cases.append(Case(nodes, rng.choice(["1", "2", "3"])))
    return cases


def outcome(api: Api, namespace: str, name: str, fillers: list[str]) -> tuple[str, list[str]]:
    """(node the preemptor is bound to, fillers that are gone)."""
    bound = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")["spec"].get("nodeName", "")
    gone = []
    for filler_name in fillers:
        try:
            api.get(f"/api/v1/namespaces/{namespace}/pods/{filler_name}")
        except ApiError as exc:
            if exc.status == 404:
                gone.append(filler_name)
    return bound, sorted(gone)


def is_bound(api: Api, namespace: str, name: str) -> bool:
    return bool(api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")["spec"].get("nodeName"))


def test_same_victims_and_node_as_kube_scheduler(
    cluster: ControlPlane, namespace: str, kwok_nodes: Any, kube_scheduler: Any
) -> None:
    api = Api(cluster)
    suite = unique("pre")
    cases = generated_cases(seed=15, count=3)
    schedulers = {"loadline": "loadline-scheduler", "kube": "default-scheduler"}
    values = {p for case in cases for node in case.nodes for _, _, p in node} | {PROD}
    # Per case and scheduler its own three nodes, the same shape and the same fillers.
    groups: dict[tuple[int, str], list[str]] = {}
    for c, case in enumerate(cases):
        for who in schedulers:
            group = f"{suite}-{c}-{who}"
            case.group[who] = group
            groups[(c, who)] = kwok_nodes(3, cpu="4", memory="16Gi", labels={SUITE: group})
    with priority_classes(api, suite, values):
        expected_fillers: dict[tuple[int, str], list[str]] = {}
        for (c, who), nodes in groups.items():
            names = []
            for n, node_fillers in enumerate(cases[c].nodes):
                for i, cpu, priority in node_fillers:
                    name = f"c{c}-{who}-f{i}"
                    api.create(f"/api/v1/namespaces/{namespace}/pods",
                               filler(name, namespace, nodes[n], cpu=cpu, priority_class=f"{suite}-{priority}"))
                    names.append(name)
            expected_fillers[(c, who)] = names
        kube_scheduler([{"schedulerName": "default-scheduler"}])
        with running_scheduler(cluster, scheduler_config()):
            for c, case in enumerate(cases):
                for who, scheduler in schedulers.items():
                    api.create(f"/api/v1/namespaces/{namespace}/pods",
                               preemptor(f"c{c}-{who}-prod", namespace, case.group[who],
                                         priority_class=f"{suite}-{PROD}", scheduler=scheduler, cpu=case.cpu))
            for c in range(len(cases)):
                for who in schedulers:
                    wait_for(f"case {c}: {who}'s preemptor bound",
                             lambda c=c, who=who: is_bound(api, namespace, f"c{c}-{who}-prod"), timeout=120)
            for c, case in enumerate(cases):
                results = {}
                for who in schedulers:
                    node, gone = outcome(api, namespace, f"c{c}-{who}-prod", expected_fillers[(c, who)])
                    index = groups[(c, who)].index(node)
                    results[who] = (index, [g.split("-f")[1] for g in gone])
                print(f"case {c} (prod {case.cpu} cpu, nodes {case.nodes}): {results}")
                assert results["loadline"] == results["kube"], f"case {c}: {results}"
                assert results["loadline"][1], "something was preempted"
            # The victims got Preempted events naming the preemptor and the node.
            node, gone = outcome(api, namespace, "c0-loadline-prod", expected_fillers[(0, "loadline")])
            events = events_for(api, namespace, gone[0], "Preempted")
            assert any(e["note"] == f"Preempted by {namespace}/c0-loadline-prod on node {node}" for e in events)


def test_budgets_policy_never_equal_priority_and_load(
    cluster: ControlPlane, namespace: str, kwok_nodes: Any
) -> None:
    """Four independent groups of two nodes, one Loadline scheduler:
    - budget: a PDB protecting the cheapest victims (node 0) moves the preemption to node 1;
    - never: a preemptor with preemptionPolicy Never evicts nothing and waits;
    - equal: fillers of the preemptor's own priority are never victims;
    - load: node 0 measures 95 % cpu (its pods report no usage of their own), so evicting its pods
      would not bring it under LoadAware's 65 %: node 1 is chosen although its victims cost more."""
    api = Api(cluster)
    suite = unique("pre")
    nodes = {g: kwok_nodes(2, cpu="4", memory="16Gi", labels={SUITE: f"{suite}-{g}"})
             for g in ("budget", "never", "equal", "load")}
    cheap, dear = 3100, 5100
    try:
        write_node_metric(api, nodes["load"][0], cpu="3800m", memory="2Gi")
        write_node_metric(api, nodes["load"][1], cpu="500m", memory="2Gi")
        with priority_classes(api, suite, {cheap, dear, PROD}, never={PROD}):
            for g, (n0, n1) in nodes.items():
                fill = PROD if g == "equal" else cheap
                api.create(f"/api/v1/namespaces/{namespace}/pods",
                           filler(f"{g}-cheap", namespace, n0, cpu="4", priority_class=f"{suite}-{fill}",
                                  labels={"app": f"{g}-cheap"}))
                api.create(f"/api/v1/namespaces/{namespace}/pods",
                           filler(f"{g}-dear", namespace, n1, cpu="4",
                                  priority_class=f"{suite}-{PROD if g == 'equal' else dear}"))
            api.create(PDB_PATH.format(namespace), {
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep-cheap"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "budget-cheap"}}}})
            # What the disruption controller would write (there is no controller-manager here).
            api.merge_patch(PDB_PATH.format(namespace) + "/keep-cheap/status", {"status": {
                "observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1,
                "expectedPods": 1}})
            with running_scheduler(cluster, scheduler_config()) as scheduler:
                for g in nodes:
                    pc = f"{suite}-{PROD}-never" if g == "never" else f"{suite}-{PROD}"
                    api.create(f"/api/v1/namespaces/{namespace}/pods",
                               preemptor(f"{g}-prod", namespace, f"{suite}-{g}", priority_class=pc,
                                         scheduler="loadline-scheduler", cpu="2"))
                wait_for("budget's preemptor bound", lambda: is_bound(api, namespace, "budget-prod"), timeout=120)
                wait_for("load's preemptor bound", lambda: is_bound(api, namespace, "load-prod"), timeout=120)
                assert outcome(api, namespace, "budget-prod", ["budget-cheap", "budget-dear"]) == (
                    nodes["budget"][1], ["budget-dear"])
                assert outcome(api, namespace, "load-prod", ["load-cheap", "load-dear"]) == (
                    nodes["load"][1], ["load-dear"])
                for g, why in (("never", "not eligible due to preemptionPolicy=Never"),
                               ("equal", "No preemption victims found for incoming pod")):
                    wait_for(f"{g}'s FailedScheduling", lambda g=g: bool(events_for(api, namespace, f"{g}-prod",
                                                                                     "FailedScheduling")))
                    notes = [e["note"] for e in events_for(api, namespace, f"{g}-prod", "FailedScheduling")]
                    assert any(why in note for note in notes), notes
                    assert outcome(api, namespace, f"{g}-prod", [f"{g}-cheap", f"{g}-dear"]) == ("", [])
                status, doc = scheduler.get_json(f"/explain/{namespace}/budget-prod")
                assert status == 200, doc
                decision = doc["preemption"]
                assert [c["node"] for c in decision["candidates"]] == [nodes["budget"][1], nodes["budget"][0]]
                assert [c["pdbViolations"] for c in decision["candidates"]] == [0, 1]
                assert decision["evicted"] == [f"{namespace}/budget-dear"]
                rendered = scheduler.explain_cli(namespace, "budget-prod")
                assert "Preemption: 2 candidate node(s)" in rendered.stdout, rendered.stdout + rendered.stderr
                metrics = scheduler.metrics()
                assert "loadline_scheduler_preemption_attempts_total" in metrics
                assert 'loadline_scheduler_preemption_victims_count 2.0' in metrics
                assert 'extension_point="PostFilter"' in metrics
    finally:
        for node in nodes["load"]:
            api.delete(f"{NM_PATH}/{node}")
        api.delete(PDB_PATH.format(namespace) + "/keep-cheap")


def test_a_gang_preempts_for_all_its_members_or_none(cluster: ControlPlane, namespace: str, kwok_nodes: Any) -> None:
    """A 4-pod prod gang (2 cpu each) in PodGroups, two groups of three full nodes:
    - `all`: every node holds four 1-cpu batch pods: eight of them are evicted, on enough nodes, and
      all four members bind;
    - `none`: only one node holds lower-priority pods (room for two members), the others pods of the gang's
      own priority: nothing is evicted and no member binds."""
    api = Api(cluster)
    suite = unique("pregang")
    groups = {g: kwok_nodes(3, cpu="4", memory="16Gi", labels={SUITE: f"{suite}-{g}"}) for g in ("all", "none")}
    with priority_classes(api, suite, {5000, PROD}):
        fillers: dict[str, list[str]] = {"all": [], "none": []}
        for g, nodes in groups.items():
            for n, node in enumerate(nodes):
                value = 5000 if g == "all" or n == 0 else PROD
                for i in range(4):
                    name = f"{g}-f{n}{i}"
                    api.create(f"/api/v1/namespaces/{namespace}/pods",
                               filler(name, namespace, node, cpu="1", priority_class=f"{suite}-{value}"))
                    fillers[g].append(name)
        with running_scheduler(cluster, scheduler_config()):
            for g in groups:
                api.create(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups",
                           pod_group(f"{g}-job", 4, namespace=namespace))
                for i in range(4):
                    member = preemptor(f"{g}-job-{i}", namespace, f"{suite}-{g}", priority_class=f"{suite}-{PROD}",
                                       scheduler="loadline-scheduler", cpu="2")
                    member["metadata"]["labels"] = {PG_LABEL: f"{g}-job"}
                    api.create(f"/api/v1/namespaces/{namespace}/pods", member)
            wait_for("the whole gang bound", lambda: all(is_bound(api, namespace, f"all-job-{i}") for i in range(4)),
                     timeout=180)
            _, gone = outcome(api, namespace, "all-job-0", fillers["all"])
            assert len(gone) == 8, gone
            wait_for("the other gang's FailedScheduling",
                     lambda: bool(events_for(api, namespace, "none-job-0", "FailedScheduling")))
            time.sleep(5)  # time enough to (wrongly) evict or bind something
            assert not any(is_bound(api, namespace, f"none-job-{i}") for i in range(4))
            assert outcome(api, namespace, "none-job-0", fillers["none"])[1] == []
