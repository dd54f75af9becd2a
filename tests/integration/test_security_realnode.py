"""Least privilege on the real node (issue 16): Loadline installed by its chart, pods' own tokens, Pod Security.

Uses the session's real cluster (tests/integration/realnode_cluster.py; installs Loadline if no earlier test
has). The tables are test_security_rbac.py's, here with the tokens the kubelet mounted into Loadline's pods.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.harness import demo
from tests.integration.realnode_cluster import NAMESPACE, RealCluster
from tests.integration.test_security_rbac import (
    ACCOUNT,
    Row,
    Scene,
    agent_rows,
    check_table,
    delete_options,
    descheduler_rows,
    manager_rows,
    pod_path,
    scheduler_rows,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]
TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"
WORKLOAD_NS = "security-tables"
DEPLOYMENTS = ("manager", "scheduler", "descheduler")


def status_of(url: str) -> int:
    """The status an unauthenticated GET gets (never 401/403: the endpoints ask for no credentials)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


# When this file installed Loadline (None: an earlier test had). `helm uninstall` deletes the Roles while the
# pods are still in their termination grace period, so an earlier test's uninstall leaves 403s of components
# that are shutting down: the audit is judged from our own install on.
INSTALLED_AT: list[datetime] = []


def installed(cluster: RealCluster) -> RealCluster:
    if not cluster.installed:
        INSTALLED_AT.append(datetime.now(UTC))
        cluster.install()
    return cluster


def pod_token(cluster: RealCluster, component: str) -> str:
    """The token the kubelet mounted into the component's (first) pod, read from inside it."""
    pod = cluster.pods(component)[0]["metadata"]["name"]
    return cluster.plane.kubectl("exec", "-n", NAMESPACE, pod, "--", "cat", TOKEN_FILE).stdout.strip()


def loadline_requests(cluster: RealCluster) -> list[dict[str, Any]]:
    return demo.loadline_requests(cluster.plane.audit_events(), INSTALLED_AT[0] if INSTALLED_AT else None)


def test_a_helm_install_run_gets_no_403(real_cluster: RealCluster) -> None:
    """The audit of the run so far (install, the components' own start and work): RBAC is sufficient."""
    cluster = installed(real_cluster)
    cluster.plane.kubectl("wait", "--for=jsonpath={.status.nodeMetric}", f"nodemetric/{cluster.node.name}",
                          "--timeout=120s", timeout=130)  # fmt: skip
    for component in DEPLOYMENTS:
        holder = cluster.lease_holder(f"loadline-{component}")
        assert holder, f"nobody holds loadline-{component}'s Lease"
    events = loadline_requests(cluster)
    calls = demo.Calls.tally(events)
    assert calls.silent() == [], calls.requests
    assert calls.refused_calls() == [], "Loadline's own calls refused by RBAC:\n" + "\n".join(calls.refused_calls())
    # The agent's token really is bound to its pod on this node (what the admission policy relies on).
    [agent_call] = [e for e in events if e["user"]["username"] == ACCOUNT.format("agent")][:1]
    assert agent_call["user"]["extra"]["authentication.kubernetes.io/node-name"] == [cluster.node.name]


def real_scene(cluster: RealCluster) -> Scene:
    """A pod on the real node and one on a kwok node (the tables' evictions and deletions are dry runs)."""
    plane, own, other = cluster.plane, cluster.node.name, cluster.kwok_nodes[0]
    if plane.kubectl("get", "namespace", WORKLOAD_NS, check=False).returncode != 0:
        plane.kubectl("create", "namespace", WORKLOAD_NS)
    for name, node in (("on-real-node", own), ("on-kwok-node", other)):
        plane.apply([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": WORKLOAD_NS},
                      "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                               "containers": [{"name": "c", "image": cluster.image, "imagePullPolicy": "Never",
                                               "command": ["sleep", "infinity"]}]}}])  # fmt: skip
    plane.apply([{"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": other},
                  "spec": {}}])  # fmt: skip

    return Scene(own, other, WORKLOAD_NS, "on-real-node", "on-kwok-node", cluster.nodemetric)


def test_pods_own_tokens_may_do_what_they_need_and_not_more(real_cluster: RealCluster) -> None:
    cluster = installed(real_cluster)
    scene = real_scene(cluster)
    try:
        tables = {
            "agent": agent_rows(scene),
            "manager": manager_rows(scene),
            "scheduler": scheduler_rows(scene),
            "descheduler": descheduler_rows(scene),
        }
        wrong = [w for component, rows in tables.items()
                 for w in check_table(cluster.plane, component, pod_token(cluster, component), rows)]  # fmt: skip
        # For real, as the agent's memory eviction deletes: the pod on the real node, with its UID as precondition.
        uid = cluster.kubectl_json("get", "pod", scene.own_pod, "-n", WORKLOAD_NS)["metadata"]["uid"]
        wrong += check_table(cluster.plane, "agent", pod_token(cluster, "agent"), [
            Row("delete a pod on its own node (for real)", "DELETE", pod_path(WORKLOAD_NS, scene.own_pod), 200,
                body=delete_options(uid))])  # fmt: skip
        assert wrong == [], "\n".join(wrong)
        # The kubelet stopped it and the pod object went away.
        cluster.plane.kubectl("wait", "--for=delete", f"pod/{scene.own_pod}", "-n", WORKLOAD_NS, "--timeout=60s",
                              timeout=70)  # fmt: skip
    finally:
        cluster.plane.kubectl("delete", "namespace", WORKLOAD_NS, "--wait=false", check=False)


