"""The pure parts of tests/harness/koordinator.py: which Koordinator CRDs are installed, and the configs and flags
each component is started with."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.harness.controlplane import CRDS_DIR
from tests.harness.koordinator import (
    DEFAULT_LOAD_AWARE_ARGS,
    KOORD_NAMESPACE,
    descheduler_config,
    extra_crds,
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
