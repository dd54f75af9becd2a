"""koordlet v1.8.0 beside Loadline's agent on the real node: both measure the same machine and pods, neither writes
the other's object, and their NodeMetrics are compared (issue 30). Shared by
tests/integration/test_koordlet_realnode.py (short, asserted) and bench/agent_vs_koordlet.py (long: footprint ratios,
prodReclaimable over time).

- koordlet runs for a *view* of the real node (a second Node object, `tests.harness.koordinator.koordlet_view_node`)
  and writes the NodeMetric `<node>-koordlet`; the chart's agent keeps writing `<node>`.
- Numbers are only comparable over the same window ending at the same moment. koordlet clamps its window at >= 60 s
  and its report interval at >= 30 s (states_nodemetric.go); the chart's agent in the test session uses 15 s. So the
  comparison reads Loadline's view from a second agent process of the same code on the host (`LocalAgent`): it
  publishes nothing, uses koordlet's window, and serves the NodeMetric status it would write at the moment it is
  asked (`/nodemetric`), which is the moment koordlet's new report is seen (about 0.5 s after koordlet built it).

    with LocalAgent(cluster, aggregate_seconds=60, windows=(60,)) as ours, KoordletBeside(cluster) as theirs:
        pairs = paired_readings(ours, theirs, count=2, timeout=180, after=time.time() + 65)
        rows = compare(*pairs[-1])                          # one Row per compared number
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from common.api.quantity import Quantity
from tests.harness import koordinator
from tests.harness.controlplane import REPO_ROOT
from tests.harness.processes import Component, free_port, http_ok, wait_until
from tests.integration.realnode_cluster import RealCluster

MIB = 1 << 20


# ------------------------------------------------------------------------------------------------ readings
@dataclass
class Reading:
    """One NodeMetric status as numbers: CPU in cores, memory in bytes."""

    update_time: float
    node: tuple[float, float] | None
    system: tuple[float, float] | None
    pods: dict[str, tuple[float, float]]  # "namespace/name" -> usage
    windows: dict[tuple[str, str], tuple[float, float]]  # (duration, avg|p50|...) -> usage; cold windows left out
    prod_reclaimable: tuple[float, float] | None


def _pair(resources: dict[str, Any] | None) -> tuple[float, float] | None:
    if not resources or "cpu" not in resources or "memory" not in resources:
        return None
    cpu = Quantity.parse(resources["cpu"]).milli_value() / 1000
    return cpu, float(Quantity.parse(resources["memory"]).value())


def reading(obj: dict[str, Any]) -> Reading | None:
    """The numbers of a NodeMetric object; None before its first status."""
    status = obj.get("status") or {}
    if not status.get("updateTime"):
        return None
    info = status.get("nodeMetric") or {}
    windows: dict[tuple[str, str], tuple[float, float]] = {}
    for entry in info.get("aggregatedNodeUsages") or []:
        for agg, usage in (entry.get("usage") or {}).items():
            value = _pair((usage or {}).get("resources"))
            if value is not None:
                windows[(str(entry.get("duration")), agg)] = value
    pods = {}
    for pm in status.get("podsMetric") or []:
        value = _pair((pm.get("podUsage") or {}).get("resources"))
        if value is not None:
            pods[f"{pm.get('namespace')}/{pm.get('name')}"] = value
    reclaimable = ((status.get("prodReclaimableMetric") or {}).get("resource") or {}).get("resources")
    return Reading(
        update_time=datetime.fromisoformat(str(status["updateTime"]).replace("Z", "+00:00")).timestamp(),
        node=_pair((info.get("nodeUsage") or {}).get("resources")),
        system=_pair((info.get("systemUsage") or {}).get("resources")),
        pods=pods,
        windows=windows,
        prod_reclaimable=_pair(reclaimable) if reclaimable else None,
    )


# ------------------------------------------------------------------------------------------------ comparison
@dataclass(frozen=True)
class Row:
    what: str
    ours: float
    theirs: float
    tolerance: float  # relative
    floor: float  # absolute slack, in the unit of the values

    @property
    def diff(self) -> float:
        """(ours - theirs) / theirs; 0 when both are 0."""
        if self.theirs == 0:
            return 0.0 if self.ours == 0 else float("inf")
        return (self.ours - self.theirs) / self.theirs

    @property
    def ok(self) -> bool:
        return abs(self.ours - self.theirs) <= max(self.tolerance * max(abs(self.theirs), abs(self.ours)), self.floor)

    def line(self) -> str:
        unit = "cores" if "cpu" in self.what else "MiB"
        scale = 1.0 if unit == "cores" else 1 / MIB
        return (
            f"{self.what:<44} loadline {self.ours * scale:10.3f} koordlet {self.theirs * scale:10.3f} {unit:<5} "
            f"{100 * self.diff:+7.2f} %  {'ok' if self.ok else 'OUTSIDE'}"
        )


@dataclass(frozen=True)
class Tolerances:
    """±5 % (the issue's), with absolute floors for small values: a pod using 3 millicores is compared to the
    millicore, not to 5 % of itself (the two windows end up to a second or two apart)."""

    relative: float = 0.05
    cpu_floor: float = 0.010  # cores
    memory_floor: float = 4.0 * MIB
    percentiles: tuple[str, ...] = ("avg", "p50", "p90", "p95", "p99")
    # A percentile of the node's CPU over the window: the two agents sample the host each second at different
    # instants, so each percentile is taken over different samples of a signal that moves second to second. Their
    # means agree within 0.3 % while a p50 over 60 such samples was seen 6.2 % apart with the host busy (CI, twice in
    # three runs): sampling error, not a difference of measurement. Memory does not move like that and keeps ±5 %.
    window_cpu_relative: float = 0.10


def compare(
    ours: Reading, theirs: Reading, tol: Tolerances = Tolerances(), pods: Sequence[str] | None = None
) -> list[Row]:
    """Every number both readings have: nodeUsage, systemUsage, the pods' usage (those named, or all common ones),
    the aggregated windows' percentiles."""
    rows: list[Row] = []

    def add(what: str, a: tuple[float, float] | None, b: tuple[float, float] | None, cpu_relative: float) -> None:
        if a is None or b is None:
            return
        rows.append(Row(f"{what} cpu", a[0], b[0], cpu_relative, tol.cpu_floor))
        rows.append(Row(f"{what} memory", a[1], b[1], tol.relative, tol.memory_floor))

    add("nodeUsage", ours.node, theirs.node, tol.relative)
    add("systemUsage", ours.system, theirs.system, tol.relative)
    for pod in sorted(set(ours.pods) & set(theirs.pods)):
        if pods is None or pod in pods:
            add(f"podsMetric {pod}", ours.pods[pod], theirs.pods[pod], tol.relative)
    for window in sorted(set(ours.windows) & set(theirs.windows)):
        if window[1] in tol.percentiles:
            cpu_relative = tol.relative if window[1] == "avg" else tol.window_cpu_relative
            add(f"aggregatedNodeUsages {window[0]} {window[1]}", ours.windows[window], theirs.windows[window],
                cpu_relative)  # fmt: skip
    return rows


# ------------------------------------------------------------------------------------------------ processes
def container_pids(pod_uid: str) -> list[int]:
    """The host PIDs of a pod's containers (not its sandbox's pause), from its cgroup (cgroup v1, cgroupfs)."""
    pids: list[int] = []
    found = [
        path
        for uid in {pod_uid, pod_uid.replace("-", "_")}  # cgroupfs, systemd
        for path in glob.glob(f"/sys/fs/cgroup/cpuacct/kubepods*/**/*pod{uid}*/*/cgroup.procs", recursive=True)
    ]
    for procs in found:
        for text in Path(procs).read_text().split():
            pid = int(text)
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/comm").read_text().strip() != "pause":
                    pids.append(pid)
    return sorted(set(pids))


@dataclass
class ProcessUse:
    """RSS and CPU time of a set of processes, read from /proc."""

    pids: list[int]

    def rss_bytes(self) -> int:
        total = 0
        for pid in self.pids:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        return total

    def cpu_seconds(self) -> float:
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for pid in self.pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        return total


def agent_pids(cluster: RealCluster) -> list[int]:
    pods = [p for p in cluster.pods("agent") if p["spec"].get("nodeName") == cluster.node.name]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return container_pids(pods[0]["metadata"]["uid"])


# ------------------------------------------------------------------------------------------------ the pair
@dataclass
class KoordletBeside:
    """koordlet for the view `<node>-koordlet` of the session's real node (the view removed again on exit)."""

    cluster: RealCluster
    report_seconds: int = 30
    aggregate_seconds: int = 60
    windows: tuple[str, ...] = ("1m0s",)
    extra_args: Sequence[str] = ()
    name: str = ""
    process: koordinator.KoordProcess | None = None

    def __post_init__(self) -> None:
        self.name = self.name or f"{self.cluster.node.name}-koordlet"

    def __enter__(self) -> Self:
        plane, real = self.cluster.plane, self.cluster.node.name
        node = self.cluster.kubectl_json("get", "node", real)
        colocation = {
            "metricReportIntervalSeconds": self.report_seconds,
            "metricAggregateDurationSeconds": self.aggregate_seconds,
            "metricAggregatePolicy": {"durations": list(self.windows)},
        }
        plane.apply(koordinator.koordlet_view_node(node, self.name, colocation))
        patch = json.dumps(koordinator.koordlet_view_status(node))
        plane.kubectl("patch", "node", self.name, "--subresource=status", "--type=merge", "-p", patch)
        try:
            self._wait("the manager's NodeMetric for the view", self._spec_written, 60)
            self.process = koordinator.start_koordlet(plane, self.name, extra_args=self.extra_args)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.process is not None:
            self.process.stop()
        self.cluster.plane.kubectl("delete", "node", self.name, "--ignore-not-found", "--wait=false", check=False)

    def _spec_written(self) -> bool:
        out = self.cluster.plane.kubectl("get", "nodemetric", self.name, "-o", "json", check=False)
        if out.returncode != 0:
            return False
        policy = (json.loads(out.stdout).get("spec") or {}).get("metricCollectPolicy") or {}
        return policy.get("reportIntervalSeconds") == self.report_seconds

    def _wait(self, what: str, check: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(0.5)

    def log_tail(self, lines: int = 40) -> str:
        return self.process.log_tail(lines) if self.process is not None else "(koordlet never started)"

    def latest(self) -> Reading | None:
        return reading(self.cluster.kubectl_json("get", "nodemetric", self.name))


@dataclass
class LocalAgent:
    """`loadline agent` for the real node as a host process (the code the image runs), publishing nothing and
    enforcing nothing; its view is read from its own endpoint (`/nodemetric`, the status it would write now)."""

    cluster: RealCluster
    aggregate_seconds: int = 60
    windows: tuple[int, ...] = (60,)
    extra_args: Sequence[str] = ()
    component: Component | None = None
    port: int = 0

    def __enter__(self) -> Self:
        plane = self.cluster.plane
        self.port = free_port()
        self.component = Component(
            "local-agent",
            [
                sys.executable, "-m", "agent", f"--kubeconfig={plane.kubeconfig}",
                f"--node-name={self.cluster.node.name}", "--publish=false", "--qos-enforcement=false",
                "--collect-interval-seconds=1", f"--aggregate-duration-seconds={self.aggregate_seconds}",
                f"--aggregate-windows={','.join(str(w) for w in self.windows)}", "--follow-nodemetric-spec=false",
                "--bind-address=127.0.0.1", f"--port={self.port}", *self.extra_args,
            ],
            plane.root / "logs" / "local-agent.log",
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )  # fmt: skip
        self.component.start()
        plane.extra.append(self.component)
        wait_until("local agent /healthz", lambda: http_ok(f"http://127.0.0.1:{self.port}/healthz"), 60,
                   alive=[self.component])  # fmt: skip
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.component is not None:
            self.component.stop()

    def now(self) -> Reading | None:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/nodemetric", timeout=10) as response:
            return reading(json.loads(response.read()))


def paired_readings(
    ours: LocalAgent, theirs: KoordletBeside, count: int, timeout: float, *, after: float = 0.0
) -> list[tuple[Reading, Reading]]:
    """(ours, theirs) for each of koordlet's next `count` reports built after `after` (epoch seconds): ours read
    the moment that report is seen."""
    pairs: list[tuple[Reading, Reading]] = []
    seen = None
    deadline = time.monotonic() + timeout
    while len(pairs) < count:
        assert theirs.process is None or theirs.process.alive(), f"koordlet exited:\n{theirs.log_tail()}"
        assert ours.component is not None and ours.component.alive(), "the local agent exited"
        latest = theirs.latest()
        if latest is not None and latest.update_time != seen:
            seen = latest.update_time
            if latest.update_time >= after and latest.node is not None:
                mine = ours.now()
                assert mine is not None
                pairs.append((mine, latest))
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout:.0f}s with {len(pairs)} of {count} koordlet reports\n{theirs.log_tail()}"
            )
        time.sleep(0.5)
    return pairs
