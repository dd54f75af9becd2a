"""`make demo` as a user sees it, on the session's real cluster: its story, the commands it prints, its Prometheus.

The story is the demo's own (tests/harness/demo.py, `Demo.story`), played once for this module on the session's
real cluster (tests/integration/realnode_cluster.py: no second control plane, the machine's one real node) in a
namespace of its own, with what the demo's keeper adds for it: the simulated agent writing the kwok nodes'
NodeMetrics, LowNodeLoad's thresholds and node selector at the demo's, and the demo's Prometheus
(tests/harness/demo_monitoring.py) scraping every Loadline component from before the story starts. Then:

- the API server's audit shows no 403 for any Loadline component (issue 16): the chart's RBAC is sufficient as well
  as minimal (test_security_rbac.py's tables show the minimal half), counted as `make demo` prints it;
- every command `make demo` prints to look around (the README's tour shows the same, tests/unit/test_docs.py) runs
  and prints something;
- every Prometheus query it prints returns data, and every Loadline component is a target that is up;
- the page of graphs it links to opens, with every script and stylesheet it loads (Debian's Prometheus reads its UI
  from disk: tests/harness/promtool.py).
"""

from __future__ import annotations

import re
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from tests.harness import demo
from tests.harness.demo_monitoring import JOBS, QUERIES, DemoPrometheus, graph_url
from tests.harness.processes import free_port
from tests.harness.prometheus import PrometheusServer
from tests.integration.realnode_cluster import (
    IDLE_HIGH_THRESHOLDS,
    LOW_THRESHOLDS,
    NAMESPACE,
    RealCluster,
    idle_nodemetric,
    set_descheduler_thresholds,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]


@dataclass
class Played:
    story: demo.Demo
    seen: dict[str, bool]
    calls: demo.Calls
    prometheus: DemoPrometheus


@pytest.fixture(scope="module")
def played(real_cluster_session: RealCluster) -> Iterator[Played]:
    cluster = real_cluster_session
    if not cluster.installed:
        cluster.install()
    namespace = f"demo-{uuid.uuid4().hex[:6]}"
    cluster.plane.kubectl("create", "namespace", namespace)
    state = demo.cluster_state(cluster.plane, cluster.plane.root / "demo-bin", cluster.node.name, cluster.kwok_nodes)
    story = demo.Demo(state, namespace=namespace)
    # helm and kubectl keep caches under $HOME: the session's, not the user's
    story.env["HOME"] = str(cluster.plane.root / "helm-home")
    started, since = time.monotonic(), datetime.now(UTC)
    simulated_port = free_port()
    simulated = demo.start_simulated_agent(cluster.plane, simulated_port)
    try:
        with DemoPrometheus(cluster.plane, NAMESPACE, static_agents=[simulated_port], interval="2s",
                            refresh_seconds=2) as prometheus:  # fmt: skip
            thresholds = demo.DESCHEDULER
            set_descheduler_thresholds(cluster, low=thresholds["lowThresholds"], high=thresholds["highThresholds"],
                                       node_selector=thresholds["nodeSelector"])  # fmt: skip
            # the session's default namespace has no `default` ServiceAccount until kube-controller-manager makes it
            wait_for("default ServiceAccount", lambda: cluster.plane.kubectl(
                "get", "serviceaccount", "default", "-n", namespace, check=False).returncode == 0, 30)  # fmt: skip
            seen = story.story(cluster.image)
            calls = story.audit(since)
            played_for = time.monotonic() - started
            print(f"\nthe demo's story on the real cluster: {played_for:.0f}s; requests {calls.requests}")
            yield Played(story, seen, calls, prometheus)
    finally:
        simulated.stop()
        # The kwok nodes' NodeMetrics would keep the story's simulated load: idle ones leave later tests room.
        for node in cluster.kwok_nodes:
            idle_nodemetric(cluster, node)
        set_descheduler_thresholds(cluster, low=LOW_THRESHOLDS, high=IDLE_HIGH_THRESHOLDS)
        # The batch job's namespace and the profile that selects it (the demo keeps them for a look).
        cluster.plane.kubectl("delete", "namespace", story.batch_namespace, namespace, "--wait=false", check=False)
        cluster.plane.kubectl("delete", "clustercolocationprofile", demo.BATCH_PROFILE["metadata"]["name"], check=False)


