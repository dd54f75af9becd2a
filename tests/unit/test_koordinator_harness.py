"""The pure parts of tests/harness/koordinator.py: which Koordinator CRDs are installed, and the configs and flags
each component is started with."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.harness import koordinator
from tests.harness.controlplane import CRDS_DIR
from tests.harness.koordinator import (
    DEFAULT_LOAD_AWARE_ARGS,
    KOORD_NAMESPACE,
    descheduler_config,
    extra_crds,
    koord_webhook_configurations,
    manager_argv,
    scheduler_config,
)


def _crd(directory: Path, file: str, *names: str) -> Path:
    docs = [{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": n}}
            for n in names]  # fmt: skip
    path = directory / file
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_extra_crds_are_the_kinds_loadline_does_not_define(tmp_path: Path) -> None:
    koord, ours = tmp_path / "koord", tmp_path / "ours"
    koord.mkdir()
    ours.mkdir()
    _crd(ours, "nm.yaml", "nodemetrics.slo.koordinator.sh")
    (ours / "notes.yaml").write_text("kind: ConfigMap\nmetadata: {name: x}\n")
    _crd(koord, "slo.koordinator.sh_nodemetrics.yaml", "nodemetrics.slo.koordinator.sh")
    reservations = _crd(koord, "scheduling.koordinator.sh_reservations.yaml", "reservations.scheduling.koordinator.sh")
    devices = _crd(koord, "devices.yaml", "devices.scheduling.koordinator.sh")
    # matched by CRD name, not file name: Loadline's own NodeMetric definition stays in force
    assert extra_crds(koord, ours) == [devices, reservations]


def test_loadline_defines_the_objects_it_shares_with_koordinator() -> None:
    ours = {p.name for p in CRDS_DIR.glob("*.yaml")}
    assert {"slo.koordinator.sh_nodemetrics.yaml", "slo.koordinator.sh_nodeslos.yaml"} <= ours


def test_scheduler_config_adds_load_aware_to_the_default_profile() -> None:
    doc = scheduler_config(Path("/k"), load_aware_args={"usageThresholds": {"cpu": 70}})
    assert doc["clientConnection"]["kubeconfig"] == "/k"
    assert doc["leaderElection"]["leaderElect"] is False
    (profile,) = doc["profiles"]
    assert profile["schedulerName"] == "koord-scheduler"
    for point in ("filter", "score", "reserve"):
        assert profile["plugins"][point]["enabled"][0]["name"] == "LoadAwareScheduling"
    assert "disabled" not in profile["plugins"]["score"]  # the kube default score plugins stay
    (args,) = (c["args"] for c in profile["pluginConfig"] if c["name"] == "LoadAwareScheduling")
    assert args["kind"] == "LoadAwareSchedulingArgs"
    assert args["usageThresholds"] == {"cpu": 70}  # the caller's override wins
    assert args["estimatedScalingFactors"] == DEFAULT_LOAD_AWARE_ARGS["estimatedScalingFactors"]


def test_scheduler_config_can_score_by_load_alone_and_elect_a_leader() -> None:
    doc = scheduler_config(Path("/k"), only_load_aware_score=True, leader_elect=True, lease_name="ks2")
    assert doc["profiles"][0]["plugins"]["score"]["disabled"] == [{"name": "*"}]
    assert doc["leaderElection"] == {
        "leaderElect": True, "resourceLock": "leases", "resourceName": "ks2", "resourceNamespace": KOORD_NAMESPACE
    }  # fmt: skip


def test_descheduler_config_balances_with_low_node_load_and_evicts_directly() -> None:
    doc = descheduler_config(Path("/k"), low={"cpu": 30}, high={"cpu": 60}, interval_seconds=2, dry_run=True)
    assert doc["kind"] == "DeschedulerConfiguration"
    assert doc["deschedulingInterval"] == "2s"
    assert doc["dryRun"] is True
    (profile,) = doc["profiles"]
    assert profile["plugins"]["balance"]["enabled"] == [{"name": "LowNodeLoad"}]
    configs = {c["name"]: c["args"] for c in profile["pluginConfig"]}
    assert configs["MigrationController"]["defaultJobMode"] == "EvictDirectly"
    assert configs["MigrationController"]["evictionPolicy"] == "Eviction"
    assert configs["LowNodeLoad"]["lowThresholds"] == {"cpu": 30}
    assert configs["LowNodeLoad"]["highThresholds"] == {"cpu": 60}
    assert configs["LowNodeLoad"]["anomalyCondition"]["consecutiveAbnormalities"] == 1


def test_manager_argv_turns_webhooks_off_and_keeps_ports_on_loopback() -> None:
    argv = manager_argv(Path("/bin/km"), Path("/k"), metrics_port=1, health_port=2, controllers=("nodemetric",))
    assert argv[0] == "/bin/km"
    assert "--feature-gates=WebhookFramework=false" in argv
    assert "--enable-leader-election=false" in argv
    assert "--controllers=nodemetric" in argv
    assert "--metrics-addr=127.0.0.1:1" in argv and "--health-probe-addr=127.0.0.1:2" in argv
    assert f"--config-namespace={KOORD_NAMESPACE}" in argv


# --- koordlet beside the agent ---------------------------------------------------------------------------------
REAL_NODE = {
    "metadata": {"name": "box", "labels": {"kubernetes.io/hostname": "box"}},
    "status": {
        "capacity": {"cpu": "2", "memory": "24Gi", "pods": "110"},
        "allocatable": {"cpu": "2", "memory": "23Gi", "pods": "110"},
        "addresses": [{"type": "InternalIP", "address": "10.1.2.3"}, {"type": "Hostname", "address": "box"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 40123}},
    },
}


def test_koord_webhook_configurations_are_koordinators_pod_webhooks_for_the_selected_namespaces(
    tmp_path: Path,
) -> None:
    service = {"service": {"name": "webhook-service", "namespace": "system", "path": "/mutate-pod"}}
    manifests = tmp_path / "manifests.yaml"
    manifests.write_text(yaml.safe_dump_all([
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
         "metadata": {"name": "mutating-webhook-configuration"},
         "webhooks": [{"name": "mnode-status.koordinator.sh", "clientConfig": service},
                      {"name": "mpod-create.koordinator.sh", "clientConfig": service, "failurePolicy": "Fail"},
                      {"name": "mpod-update.koordinator.sh", "clientConfig": service}]},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": "validating-webhook-configuration"},
         "webhooks": [{"name": "vpod.koordinator.sh", "clientConfig": {"service": {**service["service"],
                                                                                   "path": "/validate-pod"}}},
                      {"name": "vconfigmap.koordinator.sh", "clientConfig": service}]},
    ]))  # fmt: skip
    selector = {"matchLabels": {"colocate": "yes"}}
    mutating, validating = koord_webhook_configurations(manifests, "bench", selector, failure_policy="Ignore",
                                                        timeout_seconds=7)  # fmt: skip
    assert mutating["metadata"] == validating["metadata"] == {"name": "bench"}
    assert [w["name"] for w in mutating["webhooks"]] == ["mpod-create.koordinator.sh"]
    assert [w["name"] for w in validating["webhooks"]] == ["vpod.koordinator.sh"]
    for webhook in (*mutating["webhooks"], *validating["webhooks"]):
        assert (webhook["namespaceSelector"], webhook["failurePolicy"], webhook["timeoutSeconds"]) == (selector,
                                                                                                     "Ignore", 7)
        # koord-manager turns the service into its WEBHOOK_HOST URL, keeping the path
        assert webhook["clientConfig"]["service"]["namespace"] == KOORD_NAMESPACE
    assert validating["webhooks"][0]["clientConfig"]["service"]["path"] == "/validate-pod"


def test_koordlet_view_node_is_never_a_place_for_pods() -> None:
    view = koordinator.koordlet_view_node(REAL_NODE, "box-koordlet", {"metricReportIntervalSeconds": 30})
    assert view["metadata"]["name"] == "box-koordlet"
    assert view["metadata"]["labels"] == {koordinator.KOORDLET_VIEW_LABEL: "box"}
    assert view["spec"]["unschedulable"] is True
    assert {t["effect"] for t in view["spec"]["taints"]} == {"NoSchedule", "NoExecute"}
    assert json.loads(view["metadata"]["annotations"]["node.koordinator.sh/colocation-strategy"]) == {
        "metricReportIntervalSeconds": 30
    }
    # what koordlet reads of it: the real node's allocatable and the real kubelet's address and port
    status = koordinator.koordlet_view_status(REAL_NODE)["status"]
    assert status["allocatable"] == REAL_NODE["status"]["allocatable"]
    assert status["addresses"][0] == {"type": "InternalIP", "address": "10.1.2.3"}
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 40123}}


def test_koordlet_argv_keeps_its_state_off_the_host_and_its_hands_off_cgroups(tmp_path: Path) -> None:
    argv = koordinator.koordlet_argv(Path("/bin/koordlet"), Path("/k/config"), tmp_path, metrics_port=9999)
    flags = dict(a.split("=", 1) for a in argv[1:])
    assert flags["--addr"] == "127.0.0.1:9999"
    gates = dict(g.split("=") for g in flags["--feature-gates"].split(","))
    for gate in ("BECPUSuppress", "CPUBurst", "RdtResctrl", "NodeTopologyReport", "GroupIdentity", "BatchResource"):
        assert gates[gate] == "false"
    assert flags["--enable-nri-runtime-hook"] == "false"
    for flag in ("--tsdb-path", "--prediction-checkpoint-filepath", "--audit-log-dir", "--runtime-hooks-addr"):
        assert flags[flag].startswith(str(tmp_path)), flag
