"""The Helm chart: lints, renders flags the components accept, and installs on a real API server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.build import KUBERNETES_VERSION
from tests.harness.controlplane import REPO_ROOT, ControlPlane

pytestmark = pytest.mark.integration
CHART = REPO_ROOT / "deploy" / "helm" / "loadline"


def helm(plane: ControlPlane, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(plane.binary("helm")), f"--kubeconfig={plane.kubeconfig}", *args],
        capture_output=True,
        text=True,
        check=False,
        env={"HOME": str(plane.root / "helm-home"), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return proc


def rendered(plane: ControlPlane, *values: str) -> list[dict[str, Any]]:
    out = helm(plane, "template", "loadline", str(CHART), "-n", "loadline-system", "--include-crds",
               f"--kube-version={KUBERNETES_VERSION}", *values).stdout  # fmt: skip
    return [doc for doc in yaml.safe_load_all(out) if doc]


def test_chart_lints_and_renders_every_component(cluster: ControlPlane) -> None:
    lint = helm(cluster, "lint", str(CHART), "--strict", f"--kube-version={KUBERNETES_VERSION}")
    assert "0 chart(s) failed" in lint.stdout
    kinds = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in rendered(cluster))
    for expected in [
        "DaemonSet/loadline-agent",
        "Deployment/loadline-manager",
        "Deployment/loadline-scheduler",
        "Deployment/loadline-descheduler",
        "CustomResourceDefinition/nodemetrics.slo.koordinator.sh",
        "PriorityClass/koord-prod",
        "PriorityClass/koord-free",
        "ConfigMap/slo-controller-config",
        "CustomResourceDefinition/clustercolocationprofiles.config.koordinator.sh",
        "Service/loadline-webhook",
        "Secret/loadline-webhook-certs",
        "MutatingWebhookConfiguration/loadline",
        "ValidatingWebhookConfiguration/loadline",
    ]:
        assert expected in kinds
    without = [d["kind"] for d in rendered(cluster, "--set", "priorityClasses.create=false", "--set", "descheduler.enabled=false")]
    assert "PriorityClass" not in without and without.count("Deployment") == 2


def test_every_flag_in_the_chart_is_one_the_component_accepts(cluster: ControlPlane) -> None:
    workloads = [d for d in rendered(cluster) if d["kind"] in ("DaemonSet", "Deployment")]
    assert len(workloads) == 4
    for workload in workloads:
        container = workload["spec"]["template"]["spec"]["containers"][0]
        assert container["command"][0] == "loadline"
        help_text = subprocess.run(
            [sys.executable, "-m", "common.cli", container["command"][1], "--help"],
            capture_output=True, text=True, check=True, cwd=REPO_ROOT,
        ).stdout  # fmt: skip
        for arg in container["args"]:
            flag = arg.split("=", 1)[0]
            assert flag in help_text, f"{workload['metadata']['name']}: {flag} is not a flag of loadline {container['command'][1]}"


def test_helm_template_needs_no_kube_version_and_a_cluster_without_the_policy_api_is_told(
    cluster: ControlPlane,
) -> None:
    # helm's offline default (v1.20.0 for a helm built by `go install`, as this one is) renders the chart
    offline = helm(cluster, "template", "loadline", str(CHART), "-n", "loadline-system").stdout
    assert "kind: ValidatingAdmissionPolicy" in offline and "kind: DaemonSet" in offline
    # a cluster's discovery lists kinds; one without ValidatingAdmissionPolicy gets the reason and the way out
    old = helm(cluster, "template", "loadline", str(CHART), "--api-versions", "v1/Pod", check=False)
    assert old.returncode != 0
    assert "security.ownNodeAdmissionPolicy needs ValidatingAdmissionPolicy" in old.stderr
    assert "set security.ownNodeAdmissionPolicy=false" in old.stderr
    helm(cluster, "template", "loadline", str(CHART), "--api-versions", "v1/Pod",
         "--set", "security.ownNodeAdmissionPolicy=false")  # fmt: skip


def test_every_http_port_is_port_and_the_old_metrics_port_value_still_sets_it(cluster: ControlPlane) -> None:
    def ports(*values: str) -> dict[str, tuple[list[str], int]]:
        found = {}
        for d in rendered(cluster, *values):
            if d["kind"] in ("DaemonSet", "Deployment"):
                container = d["spec"]["template"]["spec"]["containers"][0]
                found[d["metadata"]["name"]] = ([a for a in container["args"] if a.startswith("--port=")],
                                                container["ports"][0]["containerPort"])  # fmt: skip
        return found

    assert ports()["loadline-agent"] == (["--port=9321"], 9321)
    assert ports()["loadline-manager"] == (["--port=8080"], 8080)
    old = ports("--set", "agent.metricsPort=9400", "--set", "manager.metricsPort=9401")
    assert old["loadline-agent"] == (["--port=9400"], 9400)
    assert old["loadline-manager"] == (["--port=9401"], 9401)
    services = {d["metadata"]["name"]: d["spec"]["ports"][0]["port"] for d in rendered(
        cluster, "--set", "agent.metricsPort=9400") if d["kind"] == "Service"}  # fmt: skip
    assert services["loadline-agent"] == 9400
    # --take-ownership: the session's API server holds PriorityClasses and webhook configurations other tests
    # created; a dry run would otherwise stop at helm's ownership check before it renders the NOTES
    dry_run = ("install", "loadline", str(CHART), "-n", "loadline-system", "--dry-run=client", "--take-ownership")
    notes = helm(cluster, *dry_run, "--set", "agent.metricsPort=9400").stdout
    assert "WARNING: agent.metricsPort is deprecated; set agent.port" in notes
    assert "metricsPort" not in helm(cluster, *dry_run).stdout


def test_chart_configs_are_accepted_by_the_components(cluster: ControlPlane) -> None:
    from manager.nodeslo.config import SLOControllerConfig, parse_slo_controller_config
    from scheduler_plugin.descheduler.args import LowNodeLoadArgs

    configs = {d["metadata"]["name"]: d for d in rendered(cluster) if d["kind"] == "ConfigMap"}
    parsed = parse_slo_controller_config(configs["slo-controller-config"]["data"])
    assert isinstance(parsed, SLOControllerConfig), parsed  # a list of errors otherwise
    args = yaml.safe_load(configs["loadline-descheduler-config"]["data"]["descheduler.yaml"])
    LowNodeLoadArgs.model_validate(args)
    scheduler = yaml.safe_load(configs["loadline-scheduler-config"]["data"]["scheduler.yaml"])
    assert scheduler["profiles"][0]["schedulerName"] == "loadline-scheduler"


def test_helm_install_and_uninstall_on_the_real_api_server(cluster: ControlPlane) -> None:
    namespace = "loadline-chart-test"
    # Our CRDs are already installed by the harness, as Koordinator's would be: --skip-crds.
    helm(cluster, "install", "loadline", str(CHART), "-n", namespace, "--create-namespace", "--skip-crds",
         "--set", "priorityClasses.create=false")  # fmt: skip
    try:
        objects = json.loads(cluster.kubectl("get", "daemonsets,deployments,configmaps,serviceaccounts", "-n", namespace, "-o", "json").stdout)
        names = {f"{o['kind']}/{o['metadata']['name']}" for o in objects["items"]}
        assert {"DaemonSet/loadline-agent", "Deployment/loadline-manager", "Deployment/loadline-scheduler",
                "Deployment/loadline-descheduler", "ConfigMap/slo-controller-config"} <= names  # fmt: skip
        roles = cluster.kubectl("get", "clusterroles", "-o", "name").stdout.split()
        assert "clusterrole.rbac.authorization.k8s.io/loadline-agent" in roles
        status = json.loads(helm(cluster, "status", "loadline", "-n", namespace, "-o", "json").stdout)
        assert status["info"]["status"] == "deployed"
    finally:
        helm(cluster, "uninstall", "loadline", "-n", namespace, "--wait", check=False)
    left = cluster.kubectl("get", "deployments,daemonsets", "-n", namespace, "-o", "name").stdout.split()
    assert left == []


def test_chart_crds_are_the_generated_ones() -> None:
    link = CHART / "crds"
    assert link.is_symlink() and link.resolve() == (REPO_ROOT / "deploy" / "crds").resolve()
    assert sorted(p.name for p in Path(link).glob("*.yaml")) == sorted(p.name for p in (REPO_ROOT / "deploy" / "crds").glob("*.yaml"))


def test_agent_privilege_follows_qos_enforcement(cluster: ControlPlane) -> None:
    def agent(*values: str) -> dict[str, Any]:
        [ds] = [d for d in rendered(cluster, *values) if d["kind"] == "DaemonSet"]
        container: dict[str, Any] = ds["spec"]["template"]["spec"]["containers"][0]
        return container

    default = agent()
    assert default["securityContext"]["privileged"] is False
    assert default["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "cgroup", "mountPath": "/host/cgroup", "readOnly": False} in default["volumeMounts"]
    assert "--qos-enforcement=true" in default["args"] and "--batch-isolation=on" in default["args"]
    assert "--pod-window-metrics=false" in default["args"]
    assert "--pod-window-metrics=true" in agent("--set", "agent.podWindowMetrics=true")["args"]
    for value, arg in (("dry-run", "dry-run"), ("false", "off"), ("true", "on")):  # YAML's on/off are booleans
        assert f"--batch-isolation={arg}" in agent("--set", f"agent.batchIsolation={value}")["args"]
    measuring = agent("--set", "agent.qosEnforcement=false", "--set", "agent.privilegedEnforcement=true")
    assert measuring["securityContext"]["privileged"] is False  # never privileged only to measure
    assert {"name": "cgroup", "mountPath": "/host/cgroup", "readOnly": True} in measuring["volumeMounts"]
    assert "--qos-enforcement=false" in measuring["args"]
    lsm = agent("--set", "agent.privilegedEnforcement=true")
    assert lsm["securityContext"]["privileged"] is True and "allowPrivilegeEscalation" not in lsm["securityContext"]


def test_every_workload_keeps_off_kwok_nodes_and_the_extender_is_optional(cluster: ControlPlane) -> None:
    docs = rendered(cluster, "--set", "extender.enabled=true")
    workloads = {d["metadata"]["name"]: d for d in docs if d["kind"] in ("DaemonSet", "Deployment")}
    assert set(workloads) == {f"loadline-{c}" for c in ("agent", "manager", "scheduler", "descheduler", "extender")}
    for name, workload in workloads.items():
        terms = workload["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]  # fmt: skip
        assert terms == [{"matchExpressions": [{"key": "type", "operator": "NotIn", "values": ["kwok"]}]}], name
    extender = workloads["loadline-extender"]["spec"]["template"]["spec"]["containers"][0]
    help_text = subprocess.run([sys.executable, "-m", "common.cli", "extender", "--help"], capture_output=True,
                               text=True, check=True, cwd=REPO_ROOT).stdout  # fmt: skip
    assert all(arg.split("=", 1)[0] in help_text for arg in extender["args"])
    kinds = {f"{d['kind']}/{d['metadata']['name']}" for d in docs}
    assert {"Service/loadline-extender", "ClusterRole/loadline-extender", "ServiceAccount/loadline-extender"} <= kinds
    assert not [d for d in rendered(cluster) if "extender" in d["metadata"]["name"]]


def test_webhook_values_choose_failure_policy_certificates_and_route(cluster: ControlPlane) -> None:
    def webhooks(*values: str) -> dict[str, dict[str, Any]]:
        docs = rendered(cluster, *values)
        return {f"{d['kind']}/{w['name']}": {**w, "annotations": d["metadata"].get("annotations") or {}}
                for d in docs if d["kind"].endswith("WebhookConfiguration") for w in d["webhooks"]}  # fmt: skip

    default = webhooks()
    assert set(default) == {"MutatingWebhookConfiguration/mpod.loadline.dev", "ValidatingWebhookConfiguration/vpod.loadline.dev",
                            "ValidatingWebhookConfiguration/vprofile.loadline.dev"}  # fmt: skip
    for hook in default.values():
        assert hook["failurePolicy"] == "Ignore" and hook["timeoutSeconds"] == 3 and hook["sideEffects"] == "None"
        assert hook["clientConfig"]["service"]["name"] == "loadline-webhook" and not hook["annotations"]
    skipped = default["MutatingWebhookConfiguration/mpod.loadline.dev"]["namespaceSelector"]["matchExpressions"]
    assert skipped == [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "loadline-system"]}]
    strict = webhooks("--set", "manager.webhook.failurePolicy=Fail", "--set", "manager.webhook.url=https://10.1.2.3:9876/")
    assert {h["failurePolicy"] for h in strict.values()} == {"Fail"}
    assert strict["ValidatingWebhookConfiguration/vpod.loadline.dev"]["clientConfig"] == {"url": "https://10.1.2.3:9876/validate-pod"}
    issued = webhooks("--set", "manager.webhook.certificates.source=cert-manager")
    assert {h["annotations"]["cert-manager.io/inject-ca-from"] for h in issued.values()} == {"loadline-system/loadline-webhook"}
    kinds = {f"{d['kind']}/{d['metadata']['name']}" for d in rendered(cluster, "--set", "manager.webhook.certificates.source=cert-manager")}
    assert {"Issuer/loadline-webhook", "Certificate/loadline-webhook"} <= kinds and "Secret/loadline-webhook-certs" not in kinds
    [manager] = [d for d in rendered(cluster, "--set", "manager.webhook.certificates.source=cert-manager")
                 if d["kind"] == "Deployment" and d["metadata"]["name"] == "loadline-manager"]  # fmt: skip
    assert "--webhook-certs=external" in manager["spec"]["template"]["spec"]["containers"][0]["args"]
    bad = helm(cluster, "template", "loadline", str(CHART), f"--kube-version={KUBERNETES_VERSION}", "--set",
               "manager.webhook.failurePolicy=Sometimes", check=False)  # fmt: skip
    assert bad.returncode != 0 and "manager.webhook.failurePolicy must be Ignore or Fail" in bad.stderr
    off = {d["kind"] for d in rendered(cluster, "--set", "manager.webhook.enabled=false")}
    assert not off & {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
