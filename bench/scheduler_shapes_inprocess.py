"""One scheduling cycle per pod of each scheduler_perf shape, in process: what InterPodAffinity and PodTopologySpread
cost Loadline's cycle, without the API server.

    .venv/bin/python bench/scheduler_shapes_inprocess.py [--nodes 1000 5000] [--pods 1000] [--repeat 3]
                                                         [--shapes basic pod-anti-affinity ...]

Per node count and shape (bench/scheduler_shapes.py, scheduler_perf's counts of bound pods at that node count):
the nodes (32 cpu / 256 Gi, labelled as the shape says), its bound pods in the snapshot, then `--pods` pods of its
backlog scheduled one after the other through the default profile without LoadAwareScheduling (no NodeMetrics
here), each placed pod assumed on its node, so later cycles see it. Pod JSON is parsed before the clock starts
(an informer does that). Reported: CPU milliseconds of this (single-threaded) process per scheduling cycle, the
best of `--repeat` runs (a shared host adds, it does not take away), how many pods were scheduled (the backlog,
at most `--pods`) and how many placed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scheduler_shapes import SHAPES, ZONE
from scheduler_plugin.framework.binder import InMemoryBinder
from scheduler_plugin.framework.clock import FakeClock
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.schedule_one import scheduling_cycle
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.registry import frameworks_from_config
from tests.harness.controlplane import fake_node

PROFILE = {"profiles": [{"schedulerName": "loadline-scheduler",
                         "plugins": {"multiPoint": {"disabled": [{"name": "LoadAwareScheduling"}]}}}]}  # fmt: skip


def one_run(shape_name: str, nodes: int, pods: int) -> tuple[float, int, int]:
    shape = SHAPES[shape_name]
    names = [f"n{i:05d}" for i in range(nodes)]
    node_objects = [fake_node(n, cpu="32", memory="256Gi") for n in names]
    for i, obj in enumerate(node_objects):
        if shape.zones:
            obj["metadata"]["labels"][ZONE] = shape.zones[i % len(shape.zones)]
    snap = Snapshot.from_objects(nodes=node_objects, pods=shape.init_pods(names, 1.0))
    framework = next(iter(frameworks_from_config(PROFILE, snapshot=snap, clock=FakeClock(),
                                                 binder=InMemoryBinder()).values()))  # fmt: skip
    backlog = [PodInfo.from_dict(o) for o in shape.backlog(nodes, 1.0, pods, 7)("p", "loadline-scheduler")][:pods]
    started = time.process_time()
    placed = sum(scheduling_cycle(framework, pod).node_name is not None for pod in backlog)
    return (time.process_time() - started) * 1000 / max(len(backlog), 1), len(backlog), placed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--pods", type=int, default=1000,
                        help="backlog pods scheduled per shape, at most (default: 1000)")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=3, help="runs per shape; the best is reported (default: 3)")
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES), metavar="SHAPE")
    args = parser.parse_args()
    print(f"{'shape':<28} {'nodes':>5} {'pods':>5} {'placed':>6} {'cpu ms/cycle':>12}")
    for nodes in args.nodes:
        for shape in args.shapes:
            runs = [one_run(shape, nodes, args.pods) for _ in range(args.repeat)]
            best, scheduled, placed = min(runs)
            print(f"{shape:<28} {nodes:>5} {scheduled:>5} {placed:>6} {best:>12.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
