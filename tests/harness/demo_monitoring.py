"""`make demo`'s Prometheus: every Loadline component scraped, the chart's rules loaded, listening on loopback only.

Debian's prometheus (tests/harness/promtool.py) is built without Kubernetes service discovery, so the targets are
found the way the chart's ServiceMonitors (deploy/helm/loadline/templates/monitoring.yaml) find them: the endpoints
of the Services loadline-agent, -manager, -scheduler, -descheduler and -extender, read from their EndpointSlices
every few seconds and written as file_sd targets; the job is the Service's name (what the rules expect) and the
agent's endpoints carry their node as the `node` label. The simulated agent that writes the kwok nodes'
NodeMetrics is a host process on loopback, a fixed target of the loadline-agent job.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from tests.harness.controlplane import REPO_ROOT, ControlPlane
from tests.harness.prometheus import PrometheusServer

RULES = REPO_ROOT / "deploy" / "prometheus" / "loadline-rules.yaml"
JOBS = tuple(f"loadline-{component}" for component in ("agent", "manager", "scheduler", "descheduler", "extender"))
AGENT_JOB = "loadline-agent"
PREFERRED_PORT = 9090  # Prometheus' usual port, when it is free on loopback


@dataclass(frozen=True)
class Query:
    what: str
    expr: str


# What `make demo` prints to paste into Prometheus; tests/integration/test_demo_story.py asserts each returns data.
QUERIES = (
    Query("CPU p95 of each node over 5 min, share of its capacity", "node:loadline_node_cpu_usage:ratio_p95_5m"),
    Query("batch-cpu the manager computed for each node, cores",
          'max by (node) (loadline_manager_node_batch_allocatable{resource="cpu"})'),
    Query("scheduling latency, pod created to bound, p99 seconds",
          'profile_quantile:loadline_scheduler_pod_scheduling_duration_seconds:histogram_quantile{quantile="0.99"}'),
    Query("the descheduler's evictions by result and reason",
          "sum by (result, reason) (loadline_descheduler_evictions_total)"),
)  # fmt: skip


def scrape_targets(slices: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """file_sd target groups per job from the EndpointSlices of the chart's Services: every endpoint not known to be
    unready, at the slice's port named `metrics`; one group per endpoint so the agent's carry their own node."""
    groups: dict[str, list[dict[str, Any]]] = {job: [] for job in JOBS}
    for eps in slices:
        job = (eps.get("metadata", {}).get("labels") or {}).get("kubernetes.io/service-name", "")
        port = next((p.get("port") for p in eps.get("ports") or [] if p.get("name") == "metrics"), None)
        if job not in groups or not port:
            continue
        for endpoint in eps.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") is False:
                continue
            labels = {"node": endpoint["nodeName"]} if job == AGENT_JOB and endpoint.get("nodeName") else {}
            addresses = [f"[{a}]:{port}" if ":" in a else f"{a}:{port}" for a in endpoint.get("addresses") or []]
            if addresses:
                groups[job].append({"targets": sorted(addresses), "labels": labels})
    for found in groups.values():
        found.sort(key=lambda g: g["targets"])
    return groups


def graph_url(base: str, queries: Sequence[Query] = QUERIES, window: str = "30m") -> str:
    """Prometheus' graph page with one panel per query: the demo's dashboard without Grafana."""
    params: dict[str, str] = {}
    for i, query in enumerate(queries):
        params.update({f"g{i}.expr": query.expr, f"g{i}.tab": "0", f"g{i}.range_input": window})
    return f"{base}/graph?{urllib.parse.urlencode(params)}"


def loopback_port(preferred: int = PREFERRED_PORT) -> int:
    """`preferred` if nothing listens there on loopback, else 0 (a free port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", preferred))
        except OSError:
            return 0
    return preferred


class DemoPrometheus:
    """`with DemoPrometheus(plane, namespace, static_agents=[port]) as prom:` Prometheus on loopback, its targets
    kept up to date from the cluster every `refresh_seconds` until the block ends."""

    def __init__(self, plane: ControlPlane, namespace: str, *, static_agents: Sequence[int] = (),
                 interval: str = "5s", port: int = 0, refresh_seconds: float = 5.0) -> None:  # fmt: skip
        self.plane = plane
        self.namespace = namespace
        self.refresh_seconds = refresh_seconds
        self.server = PrometheusServer(
            {AGENT_JOB: list(static_agents)},
            rule_files=[RULES],
            interval=interval,
            file_sd_jobs=JOBS,
            job_options={AGENT_JOB: {"honor_labels": True}},  # the agents' own `node` labels win (as honorLabels)
            port=port,
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return self.server.url

    def refresh(self) -> dict[str, list[dict[str, Any]]]:
        """Read the Services' EndpointSlices and write the targets now; returns them."""
        selector = f"kubernetes.io/service-name in ({','.join(JOBS)})"
        out = self.plane.kubectl("get", "endpointslices", "-n", self.namespace, "-l", selector, "-o", "json").stdout
        targets = scrape_targets(json.loads(out)["items"])
        for job, groups in targets.items():
            self.server.set_targets(job, groups)
        return targets

    def _keep_refreshing(self) -> None:
        while not self._stop.wait(self.refresh_seconds):
            try:
                self.refresh()
            except Exception as exc:  # the API server restarting, kubectl timing out: the next round tries again
                print(f"[prometheus] targets not refreshed: {exc}", file=sys.stderr, flush=True)

    def __enter__(self) -> DemoPrometheus:
        self.server.__enter__()
        try:
            self.refresh()
        except Exception:
            self.server.__exit__(None, None, None)
            raise
        self._thread = threading.Thread(target=self._keep_refreshing, name="prometheus-targets", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.refresh_seconds + 30)
        self.server.__exit__(kind, exc, tb)

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self.server.query(expr)
