"""Agent settings: flags > LOADLINE_AGENT_* environment > YAML file > defaults; bad values exit 2 naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.collectors.cgroups import PsiScope
from agent.config import AgentSettings, ConfigError, load
from agent.main import build_parser, main
from common.api.nodemetric import NodeMemoryCollectPolicy
from common.flags import is_deprecated_alias


def test_defaults_are_koordinators() -> None:
    s = load({}, environ={})
    assert (s.collect_interval_seconds, s.report_interval_seconds, s.aggregate_duration_seconds) == (1.0, 60.0, 300.0)
    assert s.aggregate_windows == [300.0, 600.0, 1800.0]
    assert s.node_memory_collect_policy is NodeMemoryCollectPolicy.USAGE_WITHOUT_PAGE_CACHE
    assert (s.publish_qps, s.publish_burst) == (0.1, 2)
    assert s.create_nodemetric and s.publish and s.node_name is None
    assert s.psi is PsiScope.OFF  # koordlet's PSICollector feature gate is off by default
    assert load({"psi": "pods"}, environ={}).psi is PsiScope.PODS  # and on by flag


def test_precedence_file_env_flags(tmp_path: Path) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text("collect_interval_seconds: 0.5\nreport_interval_seconds: 30\naggregate_windows: [1m, 2m]\n")
    env = {"LOADLINE_AGENT_REPORT_INTERVAL_SECONDS": "20", "LOADLINE_AGENT_AGGREGATE_WINDOWS": "10s,5s"}
    s = load({"report_interval_seconds": "10"}, file=config, environ=env)
    assert s.collect_interval_seconds == 0.5  # file
    assert s.aggregate_windows == [5.0, 10.0]  # env over file, sorted
    assert s.report_interval_seconds == 10.0  # flag over env


def test_durations_in_seconds_or_go_form() -> None:
    s = load({"aggregate_windows": "5m0s,1h,90", "collect_interval_seconds": "200ms"}, environ={})
    assert s.aggregate_windows == [90.0, 300.0, 3600.0]
    assert s.collect_interval_seconds == 0.2
    assert s.retention_seconds == 3600.0


def test_node_name_from_downward_api_unless_set() -> None:
    assert load({}, environ={"NODE_NAME": "worker-7"}).node_name == "worker-7"
    env = {"NODE_NAME": "worker-7", "LOADLINE_AGENT_NODE_NAME": "other"}
    assert load({}, environ=env).node_name == "other"
    assert load({"node_name": "flag"}, environ=env).node_name == "flag"
    with pytest.raises(ConfigError, match="node_name"):
        load({}, environ={"NODE_NAME": "Not_A_Node"})


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        ({"collect_interval_seconds": "-1"}, "collect_interval_seconds"),
        ({"aggregate_windows": "5m,later"}, "aggregate_windows"),
        ({"node_memory_collect_policy": "everything"}, "node_memory_collect_policy"),
        ({"publish_burst": "0"}, "publish_burst"),
        ({"port": "70000"}, "port"),
        ({"collectors": "node,teleport"}, "collectors"),
        ({"create_nodemetric": "perhaps"}, "create_nodemetric"),
        ({"retry_initial_seconds": "10", "retry_max_seconds": "1"}, "retry_max_seconds"),
        ({"collect_interval_seconds": "10", "container_interval_seconds": "5"}, "container_interval"),
    ],
)
def test_bad_values_name_the_field(flags: dict[str, str], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        load(flags, environ={})


def test_unknown_key_in_the_file_is_an_error(tmp_path: Path) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text("collect_interval: 1\n")
    with pytest.raises(ConfigError, match="collect_interval"):
        load({}, file=config, environ={})


def test_every_setting_is_a_flag() -> None:
    parser = build_parser()
    dests = {a.dest for a in parser._actions}
    assert set(AgentSettings.model_fields) <= dests
    args = parser.parse_args(
        ["--windows", "2s,4s", "--create-nodemetric=false", "--publish", "--collect-interval", "0.2"]
    )
    assert (args.aggregate_windows, args.create_nodemetric, args.publish) == ("2s,4s", "false", "true")
    assert args.collect_interval_seconds == "0.2"


def test_renamed_settings_still_work_from_the_file_and_the_environment_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text("metrics_port: 9400\nmetrics_address: 127.0.0.3\n")
    with caplog.at_level("WARNING", logger="loadline.config"):
        s = load({}, file=config, environ={})
        assert (s.port, s.bind_address) == (9400, "127.0.0.3")
        assert f"metrics_port (in {config}) is deprecated, use port" in caplog.text
        assert load({}, environ={"LOADLINE_AGENT_METRICS_PORT": "9401"}).port == 9401
        assert "LOADLINE_AGENT_METRICS_PORT is deprecated, use LOADLINE_AGENT_PORT" in caplog.text
    # the new name wins over the old in the same source, and a flag over both
    assert load({}, environ={"LOADLINE_AGENT_METRICS_PORT": "1", "LOADLINE_AGENT_PORT": "2"}).port == 2
    config.write_text("metrics_port: 1\nport: 2\n")
    assert load({}, file=config, environ={}).port == 2
    assert load({"port": "3"}, environ={"LOADLINE_AGENT_METRICS_PORT": "1"}).port == 3


def test_main_exits_2_on_a_bad_value(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert main(["--once", "--collect-interval-seconds", "0"]) == 2
    err = capsys.readouterr().err
    assert "collect_interval_seconds" in err and "greater than 0" in err
    monkeypatch.setenv("LOADLINE_AGENT_PSI", "sometimes")
    assert main(["--once"]) == 2
    assert "psi" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "field", "why"),
    [
        (["--aggregate-windows", "5m,168h"], "aggregate_windows", "604800s is longer than 3600s"),
        (["--windows", "1m,2m,3m,4m,5m,6m,7m,8m,9m"], "aggregate_windows", "9 durations, at most 8"),
        (["--aggregate-duration-seconds", "3601"], "aggregate_duration_seconds", "3601s is longer than 3600s"),
        (["--aggregate-duration", "2h"], "aggregate_duration_seconds", "7200s is longer than 3600s"),
    ],
)
def test_aggregation_flags_past_the_managers_bounds_stop_the_agent_at_start(
    flags: list[str], field: str, why: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 29: the manager refuses colocation-config windows past 1 h or more than 8 of them (every agent keeps a
    # sample per second per series for the longest), but the agent's own flags took any: 168h sized its ring to
    # ~605,000 samples per series. Now the same bounds (common/api/nodemetric.py) are a config error naming the field.
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert main(["--once", *flags]) == 2
    err = capsys.readouterr().err
    assert field in err and why in err, err


def test_aggregation_flags_at_the_bounds_are_taken() -> None:
    settings = load({"aggregate_windows": "1m,2m,3m,4m,5m,6m,7m,1h", "aggregate_duration_seconds": "1h"}, environ={})
    assert settings.aggregate_windows[-1] == 3600.0 and len(settings.aggregate_windows) == 8
    assert settings.aggregate_duration_seconds == 3600.0


def test_daemon_without_a_node_name_exits_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("NODE_NAME", "LOADLINE_AGENT_NODE_NAME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KUBECONFIG", "/etc/loadline-test/kubeconfig")  # a cluster is configured: node needed
    assert main([]) == 2
    assert "node_name: required" in capsys.readouterr().err


def test_once_and_simulate_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--once", "--simulate"])
    assert exc.value.code == 2
    capsys.readouterr()


def test_every_option_has_help_and_lists_its_choices() -> None:
    from agent.collectors.registry import COLLECTORS
    from agent.main import build_parser

    parser = build_parser()
    actions = [a for a in parser._actions if a.option_strings and a.dest != "help" and not is_deprecated_alias(a)]
    assert len(actions) > 40
    for action in actions:
        assert action.help and len(action.help) > 10, action.option_strings
        assert action.help.count("(default:") <= 1, action.help
    by_dest = {a.dest: a.help or "" for a in actions}
    assert all(spec.name in by_dest["collectors"] for spec in COLLECTORS)
    assert "usageWithPageCache" in by_dest["node_memory_collect_policy"]
    assert "table, yaml" in by_dest["once_output"]
