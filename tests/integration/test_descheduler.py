"""`loadline descheduler` as a process against a real kube-apiserver with kwok nodes.

NodeMetrics are written by the tests (status subresource, as koordlet would) with `systemUsage`,
`podsMetric` and a matching `nodeUsage`. Pods are bound directly to kwok nodes and owned by
ReplicaSet objects the tests create (there is no controller-manager: nothing recreates an evicted
pod, and kwok deletes a pod as soon as it has a deletionTimestamp). Every test scopes the daemon
to its own nodes with a `nodeSelector` on a per-test label, so other tests' nodes are never seen.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests import objects
from tests.conftest import failed
from tests.harness.controlplane import ControlPlane
from tests.harness.processes import Component, free_port
from tests.objects import MakeNodeMetric

pytestmark = pytest.mark.integration

LABEL = "loadline.test/descheduler"
GiB = 1024**3
POOL = "__default_node_pool__"
REPO = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------- cluster objects
PodUsage = tuple[str, str, int, int]  # namespace, name, cpu millicores, memory bytes


def nm_status(pods: list[PodUsage], *, system_cpu: int = 500, system_mem: int = 2 * GiB) -> dict[str, Any]:
    cpu = system_cpu + sum(p[2] for p in pods)
    mem = system_mem + sum(p[3] for p in pods)
    built = MakeNodeMetric("_").updated(time.time()).node_usage(f"{cpu}m", str(mem))
    built.system(f"{system_cpu}m", str(system_mem)).pods([])
    for ns, name, c, m in pods:
        built.pod(ns, name, f"{c}m", str(m))
    return built.status()


def write_nodemetric(cluster: ControlPlane, node: str, status: dict[str, Any]) -> None:
    cluster.apply(MakeNodeMetric(node).report_interval(60).obj())
    # A merge patch replaces podsMetric as a whole, as a new report from the agent would.
    cluster.kubectl(
        "patch", "nodemetrics.slo.koordinator.sh", node, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip


def replicaset(cluster: ControlPlane, namespace: str, name: str, replicas: int) -> str:
    """A ReplicaSet object (inert: no controller-manager); returns its uid."""
    cluster.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "c", "image": "fake"}]},
                },
            },
        }
    )
    return cluster.kubectl("get", "rs", name, "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout.strip()


def owned_pod(
    namespace: str,
    name: str,
    rs: tuple[str, str],
    *,
    node: str | None,
    cpu: str = "100m",
    memory: str = "256Mi",
    labels: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
    scheduler: str = "loadline-scheduler",
) -> dict[str, Any]:
    """A pod of the ReplicaSet `rs` (name, uid), labelled `app=<name>`."""
    rs_name, rs_uid = rs
    return objects.for_api_server(objects.pod(
        name, cpu, memory, namespace=namespace, image="fake", node_name=node, node_selector=node_selector,
        scheduler_name=scheduler, labels={"app": rs_name, **(labels or {})}, owner=("ReplicaSet", rs_name, rs_uid),
    ))  # fmt: skip


def pod_names(cluster: ControlPlane, namespace: str, node: str | None = None) -> set[str]:
    args = ["get", "pods", "-n", namespace, "-o", "json"]
    if node:
        args.append(f"--field-selector=spec.nodeName={node}")
    items = json.loads(cluster.kubectl(*args).stdout)["items"]
    return {p["metadata"]["name"] for p in items if not p["metadata"].get("deletionTimestamp")}


def wait_pods_ready(cluster: ControlPlane, namespace: str, names: list[str], timeout: int = 120) -> None:
    cluster.kubectl(
        "wait", "--for=condition=Ready", "pod", *names, "-n", namespace, f"--timeout={timeout}s", timeout=timeout + 10
    )


def descheduled_events(cluster: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    items = json.loads(cluster.kubectl("get", "events.v1.events.k8s.io", "-n", namespace, "-o", "json").stdout)["items"]
    return [e for e in items if e.get("reason") == "Descheduled"]


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# ----------------------------------------------------------------------------- the daemon
@dataclass
class Daemon:
    component: Component
    port: int
    history: list[dict[str, float]] = field(default_factory=list)  # one scrape per finished round

    def scrape(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as response:
            text = response.read().decode()
        samples = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return samples

    def value(self, name: str, samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] | None = None,
              **labels: str) -> float:  # fmt: skip
        """Sum of the samples of `name` whose labels include `labels` (0 when there are none)."""
        samples = self.scrape() if samples is None else samples
        wanted = set(labels.items())
        return sum(v for (n, lbls), v in samples.items() if n == name and wanted <= set(lbls))

    def rounds(self) -> float:
        return self.value("loadline_descheduler_rounds_total")

    def log(self) -> str:
        return self.component.log_path.read_text(errors="replace")

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def wait_rounds(self, count: int, timeout: float = 60.0) -> None:
        target = self.rounds() + count
        wait_for(f"{count} more rounds", lambda: self.alive_rounds() >= target, timeout)

    def alive_rounds(self) -> float:
        assert self.component.alive(), f"descheduler exited:\n{self.component.log_tail()}"
        return self.rounds()

    def track(self) -> None:
        """Record one entry per finished round (call often; rounds are seconds apart)."""
        samples = self.scrape()
        rounds = self.value("loadline_descheduler_rounds_total", samples)
        if not self.history or self.history[-1]["rounds"] != rounds:
            self.history.append(
                {
                    "rounds": rounds,
                    "high": self.value("loadline_descheduler_nodes", samples, **{"class": "high", "pool": POOL}),
                    "evicted": self.value("loadline_descheduler_evictions_total", samples, result="evicted"),
                }
            )


@pytest.fixture
def daemons(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., Daemon]]:
    """Factory: start `loadline descheduler` against a control plane with the given LowNodeLoadArgs;
    stopped after the test (its log is shown when the test failed)."""
    started: list[Daemon] = []

    def start(plane: ControlPlane, args: dict[str, Any], *, lease_namespace: str, name: str = "descheduler",
              wait_leader: bool = True) -> Daemon:  # fmt: skip
        config = tmp_path / f"{name}.yaml"
        config.write_text(yaml.safe_dump(args))
        port = free_port()
        component = Component(
            name,
            [
                sys.executable, "-m", "common", "descheduler",
                "--config", str(config),
                "--kubeconfig", str(plane.kubeconfig),
                "--bind-address", "127.0.0.1", "--port", str(port),
                "--lease-namespace", lease_namespace,
                "--lease-duration", "6",
                "--renew-deadline", "4",
                "--retry-period", "1",
                "--log-level", "debug" if request.config.getoption("verbose") > 1 else "info",
            ],
            tmp_path / f"{name}.log",
        )  # fmt: skip
        component.start()
        daemon = Daemon(component, port)
        started.append(daemon)
        wait_for(f"{name} /readyz", lambda: component.alive() and daemon.ready(), 90)
        if wait_leader:
            wait_for(f"{name} leading and a first round", lambda: daemon.alive_rounds() >= 1, 60)
        return daemon

    yield start
    for daemon in started:
        daemon.component.stop()
        if failed(request):
            print(f"\n----- {daemon.component.name} ({daemon.component.log_path}) -----\n{daemon.component.log_tail(150)}")


@pytest.fixture
def descheduler(
    cluster: ControlPlane, namespace: str, daemons: Callable[..., Daemon]
) -> Callable[..., Daemon]:
    """Factory: the daemon on the session control plane, its Lease in the test's namespace."""

    def start(args: dict[str, Any], **kw: Any) -> Daemon:
        return daemons(cluster, args, lease_namespace=namespace, **kw)

    return start