def test_the_demo_story_gets_no_403_for_any_loadline_component(played: Played, real_cluster: RealCluster) -> None:
    # The audit covers the whole story only if the story played: each step is one component's work.
    assert all(played.seen.values()), f"story steps not seen: {[step for step, ok in played.seen.items() if not ok]}"
    assert played.calls.silent() == [], f"components with no request in the audit: {played.calls.requests}"
    refused = played.calls.refused_calls()
    assert refused == [], "Loadline's calls refused by RBAC:\n" + "\n".join(refused)


def test_every_command_the_demo_prints_returns_something(played: Played, real_cluster: RealCluster) -> None:
    story = played.story
    # `loadline explain` asks the scheduler `make demo` recorded in its state file; here the same leader, by env
    story.env["LOADLINE_SCHEDULER_URL"] = wait_for("the leading scheduler pod's address", story.scheduler_url, 60)
    empty = []
    for command in story.tour():
        out = story.run(*command.argv)  # a non-zero exit is a RuntimeError with the output
        print(f"$ {' '.join(command.argv)}\n{out[:600]}")
        if not out.strip():
            empty.append(" ".join(command.argv))
    assert empty == [], f"commands the demo prints that print nothing: {empty}"
    events = story.run("kubectl", "get", "events", "-n", story.namespace, "--field-selector", "reason=Descheduled")
    # LowNodeLoad evicts whichever pods of the hot node it finds removable (cruncher or web), never from elsewhere
    evicted_from = {line.split('evicted from node "', 1)[1].split('"', 1)[0] for line in events.splitlines()
                    if "Descheduled" in line and 'evicted from node "' in line}  # fmt: skip
    assert evicted_from == {story.kwok[-1]}, events


def test_every_query_the_demo_prints_returns_data_and_every_component_is_scraped(
    played: Played, real_cluster: RealCluster
) -> None:
    prometheus = played.prometheus
    pending = {q.expr: q.what for q in QUERIES}

    def answered() -> bool:
        for expr in list(pending):
            if prometheus.query(expr):
                del pending[expr]
        return not pending

    wait_for("data for every query the demo prints", answered, 120, interval=2,
             context=lambda: f"without data: {pending}\n{prometheus.server.log()}")  # fmt: skip
    up = {s["metric"]["job"]: s["value"][1] for s in prometheus.query('max by (job) (up{job=~"loadline-.*"})')}
    installed = {job for job in JOBS if job != "loadline-extender"}  # the chart's default leaves the extender off
    assert installed <= set(up) and all(up[job] == "1" for job in installed), up
    nodes = {s["metric"].get("node") for s in prometheus.query("loadline_node_cpu_capacity_cores")}
    assert {real_cluster.node.name, *real_cluster.kwok_nodes} <= nodes, nodes


def test_the_page_of_graphs_the_demo_links_to_opens_with_its_scripts_and_styles() -> None:
    with PrometheusServer({}) as server:  # the demo's server without targets: the page is the same
        with urllib.request.urlopen(graph_url(server.url), timeout=10) as response:  # (redirected to the classic UI)
            page = response.read().decode()
            assert response.status == 200 and "/classic/graph" in response.url, response.url
        assets = sorted(set(re.findall(r'(?:src|href)="(/classic/static/[^"?]+)', page)))
        assert len(assets) >= 10, page[:2000]  # jQuery, Bootstrap, D3, Rickshaw, moment, the graph's own script, ...
        empty = []
        for asset in assets:
            with urllib.request.urlopen(urllib.parse.urljoin(server.url, asset), timeout=10) as response:
                if response.status != 200 or not response.read():
                    empty.append(asset)
        assert empty == []
