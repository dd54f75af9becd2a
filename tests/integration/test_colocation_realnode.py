"""The Colocation Profile through the chart on the real node (issue 27's acceptance): a plain Deployment and a plain
Job, applied unchanged in a namespace a ClusterColocationProfile selects, become batch pods (labels, priority,
scheduler, batch resources) at creation; loadline-scheduler places them on the real node, they run, and they are
counted against its batch allocatable.

The API server calls the manager pods' webhooks through the Service loadline-webhook (the harness' API server
resolves it to a ready pod's IP: `--enable-aggregator-routing`), over TLS with the manager's own certificates.
"""

from __future__ import annotations

import json
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


def workloads(ns: str, image: str, cpu_milli: int) -> list[Obj]:
    """A Deployment and a Job as a user writes them: cpu and memory, no batch names, no scheduler, no priority."""
    container = {"name": "work", "image": image, "imagePullPolicy": "Never",
                 "command": ["python3", "-c", "import time; time.sleep(20); print('done')"],
                 "resources": {"requests": {"cpu": f"{cpu_milli}m", "memory": "32Mi"},
                               "limits": {"cpu": f"{cpu_milli}m", "memory": "64Mi"}}}  # fmt: skip
    template = {"metadata": {"labels": {"app": "report"}},
                "spec": {"terminationGracePeriodSeconds": 0, "containers": [container]}}  # fmt: skip
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "report", "namespace": ns},
                  "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "report"}}, "template": template}}
    job_template = {"metadata": {"labels": {"app": "nightly"}},
                    "spec": {**template["spec"], "restartPolicy": "Never"}}  # fmt: skip
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "nightly", "namespace": ns},
           "spec": {"backoffLimit": 0, "template": job_template}}
    return [deployment, job]


def test_a_deployment_and_a_job_applied_unchanged_run_as_batch_pods_on_the_real_node(
    real_cluster: RealCluster, colocated_ns: str
) -> None:
    cluster, ns = real_cluster, colocated_ns
    allocatable = wait_for("batch-cpu on the real Node", lambda: batch_cpu_allocatable(cluster) >= 200, 90)
    allocatable = batch_cpu_allocatable(cluster)
    share = max(50, allocatable // 5)  # three pods take ~60 % of the node's batch-cpu
    cluster.plane.apply(workloads(ns, cluster.image, share))

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
    # Counted against the node's batch allocatable: a pod asking for 70 % of it fits alone, but not beside the
    # three (60 %): it waits with Insufficient kubernetes.io/batch-cpu.
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": ns},
             "spec": {"containers": [{"name": "c", "image": cluster.image, "imagePullPolicy": "Never",
                                      "command": ["sleep", "3600"],
                                      "resources": {"requests": {"cpu": f"{allocatable * 7 // 10}m"}}}]}}  # fmt: skip
    cluster.plane.apply(probe)

    def refused() -> str | None:
        events = cluster.kubectl_json("get", "events", "-n", ns, "--field-selector",
                                      "involvedObject.name=probe,reason=FailedScheduling")["items"]  # fmt: skip
        messages = [e.get("message") or "" for e in events]
        return next((m for m in messages if f"Insufficient {BATCH}" in m), None)

    print(f"\nbatch-cpu allocatable {allocatable}, three pods of {share}: the probe of {allocatable * 7 // 10} waits: "
          f"{wait_for('the probe refused for batch-cpu', refused, 60)}")
    job = cluster.kubectl_json("get", "job", "nightly", "-n", ns)
    wait_for("the Job completed", lambda: (cluster.kubectl_json("get", "job", "nightly", "-n", ns)["status"]
                                           .get("succeeded") or 0) >= 1, 90)  # fmt: skip
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == f"{share}m", (
        "the Job's own template stays as written")


def test_the_manager_pods_serve_the_webhook_with_their_own_certificates(real_cluster: RealCluster,
                                                                        installed: None) -> None:  # fmt: skip
    plane = real_cluster.plane
    secret = real_cluster.kubectl_json("get", "secret", "loadline-webhook-certs", "-n", NAMESPACE)
    assert set(secret.get("data") or {}) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        config = json.loads(plane.kubectl("get", kind, "loadline", "-o", "json").stdout)
        assert all(w["clientConfig"].get("caBundle") == secret["data"]["ca.crt"] for w in config["webhooks"]), kind