def base_args(suite: str, **overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "LowNodeLoadArgs",
        "deschedulingInterval": "1s",
        "nodeSelector": {"matchLabels": {LABEL: suite}},
        "lowThresholds": {"cpu": 45, "memory": 55},
        "highThresholds": {"cpu": 75, "memory": 80},
        "anomalyCondition": {"consecutiveAbnormalities": 1},
        "evictQPS": 20,
        "evictBurst": 5,
    }
    args.update(overrides)
    return args


@dataclass
class Scenario:
    suite: str
    namespace: str
    hot: str
    idle: list[str]


def make_nodes(kwok_nodes: Callable[..., list[str]], idle: int = 2) -> tuple[str, str, list[str]]:
    suite = uuid.uuid4().hex[:8]
    names = kwok_nodes(1 + idle, prefix=f"ds{suite}", cpu="10", memory="40Gi", labels={LABEL: suite})
    return suite, names[0], names[1:]


# ----------------------------------------------------------------------------- the hot node drain
# Node "hot": 10 cores; system 500m + pods 8100m = 8600m = 86 % (high threshold 75 % = 7500m, excess 1100m).
#   web-a 300m  (koord-batch: sorts before every unclassified pod)
#   web-b 2000m  fit 2000/1100 = 1.82 -> 1 + 1/1.82 = 1.55
#   web-c 1000m  fit 1000/1100 = 0.91
#   web-d 1500m  fit 1500/1100 = 1.36 -> 1.73   (best fit of the unclassified pods)
#   web-e 1600m, web-f 1600m  fit 1.45 -> 1.69
#   kube-system/ks-<suite> 100m, koord-free: would sort first, but kube-system is never evictable.
# Order a, d, e/f, b, c. Evict a: 8600 - 300 = 8300 > 7500, go on; evict d: 6800 <= 7500, stop.
# Idle nodes: 500m = 5 % cpu, or 4100m = 41 % with a "steady" pod of 3600m (still low: <= 45 %).
# Every pod requests what it uses and carries the suite's nodeSelector (so does its replacement).
WEB_USAGE = {"web-a": 300, "web-b": 2000, "web-c": 1000, "web-d": 1500, "web-e": 1600, "web-f": 1600}


