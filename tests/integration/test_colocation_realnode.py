"""The Colocation Profile through the chart on the real node (issue 27's acceptance): a plain Deployment and a plain
Job, applied unchanged in a namespace a ClusterColocationProfile selects, become batch pods (labels, priority,
scheduler, batch resources) at creation; loadline-scheduler places them on the real node, they run, and they are
counted against its batch allocatable.

The API server calls the manager pods' webhooks through the Service loadline-webhook (the harness' API server
resolves it to a ready pod's IP: `--enable-aggregator-routing`), over TLS with the manager's own certificates.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from common.api.quantity import Quantity
from tests.harness.realnode import REAL_NODE_LABEL
from tests.integration.realnode_cluster import NAMESPACE, RealCluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
Obj = dict[str, Any]
BATCH, BATCH_MEM = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"


def batch_cpu_allocatable(cluster: RealCluster) -> int:
    node = cluster.kubectl_json("get", "node", cluster.node.name)
    return Quantity.parse((node["status"].get("allocatable") or {}).get(BATCH, "0")).value()


@pytest.fixture
def colocated_ns(real_cluster: RealCluster, installed: None) -> Iterator[str]:
    """A namespace with the label a profile selects, and that profile (names of their own, removed afterwards)."""
    run = uuid.uuid4().hex[:6]
    name = f"analytics-{run}"
    plane = real_cluster.plane
    plane.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name,
                                                                      "labels": {"colocation": f"batch-{run}"}}})
    wait_for("default ServiceAccount", lambda: plane.kubectl("get", "serviceaccount", "default", "-n", name,
                                                             check=False).returncode == 0, 30)  # fmt: skip
    profile = {
        "apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
        "metadata": {"name": f"batch-jobs-{run}"},
        "spec": {"namespaceSelector": {"matchLabels": {"colocation": f"batch-{run}"}},
                 "qosClass": "BE", "priorityClassName": "koord-batch", "schedulerName": "loadline-scheduler",
                 # only the real node runs containers (the kwok nodes beside it are simulated)
                 "patch": {"spec": {"nodeSelector": {REAL_NODE_LABEL: "true"}}}},
    }  # fmt: skip
    plane.apply(profile)
    try:
        yield name
    finally:
        plane.kubectl("delete", "clustercolocationprofile", profile["metadata"]["name"], check=False)
        plane.kubectl("delete", "namespace", name, "--wait=true", "--timeout=60s", check=False, timeout=90)


def workloads(ns: str, image: str, cpu_milli: int, job_seconds: int) -> list[Obj]:
    """A Deployment and a Job as a user writes them: cpu and memory, no batch names, no scheduler, no priority."""

    def template(app: str, seconds: int, **spec: Any) -> Obj:
        container = {"name": "work", "image": image, "imagePullPolicy": "Never",
                     "command": ["python3", "-c", f"import time; time.sleep({seconds}); print('done')"],
                     "resources": {"requests": {"cpu": f"{cpu_milli}m", "memory": "32Mi"},
                                   "limits": {"cpu": f"{cpu_milli}m", "memory": "64Mi"}}}  # fmt: skip
        return {"metadata": {"labels": {"app": app}},
                "spec": {"terminationGracePeriodSeconds": 0, "containers": [container], **spec}}  # fmt: skip

    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "report", "namespace": ns},
                  "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "report"}},
                           "template": template("report", 3600)}}  # fmt: skip
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "nightly", "namespace": ns},
           "spec": {"backoffLimit": 3, "template": template("nightly", job_seconds, restartPolicy="Never")}}
    return [deployment, job]


def test_a_deployment_and_a_job_applied_unchanged_run_as_batch_pods_on_the_real_node(
    real_cluster: RealCluster, colocated_ns: str
) -> None:
    cluster, ns = real_cluster, colocated_ns
    # What is free for batch follows this shared machine's real load: little (a few milli-cores) when other work
    # saturates it, so the pods' size follows it.
    wait_for("batch-cpu on the real Node", lambda: batch_cpu_allocatable(cluster) >= 5, 150)
    allocatable = batch_cpu_allocatable(cluster)
    share = max(1, allocatable * 3 // 10)  # the Deployment's two pods take ~60 %, the Job's ~30 %
    cluster.plane.apply(workloads(ns, cluster.image, share, job_seconds=15))

    def pods() -> list[Obj]:
        items: list[Obj] = cluster.kubectl_json("get", "pods", "-n", ns)["items"]
        return items

    def all_running() -> list[Obj] | None:
        found = pods()
        running = [p for p in found if p["status"].get("phase") in ("Running", "Succeeded")]
        return found if len(found) == 3 and len(running) == 3 else None

    found = wait_for("the Deployment's and the Job's pods running", all_running, 180, context=lambda: "\n".join(
        [cluster.plane.kubectl("get", "events", "-n", ns, check=False).stdout, cluster.logs("manager")]))  # fmt: skip
    for p in found:
        meta, spec = p["metadata"], p["spec"]
        where = f"{meta['name']}: "
        assert meta["labels"]["koordinator.sh/qosClass"] == "BE", where + str(meta["labels"])
        assert meta["annotations"]["loadline.io/colocation-profile"].startswith("batch-jobs-"), where
        assert (spec["priorityClassName"], spec["priority"], spec["schedulerName"]) == (
            "koord-batch", 5000, "loadline-scheduler"), where  # fmt: skip
        resources = spec["containers"][0]["resources"]
        assert set(resources["requests"]) == {BATCH, BATCH_MEM} and set(resources["limits"]) == {BATCH, BATCH_MEM}
        assert Quantity.parse(resources["requests"][BATCH]).value() == share
        assert spec["nodeName"] == cluster.node.name, where
        assert p["status"]["qosClass"] == "BestEffort", where  # no cpu/memory left: the kubelet's BE tier
    wait_for("the Job completed", lambda: (cluster.kubectl_json("get", "job", "nightly", "-n", ns)["status"]
                                           .get("succeeded") or 0) >= 1, 90)  # fmt: skip
    job = cluster.kubectl_json("get", "job", "nightly", "-n", ns)
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == f"{share}m", (
        "the Job's own template stays as written")

    # With every manager replica stopped, a pod in the selected namespace is still created, unmutated, at once
    # (failurePolicy Ignore; the Service has no endpoint). With no manager either to move the node's batch-cpu with
    # this busy host's load, the accounting is checked on a fixed allocatable: a batch pod that fits the node alone
    # waits with Insufficient kubernetes.io/batch-cpu beside the Deployment's two pods, and binds once they are gone.
    plane = cluster.plane
    plane.kubectl("scale", "deployment", "loadline-manager", "-n", NAMESPACE, "--replicas=0")
    try:
        wait_for("no manager pod", lambda: not cluster.pods("manager"), 90)
        started = time.monotonic()
        plane.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "unmutated", "namespace": ns},
                     "spec": {"containers": [{"name": "c", "image": cluster.image, "command": ["sleep", "1"],
                                              "resources": {"requests": {"cpu": "1m"}}}]}})  # fmt: skip
        took = time.monotonic() - started
        unmutated = cluster.kubectl_json("get", "pod", "unmutated", "-n", ns)
        assert "koordinator.sh/qosClass" not in unmutated["metadata"].get("labels", {}), unmutated["metadata"]
        assert unmutated["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1m"}
        assert took < 5, f"creating a pod took {took:.1f}s with no manager replica"
        fixed = 3 * share
        plane.kubectl("patch", "node", cluster.node.name, "--subresource=status", "--type=merge", "-p", json.dumps(
            {"status": {"capacity": {BATCH: str(fixed)}, "allocatable": {BATCH: str(fixed)}}}))  # fmt: skip
        probe_milli = fixed - 2 * share + 1  # = share + 1: fits alone, not beside the two
        probe = {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": "probe", "namespace": ns, "labels": {"koordinator.sh/qosClass": "BE"}},
                 "spec": {"terminationGracePeriodSeconds": 0, "schedulerName": "loadline-scheduler",
                          "priorityClassName": "koord-batch", "nodeSelector": {REAL_NODE_LABEL: "true"},
                          "containers": [{"name": "c", "image": cluster.image, "imagePullPolicy": "Never",
                                          "command": ["sleep", "3600"],
                                          "resources": {"requests": {BATCH: str(probe_milli)},
                                                        "limits": {BATCH: str(probe_milli)}}}]}}  # fmt: skip
        plane.apply(probe)

        def refused() -> str | None:
            events = cluster.kubectl_json("get", "events", "-n", ns, "--field-selector",
                                          "involvedObject.name=probe,reason=FailedScheduling")["items"]  # fmt: skip
            messages = [e.get("message") or "" for e in events]
            return next((m for m in messages if f"Insufficient {BATCH}" in m), None)

        message = wait_for("the probe refused for batch-cpu", refused, 60)
        print(f"\nbatch-cpu allocatable {fixed}, two pods of {share} running: a probe of {probe_milli} waits: {message}")
        plane.kubectl("scale", "deployment", "report", "-n", ns, "--replicas=0")
        wait_for("the probe bound once the Deployment's pods are gone",
                 lambda: cluster.kubectl_json("get", "pod", "probe", "-n", ns)["spec"].get("nodeName"), 90)  # fmt: skip
    finally:
        plane.kubectl("scale", "deployment", "loadline-manager", "-n", NAMESPACE, "--replicas=2")
        plane.kubectl("rollout", "status", "deployment/loadline-manager", "-n", NAMESPACE, "--timeout=180s",
                      timeout=190)  # fmt: skip


def test_the_manager_pods_serve_the_webhook_with_their_own_certificates(real_cluster: RealCluster,
                                                                        installed: None) -> None:  # fmt: skip
    plane = real_cluster.plane
    secret = real_cluster.kubectl_json("get", "secret", "loadline-webhook-certs", "-n", NAMESPACE)
    assert set(secret.get("data") or {}) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        config = json.loads(plane.kubectl("get", kind, "loadline", "-o", "json").stdout)
        assert all(w["clientConfig"].get("caBundle") == secret["data"]["ca.crt"] for w in config["webhooks"]), kind
