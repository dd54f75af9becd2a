"""Loadline's agent beside koordlet v1.8.0 on this machine as a real node: footprint and NodeMetrics (issue 30).

    .venv/bin/python bench/agent_vs_koordlet.py [--pods 30] [--burners 3] [--warmup 5] [--minutes 20]
        [--cold-start 600] [--out FILE]

One run, the same node and pods for both (tests/integration/koordlet_beside.py has the set-up and why):

- a real cluster with Loadline installed from its chart, the agent with its production defaults (collect 1 s,
  report 60 s, nodeUsage over 300 s, windows 5m/10m/30m, peak prediction on) and `--pods` pods on the real node:
  `--burners` of them burn CPU steadily (0.1-0.3 cores), the others sleep;
- koordlet v1.8.0 for a view of the node with Koordinator's defaults from the same NodeMetric spec (report 60 s,
  300 s, 5m/10m/30m), its QoS and runtime-hook gates off (it writes nothing to the host; a plain koordlet would run
  its CPU-burst loop besides, so this is its cheaper configuration);
- footprint: RSS and CPU time of the agent pod's process and of koordlet, read from /proc once a minute over
  `--minutes` after `--warmup` minutes; ratio agent / koordlet (targets: RSS <= 0.5, CPU <= 1.0);
- NodeMetrics: at every koordlet report, Loadline's view over the same windows from an agent process of the same
  code read at that moment; every number both carry is compared (±5 %, floors 10 millicores / 4 MiB), the
  aggregated windows once they are warm (koordlet's cold-start rule: half the window);
- prodReclaimable: both predict with `--cold-start` seconds of cold start (Loadline also with no minimum model
  history), each from its own models; side by side at every koordlet report.

Needs root and the real-node lock (waits while another test run holds the real node).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.agent_scrape_bench import tally
from tests.harness.image import ensure_image
from tests.integration.koordlet_beside import (
    KoordletBeside,
    LocalAgent,
    ProcessUse,
    Reading,
    Tolerances,
    agent_pids,
    compare,
    paired_readings,
)
from tests.integration.realnode_cluster import RealCluster, burner_pod, start_real_cluster, stop_real_cluster

MIB = 1 << 20
WINDOWS = ("5m0s", "10m0s", "30m0s")


def bench_values(cluster_values: dict[str, Any], cold_start: int) -> dict[str, Any]:
    """The session's chart values with the agent and the colocation strategy at their production defaults."""
    values = dict(cluster_values)
    values["agent"] = {
        **values["agent"],
        "args": [f"--prediction-cold-start-seconds={cold_start}", "--prediction-min-history-seconds=0"],
    }
    values["sloControllerConfig"] = {
        "data": {
            "colocation-config": json.dumps(
                {"enable": True, "cpuReclaimThresholdPercent": 100, "memoryReclaimThresholdPercent": 100}
            ),
            "resource-threshold-config": '{"clusterStrategy": {"enable": false}}',
        }
    }
    return values


def sleeper(name: str, namespace: str, image: str) -> dict[str, Any]:
    pod = burner_pod(name, namespace, cores=0, mib=0, image=image,
                     resources={"requests": {"cpu": "10m", "memory": "16Mi"}})  # fmt: skip
    pod["spec"]["containers"][0]["command"] = ["sleep", "infinity"]
    return pod


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="See the module docstring.")
    parser.add_argument("--pods", type=int, default=30, help="pods on the real node besides Loadline's own")
    parser.add_argument("--burners", type=int, default=3, help="of them, pods burning CPU steadily")
    parser.add_argument("--warmup", type=float, default=5.0, help="minutes before the footprint is measured")
    parser.add_argument("--minutes", type=float, default=20.0, help="minutes measured")
    parser.add_argument("--cold-start", type=int, default=600, help="prediction cold start, seconds, for both")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    image = ensure_image()
    say("starting the real cluster (waits for the real-node lock)")
    cluster = start_real_cluster(image.archive, image.name)
    report: list[str] = []
    try:
        values = bench_values(cluster.test_values(), args.cold_start)
        cluster.values_file.write_text(yaml.safe_dump(values))
        cluster.install()
        ns = "koordlet-bench"
        cluster.plane.kubectl("create", "namespace", ns)
        time.sleep(3)  # the namespace's default ServiceAccount
        pods = [
            burner_pod(
                f"burn-{i}",
                ns,
                cores=0.1 + 0.1 * (i % 3),
                mib=64 + 32 * i,
                image=cluster.image,
                resources={"requests": {"cpu": "300m", "memory": "256Mi"}},
            )
            for i in range(args.burners)
        ]
        pods += [sleeper(f"sleep-{i}", ns, cluster.image) for i in range(args.pods - args.burners)]  # fmt: skip
        cluster.plane.apply(pods)
        cluster.plane.kubectl("wait", "-n", ns, "--for=condition=Ready", "pod", "--all", "--timeout=600s", timeout=620)
        say(f"{len(pods)} pods Ready")
        koord_args = [f"--prediction-cold-start-duration={args.cold_start}s"]
        local_args = [f"--prediction-cold-start-seconds={args.cold_start}", "--prediction-min-history-seconds=0"]
        with (
            KoordletBeside(cluster, report_seconds=60, aggregate_seconds=300, windows=WINDOWS,
                           extra_args=koord_args) as theirs,
            LocalAgent(cluster, aggregate_seconds=300, windows=(300, 600, 1800), extra_args=local_args) as ours,
        ):  # fmt: skip
            started = time.time()
            assert theirs.process is not None
            koordlet = ProcessUse([theirs.process.pid])
            agent = ProcessUse(agent_pids(cluster))
            say(f"koordlet pid {theirs.process.pid}, agent pids {agent.pids}; warm-up {args.warmup:g} min")
            pairs: list[tuple[Reading, Reading]] = []
            samples: list[tuple[float, int, float, int, float]] = []  # wall, agent rss, cpu, koordlet rss, cpu
            measure_from = started + 60 * args.warmup
            end = measure_from + 60 * args.minutes
            last = 0.0
            while time.time() < end:
                # one koordlet report (every 60 s) at a time; the footprint is sampled between them
                pairs += paired_readings(ours, theirs, count=1, timeout=120, after=last + 0.5)
                last = pairs[-1][1].update_time
                if time.time() >= measure_from:
                    samples.append((time.time(), agent.rss_bytes(), agent.cpu_seconds(), koordlet.rss_bytes(),
                                    koordlet.cpu_seconds()))  # fmt: skip
                say(f"  {(time.time() - started) / 60:5.1f} min: {len(pairs)} koordlet reports paired")
            report += scrape_sizes(cluster)
            report += footprint(samples, args)
            report += nodemetrics(pairs, started)
            report += reclaimable(pairs, started)
    finally:
        stop_real_cluster(cluster)
    header = [
        f"agent vs koordlet v1.8.0 on this machine as a real node ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC): "
        f"{args.pods} pods ({args.burners} burning), warm-up {args.warmup:g} min, measured {args.minutes:g} min",
        "",
    ]
    text = "\n".join(header + report) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


