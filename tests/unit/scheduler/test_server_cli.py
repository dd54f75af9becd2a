"""`loadline scheduler` start-up errors and options, and `loadline explain`'s rendering."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from common.cli import explain
from scheduler_plugin.framework.config import KubeSchedulerConfiguration
from scheduler_plugin.main import main as scheduler_main
from scheduler_plugin.server.options import client_limits_from, leader_election_from


def write(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


CONFIG = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}


@pytest.mark.parametrize(("doc", "field"), [
    ({**CONFIG, "profiles": [{"pluginConfig": [{"name": "LoadAwareScheduling", "args": {"usageThresholds": {"cpu": 120}}}]}]},
     "profiles[0].pluginConfig[0].args.usageThresholds"),
    ({**CONFIG, "profiles": [{"plugins": {"score": {"enabled": [{"name": "NoSuchPlugin"}]}}}]},
     "profiles[0].plugins.score.enabled[0].name"),
    ({**CONFIG, "leaderElection": {"leaseDuration": "soon"}}, "leaderElection.leaseDuration"),
    ({**CONFIG, "leaderElection": {"leaseDuration": "5s", "renewDeadline": "10s"}}, "leaderElection"),
    ({**CONFIG, "leaderElection": {"resourceLock": "endpoints"}}, "leaderElection.resourceLock"),
    ({**CONFIG, "clientConnection": {"kubeconfig": 3}}, "clientConnection.kubeconfig"),
    ({**CONFIG, "clientConnection": {"qps": 0}}, "clientConnection.qps"),
    ({**CONFIG, "clientConnection": {"qps": "fast"}}, "clientConnection.qps"),
    ({**CONFIG, "clientConnection": {"burst": 2.5}}, "clientConnection.burst"),
])  # fmt: skip
def test_config_errors_stop_the_scheduler_at_start_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: object, field: str
) -> None:
    assert scheduler_main(["--config", str(write(tmp_path, doc))]) == 2
    assert field in capsys.readouterr().err


def test_missing_config_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert scheduler_main(["--config", str(tmp_path / "nope.yaml")]) == 2
    assert "--config" in capsys.readouterr().err


def test_leader_election_flags_override_the_file() -> None:
    config = KubeSchedulerConfiguration.model_validate({
        **CONFIG, "leaderElection": {"leaderElect": False, "leaseDuration": "30s", "renewDeadline": "20s",
                                     "retryPeriod": "5s", "resourceName": "from-file", "resourceNamespace": "ops"},
    })  # fmt: skip
    from_file = leader_election_from(config, {})
    assert (from_file.enabled, from_file.name, from_file.namespace, from_file.lease_seconds) == (False, "from-file", "ops", 30)
    flagged = leader_election_from(config, {"leader_elect": True, "lease_name": "x", "lease_duration": 12.0,
                                            "renew_deadline": 8.0, "retry_period": 1.0})
    assert (flagged.enabled, flagged.name, flagged.namespace, flagged.lease_seconds) == (True, "x", "ops", 12.0)


def test_client_limits_default_like_kube_scheduler() -> None:
    assert client_limits_from(KubeSchedulerConfiguration.model_validate(CONFIG)) == (50.0, 100)
    custom = KubeSchedulerConfiguration.model_validate({**CONFIG, "clientConnection": {"qps": 7.5, "burst": 3}})
    assert client_limits_from(custom) == (7.5, 3)


DOC = {
    "pod": "ns/p", "schedulerName": "loadline-scheduler", "state": "queued:unschedulable", "nodeName": None,
    "attempt": {"at": "2026-01-01T00:00:00Z", "profile": "loadline-scheduler", "attempts": 2, "outcome": "unschedulable",
                "code": "Unschedulable", "message": "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) cpu usage exceed threshold.",
                "node": None, "evaluatedNodes": 3, "feasibleNodes": 0, "stale": False},
    "nodes": [
        {"node": "a", "feasible": False, "rejectedBy": "NodeResourcesFit", "reasons": ["Insufficient cpu"], "chosen": False},
        {"node": "b", "feasible": False, "rejectedBy": "LoadAwareScheduling", "reasons": ["node(s) cpu usage exceed threshold"], "chosen": False},
        {"node": "c", "feasible": False, "rejectedBy": "LoadAwareScheduling", "reasons": ["node(s) cpu usage exceed threshold"], "chosen": False},
    ],
    "gang": {"name": "ns/job", "source": "scheduling.x-k8s.io/pod-group", "podGroupFound": True, "minMember": 4,
             "members": 4, "bound": [], "waitingOnPermit": ["ns/job-1"], "assumed": [], "pending": ["ns/p", "ns/job-2", "ns/job-3"]},
}  # fmt: skip


def test_explain_renders_rejections_scores_and_the_gang() -> None:
    text = explain.render(DOC)
    assert "0/3 nodes are available" in text
    rows = [line.split() for line in text.splitlines() if " rejected " in line]
    assert [(r[0], r[2]) for r in rows] == [("a", "NodeResourcesFit"), ("b", "LoadAwareScheduling"), ("c", "LoadAwareScheduling")]
    assert "2  LoadAwareScheduling: node(s) cpu usage exceed threshold" in text
    assert "Gang ns/job (scheduling.x-k8s.io/pod-group): minMember 4" in text
    assert "waiting in Permit    1  ns/job-1" in text

    scored = {**DOC, "state": "bound", "nodes": [
        {"node": "a", "feasible": True, "chosen": True, "total": 250,
         "scores": {"LoadAwareScheduling": {"raw": 90, "normalized": 90, "weight": 1, "weighted": 90},
                    "TaintToleration": {"raw": 0, "normalized": 100, "weight": 3, "weighted": 300}}},
    ], "gang": None}  # fmt: skip
    text = explain.render(scored)
    assert "chosen" in text and "total 250" in text and "TaintToleration 100×3" in text
    assert "tied" not in text
    tied = {**scored, "attempt": {**DOC["attempt"], "node": "a", "feasibleNodes": 3, "tiedNodes": 3}}  # type: ignore[dict-item]
    assert "chosen: a (one of 3 tied at the best total, picked at random)" in explain.render(tied)
    failed_before = {**DOC, "lastBindFailure": {
        "at": "2026-01-01T00:00:00Z", "attempts": 1, "node": "b", "tiedNodes": 2,
        "message": 'running PreBind plugin "VolumeBinding": binding volumes: pv "p" node affinity doesn\'t match node "b"'}}
    assert ('  binding failed earlier (attempt #1, 2026-01-01T00:00:00Z) on b (one of 2 tied): running PreBind plugin '
            '"VolumeBinding"') in explain.render(failed_before)
    assert "binding failed earlier" not in explain.render(DOC)
    assert len(explain.render(DOC, max_nodes=1).splitlines()) < len(explain.render(DOC).splitlines())


def test_explain_cli_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        explain.main(["--help"])
    assert exit_info.value.code == 0
    assert "<namespace>/<pod>" in capsys.readouterr().out
    assert explain.main(["a/b/c"]) == 2
    assert explain.main(["ns/p", "--server", "http://127.0.0.1:9", "--timeout", "2"]) == 1
    assert "cannot reach the scheduler" in capsys.readouterr().err


def test_tie_break_seed_flag_reaches_the_options_and_seeds_every_profile() -> None:
    from scheduler_plugin.main import _options, _parser
    from scheduler_plugin.plugins.registry import frameworks_from_config

    config = KubeSchedulerConfiguration.model_validate(CONFIG)
    assert _options(_parser().parse_args(["--tie-break-seed", "7"]), config).tie_break_seed == 7
    assert _options(_parser().parse_args([]), config).tie_break_seed is None
    draws = [[f.rng.random() for f in frameworks_from_config(config, tie_break_seed=7).values()] for _ in range(2)]
    assert draws[0] == draws[1]


def test_explain_renders_the_pods_volumes() -> None:
    doc = {**DOC, "gang": None, "volumes": [
        {"volume": "data", "claim": "data-web-0", "ephemeral": False, "phase": "Pending", "storageClass": "local",
         "bindingMode": "WaitForFirstConsumer", "volumeName": None, "selectedNode": None,
         "binding": "PreBind: pv-3 pre-bound to the claim, waiting for the PV controller"},
        {"volume": "logs", "claim": "gone", "ephemeral": False, "problem": "not found"},
    ]}  # fmt: skip
    text = explain.render(doc)
    assert "  data -> claim data-web-0: Pending, class local (WaitForFirstConsumer)" in text
    assert "PreBind: pv-3 pre-bound to the claim, waiting for the PV controller" in text
    assert "  logs -> claim gone\n      not found" in text
