"""Least privilege, checked by the API server (issue 16): the chart's RBAC and admission policy, and real tokens.

Every component runs as a host process with a kubeconfig holding only its own ServiceAccount's token (a
TokenRequest; the agent's bound to a pod on its node, as the kubelet's would be) against an API server with the
chart's RBAC and ValidatingAdmissionPolicy applied. The API server's audit log must show no 403 for any of them:
the code and templates/rbac.yaml cannot drift apart unnoticed. Then each token is tried on what it needs and on
a sample of what it must not do (`TABLES`), with the status code and the message asserted; the real-node tests
(test_security_realnode.py) run the same tables with the tokens the kubelet mounted into Loadline's pods.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.qos.evictor import MemoryEvictor
from agent.qos.inputs import NodeFacts
from agent.qos.memory_evict import MemoryEvictionPlan
from agent.qos.usage import PodUsageSample, UsageSnapshot
from common.api.nodeslo import ResourceThresholdStrategy
from common.api.poddigest import digest_pod
from common.kube.events import EventRecorder
from common.kube.http import KubeHTTP
from tests.harness.build import KUBERNETES_VERSION
from tests.harness.controlplane import REPO_ROOT, ControlPlane, fake_node
from tests.harness.demo import Calls, loadline_requests
from tests.harness.processes import Component, free_port, http_ok, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
CHART = REPO_ROOT / "deploy" / "helm" / "loadline"
NAMESPACE = "loadline-system"
COMPONENTS = ("agent", "manager", "scheduler", "descheduler", "extender")
ACCOUNT = "system:serviceaccount:" + NAMESPACE + ":loadline-{}"
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
              "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}  # fmt: skip
NODEMETRICS = "/apis/slo.koordinator.sh/v1alpha1/nodemetrics"
NODESLOS = "/apis/slo.koordinator.sh/v1alpha1/nodeslos"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
NO_UID = "00000000-0000-0000-0000-000000000000"  # a UID no pod has: a namesake's


# ----------------------------------------------------------------------------- chart and tokens
def render(plane: ControlPlane, *sets: str, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    argv = [str(plane.binary("helm")), "template", "loadline", str(CHART), "-n", namespace,
            f"--kube-version={KUBERNETES_VERSION}", *(a for s in sets for a in ("--set", s))]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env={"HOME": str(plane.root)}).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def token(plane: ControlPlane, component: str, *, bound_pod: str | None = None, namespace: str = NAMESPACE) -> str:
    """A TokenRequest for the component's account; bound to `bound_pod` (in `namespace`) like a mounted one."""
    argv = ["create", "token", f"loadline-{component}", "-n", namespace, "--duration=1h"]
    if bound_pod:
        argv += ["--bound-object-kind=Pod", f"--bound-object-name={bound_pod}"]
    return plane.kubectl(*argv).stdout.strip()


def kubeconfig_for(plane: ControlPlane, name: str, bearer: str) -> Path:
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {
            "server": plane.server,
            "certificate-authority-data": base64.b64encode(plane.pki.ca_cert.read_bytes()).decode()}}],
        "users": [{"name": name, "user": {"token": bearer}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": name}}],
    }  # fmt: skip
    path = plane.root / f"kubeconfig-{name}"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class Answer:
    status: int
    message: str


def call(plane: ControlPlane, bearer: str, method: str, path: str, *, body: Any = None,
         content_type: str = "application/json") -> Answer:  # fmt: skip
    context = ssl.create_default_context(cafile=str(plane.pki.ca_cert))
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(plane.server + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {bearer}", "Content-Type": content_type})  # fmt: skip
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return Answer(response.status, "")
    except urllib.error.HTTPError as exc:
        payload = exc.read()
        try:
            message = str(json.loads(payload).get("message", ""))
        except ValueError:
            message = payload.decode(errors="replace")
        return Answer(exc.code, message)


# ----------------------------------------------------------------------------- the tables
@dataclass(frozen=True)
class Row:
    """One API call with a component's token and what the API server must answer."""

    what: str
    method: str
    path: str
    status: int
    message: str = ""  # a part of the API server's message (denials)
    body: Any = None  # or a function returning it, called per attempt (an object another writer updates)
    content_type: str = "application/json"


def eviction(namespace: str, pod: str) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace},
            "deleteOptions": {"dryRun": ["All"]}}  # fmt: skip


