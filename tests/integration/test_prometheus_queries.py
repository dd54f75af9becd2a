"""Every dashboard query and recording rule returns data from a real Prometheus scraping running components, and
every alert expression parses and evaluates.

Scraped (as the chart's ServiceMonitors would): manager, scheduler, descheduler and extender as host processes, a
simulated agent for three kwok nodes, and a standalone agent reading this machine's /proc and cgroups (the only
source of node pressure: kwok nodes have no kernel), under its own `node` label as the ServiceMonitor adds it.
The cluster is made to show what the panels are for: one node is hot (a bare pod that cannot be evicted plus
one that may be, which the descheduler evicts), kube-scheduler places pods through the extender, which filters
the hot node out, pods with a CPU limit get throttled, a malformed NodeMetric is counted, a pod too big for any
node waits and is moved back to the queue when a pod is deleted, and at the end
slo-controller-config is broken so the "rejected" table has a row.
"""

from __future__ import annotations

import json
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.api.constants import ANNOTATION_DESCHEDULER_EVICT
from common.api.quantity import Quantity
from tests.harness.controlplane import REPO_ROOT, ControlPlane
from tests.harness.processes import Component, free_port, http_ok, wait_until
from tests.harness.prometheus import PrometheusServer, Target
from tests.objects import MakeNodeMetric
from tests.unit.test_monitoring import DASHBOARDS, all_rules, dashboard_exprs, load_dashboard

pytestmark = pytest.mark.integration
RULES = REPO_ROOT / "deploy" / "prometheus" / "loadline-rules.yaml"
WINDOWS = ("4s", "10s", "5m0s")  # the simulated agent's: the first two fill within the test, 5m0s does not
HOT_CPU = 6.5  # cores of 8 the hot node's two pods use: above LoadAware's 65 % and the descheduler's 70 %
REJECTED = "max by (key, field) (loadline_manager_config_rejected) == 1"  # has a row once the config is broken
EXTENDER_CONFIG = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [{"schedulerName": "loadline-extender", "pluginConfig": [
        {"name": "LoadAwareScheduling", "args": {"usageThresholds": {"cpu": 65, "memory": 95}}}]}],
}  # fmt: skip


def _start(logs: Path, name: str, *args: str) -> Component:
    component = Component(
        f"loadline-{name}",
        [sys.executable, "-m", "common.cli", *args],
        logs / f"loadline-{name}.log",
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
    )
    component.start()
    return component


def _pod(name: str, namespace: str, cpu: str, *, limit: str | None = None, **spec: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "256Mi"}}
    if limit is not None:
        resources["limits"] = {"cpu": limit}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {"loadline.io/simulated-cpu": cpu, "loadline.io/simulated-memory": "1Gi",
                                         **spec.pop("annotations", {})}},
            "spec": {"tolerations": [{"operator": "Exists"}], **spec,
                     "containers": [{"name": "c", "image": "demo", "resources": resources}]}}  # fmt: skip


def _configmap(namespace: str, colocation: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "slo-controller-config", "namespace": namespace},
            "data": {"colocation-config": colocation,
                     "resource-threshold-config": json.dumps({"clusterStrategy": {"enable": True}})}}  # fmt: skip


@dataclass(frozen=True)
class Cluster:
    plane: ControlPlane
    namespace: str
    suite: str
    nodes: list[str]
    targets: dict[str, list[Target]]
    logs: Path

    def node_cpu(self, node: str) -> float:
        """Cores the node's NodeMetric reports (what the extender and the descheduler read); 0 before the first."""
        out = self.plane.kubectl(
            "get", "nodemetric", node, "-o", "jsonpath={.status.nodeMetric.nodeUsage.resources.cpu}", check=False
        ).stdout.strip()
        return Quantity.parse(out).as_float() if out else 0.0


