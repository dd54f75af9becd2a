"""What volumes add to a scheduling cycle, in process: N nodes with one static local PV each (issue 28).

    .venv/bin/python bench/volume_binding_bench.py [--nodes 5000] [--taken 0.0] [--repeat 30]

Every node has one local PV (`kubernetes.io/hostname In [node]`, 10Gi) of a WaitForFirstConsumer class with
no provisioner; `--taken` of them are already bound to other claims. Each repeat schedules one pod with one
fresh unbound claim of that class (a StatefulSet replica) through the whole default profile, Reserve included
(so every repeat takes one more PV), and, for comparison, one pod without volumes. Printed: p50/p99 of the
cycle, wall clock and CPU seconds of this single-threaded process, for both pods. With `--taken 0.999` only a
handful of PVs are free: the worst case for finding one (every PV of the class is looked at).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler_plugin.framework.clock import FakeClock
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.schedule_one import scheduling_cycle
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.registry import frameworks_from_config
from scheduler_plugin.plugins.storage import PersistentVolumeClaims, PersistentVolumes, StorageClasses
from tests import objects

CLASS = "local"


def node(i: int) -> dict[str, Any]:
    name = f"node-{i:05d}"
    return objects.node(name, cpu="32", memory="128Gi", labels={"kubernetes.io/hostname": name})


def pv(i: int, taken: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": CLASS,
        "local": {"path": f"/mnt/disk-{i}"},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [f"node-{i:05d}"]}]}]}},
    }  # fmt: skip
    if taken:
        spec["claimRef"] = {"namespace": "other", "name": f"c{i}", "uid": f"u{i}"}
    return {"metadata": {"name": f"pv-{i:05d}", "resourceVersion": "1"}, "spec": spec,
            "status": {"phase": "Bound" if taken else "Available"}}


def claim(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": CLASS,
                     "resources": {"requests": {"storage": "1Gi"}}}, "status": {"phase": "Pending"}}  # fmt: skip


def pod(name: str, claim_name: str | None) -> dict[str, Any]:
    """A pod of 100m / 64Mi, with one claim when given."""
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}] if claim_name else []
    return objects.pod(name, "100m", "64Mi", created=None, volumes=volumes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--taken", type=float, default=0.0, help="fraction of the PVs already bound (0..1)")
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    taken = int(args.nodes * args.taken)
    if args.nodes - taken < args.repeat:
        parser.error(f"only {args.nodes - taken} free PVs for {args.repeat} repeats")
    started = time.perf_counter()
    storage_class = {"metadata": {"name": CLASS}, "provisioner": "kubernetes.io/no-provisioner",
                     "volumeBindingMode": "WaitForFirstConsumer"}  # fmt: skip
    snap = Snapshot.from_objects(
        nodes=[node(i) for i in range(args.nodes)],
        stores={PersistentVolumes: [pv(i, i < taken) for i in range(args.nodes)],
                StorageClasses: [storage_class],
                PersistentVolumeClaims: [claim(f"data-{r}") for r in range(args.repeat)]},
    )  # fmt: skip
    framework = next(iter(frameworks_from_config(None, snapshot=snap, clock=FakeClock()).values()))
    print(f"{args.nodes} nodes, {args.nodes} local PVs ({taken} taken), set up in {time.perf_counter() - started:.1f}s")
    results: dict[str, list[tuple[float, float]]] = {"with a claim": [], "without volumes": []}
    for r in range(args.repeat):
        for label, claim_name in (("with a claim", f"data-{r}"), ("without volumes", None)):
            info = PodInfo.from_dict(pod(f"{'v' if claim_name else 'p'}-{r}", claim_name))
            wall, cpu = time.perf_counter(), time.process_time()
            result = scheduling_cycle(framework, info)
            results[label].append((time.perf_counter() - wall, time.process_time() - cpu))
            assert result.status.is_success(), result.status.message
    for label, samples in results.items():
        walls = sorted(w for w, _ in samples)
        cpus = sorted(c for _, c in samples)
        p99 = walls[min(len(walls) - 1, int(len(walls) * 0.99))]
        print(f"  pod {label:<16} cycle p50 {statistics.median(walls) * 1000:6.1f} ms  p99 {p99 * 1000:6.1f} ms"
              f"  (CPU p50 {statistics.median(cpus) * 1000:6.1f} ms)")


if __name__ == "__main__":
    main()