def denied(verb: str, resource: str, component: str) -> str:
    return f'User "{ACCOUNT.format(component)}" cannot {verb} resource "{resource}"'


@dataclass(frozen=True)
class Scene:
    """The objects a table refers to: the token's own node, another node, a pod on each (namespace `ns`)."""

    own_node: str
    other_node: str
    ns: str
    own_pod: str
    other_pod: str
    nodemetric: Callable[[str], dict[str, Any]]  # the current NodeMetric of a node (admin read)

    def current(self, node: str) -> Callable[[], dict[str, Any]]:
        return lambda: self.nodemetric(node)


def pod_path(namespace: str, pod: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{pod}"


def delete_options(uid: str) -> dict[str, Any]:
    """What the agent's memory eviction sends with its DELETE (agent/qos/evictor.py)."""
    return {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}


def deleted_elsewhere(s: Scene) -> str:
    """The own-node policy's refusal of the agent deleting the other node's pod."""
    return (f"loadline-agent on node {s.own_node} may delete only pods on node {s.own_node}, "
            f"not {s.ns}/{s.other_pod} on {s.other_node}")  # fmt: skip


def agent_rows(s: Scene) -> list[Row]:
    own, other = s.current(s.own_node), s.current(s.other_node)
    return [
        Row("update its own node's NodeMetric status", "PUT", f"{NODEMETRICS}/{s.own_node}/status", 200, body=own),
        Row("list pods", "GET", "/api/v1/pods?limit=1", 200),
        Row("get its node", "GET", f"/api/v1/nodes/{s.own_node}", 200),
        Row("update another node's NodeMetric status", "PUT", f"{NODEMETRICS}/{s.other_node}/status", 403,
            f"loadline-agent on node {s.own_node} may write only NodeMetric {s.own_node}, not {s.other_node}",
            body=other),
        Row("create another node's NodeMetric", "POST", NODEMETRICS, 403,
            f"may write only NodeMetric {s.own_node}, not kwok-unclaimed",
            body={"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                  "metadata": {"name": "kwok-unclaimed"}, "spec": {}}),
        Row("update a NodeMetric's spec", "PUT", f"{NODEMETRICS}/{s.own_node}", 403,
            denied("update", "nodemetrics", "agent"), body=own),
        Row("get a Secret", "GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/anything", 403,
            denied("get", "secrets", "agent")),
        Row("list Secrets", "GET", "/api/v1/secrets", 403, denied("list", "secrets", "agent")),
        Row("patch a Node", "PATCH", f"/api/v1/nodes/{s.own_node}", 403, denied("patch", "nodes", "agent"),
            body={"metadata": {"labels": {"x": "y"}}}, content_type="application/merge-patch+json"),
        # BE memory eviction deletes the pod: admission sees the pod (oldObject) and the policy its node. Dry runs
        # go through authorization and admission like real ones.
        Row("delete (dry run) a pod on its own node", "DELETE", pod_path(s.ns, s.own_pod) + "?dryRun=All", 200),
        Row("delete (dry run) a pod on another node", "DELETE", pod_path(s.ns, s.other_pod) + "?dryRun=All", 403,
            deleted_elsewhere(s)),
        Row("delete (dry run) a namesake of a pod on its node (another UID)", "DELETE",
            pod_path(s.ns, s.own_pod) + "?dryRun=All", 409, f"the UID in the precondition ({NO_UID}) does not match",
            body=delete_options(NO_UID)),
        # No Eviction API: admission never sees an Eviction's pod, so no policy could hold it to this node.
        Row("evict a pod (the Eviction API)", "POST", f"{pod_path(s.ns, s.own_pod)}/eviction", 403,
            denied("create", "pods/eviction", "agent"), body=eviction(s.ns, s.own_pod)),
    ]  # fmt: skip


def unbound_agent_rows(s: Scene) -> list[Row]:
    return [
        Row("update a NodeMetric status with a token bound to no node", "PUT", f"{NODEMETRICS}/{s.own_node}/status",
            403, "loadline-agent may write a NodeMetric only with a token bound to a pod on a node",
            body=s.current(s.own_node)),
        Row("delete (dry run) a pod with a token bound to no node", "DELETE",
            pod_path(s.ns, s.own_pod) + "?dryRun=All", 403,
            "loadline-agent may delete a pod only with a token bound to a pod on a node"),
    ]  # fmt: skip


def common_denials(component: str, s: Scene) -> list[Row]:
    return [
        Row("get a Secret", "GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/anything", 403,
            denied("get", "secrets", component)),
        Row("list Secrets", "GET", "/api/v1/secrets", 403, denied("list", "secrets", component)),
        Row("patch a Node", "PATCH", f"/api/v1/nodes/{s.own_node}", 403, denied("patch", "nodes", component),
            body={"metadata": {"labels": {"x": "y"}}}, content_type="application/merge-patch+json"),
        Row("delete a pod", "DELETE", f"/api/v1/namespaces/{s.ns}/pods/{s.own_pod}?dryRun=All", 403,
            denied("delete", "pods", component)),
    ]


def manager_rows(s: Scene) -> list[Row]:
    return [
        Row("patch a node's status (batch resources)", "PATCH", f"/api/v1/nodes/{s.own_node}/status?dryRun=All",
            200, body={}, content_type="application/merge-patch+json"),
        Row("list NodeSLOs", "GET", f"{NODESLOS}?limit=1", 200),
        Row("get its Lease", "GET", f"{LEASES}/loadline-manager", 200),
        Row("get the scheduler's Lease", "GET", f"{LEASES}/loadline-scheduler", 403,
            denied("get", "leases", "manager")),
        Row("update a NodeMetric status", "PUT", f"{NODEMETRICS}/{s.own_node}/status", 403,
            denied("update", "nodemetrics/status", "manager"), body=s.current(s.own_node)),
        Row("evict a pod", "POST", f"/api/v1/namespaces/{s.ns}/pods/{s.own_pod}/eviction", 403,
            denied("create", "pods/eviction", "manager"), body=eviction(s.ns, s.own_pod)),
        Row("get its webhook Secret", "GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/loadline-webhook-certs", 200),
        Row("list ClusterColocationProfiles", "GET", "/apis/config.koordinator.sh/v1alpha1/clustercolocationprofiles",
            200),
        Row("list PriorityClasses", "GET", "/apis/scheduling.k8s.io/v1/priorityclasses?limit=1", 200),
        Row("get a Namespace", "GET", f"/api/v1/namespaces/{s.ns}", 200),
        Row("update another MutatingWebhookConfiguration", "PUT",
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/someone-elses", 403,
            denied("update", "mutatingwebhookconfigurations", "manager"), body={}),
        Row("create a ClusterColocationProfile", "POST", "/apis/config.koordinator.sh/v1alpha1/clustercolocationprofiles",
            403, denied("create", "clustercolocationprofiles", "manager"), body={}),
        *common_denials("manager", s),
    ]


def scheduler_rows(s: Scene) -> list[Row]:
    return [
        Row("get a pod", "GET", f"/api/v1/namespaces/{s.ns}/pods/{s.own_pod}", 200),
        Row("patch a pod's status (a waiting pod's condition)", "PATCH",
            f"/api/v1/namespaces/{s.ns}/pods/{s.own_pod}/status?dryRun=All", 200, body={},
            content_type="application/strategic-merge-patch+json"),
        Row("evict (dry run) a pod: preemption", "POST", f"/api/v1/namespaces/{s.ns}/pods/{s.own_pod}/eviction",
            201, body=eviction(s.ns, s.own_pod)),
        Row("list PodDisruptionBudgets", "GET", "/apis/policy/v1/poddisruptionbudgets?limit=1", 200),
        Row("list PersistentVolumes (VolumeBinding)", "GET", "/api/v1/persistentvolumes?limit=1", 200),
        Row("list CSINodes (NodeVolumeLimits)", "GET", "/apis/storage.k8s.io/v1/csinodes?limit=1", 200),
        Row("delete a PersistentVolumeClaim", "DELETE", f"/api/v1/namespaces/{s.ns}/persistentvolumeclaims/x", 403,
            denied("delete", "persistentvolumeclaims", "scheduler")),
        Row("list Namespaces (InterPodAffinity's namespaceSelector)", "GET", "/api/v1/namespaces?limit=1", 200),
        Row("list StatefulSets (PodTopologySpread's default constraints)", "GET",
            "/apis/apps/v1/statefulsets?limit=1", 200),
        Row("get its Lease", "GET", f"{LEASES}/loadline-scheduler", 200),
        Row("update the manager's Lease", "PUT", f"{LEASES}/loadline-manager", 403,
            denied("update", "leases", "scheduler"), body={}),
        Row("create a NodeMetric", "POST", NODEMETRICS, 403, denied("create", "nodemetrics", "scheduler"),
            body={"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": "x"}}),
        Row("patch a node's status", "PATCH", f"/api/v1/nodes/{s.own_node}/status", 403,
            denied("patch", "nodes/status", "scheduler"), body={}, content_type="application/merge-patch+json"),
        *common_denials("scheduler", s),
    ]


def descheduler_rows(s: Scene) -> list[Row]:
    return [
        Row("evict (dry run) a pod", "POST", f"/api/v1/namespaces/{s.ns}/pods/{s.own_pod}/eviction", 201,
            body=eviction(s.ns, s.own_pod)),
        Row("list ReplicaSets", "GET", "/apis/apps/v1/replicasets?limit=1", 200),
        Row("get its Lease", "GET", f"{LEASES}/loadline-descheduler", 200),
        Row("bind a pod", "POST", f"/api/v1/namespaces/{s.ns}/pods/{s.own_pod}/binding", 403,
            denied("create", "pods/binding", "descheduler"),
            body={"apiVersion": "v1", "kind": "Binding", "metadata": {"name": s.own_pod},
                  "target": {"kind": "Node", "name": s.own_node}}),
        Row("list Deployments", "GET", "/apis/apps/v1/deployments", 403, denied("list", "deployments", "descheduler")),
        *common_denials("descheduler", s),
    ]


def extender_rows(s: Scene) -> list[Row]:
    return [
        Row("list NodeMetrics", "GET", f"{NODEMETRICS}?limit=1", 200),
        Row("bind a pod", "POST", f"/api/v1/namespaces/{s.ns}/pods/{s.own_pod}/binding", 403,
            denied("create", "pods/binding", "extender"),
            body={"apiVersion": "v1", "kind": "Binding", "metadata": {"name": s.own_pod},
                  "target": {"kind": "Node", "name": s.own_node}}),
        Row("evict a pod", "POST", f"/api/v1/namespaces/{s.ns}/pods/{s.own_pod}/eviction", 403,
            denied("create", "pods/eviction", "extender"), body=eviction(s.ns, s.own_pod)),
        *common_denials("extender", s),
    ]


def check_table(plane: ControlPlane, component: str, bearer: str, rows: list[Row]) -> list[str]:
    """Every row's answer; returns the mismatches (empty: the table holds) and prints the table."""
    wrong = []
    for row in rows:
        for _ in range(10):  # a 409: the agent wrote the same NodeMetric between our read and our write; a 429: a
            # CRD's storage still initializing on a plane just started
            body = row.body() if callable(row.body) else row.body
            answer = call(plane, bearer, row.method, row.path, body=body, content_type=row.content_type)
            if answer.status not in (409, 429):
                break
            time.sleep(0.5 if answer.status == 429 else 0)
        ok = answer.status == row.status and row.message in answer.message
        print(f"  {component:12} {row.what:62} {answer.status} {'ok' if ok else 'WRONG: ' + answer.message}")
        if not ok:
            wrong.append(f"{component}: {row.what}: expected {row.status} {row.message!r}, got {answer}")
    return wrong


# ----------------------------------------------------------------------------- the cluster
@dataclass
class Setup:
    plane: ControlPlane
    nodes: list[str]
    ns: str
    pods: dict[str, str]  # node -> a pod bound to it (the agent's token is bound to the first node's)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """An audited control plane with kwok nodes, the chart's RBAC, admission policy and ConfigMaps, and a pod on
    each node (the first one runs as the agent's account, so a token can be bound to it)."""
    plane = ControlPlane.start(audit=True)
    try:
        plane.start_kwok()
        nodes = ["sec-node-a", "sec-node-b"]
        plane.apply([fake_node(n, cpu="8", memory="16Gi") for n in nodes])
        plane.kubectl("wait", "--for=condition=Ready", *(f"node/{n}" for n in nodes), "--timeout=60s")
        plane.kubectl("create", "namespace", NAMESPACE)
        docs = render(plane, "extender.enabled=true")
        # (the webhook's empty Secret too, for the manager's "get its Secret"; not the webhook configurations: they
        # would send this plane's pods to a manager that does not run here)
        plane.apply([d for d in docs if d["kind"] in RBAC_KINDS or d["kind"] in ("ConfigMap", "Secret")])
        ns = "sec-workload"
        plane.kubectl("create", "namespace", ns)
        pods = {}
        for i, node in enumerate(nodes):
            name = f"on-{node}"
            spec: dict[str, Any] = {"nodeName": node, "containers": [{"name": "c", "image": "fake"}]}
            namespace = ns
            if i == 0:  # the agent's stand-in pod: its account, in the release namespace
                name, namespace = "agent-stand-in", NAMESPACE
                spec["serviceAccountName"] = "loadline-agent"
            plane.apply([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
                          "spec": spec}])  # fmt: skip
            pods[node] = name
        plane.apply([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "victim-a", "namespace": ns},
                      "spec": {"nodeName": nodes[0], "containers": [{"name": "c", "image": "fake"}]}}])  # fmt: skip
        pods[nodes[0]] = "victim-a"
        yield Setup(plane, nodes, ns, pods)
    finally:
        plane.stop()


