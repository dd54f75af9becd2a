"""What the agent's resident memory is made of before it samples anything: RSS after each import stage.

    .venv/bin/python bench/agent_import_rss.py [--repeat 3]

Each stage is imported in a fresh interpreter on top of the ones before it (one process per line, `--repeat` times,
the median), and /proc/self/smaps_rollup read after it: RSS, its anonymous part (the process's own: objects, code
objects, the C libraries' heaps) and its file part (the shared libraries' and extension modules' pages that are
resident: the page cache's, counted in every process that maps them). Two orders:

- the libraries alone, in the order the agent needs them (asyncio, numpy, pydantic, aiohttp with ssl,
  prometheus_client, which only an agent with a cluster imports), and the kubernetes client, which the agent does
  not import (its API client is `common.kube.http` on aiohttp), for scale;
- the daemon's own order: `agent.main` (a standalone agent: collectors, store, exporter, config models), then what
  the agent with a cluster adds (the API client on aiohttp, the NodeMetric publisher, peak prediction, QoS).

The agent pod's RSS beside koordlet on the real node (`bench/agent_vs_koordlet.py`) is these imports plus what
it holds for its pods; docs/benchmarks.md has both.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

LIBRARIES = (
    ("interpreter", ()),
    ("asyncio", ("asyncio",)),
    ("numpy", ("numpy",)),
    ("pydantic", ("pydantic",)),
    ("aiohttp, ssl", ("ssl", "aiohttp")),
    ("prometheus_client (with a cluster)", ("prometheus_client",)),
    ("(not imported) kubernetes", ("kubernetes",)),
)
DAEMON = (
    ("interpreter", ()),
    ("agent.main (standalone agent)", ("agent.main",)),
    ("API client (aiohttp)", ("common.kube.http",)),
    ("NodeMetric publisher", ("agent.publisher",)),
    ("peak prediction", ("agent.prediction.node", "agent.prediction.predictor")),
    ("QoS enforcement", ("agent.qos.enforcer", "agent.qos.usage")),
)

PROBE = """
import importlib, json, sys
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
kib = {}
for line in open("/proc/self/smaps_rollup"):
    parts = line.split()
    if parts[0] in ("Rss:", "Anonymous:"):
        kib[parts[0][:-1]] = int(parts[1])
print(json.dumps([kib["Rss"], kib["Anonymous"], len(sys.modules)]))
"""


def measure(modules: list[str], repeat: int) -> tuple[float, float, int]:
    """Median RSS and anonymous MiB, and the module count, after importing `modules` in a fresh interpreter."""
    rows = []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-c", PROBE, json.dumps(modules)], cwd=REPO, capture_output=True, text=True, check=True
        )
        rows.append(json.loads(out.stdout))
    rss = statistics.median(r[0] for r in rows) / 1024
    anon = statistics.median(r[1] for r in rows) / 1024
    return rss, anon, rows[0][2]


def stages(title: str, plan: tuple[tuple[str, tuple[str, ...]], ...], repeat: int) -> None:
    print(title)
    print(f"  {'stage':38s} {'RSS MiB':>8s} {'+':>6s} {'anon':>6s} {'+':>6s} {'file':>6s} {'modules':>8s}")
    modules: list[str] = []
    last = (0.0, 0.0)
    for label, names in plan:
        cumulative = not label.startswith("(not imported)")
        wanted = [*modules, *names]
        rss, anon, count = measure(wanted, repeat)
        print(
            f"  {label:38s} {rss:8.1f} {rss - last[0]:+6.1f} {anon:6.1f} {anon - last[1]:+6.1f} {rss - anon:6.1f} "
            f"{count:8d}"
        )
        if cumulative:
            modules, last = wanted, (rss, anon)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--repeat", type=int, default=3, help="fresh interpreters per stage (the median is shown)")
    args = ap.parse_args()
    print(f"Python {sys.version.split()[0]}, {sys.executable}")
    stages("the libraries alone (each on top of the ones above)", LIBRARIES, args.repeat)
    stages("the agent daemon's imports, in its order", DAEMON, args.repeat)


if __name__ == "__main__":
    main()