def scrape_sizes(cluster: RealCluster) -> list[str]:
    """One scrape each of the agent pod's /metrics (chart defaults) and the kubelet's cAdvisor endpoint on the same
    node and pods (through the API server's node proxy): series and bytes (bench/agent_scrape_bench.py counts)."""
    lines = ["/metrics of the node, one scrape each (series = sample lines):"]
    texts = {}
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{cluster.agent_port}/metrics", timeout=30) as answer:
            texts["agent pod"] = answer.read().decode()
    except OSError as exc:
        lines.append(f"  agent pod: not scraped ({exc})")
    cadvisor = f"/api/v1/nodes/{cluster.node.name}/proxy/metrics/cadvisor"
    raw = cluster.plane.kubectl("get", "--raw", cadvisor, check=False)
    if raw.returncode == 0:
        texts["kubelet /metrics/cadvisor"] = raw.stdout
    else:
        lines.append(f"  kubelet /metrics/cadvisor: not scraped ({raw.stderr.strip()})")
    for name, text in texts.items():
        series, _ = tally(text)
        families = len({line.split(" ")[2] for line in text.splitlines() if line.startswith("# TYPE ")})
        kinds = ", ".join(f"{kind} {series[kind]:,}" for kind in series)
        lines.append(f"  {name:26s} {sum(series.values()):6,} series in {families} families, "
                     f"{len(text.encode()) / 1e6:5.2f} MB ({kinds})")  # fmt: skip
    return [*lines, ""]


def footprint(samples: list[tuple[float, int, float, int, float]], args: argparse.Namespace) -> list[str]:
    if len(samples) < 2:
        return ["footprint: not enough samples"]
    span = samples[-1][0] - samples[0][0]
    a_cpu = (samples[-1][2] - samples[0][2]) / span
    k_cpu = (samples[-1][4] - samples[0][4]) / span
    a_rss = statistics.median(s[1] for s in samples)
    k_rss = statistics.median(s[3] for s in samples)
    return [
        f"footprint over {span / 60:.1f} min (median RSS, CPU time / wall time):",
        f"  agent pod     RSS {a_rss / MIB:7.1f} MiB   CPU {100 * a_cpu:6.2f} % of a core",
        f"  koordlet      RSS {k_rss / MIB:7.1f} MiB   CPU {100 * k_cpu:6.2f} % of a core",
        f"  agent / koordlet: RSS {a_rss / k_rss:.2f} (target <= 0.5), CPU {a_cpu / k_cpu:.2f} (target <= 1.0)",
        "",
    ]


def nodemetrics(pairs: list[tuple[Reading, Reading]], started: float) -> list[str]:
    groups: dict[str, list[float]] = defaultdict(list)
    outside: list[str] = []
    for ours, theirs in pairs:
        for row in compare(ours, theirs, Tolerances()):
            family = row.what.split(" ")[0] if not row.what.startswith("aggregated") else " ".join(row.what.split()[:3])
            groups[f"{family} {row.what.split()[-1]}"].append(abs(row.diff))
            if not row.ok:
                outside.append(f"  {(theirs.update_time - started) / 60:5.1f} min  {row.line()}")
    lines = [f"NodeMetrics at {len(pairs)} koordlet reports: max |loadline - koordlet| / koordlet per field"]
    for key in sorted(groups):
        values = groups[key]
        lines.append(f"  {key:<40} n={len(values):4d}  median {100 * statistics.median(values):6.2f} %  "
                     f"max {100 * max(values):6.2f} %")  # fmt: skip
    lines += ["", f"outside ±5 % (floors 10m / 4 MiB): {len(outside)}", *outside[:40], ""]
    return lines


def reclaimable(pairs: list[tuple[Reading, Reading]], started: float) -> list[str]:
    lines = ["prodReclaimableMetric side by side (cpu cores / memory MiB; '-' = not published yet):"]
    for ours, theirs in pairs:

        def show(r: Reading) -> str:
            v = r.prod_reclaimable
            return "-" if v is None else f"{v[0]:6.3f} / {v[1] / MIB:8.1f}"

        lines.append(f"  {(theirs.update_time - started) / 60:5.1f} min  loadline {show(ours):>20}  "
                     f"koordlet {show(theirs):>20}")  # fmt: skip
    return lines


if __name__ == "__main__":
    sys.exit(main())