def start_component(plane: ControlPlane, component: str, config: Path, argv: list[str]) -> Component:
    port = free_port()
    proc = Component(
        f"loadline-{component}",
        [sys.executable, "-m", "common", component, f"--kubeconfig={config}", *argv,
         "--bind-address=127.0.0.1", f"--port={port}"],
        plane.root / "logs" / f"loadline-{component}.log",
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT), "POD_NAME": f"{component}-0"},
    )  # fmt: skip
    proc.start()
    plane.extra.append(proc)
    wait_until(f"{component} /healthz", lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 60, alive=[proc])
    return proc


def test_every_component_runs_with_only_its_own_rbac(secured: Setup, tmp_path: Path) -> None:
    """Each component, with its own token only, does its normal work; the audit log shows no 403 for any."""
    plane, node = secured.plane, secured.nodes[0]
    configs = {d["metadata"]["name"]: d["data"] for d in render(plane, "extender.enabled=true") if d["kind"] == "ConfigMap"}
    scheduler_yaml = tmp_path / "scheduler.yaml"
    scheduler_yaml.write_text(configs["loadline-scheduler-config"]["scheduler.yaml"])
    descheduler_yaml = tmp_path / "descheduler.yaml"
    descheduler_yaml.write_text(configs["loadline-descheduler-config"]["descheduler.yaml"])
    empty_cgroups = tmp_path / "cgroup"  # the agent must not touch this host's cgroups: nothing to enforce on
    empty_cgroups.mkdir()
    lease = ["--lease-duration=6", "--renew-deadline=4", "--retry-period=1"]
    argv = {
        "agent": [f"--node-name={node}", f"--cgroup-root={empty_cgroups}", "--report-interval-seconds=2",
                  "--collect-interval-seconds=1", "--aggregation-interval-seconds=2", "--publish-qps=5"],
        "manager": [f"--namespace={NAMESPACE}", "--config-map=slo-controller-config", *lease],
        "scheduler": [f"--config={scheduler_yaml}", f"--lease-namespace={NAMESPACE}", *lease],
        "descheduler": [f"--config={descheduler_yaml}", f"--lease-namespace={NAMESPACE}", *lease],
        "extender": [f"--config={scheduler_yaml}"],
    }
    started = []
    try:
        for component in COMPONENTS:
            bound = "agent-stand-in" if component == "agent" else None
            config = kubeconfig_for(plane, component, token(plane, component, bound_pod=bound))
            started.append(start_component(plane, component, config, argv[component]))
        # Work for the scheduler: one pod it can place (binding, event), one it cannot (status, event).
        for name, cpu in (("fits", "100m"), ("too-big", "64")):
            plane.apply([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": secured.ns},
                          "spec": {"schedulerName": "loadline-scheduler", "nodeSelector": {"type": "kwok"},
                                   "containers": [{"name": "c", "image": "fake",
                                                   "resources": {"requests": {"cpu": cpu}}}]}}])  # fmt: skip

        def done() -> bool:
            fits = json.loads(plane.kubectl("get", "pod", "fits", "-n", secured.ns, "-o", "json").stdout)
            waiting = json.loads(plane.kubectl("get", "pod", "too-big", "-n", secured.ns, "-o", "json").stdout)
            metric = json.loads(plane.kubectl("get", "nodemetric", node, "-o", "json").stdout)
            slos = plane.kubectl("get", "nodeslo", "-o", "name").stdout.split()
            leases = {json.loads(plane.kubectl("get", "lease", f"loadline-{c}", "-n", NAMESPACE, "-o", "json").stdout)
                      ["spec"].get("holderIdentity") for c in ("manager", "scheduler", "descheduler")}  # fmt: skip
            return bool(
                fits["spec"].get("nodeName")
                and any(c["type"] == "PodScheduled" for c in waiting["status"].get("conditions", []))
                and (metric.get("status") or {}).get("nodeMetric")
                and len(slos) == len(secured.nodes)
                and None not in leases and "" not in leases
            )

        wait_until("the components did their work with their own tokens", done, 120, alive=started)
        time.sleep(5)  # a few more rounds of every loop (descheduler rounds, lease renewals, NodeMetric writes)
        for proc in started:
            assert proc.alive(), f"{proc.name} exited:\n{proc.log_tail()}"
    finally:
        for proc in started:
            plane.stop_component(proc)
    calls = Calls.tally(loadline_requests(plane.audit_events()))
    silent = [c for c in COMPONENTS if not calls.requests.get(c)]
    assert silent == [], f"the audit log has no requests of {silent}"
    assert calls.refused_calls() == [], "RBAC refused calls the code makes:\n" + "\n".join(calls.refused_calls())