def setup_hot_node(
    cluster: ControlPlane, namespace: str, kwok_nodes: Callable[..., list[str]], *, idle_steady_cpu: int = 0
) -> Scenario:
    suite, hot, idle = make_nodes(kwok_nodes)
    here = {LABEL: suite}
    rs = ("web", replicaset(cluster, namespace, "web", replicas=len(WEB_USAGE)))
    pods = [
        owned_pod(namespace, name, rs, node=hot, cpu=f"{usage}m", memory="1Gi", node_selector=here,
                  labels={"koordinator.sh/priority-class": "koord-batch"} if name == "web-a" else None)
        for name, usage in WEB_USAGE.items()
    ]  # fmt: skip
    steady_rs = ("steady", replicaset(cluster, namespace, "steady", replicas=len(idle)))
    steady = [f"steady-{i}" for i in range(len(idle))] if idle_steady_cpu else []
    pods += [
        owned_pod(namespace, name, steady_rs, node=node, cpu=f"{idle_steady_cpu}m", memory="1Gi", node_selector=here)
        for name, node in zip(steady, idle, strict=False)
    ]
    ks_rs = (f"ks-{suite}", replicaset(cluster, "kube-system", f"ks-{suite}", replicas=3))
    pods.append(
        owned_pod("kube-system", f"ks-{suite}", ks_rs, node=hot, labels={"koordinator.sh/priority-class": "koord-free"})
    )
    cluster.apply(pods)
    wait_pods_ready(cluster, namespace, [*WEB_USAGE, *steady])
    wait_pods_ready(cluster, "kube-system", [f"ks-{suite}"])
    usages: list[PodUsage] = [(namespace, name, cpu, GiB) for name, cpu in WEB_USAGE.items()]
    usages.append(("kube-system", f"ks-{suite}", 100, GiB // 4))
    write_nodemetric(cluster, hot, nm_status(usages))
    for i, node in enumerate(idle):
        write_nodemetric(cluster, node, nm_status([(namespace, s, idle_steady_cpu, GiB) for s in steady[i : i + 1]]))
    return Scenario(suite, namespace, hot, idle)


def cleanup(cluster: ControlPlane, scenario: Scenario) -> None:
    cluster.kubectl("delete", "pod", f"ks-{scenario.suite}", "-n", "kube-system", "--wait=false", check=False)
    cluster.kubectl("delete", "rs", f"ks-{scenario.suite}", "-n", "kube-system", "--wait=false", check=False)
    cluster.kubectl("delete", "nodemetrics.slo.koordinator.sh", scenario.hot, *scenario.idle, check=False)


def drain(cluster: ControlPlane, scenario: Scenario, daemon: Daemon) -> None:
    wait_for("web-a and web-d evicted", lambda: daemon.alive_rounds() >= 0
             and pod_names(cluster, scenario.namespace, scenario.hot) == {"web-b", "web-c", "web-e", "web-f"}, 60)  # fmt: skip


def test_hot_node_is_drained_in_order_until_under_its_threshold_and_not_one_more(
    cluster: ControlPlane, namespace: str, kwok_nodes: Callable[..., list[str]], descheduler: Callable[..., Daemon]
) -> None:
    scenario = setup_hot_node(cluster, namespace, kwok_nodes)
    try:
        daemon = descheduler(base_args(scenario.suite))
        drain(cluster, scenario, daemon)
        # Not one more: the node is at 68 % by the pods that are left; later rounds leave it alone.
        daemon.wait_rounds(5)
        assert pod_names(cluster, namespace, scenario.hot) == {"web-b", "web-c", "web-e", "web-f"}
        assert f"ks-{scenario.suite}" in pod_names(cluster, "kube-system", scenario.hot)  # never touched
        assert daemon.value("loadline_descheduler_evictions_total", result="evicted") == 2

        evicted = [line for line in daemon.log().splitlines() if "evicted pod" in line]
        assert [line.split(" pod=")[1].split()[0] for line in evicted] == [f"{namespace}/web-a", f"{namespace}/web-d"]
        events = {e["regarding"]["name"]: e for e in descheduled_events(cluster, namespace)}
        assert set(events) == {"web-a", "web-d"}
        assert events["web-a"]["note"] == (
            f'Pod evicted from node "{scenario.hot}" by the reason '
            '"node is overutilized, node cpu usage(86.00%)>threshold(75.00%)"'
        )
        assert events["web-d"]["note"] == (
            f'Pod evicted from node "{scenario.hot}" by the reason '
            '"node is overutilized, node cpu usage(83.00%)>threshold(75.00%)"'
        )
        assert events["web-a"]["type"] == "Normal" and events["web-a"]["action"] == "Migrating"
        assert events["web-a"]["reportingController"] == "loadline-descheduler"
        skipped = daemon.value("loadline_descheduler_pods_skipped_total", reason="namespace not evictable")
        assert skipped >= 1  # the kube-system pod was considered and refused every round
        assert daemon.value("loadline_descheduler_nodes", **{"class": "high", "pool": POOL}) == 0
        assert daemon.value("loadline_descheduler_nodes", **{"class": "low", "pool": POOL}) == 2
    finally:
        cleanup(cluster, scenario)


# ----------------------------------------------------------------------------- PodDisruptionBudget
def test_pdb_refusal_is_a_normal_not_now_and_other_pods_relieve_the_node(
    cluster: ControlPlane, namespace: str, kwok_nodes: Callable[..., list[str]], descheduler: Callable[..., Daemon]
) -> None:
    """db-0..2 (koord-batch, 1000m each) sort first but a PDB with maxUnavailable 0 covers them;
    web-0..2 take 1500m each. 500 + 3000 + 4500 = 8000m = 80 % (excess 500m): one pod is enough.
    Each round plans one db pod, the API server answers 429 (said once per pod, counted), the pod is
    left out of planning for a while (5 rounds); after the three db pods, a web pod is evicted and
    the node is at 65 %: the budget held, and the node was relieved all the same."""
    suite, hot, idle = make_nodes(kwok_nodes, idle=1)
    db = ("db", replicaset(cluster, namespace, "db", replicas=3))
    web = ("web", replicaset(cluster, namespace, "web", replicas=3))
    batch = {"koordinator.sh/priority-class": "koord-batch"}
    pods = [owned_pod(namespace, f"db-{i}", db, node=hot, labels=batch) for i in range(3)]
    pods += [owned_pod(namespace, f"web-{i}", web, node=hot) for i in range(3)]
    cluster.apply(pods)
    cluster.apply(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "db", "namespace": namespace},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "db"}}},
        }
    )
    # What the disruption controller would write (there is no controller-manager).
    cluster.kubectl(
        "patch", "pdb", "db", "-n", namespace, "--subresource=status", "--type=merge", "-p",
        json.dumps({"status": {"observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 3,
                               "desiredHealthy": 3, "expectedPods": 3}}),
    )  # fmt: skip
    wait_pods_ready(cluster, namespace, [p["metadata"]["name"] for p in pods])
    usage = [(namespace, f"db-{i}", 1000, GiB) for i in range(3)] + [(namespace, f"web-{i}", 1500, GiB) for i in range(3)]
    write_nodemetric(cluster, hot, nm_status(usage))
    write_nodemetric(cluster, idle[0], nm_status([]))
    try:
        daemon = descheduler(base_args(suite))
        wait_for("one web pod evicted", lambda: daemon.alive_rounds() >= 0
                 and len(pod_names(cluster, namespace, hot) & {"web-0", "web-1", "web-2"}) == 2, 60)  # fmt: skip
        daemon.wait_rounds(4)
        remaining = pod_names(cluster, namespace, hot)
        assert {"db-0", "db-1", "db-2"} <= remaining  # the budget held
        assert len(remaining) == 5
        samples = daemon.scrape()
        refused = daemon.value("loadline_descheduler_evictions_total", samples, result="refused", reason="disruption budget")
        assert refused >= 3  # each db pod at least once (the backoff itself is unit-tested with a fake clock)
        assert daemon.value("loadline_descheduler_evictions_total", samples, result="evicted") == 1
        assert daemon.value("loadline_descheduler_rounds_total", samples, result="error") == 0
        refusals = [line for line in daemon.log().splitlines() if "eviction refused" in line]
        assert all("disruption budget" in line for line in refusals), refusals
        assert {line.split(" pod=")[1].split()[0] for line in refusals} == {f"{namespace}/db-{i}" for i in range(3)}
        assert {e["regarding"]["name"] for e in descheduled_events(cluster, namespace)} <= {"web-0", "web-1", "web-2"}
    finally:
        cluster.kubectl("delete", "nodemetrics.slo.koordinator.sh", hot, *idle, check=False)


