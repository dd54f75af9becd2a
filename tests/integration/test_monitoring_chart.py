"""The chart's monitoring templates, rendered by the real helm: PrometheusRule, dashboard ConfigMaps and
ServiceMonitors carry exactly deploy/prometheus and deploy/dashboards, and nothing renders by default."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness import build
from tests.harness.build import KUBERNETES_VERSION
from tests.harness.controlplane import REPO_ROOT

pytestmark = pytest.mark.integration
CHART = REPO_ROOT / "deploy" / "helm" / "loadline"
RULES = REPO_ROOT / "deploy" / "prometheus" / "loadline-rules.yaml"
DASHBOARDS = sorted((REPO_ROOT / "deploy" / "dashboards").glob("*.json"))
ALL_ON = [
    "--set", "monitoring.prometheusRule.enabled=true",
    "--set", "monitoring.grafanaDashboards.enabled=true",
    "--set", "monitoring.serviceMonitor.enabled=true",
]  # fmt: skip


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Any:
    binary = build.ensure(["helm"])["helm"]
    home = tmp_path_factory.mktemp("helm-home")

    def run(*args: str) -> str:
        proc = subprocess.run(
            [str(binary), *args], capture_output=True, text=True, check=False, timeout=120,
            env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}"
        return proc.stdout

    return run


def rendered(helm: Any, *values: str) -> list[dict[str, Any]]:
    out = helm("template", "loadline", str(CHART), "-n", "loadline-system", f"--kube-version={KUBERNETES_VERSION}",
               *values)  # fmt: skip
    return [doc for doc in yaml.safe_load_all(out) if doc]


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def test_nothing_renders_by_default(helm: Any) -> None:
    docs = rendered(helm)
    assert docs, "the chart renders its components"
    assert not [d for d in docs if d["apiVersion"].startswith("monitoring.coreos.com/")]
    assert not [d for d in docs if d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"].get("labels", {})]


def test_lints_with_monitoring_on(helm: Any) -> None:
    out = helm("lint", str(CHART), "--strict", f"--kube-version={KUBERNETES_VERSION}", *ALL_ON)
    assert "0 chart(s) failed" in out


def test_prometheus_rule_is_the_rule_file(helm: Any) -> None:
    docs = rendered(helm, *ALL_ON, "--set", "monitoring.prometheusRule.labels.release=kube-prometheus-stack")
    rules = by_kind(docs, "PrometheusRule")
    assert list(rules) == ["loadline"]
    rule = rules["loadline"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "loadline-system"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]


def test_dashboard_configmaps_carry_the_dashboards(helm: Any) -> None:
    docs = rendered(helm, *ALL_ON, "--set", "monitoring.grafanaDashboards.namespace=monitoring")
    maps = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["labels"].get("grafana_dashboard") == "1"]
    assert len(maps) == len(DASHBOARDS) >= 2
    carried: dict[str, Any] = {}
    for cm in maps:
        assert cm["metadata"]["namespace"] == "monitoring"
        assert cm["metadata"]["annotations"]["grafana_folder"] == "Loadline"
        ((key, text),) = cm["data"].items()
        carried[key] = json.loads(text)
    assert carried == {p.name: json.loads(p.read_text()) for p in DASHBOARDS}


def test_service_monitors_select_the_metrics_services(helm: Any) -> None:
    docs = rendered(helm, *ALL_ON, "--set", "descheduler.enabled=false")
    monitors = by_kind(docs, "ServiceMonitor")
    services = by_kind(docs, "Service")
    assert sorted(monitors) == ["loadline-agent", "loadline-manager", "loadline-scheduler"]
    for name, monitor in monitors.items():
        # the rules expect job = the Service's name, the Prometheus Operator's default without jobLabel
        assert "jobLabel" not in monitor["spec"]
        matching = [s for s in services.values()
                    if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()]  # fmt: skip
        assert [s["metadata"]["name"] for s in matching] == [name]
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["port"] in {p["name"] for p in matching[0]["spec"]["ports"]}
        assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["loadline-system"]
    with_extender = by_kind(rendered(helm, *ALL_ON, "--set", "extender.enabled=true"), "ServiceMonitor")
    assert with_extender["loadline-extender"]["spec"]["endpoints"][0]["port"] == "metrics"  # the Extender rows' data
    agent = monitors["loadline-agent"]["spec"]["endpoints"][0]
    assert agent["honorLabels"] is True
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"} in agent["relabelings"]


def test_chart_links_the_deploy_directories() -> None:
    for link, target in (("prometheus", RULES.parent), ("dashboards", DASHBOARDS[0].parent)):
        path = CHART / link
        assert path.is_symlink() and path.resolve() == Path(target).resolve()
