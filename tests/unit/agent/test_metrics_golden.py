"""End-to-end /metrics over a fixture tree, compared with a checked-in golden file (node_exporter's e2e-output.txt).

Fake /proc (CPU, memory, PSI, net/dev) and a cgroup v2 tree with two pods run through the real collectors and one
`NodePipeline` for three cycles on a fixed clock; the whole exposition (raw series, window aggregates,
self-metrics) is compared line by line, so a renamed, dropped or added series is a visible diff. Values that
depend on the machine or the moment (durations, timestamps, byte sizes, versions) are masked.

After an intended change: `LOADLINE_UPDATE_GOLDEN=1 pytest tests/unit/agent/test_metrics_golden.py` and review
the diff of `golden/metrics.txt`.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

from agent.collectors.cgroup_layout import CgroupDriver, CgroupVersion
from agent.collectors.cgroups import CgroupCollector
from agent.collectors.netdev import NetdevCollector
from agent.collectors.node import NodeCollector
from agent.exporter import AgentTimings, render_self, render_windows
from agent.pipeline import NodePipeline
from agent.report import PodIdentity, ReportPolicy
from common.api.pod import KubeQoSClass
from tests.fakes.cgroup_trees import CgroupValues, FakeCgroupTree, ProcValues, make_pod, write_proc

GOLDEN = Path(__file__).parent / "golden" / "metrics.txt"
NET_DEV = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier "
    "compressed\n"
    "    lo: {lo} 10 0 0 0 0 0 0 {lo} 10 0 0 0 0 0 0\n"
    "  eth0: {rx} 50 1 2 0 0 0 0 {tx} 70 3 4 0 0 0 0\n"
)
# Families whose values depend on the machine or the moment: their values are masked.
_MASKED = re.compile(r"_(duration_seconds|timestamp_seconds|store_bytes)\b|^loadline_agent_build_info")


def exposition(tmp_path: Path) -> str:
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    values = ProcValues()
    write_proc(proc, values)
    tree = FakeCgroupTree(cgroup, CgroupVersion.V2, CgroupDriver.SYSTEMD)
    pods = [make_pod(1, KubeQoSClass.GUARANTEED, containers=1), make_pod(2, KubeQoSClass.BURSTABLE, containers=2)]
    for pod in pods:
        tree.add_pod(pod, CgroupValues())
    identities = {p.uid: PodIdentity(p.uid, p.namespace, p.name, "koord-prod", "LS") for p in pods}
    collectors = [
        NodeCollector(proc, clock_ticks=100),
        CgroupCollector(lambda: pods, tree.root),
        NetdevCollector(proc, list_links=list),  # no inventory: nothing racing the three cycles
    ]
    now = [1000.0]
    pipeline = NodePipeline(
        "node-1",
        collectors,
        pods=lambda: identities,
        policy=ReportPolicy(aggregate_duration_seconds=3, report_interval_seconds=60, windows=(2.0, 4.0)),
        interval=1.0,
    )
    pipeline.sampler._clock = lambda: now[0]
    try:
        for n in range(3):
            user, *rest = values.cpu
            values.cpu = (user + 150 * n, *rest)
            write_proc(proc, values)
            (proc / "net").mkdir(exist_ok=True)
            (proc / "net" / "dev").write_text(NET_DEV.format(lo=1000 + 100 * n, rx=5000 + 2000 * n, tx=7000 + 500 * n))
            for i, pod in enumerate(pods):
                tree.write(tree.pod_rel(pod), CgroupValues(cpu_ns=5_000_000_000 + (i + 1) * 250_000_000 * n))
                for ref in pod.containers:
                    tree.write(tree.container_rel(pod, ref), CgroupValues(cpu_ns=1_000_000_000 + 100_000_000 * n))
            asyncio.run(pipeline.sampler.cycle())
            now[0] += 1.0
        agg = pipeline.aggregate(now[0] - 1.0)
        timings = AgentTimings()
        body = pipeline.render_raw() + render_windows([pipeline.export_input(agg)])
        text = body.decode() + render_self([pipeline.self_state()], timings, "node", per_node=True)
    finally:
        pipeline.close()
    return "\n".join(_mask(line) for line in text.splitlines()) + "\n"


def _mask(line: str) -> str:
    if line.startswith("#"):
        return line
    name = line.split("{", 1)[0].split(" ", 1)[0]
    if _MASKED.search(name):
        return line.rsplit(" ", 1)[0] + " <masked>"
    return line


def test_metrics_match_the_golden_file(tmp_path: Path) -> None:
    text = exposition(tmp_path)
    if os.environ.get("LOADLINE_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text)
    expected = GOLDEN.read_text()
    assert text.splitlines() == expected.splitlines(), "see the module docstring to update the golden file"
    names = {line.split("{", 1)[0].split(" ", 1)[0] for line in text.splitlines() if not line.startswith("#")}
    # the series users query most, present by name (a golden file regenerated blindly still has these)
    assert {
        "loadline_node_cpu_usage_seconds_total",
        "loadline_node_memory_usage_bytes",
        "loadline_container_cpu_usage_seconds_total",
        "loadline_container_memory_working_set_bytes",
        "loadline_node_network_receive_bytes_per_second",
        "loadline_node_cpu_usage_window_cores",
        "loadline_system_cpu_usage_window_cores",
        "loadline_agent_collector_success",
    } <= names
    assert not [n for n in names if n.startswith("loadline_pod_")]  # pod window series: --pod-window-metrics only