# ----------------------------------------------------------------------------- dryRun and leader election
def test_dry_run_evicts_nothing_and_only_the_leader_runs_rounds(
    cluster: ControlPlane,
    namespace: str,
    kwok_nodes: Callable[..., list[str]],
    descheduler: Callable[..., Daemon],
    tmp_path: Path,
) -> None:
    suite, hot, idle = make_nodes(kwok_nodes, idle=1)
    web = ("web", replicaset(cluster, namespace, "web", replicas=4))
    names = [f"web-{i}" for i in range(4)]
    cluster.apply([owned_pod(namespace, n, web, node=hot) for n in names])
    wait_pods_ready(cluster, namespace, names)
    write_nodemetric(cluster, hot, nm_status([(namespace, n, 2200, GiB) for n in names]))  # 93 %
    write_nodemetric(cluster, idle[0], nm_status([]))
    try:
        first = descheduler(base_args(suite, dryRun=True), name="first")
        second = descheduler(base_args(suite, dryRun=True), name="second", wait_leader=False)
        first.wait_rounds(4)
        assert first.value("loadline_leader", lease="loadline-descheduler") == 1
        assert second.value("loadline_leader", lease="loadline-descheduler") == 0
        assert second.rounds() == 0  # the standby keeps its caches warm but plans nothing
        assert second.ready()
        assert pod_names(cluster, namespace, hot) == set(names)
        assert first.value("loadline_descheduler_evictions_total", result="dry_run") >= 2
        assert first.value("loadline_descheduler_evictions_total", result="evicted") == 0
        assert "dry run: would evict pod" in first.log()
        assert descheduled_events(cluster, namespace) == []

        # --once: one round as soon as the caches are synced, no election, then exit 0.
        config = tmp_path / "once.yaml"
        config.write_text(yaml.safe_dump(base_args(suite, dryRun=True)))
        once = subprocess.run(
            [sys.executable, "-m", "common", "descheduler", "--config", str(config), "--kubeconfig",
             str(cluster.kubeconfig), "--once", "--bind-address", "127.0.0.1", "--port", "0"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert once.returncode == 0, once.stderr
        assert "dry run: would evict pod" in once.stderr and f"node={hot}" in once.stderr
        assert pod_names(cluster, namespace, hot) == set(names)
    finally:
        cluster.kubectl("delete", "nodemetrics.slo.koordinator.sh", hot, *idle, check=False)


# ----------------------------------------------------------------------------- anomaly detection
def patch_nodemetric(cluster: ControlPlane, node: str, status: dict[str, Any]) -> None:
    """One kubectl call (the object exists): timing-sensitive tests change a report within a round."""
    cluster.kubectl(
        "patch", "nodemetrics.slo.koordinator.sh", node, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip


def test_node_hot_for_only_two_rounds_is_left_alone(
    cluster: ControlPlane, namespace: str, kwok_nodes: Callable[..., list[str]], descheduler: Callable[..., Daemon]
) -> None:
    """consecutiveAbnormalities 4: a node becomes evictable in its 5th consecutive hot round (two
    rounds of margin for the test's own reaction time on a busy machine).
    Hot for two rounds, then normal: nothing happens. Hot again: the eviction comes in the 5th
    consecutive hot round, not earlier."""
    suite, hot, idle = make_nodes(kwok_nodes, idle=1)
    web = ("web", replicaset(cluster, namespace, "web", replicas=4))
    names = [f"web-{i}" for i in range(4)]
    cluster.apply([owned_pod(namespace, n, web, node=hot) for n in names])
    wait_pods_ready(cluster, namespace, names)
    hot_status = lambda: nm_status([(namespace, n, 2000, GiB) for n in names])  # noqa: E731  85 %
    normal_status = lambda: nm_status([(namespace, n, 1200, GiB) for n in names])  # noqa: E731  53 %
    write_nodemetric(cluster, hot, normal_status())
    write_nodemetric(cluster, idle[0], nm_status([]))
    try:
        daemon = descheduler(base_args(suite, deschedulingInterval="2s",
                                       anomalyCondition={"consecutiveAbnormalities": 4}))  # fmt: skip

        def until(what: str, check: Callable[[list[dict[str, float]]], bool], timeout: float = 60) -> None:
            def poll() -> bool:
                assert daemon.component.alive(), daemon.component.log_tail()
                daemon.track()
                return check(daemon.history)

            wait_for(what, poll, timeout, interval=0.05)

        until("a normal round", lambda h: len(h) >= 1 and h[-1]["high"] == 0)
        patch_nodemetric(cluster, hot, hot_status())
        until("two hot rounds", lambda h: len(h) >= 2 and h[-1]["high"] == 1 and h[-2]["high"] == 1)
        patch_nodemetric(cluster, hot, normal_status())
        until("three normal rounds", lambda h: len(h) >= 3 and all(r["high"] == 0 for r in h[-3:]))
        assert all(r["evicted"] == 0 for r in daemon.history)
        assert pod_names(cluster, namespace, hot) == set(names)

        start = len(daemon.history) - 1  # a normal round
        patch_nodemetric(cluster, hot, hot_status())
        until("an eviction", lambda h: h[-1]["evicted"] >= 1, timeout=90)
        rounds = daemon.history[start:]
        evicting = next(i for i, r in enumerate(rounds) if r["evicted"] >= 1)
        last_normal = max(i for i, r in enumerate(rounds[:evicting]) if r["high"] == 0)
        # Round numbers, not history entries: a scrape may miss a round on a busy machine (the
        # report stayed hot all along, so a missed round was a hot one).
        streak = rounds[evicting]["rounds"] - rounds[last_normal]["rounds"]
        assert streak >= 5, rounds  # the evicting round was at least the 5th consecutive hot one
        assert rounds[evicting]["evicted"] == 1
        assert len(pod_names(cluster, namespace, hot)) == 3
    finally:
        cluster.kubectl("delete", "nodemetrics.slo.koordinator.sh", hot, *idle, check=False)


# ----------------------------------------------------------------------------- malformed NodeMetrics
def test_malformed_node_metric_skips_the_node_and_the_round_goes_on(
    cluster: ControlPlane, namespace: str, kwok_nodes: Callable[..., list[str]], descheduler: Callable[..., Daemon]
) -> None:
    """bad: its NodeMetric reports a negative pod usage (the CRD's quantity pattern allows the sign);
    silent: no NodeMetric at all; hot: 85 %, drained in the same rounds."""
    suite, hot, rest = make_nodes(kwok_nodes, idle=3)
    bad, silent, idle = rest
    web = ("web", replicaset(cluster, namespace, "web", replicas=8))
    on_hot = [f"hot-{i}" for i in range(4)]
    on_bad = [f"bad-{i}" for i in range(4)]
    cluster.apply([owned_pod(namespace, n, web, node=hot) for n in on_hot]
                  + [owned_pod(namespace, n, web, node=bad) for n in on_bad])  # fmt: skip
    wait_pods_ready(cluster, namespace, on_hot + on_bad)
    write_nodemetric(cluster, hot, nm_status([(namespace, n, 2000, GiB) for n in on_hot]))
    broken = nm_status([(namespace, n, 2200, GiB) for n in on_bad])
    broken["podsMetric"][1]["podUsage"]["resources"]["cpu"] = "-100m"
    write_nodemetric(cluster, bad, broken)
    write_nodemetric(cluster, idle, nm_status([]))
    try:
        daemon = descheduler(base_args(suite))
        wait_for("a pod evicted from the hot node", lambda: daemon.alive_rounds() >= 0
                 and len(pod_names(cluster, namespace, hot)) == 3, 60)  # fmt: skip
        daemon.wait_rounds(3)
        assert pod_names(cluster, namespace, bad) == set(on_bad)
        samples = daemon.scrape()
        assert daemon.value("loadline_descheduler_nodes_skipped", samples, reason="malformed") == 1
        assert daemon.value("loadline_descheduler_nodes_skipped", samples, reason="missing") == 1
        assert daemon.value("loadline_descheduler_node_skips_total", samples, reason="malformed") >= 4
        assert daemon.value("loadline_descheduler_rounds_total", samples, result="error") == 0
        # Counted as every component counts unreadable objects: once per object version.
        assert daemon.value("loadline_malformed_objects_total", samples, kind="NodeMetric") == 1
        assert daemon.value("loadline_malformed_objects_total", samples, reason="negative_quantity") == 1
        skipped = [line for line in daemon.log().splitlines() if "node skipped" in line]
        assert len(skipped) == 2, skipped  # once per node and state, not once per round
        (bad_line,) = [line for line in skipped if f"node={bad}" in line]
        assert "status.podsMetric[1].podUsage.resources.cpu: '-100m' is not a valid usage quantity" in bad_line
        (silent_line,) = [line for line in skipped if f"node={silent}" in line]
        assert "NodeMetric not found" in silent_line
    finally:
        cluster.kubectl("delete", "nodemetrics.slo.koordinator.sh", hot, bad, idle, check=False)


# ----------------------------------------------------------------------------- the replacements
SCHEDULER_CONFIG = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [
        {
            "schedulerName": "loadline-scheduler",
            # LoadAware's threshold must not be above the descheduler's high threshold (75 %), or
            # the scheduler could fill a node the descheduler then drains again.
            "pluginConfig": [{"name": "LoadAwareScheduling", "args": {"usageThresholds": {"cpu": 55, "memory": 95}}}],
        }
    ],
}


@dataclass
class Scheduler:
    component: Component
    port: int

    def explain(self, namespace: str, name: str) -> dict[str, Any]:
        url = f"http://127.0.0.1:{self.port}/explain/{namespace}/{name}"
        with urllib.request.urlopen(url, timeout=5) as response:
            doc: dict[str, Any] = json.loads(response.read())
        return doc

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False


@pytest.fixture
def loadline_scheduler(
    cluster: ControlPlane, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[[dict[str, Any]], Scheduler]]:
    """Factory: the `loadline scheduler` process with a KubeSchedulerConfiguration; stopped after the test."""
    started: list[Component] = []

    def start(config: dict[str, Any]) -> Scheduler:
        path = tmp_path / "scheduler.yaml"
        path.write_text(yaml.safe_dump(config))
        port = free_port()
        component = Component(
            "loadline-scheduler",
            [
                sys.executable, "-m", "common", "scheduler", "--config", str(path),
                "--kubeconfig", str(cluster.kubeconfig), "--bind-address", "127.0.0.1", "--port", str(port),
                "--no-leader-elect",
            ],
            tmp_path / "scheduler.log",
        )  # fmt: skip
        component.start()
        started.append(component)
        scheduler = Scheduler(component, port)
        wait_for("loadline scheduler /readyz", lambda: component.alive() and scheduler.ready(), 90)
        return scheduler

    yield start
    for component in started:
        component.stop()
        if failed(request):
            print(f"\n----- {component.name} ({component.log_path}) -----\n{component.log_tail(150)}")


def bound_node(cluster: ControlPlane, namespace: str, name: str) -> str:
    return cluster.kubectl("get", "pod", name, "-n", namespace, "-o", "jsonpath={.spec.nodeName}").stdout.strip()


def test_replacements_are_placed_by_the_loadline_scheduler_on_the_idle_nodes(
    cluster: ControlPlane,
    namespace: str,
    kwok_nodes: Callable[..., list[str]],
    descheduler: Callable[..., Daemon],
    loadline_scheduler: Callable[[dict[str, Any]], Scheduler],
) -> None:
    """After the drain the test recreates web-a and web-d as their ReplicaSet would (same template:
    requests 300m and 1500m, the suite's nodeSelector) and the Loadline scheduler places them.

    LoadAware (threshold 55 %, estimate = request × 85 %): the hot node's NodeMetric still says 86 %
    (it was not re-reported since the eviction), so it is rejected for both. The idle nodes report
    41 %. web-a2 (255m estimated) fits either; the tie is broken at random. web-d2 (1275m): the node web-a2
    took still reports 41 %, but the assign cache counts web-a2, placed since that report:
    41 % + 2.55 % + 12.75 % = 56.3 % → 56 > 55, rejected; the other: 41 % + 12.75 % → 54, accepted."""
    scenario = setup_hot_node(cluster, namespace, kwok_nodes, idle_steady_cpu=3600)
    try:
        daemon = descheduler(base_args(scenario.suite))
        drain(cluster, scenario, daemon)
        scheduler = loadline_scheduler(SCHEDULER_CONFIG)
        here = {LABEL: scenario.suite}
        rs_uid = cluster.kubectl("get", "rs", "web", "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout.strip()
        placed: dict[str, str] = {}
        explained: dict[str, dict[str, dict[str, Any]]] = {}
        ours = {scenario.hot, *scenario.idle}
        for name, cpu in (("web-a2", "300m"), ("web-d2", "1500m")):
            cluster.apply(owned_pod(namespace, name, ("web", rs_uid), node=None, cpu=cpu, memory="1Gi", node_selector=here))
            wait_for(f"{name} bound", lambda n=name: bound_node(cluster, namespace, n) != "", 60)  # type: ignore[misc]
            placed[name] = bound_node(cluster, namespace, name)
            doc = scheduler.explain(namespace, name)
            explained[name] = {entry["node"]: entry for entry in doc["nodes"] if entry["node"] in ours}
        # web-a2's two idle nodes tie and the scheduler picks one at random (kube-scheduler's selectHost):
        # web-d2 must then go to the other one
        assert placed["web-a2"] in scenario.idle, (placed, explained)
        first, other = (scenario.idle[0], scenario.idle[1])
        if placed["web-a2"] == other:
            first, other = other, first
        assert placed == {"web-a2": first, "web-d2": other}, (placed, explained)
        for name in placed:
            hot = explained[name][scenario.hot]
            assert hot["rejectedBy"] == "LoadAwareScheduling", explained[name]
            assert hot["reasons"] == ["node(s) cpu usage exceed threshold"]
        first_idle = explained["web-d2"][first]  # only the assign cache makes it too full
        assert first_idle["rejectedBy"] == "LoadAwareScheduling", explained["web-d2"]
        assert explained["web-d2"][other]["chosen"] is True
        wait_pods_ready(cluster, namespace, ["web-a2", "web-d2"])
        # The descheduler leaves the new layout alone: no node is hot (the idle nodes' NodeMetrics
        # have not seen the replacements yet, and the hot one no longer counts the evicted pods).
        daemon.wait_rounds(3)
        assert daemon.value("loadline_descheduler_evictions_total", result="evicted") == 2
    finally:
        cleanup(cluster, scenario)


# ----------------------------------------------------------------------------- the API server goes away
def test_api_server_outage_pauses_the_descheduler_and_it_carries_on_afterwards(
    fresh_control_plane: ControlPlane, daemons: Callable[..., Daemon]
) -> None:
    """No kwok here (it belongs to the session's control plane): plain Node objects, pods marked Running
    and Ready through the status subresource as a kubelet would."""
    plane = fresh_control_plane
    suite = uuid.uuid4().hex[:8]
    plane.kubectl("create", "namespace", "work")
    plane.apply([
        objects.node(name, cpu="10", memory="40Gi", labels={LABEL: suite})
        for name in ("hot", "idle")
    ])  # fmt: skip
    rs = ("web", replicaset(plane, "work", "web", replicas=20))
    names = [f"web-{i}" for i in range(4)]
    plane.apply([owned_pod("work", n, rs, node="hot") for n in names])
    for n in names:
        plane.kubectl("patch", "pod", n, "-n", "work", "--subresource=status", "--type=merge", "-p", json.dumps(
            {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}))  # fmt: skip
    write_nodemetric(plane, "hot", nm_status([("work", n, 1200, GiB) for n in names]))  # 53 %
    write_nodemetric(plane, "idle", nm_status([]))
    daemon = daemons(plane, base_args(suite), lease_namespace="work")

    plane.stop_apiserver()
    time.sleep(8)  # past the Lease's renew deadline (4 s): the daemon stops leading, keeps its caches
    assert daemon.component.alive()
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.port}/healthz", timeout=5) as response:
        assert response.status == 200
    assert daemon.ready()
    assert daemon.value("loadline_leader", lease="loadline-descheduler") == 0
    plane.start_apiserver()

    write_nodemetric(plane, "hot", nm_status([("work", n, 2000, GiB) for n in names]))  # 85 %
    wait_for("an eviction after the outage", lambda: daemon.alive_rounds() >= 0
             and daemon.value("loadline_descheduler_evictions_total", result="evicted") >= 1, 90)  # fmt: skip
    assert daemon.value("loadline_leader", lease="loadline-descheduler") == 1
    assert daemon.value("loadline_descheduler_rounds_total", result="error") == 0
    assert "Traceback" not in daemon.log()