def label_namespace(cluster: RealCluster, level: str | None, *extra: str) -> str:
    """Set (None: remove) the namespace's enforced Pod Security level; returns the API server's warnings."""
    label = "pod-security.kubernetes.io/enforce" + (f"={level}" if level else "-")
    return cluster.plane.kubectl("label", "namespace", NAMESPACE, label, "--overwrite", *extra).stderr


def test_every_pod_passes_the_pod_security_level_the_chart_declares(real_cluster: RealCluster) -> None:
    """Manager, scheduler and descheduler: restricted (they start and become Ready with a read-only root
    filesystem under an enforcing namespace); the agent: privileged (host PID, network and paths)."""
    cluster = installed(real_cluster)
    agents = [p["metadata"]["name"] for p in cluster.pods("agent")]
    deployment_pods = [p["metadata"]["name"] for c in DEPLOYMENTS for p in cluster.pods(c)]
    warnings = label_namespace(cluster, "restricted", "--dry-run=server")
    assert all(a in warnings for a in agents), warnings
    assert not [p for p in deployment_pods if p in warnings], warnings
    assert "host namespaces" in warnings and "runAsUser=0" in warnings, warnings
    baseline = label_namespace(cluster, "baseline", "--dry-run=server")
    assert all(a in baseline for a in agents), baseline  # the agent is privileged, not baseline
    try:
        label_namespace(cluster, "restricted")
        for component in DEPLOYMENTS:
            cluster.plane.kubectl("rollout", "restart", f"deployment/loadline-{component}", "-n", NAMESPACE)
        for component in DEPLOYMENTS:
            cluster.plane.kubectl("rollout", "status", f"deployment/loadline-{component}", "-n", NAMESPACE,
                                  "--timeout=180s", timeout=190)  # fmt: skip
        restarted = [p for c in DEPLOYMENTS for p in cluster.pods(c)]
        assert restarted and not {p["metadata"]["name"] for p in restarted} & set(deployment_pods)
        for pod in restarted:
            ready = [c for c in pod["status"].get("conditions", []) if c["type"] == "Ready"]
            assert ready and ready[0]["status"] == "True", pod["metadata"]["name"]
        # The agent, as the chart renders it, is refused under restricted and admitted under privileged.
        daemonset = cluster.kubectl_json("get", "daemonset", "loadline-agent", "-n", NAMESPACE)
        template = daemonset["spec"]["template"]
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent-admission-probe", "namespace": NAMESPACE,
                 "labels": {"probe": "true"}}, "spec": {**template["spec"], "nodeName": cluster.kwok_nodes[0]}}  # fmt: skip
        refused = cluster.plane.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(probe), check=False)
        assert refused.returncode != 0 and 'violates PodSecurity "restricted:latest"' in refused.stderr, refused.stderr
        label_namespace(cluster, "privileged")
        cluster.plane.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(probe))
    finally:
        label_namespace(cluster, None)
    cluster.wait_all_ready()


def test_probes_and_metrics_need_no_credentials_and_listen_on_the_pod_ip(real_cluster: RealCluster) -> None:
    cluster = installed(real_cluster)
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.agent_port}/metrics", timeout=5) as response:
        assert response.status == 200
    for component in DEPLOYMENTS:
        pod = cluster.pods(component)[0]
        ip = pod["status"]["podIP"]
        port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
        for path in ("/metrics", "/healthz", "/readyz"):
            assert status_of(f"http://{ip}:{port}{path}") in (200, 503), (component, path)  # 503: a standby
        assert status_of(f"http://{ip}:{port}/metrics") == 200
        args = pod["spec"]["containers"][0]["args"]
        assert "--bind-address=$(POD_IP)" in args, args
        # Not on the pod's loopback: only the address the chart set.
        probe = "import socket,sys; s=socket.socket(); s.settimeout(2); sys.exit(s.connect_ex(('127.0.0.1', %d)))"
        answer = cluster.plane.kubectl("exec", "-n", NAMESPACE, pod["metadata"]["name"], "--", "python3", "-c",
                                       probe % port, check=False)  # fmt: skip
        assert answer.returncode != 0, f"{component} answers on 127.0.0.1:{port}"
