"""What one scrape of the agent's /metrics costs Prometheus: series and bytes per node, by kind of series.

    .venv/bin/python bench/agent_scrape_bench.py [--pods 100,300] [--nodes 5000] [--scrape-interval 15]
        [--compare node_exporter=http://127.0.0.1:9100/metrics ...]

For each pod count: pods x 3 containers on a fixture cgroup v2 tree sampled through the agent's real collectors
and sampler (`agent_store_bench.agent_sampling`) until its ring is full (every default window, 5m/10m/30m,
exported), the containers read as a scrape reads them; then the whole /metrics text as the daemon serves it (raw
series of the last cycle, window series, self-metrics), once with the defaults and once with
`--pod-window-metrics`. Prints the series (sample lines) and bytes per scrape by kind (node and system raw, pod
cgroups raw, container cgroups raw, node/system window series, pod window series, the agent's own), and what
`--nodes` agents scraped every `--scrape-interval` seconds send and add: bytes/s, samples/s, active series.
(Bytes uncompressed: Prometheus parses every one; the fixture's values repeat across pods, so a gzip size here
would flatter.)

--compare NAME=URL scrapes other exporters once (node_exporter, the kubelet's /metrics/cadvisor) and prints the
same counts, for a side-by-side on the same machine.
"""

from __future__ import annotations

import argparse
import sys
import urllib.request
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.exporter import AgentTimings, Exporter, ExportInput, NodeSelfState, render_raw, render_self, render_windows
from agent.report import Aggregates, PodIdentity, ReportPolicy, aggregate
from bench.agent_store_bench import agent_sampling

KINDS = ("node raw", "pod raw", "container raw", "node windows", "pod windows", "agent self", "other")


def kind_of(line: str) -> str:
    name = line.split("{", 1)[0].split(" ", 1)[0]
    if "_window_" in name:
        return "pod windows" if name.startswith("loadline_pod_") else "node windows"
    if name.startswith("loadline_container_"):
        return "pod raw" if 'container=""' in line else "container raw"
    if name.startswith(("loadline_node_", "loadline_system_", "loadline_gpu_", "loadline_infiniband_")):
        return "node raw"
    if name.startswith(("loadline_agent_", "process_", "python_")):
        return "agent self"
    return "other"


def tally(text: str) -> tuple[Counter[str], Counter[str]]:
    """Sample lines and bytes (with their share of # HELP/# TYPE lines) by kind."""
    series: Counter[str] = Counter()
    size: Counter[str] = Counter()
    current = "other"
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(" ", 3)
            current = kind_of(parts[2]) if len(parts) > 2 else current
            size[current] += len(line) + 1
            continue
        if not line:
            continue
        kind = kind_of(line)
        series[kind] += 1
        size[kind] += len(line) + 1
    return series, size


def agent_scrapes(pods: int) -> dict[str, str]:
    """The full /metrics text at `pods` x 3 containers with every window full: defaults, and pod windows on."""
    out = {}
    policy = ReportPolicy()
    with agent_sampling(pods, policy.retention_seconds) as sampling:
        sampler, clock = sampling.sampler, sampling.clock
        sampling.sample(sampler.ring.slots + 5)
        block = sampling.cgroups.read_on_scrape(clock.t)  # the containers, as a scrape reads them first
        if block is not None:
            sampler.replace_block(sampling.cgroups, block)
        infos = {p.uid: PodIdentity(p.uid, p.namespace, p.name, "koord-prod", "LS") for p in sampling.refs}
        raw = render_raw([ExportInput(list(sampler.last_samples), None, infos)])
        for label, pod_windows in (("defaults", False), ("--pod-window-metrics", True)):
            agg: Aggregates = aggregate(sampler.ring, clock.t - 1.0, ReportPolicy(pod_windows=pod_windows))
            windows = render_windows([ExportInput([], agg, infos)])
            own = render_self([NodeSelfState("", sampler)], AgentTimings(0.01, 0.02, 1.7e9, 1), "node", per_node=True)
            text = (raw + windows).decode() + own
            exporter = Exporter(
                "127.0.0.1", 0, live=lambda t=text: t, health=lambda: (True, ""), ready=lambda: (True, "")
            )
            out[label] = exporter.metrics_text().decode()
    return out


def report(label: str, text: str, nodes: int, interval: float) -> None:
    series, size = tally(text)
    total_series, total_bytes = sum(series.values()), len(text.encode())
    kinds = ", ".join(f"{k} {series[k]:,} ({size[k] / 1024:,.0f} KiB)" for k in KINDS if series[k] or size[k])
    print(f"  {label:22s} {total_series:7,} series {total_bytes / 1e6:5.2f} MB: {kinds}")
    print(
        f"  {'':22s} {nodes:,} nodes every {interval:g} s: {nodes * total_bytes / interval / 1e9:5.2f} GB/s, "
        f"{nodes * total_series / interval / 1e6:5.2f} M samples/s, {nodes * total_series / 1e6:6.1f} M active series"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--pods", default="100,300", help="pod counts (x 3 containers), comma separated")
    ap.add_argument("--nodes", type=int, default=5000, help="nodes of the cluster the figures are scaled to")
    ap.add_argument("--scrape-interval", type=float, default=15.0, help="Prometheus' scrape interval, seconds")
    ap.add_argument("--compare", action="append", default=[], metavar="NAME=URL", help="another exporter to scrape")
    args = ap.parse_args()
    for pods in (int(p) for p in args.pods.split(",")):
        print(f"agent, {pods} pods x 3 containers, every window full (5m/10m/30m):")
        for label, text in agent_scrapes(pods).items():
            report(label, text, args.nodes, args.scrape_interval)
    for item in args.compare:
        name, _, url = item.partition("=")
        with urllib.request.urlopen(url, timeout=30) as answer:
            text = answer.read().decode()
        print(f"{name} ({url}):")
        report(name, text, args.nodes, args.scrape_interval)


if __name__ == "__main__":
    main()