@pytest.fixture
def components(
    cluster: ControlPlane, kwok_nodes: Callable[..., list[str]], namespace: str, tmp_path: Path
) -> Iterator[Cluster]:
    suite = uuid.uuid4().hex[:6]
    nodes = kwok_nodes(3, prefix=f"prom{suite}", cpu="8", memory="32Gi", labels={"loadline-test": suite})
    (stray,) = kwok_nodes(1, prefix=f"prom{suite}x", cpu="8", memory="32Gi", labels={"loadline-test": f"{suite}x"})
    cluster.apply(_configmap(namespace, json.dumps({
        "enable": True, "metricAggregateDurationSeconds": 4, "metricReportIntervalSeconds": 2,
        "metricAggregatePolicy": {"durations": ["4s", "10s", "5m"]}})))  # fmt: skip
    descheduler_config = tmp_path / "lownodeload.yaml"
    descheduler_config.write_text(yaml.safe_dump({
        "deschedulingInterval": "2s", "lowThresholds": {"cpu": 30, "memory": 40},
        "highThresholds": {"cpu": 70, "memory": 80}, "nodeSelector": {"matchLabels": {"loadline-test": suite}},
        "evictableNamespaces": {"include": [namespace]},
    }))  # fmt: skip
    extender_config = tmp_path / "extender.yaml"
    extender_config.write_text(yaml.safe_dump(EXTENDER_CONFIG))
    ports = {job: free_port() for job in ("manager", "agent", "host-agent", "scheduler", "descheduler", "extender")}
    kube = f"--kubeconfig={cluster.kubeconfig}"
    argv = {
        "manager": ["manager", kube, f"--namespace={namespace}", f"--port={ports['manager']}"],
        "agent": ["agent", kube, "--simulate", f"--simulate-node-selector=loadline-test={suite}",
                  f"--port={ports['agent']}", "--bind-address=127.0.0.1", "--collect-interval=0.5",
                  "--report-interval=2", "--aggregate-duration=4", f"--windows={','.join(WINDOWS)}",
                  "--aggregation-interval=1"],
        "host-agent": ["agent", "--standalone", f"--port={ports['host-agent']}", "--bind-address=127.0.0.1"],
        "scheduler": ["scheduler", kube, f"--port={ports['scheduler']}", f"--lease-namespace={namespace}"],
        "descheduler": ["descheduler", kube, f"--config={descheduler_config}", f"--port={ports['descheduler']}",
                        f"--lease-namespace={namespace}"],
        "extender": ["extender", kube, "--bind-address=127.0.0.1", f"--port={ports['extender']}",
                     f"--config={extender_config}", "--url-prefix=/loadline"],
    }  # fmt: skip
    started = [_start(tmp_path, name, *args) for name, args in argv.items()]
    try:
        hot = nodes[0]
        cluster.apply([
            # The hot node: a bare pod (nothing would recreate it, so never evicted) and one the descheduler may evict.
            _pod("hog", namespace, "5", nodeName=hot, annotations={"loadline.io/simulated-burstiness": "0"}),
            _pod("spike", namespace, "1.5", nodeName=hot,
                 annotations={"loadline.io/simulated-burstiness": "0", ANNOTATION_DESCHEDULER_EVICT: "true"}),
            # Loadline-scheduled pods that want about their CPU limit, so about half their periods are throttled.
            *(_pod(f"web-{i}", namespace, "300m", limit="300m", schedulerName="loadline-scheduler",
                   nodeSelector={"loadline-test": suite}) for i in range(4)),
            # More CPU than a node has: unschedulable, moved back to the queue when an assigned pod goes.
            {**_pod("too-big", namespace, "1", schedulerName="loadline-scheduler", nodeSelector={"loadline-test": suite}),
             "spec": {"schedulerName": "loadline-scheduler", "nodeSelector": {"loadline-test": suite},
                      "containers": [{"name": "c", "image": "demo", "resources": {"requests": {"cpu": "9"}}}]}},
        ])  # fmt: skip
        # A NodeMetric the API server accepts but no component can read: counted by kind and reason.
        cluster.apply({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": stray}})
        status = MakeNodeMetric(stray).updated(time.time()).node_usage("-1", "1Gi").status()
        cluster.kubectl("patch", "nodemetric", stray, "--subresource=status", "--type=merge",
                        "-p", json.dumps({"status": status}))  # fmt: skip
        targets: dict[str, list[Target]] = {
            f"loadline-{job}": [port] for job, port in ports.items() if job not in ("agent", "host-agent")
        }
        targets["loadline-agent"] = [ports["agent"], (ports["host-agent"], {"node": f"host-{suite}"})]
        wait_until("extender ready", lambda: http_ok(f"http://127.0.0.1:{ports['extender']}/readyz"), 60,
                   alive=started)  # fmt: skip
        yield Cluster(cluster, namespace, suite, nodes, targets, tmp_path)
    finally:
        for component in started:
            component.stop()
        # The session's later schedulers would count this unreadable NodeMetric too (its node goes with kwok_nodes).
        cluster.kubectl("delete", "nodemetric", stray, "--ignore-not-found", check=False)


def _substitute(expr: str, window: str) -> str:
    expr = re.sub(r"\$\{?__rate_interval\}?|\$\{?__range\}?|\$\{?__interval\}?", "30s", expr)
    expr = re.sub(r"\$\{?window\}?", window, expr)
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


def _logs(directory: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in directory.glob("loadline-*.log"))


def _queries() -> dict[str, str]:
    """name -> PromQL: every recording rule and every query of every dashboard panel and variable."""
    queries = {f"{r['record']}{r.get('labels') or ''}": r["expr"] for r in all_rules() if "record" in r}
    for path in DASHBOARDS:
        for expr in dashboard_exprs(load_dashboard(path)):
            queries[f"{path.name}: {expr}"] = _substitute(expr, WINDOWS[0])
    return queries


def _wait_for_data(prom: PrometheusServer, queries: dict[str, str], timeout: float) -> dict[str, str]:
    """The queries still without data after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    pending = dict(queries)
    while pending:
        pending = {name: expr for name, expr in pending.items() if not prom.query(expr)}
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(2)
    return pending


def test_every_dashboard_query_and_recording_rule_returns_data(
    components: Cluster, kube_scheduler: Callable[..., Component]
) -> None:
    c = components
    queries = _queries()
    rejected = [name for name, expr in queries.items() if expr == REJECTED]
    assert rejected, f"the dashboards have no panel {REJECTED!r}"
    with PrometheusServer(c.targets, rule_files=[RULES]) as prom:
        expected_up = sum(len(t) for t in c.targets.values())
        wait_until("every component scraped", lambda: len(prom.query("up == 1")) == expected_up, 90)

        # kube-scheduler asks the extender once the hot node's NodeMetric says it is hot.
        wait_until(f"{c.nodes[0]} reported hot", lambda: c.node_cpu(c.nodes[0]) > 0.65 * 8, 60)
        extender = c.targets["loadline-extender"][0]
        scheduler = f"ext-{c.suite}"
        kube_scheduler([{"schedulerName": scheduler}], extenders=[{
            "urlPrefix": f"http://127.0.0.1:{extender}/loadline", "filterVerb": "filter",
            "prioritizeVerb": "prioritize", "weight": 5, "nodeCacheCapable": True, "httpTimeout": "10s"}])  # fmt: skip
        c.plane.apply([_pod(f"ext-{i}", c.namespace, "200m", schedulerName=scheduler,
                            nodeSelector={"loadline-test": c.suite}) for i in range(2)])  # fmt: skip
        c.plane.kubectl("wait", "-n", c.namespace, "--for=condition=PodScheduled", "pod/ext-0", "pod/ext-1",
                        "--timeout=90s", timeout=100)  # fmt: skip
        placed = c.plane.kubectl("get", "pods", "-n", c.namespace, "ext-0", "ext-1",
                                 "-o", "jsonpath={.items[*].spec.nodeName}").stdout.split()  # fmt: skip
        assert c.nodes[0] not in placed, placed  # the extender filtered the hot node out
        c.plane.kubectl("delete", "pod", "-n", c.namespace, "web-3", "--wait=false")  # frees CPU: too-big moves

        # What the test provoked shows: an eviction, LoadAware's rejections, the malformed NodeMetric.
        provoked = {
            "eviction": 'loadline_descheduler_evictions_total{result="evicted"} > 0',
            "rejection": 'loadline_extender_filter_rejections_total{plugin="LoadAwareScheduling"} > 0',
            "malformed (scheduler)": 'loadline_malformed_objects_total{job="loadline-scheduler", kind="NodeMetric"} > 0',
            "malformed (manager)": 'loadline_malformed_objects_total{job="loadline-manager", kind="NodeMetric"} > 0',
            "throttling": 'rate(loadline_container_cpu_cfs_throttled_periods_total{container=""}[1m]) > 0',
        }
        checked = {name: expr for name, expr in queries.items() if name not in rejected}
        pending = _wait_for_data(prom, {**checked, **provoked}, 120)
        assert not pending, "no data:\n" + "\n".join(sorted(pending)) + "\n" + _logs(c.logs)

        # A broken slo-controller-config: the manager keeps the last good one and the table lists the refusal.
        c.plane.apply(_configmap(c.namespace, "{not json"))
        pending = _wait_for_data(prom, {name: queries[name] for name in rejected}, 60)
        assert not pending, f"no data: {pending}\n{_logs(c.logs)}"
        assert prom.query("min(loadline_manager_config_valid) == 0")

        for alert in (r for r in all_rules() if "alert" in r):
            prom.query(alert["expr"])  # parses and evaluates (RuntimeError with Prometheus' message if not)
        rules = prom.api("rules")
        health = [(r["name"], r.get("lastError")) for g in rules["groups"] for r in g["rules"] if r["health"] == "err"]
        assert not health, health
        assert len(queries) == len(checked) + len(rejected)
        print(f"\n{len(queries)} queries and recording rules returned data; "
              f"{sum(1 for r in all_rules() if 'alert' in r)} alert expressions evaluated")  # fmt: skip
        assert prom.query('count({__name__=~".+_created"})') == []  # no prometheus_client `_created` gauges
        assert prom.query("count(loadline_manager_leader)") == []