def scene(setup: Setup) -> Scene:
    plane = setup.plane

    def nodemetric(node: str) -> dict[str, Any]:
        found = plane.kubectl("get", "nodemetric", node, "-o", "json", check=False)
        if found.returncode != 0:
            plane.apply([{"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                          "metadata": {"name": node}, "spec": {}}])  # fmt: skip
            found = plane.kubectl("get", "nodemetric", node, "-o", "json")
        result: dict[str, Any] = json.loads(found.stdout)
        return result

    a, b = setup.nodes
    return Scene(a, b, setup.ns, setup.pods[a], setup.pods[b], nodemetric)


def test_tokens_may_do_what_their_component_needs_and_nothing_of_a_sample_beyond(secured: Setup) -> None:
    plane, s = secured.plane, scene(secured)
    tables = {
        "agent": (token(plane, "agent", bound_pod="agent-stand-in"), agent_rows(s)),
        "agent unbound": (token(plane, "agent"), unbound_agent_rows(s)),
        "manager": (token(plane, "manager"), manager_rows(s)),
        "scheduler": (token(plane, "scheduler"), scheduler_rows(s)),
        "descheduler": (token(plane, "descheduler"), descheduler_rows(s)),
        "extender": (token(plane, "extender"), extender_rows(s)),
    }
    for lease in ("manager", "scheduler", "descheduler"):  # the "get its Lease" rows need one
        plane.apply([{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                      "metadata": {"name": f"loadline-{lease}", "namespace": NAMESPACE}, "spec": {}}])  # fmt: skip
    wrong = [w for component, (bearer, rows) in tables.items() for w in check_table(plane, component, bearer, rows)]
    assert wrong == [], "\n".join(wrong)


def test_the_agents_memory_eviction_deletes_on_its_own_node_only(secured: Setup) -> None:
    """The agent's own eviction code with its own token: a BE pod on its node is deleted (evictPodSuccess); a BE pod
    on another node, handed to it as a victim (a compromised or confused agent), is refused by the API server's
    policy (evictPodFail with the policy's message) and stays."""
    plane, s = secured.plane, scene(secured)
    names = {s.own_node: "be-own-node", s.other_node: "be-other-node"}
    for node, name in names.items():
        plane.apply([{"apiVersion": "v1", "kind": "Pod",
                      "metadata": {"name": name, "namespace": s.ns, "labels": {"koordinator.sh/qosClass": "BE"}},
                      "spec": {"nodeName": node, "containers": [{"name": "c", "image": "fake"}]}}])  # fmt: skip
    pods = {p["metadata"]["uid"]: (p, digest_pod(p)) for p in (plane_pod(plane, s.ns, name) for name in names.values())
            if p}  # fmt: skip
    config = kubeconfig_for(plane, "agent-evictor", token(plane, "agent", bound_pod="agent-stand-in"))

    async def evict() -> MemoryEvictionPlan | None:
        http = await KubeHTTP.connect(config)
        try:
            evictor = MemoryEvictor(http, EventRecorder(http, "loadline-agent", s.own_node))
            # 15 of 16 GiB used >= 70 %: release 16 GiB x (93 - 68) % = 4 GiB > the two pods' 3 GiB: both are victims.
            usage = UsageSnapshot(0.0, 1.0, 15 * 2**30, {uid: PodUsageSample(0.1, 1.5 * 2**30) for uid in pods})
            return await evictor.round(ResourceThresholdStrategy(memory_evict_threshold_percent=70),
                                       NodeFacts(8000, 16 * 2**30, 0, ()), usage, pods)  # fmt: skip
        finally:
            await http.close()

    plan = asyncio.run(evict())
    assert plan is not None and {v.name for v in plan.victims} == set(names.values()), plan
    own = plane_pod(plane, s.ns, names[s.own_node], missing_ok=True)
    assert own is None or own["metadata"].get("deletionTimestamp"), "the pod on its own node was not deleted"
    other = plane_pod(plane, s.ns, names[s.other_node])
    assert other and not other["metadata"].get("deletionTimestamp"), "the pod on another node was deleted"
    events = json.loads(plane.kubectl("get", "events.events.k8s.io", "-n", s.ns, "-o", "json").stdout)["items"]
    reasons = {(e["regarding"]["name"], e["reason"]): e["note"] for e in events if e["regarding"]["name"] in names.values()}
    assert set(reasons) == {(names[s.own_node], "evictPodSuccess"), (names[s.other_node], "evictPodFail")}, reasons
    refusal = (f"loadline-agent on node {s.own_node} may delete only pods on node {s.own_node}, "
               f"not {s.ns}/{names[s.other_node]} on {s.other_node}")  # fmt: skip
    assert refusal in reasons[(names[s.other_node], "evictPodFail")], reasons


def plane_pod(plane: ControlPlane, namespace: str, name: str, *, missing_ok: bool = False) -> dict[str, Any] | None:
    found = plane.kubectl("get", "pod", name, "-n", namespace, "-o", "json", "--ignore-not-found").stdout
    assert found or missing_ok, f"pod {namespace}/{name} is gone"
    return json.loads(found) if found else None


def test_chart_security_switches(secured: Setup) -> None:
    """Pod deletion only with QoS enforcement; the admission policies can be turned off; nobody reads Secrets but the
    manager its webhook Secret, by name (and writes it only when it issues the certificates itself)."""
    plane = secured.plane

    def agent_rules(*sets: str) -> list[dict[str, Any]]:
        [role] = [d for d in render(plane, *sets) if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "loadline-agent"]
        rules: list[dict[str, Any]] = role["rules"]
        return rules

    def pod_verbs(*sets: str) -> set[str]:
        return {v for r in agent_rules(*sets) if r["apiGroups"] == [""] for res in r["resources"] if res.startswith("pod")
                for v in (f"{res} {verb}" for verb in r["verbs"])}  # fmt: skip

    # Deleting (held to its node by the policy) only with QoS enforcement; the Eviction API never (no policy can).
    assert pod_verbs() == {"pods list", "pods watch", "pods delete"}
    assert pod_verbs("agent.qosEnforcement=false") == {"pods list", "pods watch"}
    policies = {d["metadata"]["name"]: d for d in render(plane) if d["kind"] == "ValidatingAdmissionPolicy"}
    bindings = {d["spec"]["policyName"] for d in render(plane) if d["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert set(policies) == bindings == {"loadline-agent-own-node", "loadline-agent-own-node-pods"}
    [pod_rule] = policies["loadline-agent-own-node-pods"]["spec"]["matchConstraints"]["resourceRules"]
    assert pod_rule["resources"] == ["pods"] and pod_rule["operations"] == ["DELETE"]
    off = {d["kind"] for d in render(plane, "security.ownNodeAdmissionPolicy=false")}
    assert not off & {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    every = render(plane, "extender.enabled=true")
    for doc in every:
        if doc["kind"] in ("ClusterRole", "Role"):
            for rule in doc["rules"]:
                assert "*" not in rule["resources"] + rule["verbs"], doc
                if "secrets" in rule["resources"]:
                    assert (doc["kind"], doc["metadata"]["name"]) == ("Role", "loadline-manager"), doc
                    assert rule["resourceNames"] == ["loadline-webhook-certs"], rule

    def secret_verbs(*sets: str) -> list[str]:
        [role] = [d for d in render(plane, *sets) if d["kind"] == "Role" and d["metadata"]["name"] == "loadline-manager"]
        return [v for r in role["rules"] if "secrets" in r["resources"] for v in r["verbs"]]

    assert secret_verbs() == ["get", "list", "watch", "update"]
    assert secret_verbs("manager.webhook.certificates.source=cert-manager") == ["get", "list", "watch"]
    assert secret_verbs("manager.webhook.enabled=false") == []
    workloads = [d for d in every if d["kind"] in ("Deployment", "DaemonSet")]
    for workload in workloads:
        pod = workload["spec"]["template"]["spec"]
        container = pod["containers"][0]["securityContext"]
        assert container["readOnlyRootFilesystem"] is True and container["capabilities"] == {"drop": ["ALL"]}
        assert container["allowPrivilegeEscalation"] is False
        if workload["kind"] == "Deployment":
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        else:
            assert container["seccompProfile"] == {"type": "RuntimeDefault"}
