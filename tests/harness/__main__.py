"""`python -m tests.harness cluster up|down|status`: a local cluster for people (make cluster)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

from tests.harness import build
from tests.harness.controlplane import ControlPlane, fake_node

STATE_DIR = build.cache_root() / "cluster"
STATE_FILE = STATE_DIR / "state.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def up(nodes: int, cpu: str, memory: str, *, with_loadline: bool = False) -> int:
    if STATE_FILE.exists():
        state = json.loads(STATE_FILE.read_text())
        if any(_alive(pid) for pid in state["pids"].values()):
            print(
                f"a cluster is already running; export KUBECONFIG={state['kubeconfig']}  (make cluster-down stops it)"
            )
            return 0
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    root = STATE_DIR / "root"
    if root.exists():
        import shutil

        shutil.rmtree(root)
    print("==> starting etcd and kube-apiserver", file=sys.stderr)
    plane = ControlPlane.start(root, keep_root=True)
    print(
        f"==> control plane ready in {plane.startup_seconds:.1f}s; starting kwok with {nodes} fake nodes",
        file=sys.stderr,
    )
    plane.start_kwok()
    plane.apply([fake_node(f"kwok-node-{i}", cpu=cpu, memory=memory) for i in range(nodes)])
    started = time.monotonic()
    plane.kubectl("wait", "--for=condition=Ready", "node", "--all", "--timeout=120s")
    print(f"==> {nodes} nodes Ready in {time.monotonic() - started:.1f}s", file=sys.stderr)
    if with_loadline:
        from tests.harness import demo

        print("==> starting Loadline: manager, agent --simulate, scheduler, descheduler", file=sys.stderr)
        ports = demo.start_loadline(plane, STATE_DIR / "config")
        print("==> waiting for the first NodeMetrics from the simulated agent", file=sys.stderr)
        reported = demo.wait_for_nodemetrics(plane, nodes)
        print(f"==> {reported}/{nodes} nodes have a NodeMetric; creating a workload for loadline-scheduler", file=sys.stderr)
        # Before its first report a node's NodeMetric has no updateTime, and LoadAwareScheduling (Koordinator's
        # default filterExpiredNodeMetrics) treats it as expired: seed the pods once every node has reported.
        demo.seed_workload(plane)
        demo.wait_for_scheduled(plane)
        print(plane.kubectl("get", "nodemetrics").stdout, file=sys.stderr)
        print(plane.kubectl("get", "pods", "-o", "wide").stdout, file=sys.stderr)
        print(f"metrics: agent :{ports['agent']}, manager :{ports['manager']}, scheduler :{ports['scheduler']}, "
              f"descheduler :{ports['descheduler']} (/metrics); logs in {plane.root / 'logs'}", file=sys.stderr)  # fmt: skip
    pids = {c.name: c.proc.pid for c in plane.components() if c.proc is not None}
    state = {"kubeconfig": str(plane.kubeconfig), "pids": pids, "kubectl": str(plane.binaries["kubectl"])}
    if with_loadline:
        # `loadline explain` reads this to find the demo's scheduler on its free port
        state["scheduler_url"] = f"http://127.0.0.1:{ports['scheduler']}"
    STATE_FILE.write_text(json.dumps(state))
    print(f"export KUBECONFIG={plane.kubeconfig}")
    print(f"alias kubectl={plane.binaries['kubectl']}", file=sys.stderr)
    print("try: kubectl get nodes; kubectl get nodemetrics   (make cluster-down stops it)", file=sys.stderr)
    return 0


def down() -> int:
    if not STATE_FILE.exists():
        print("no local cluster is running")
        return 0
    state = json.loads(STATE_FILE.read_text())
    for name, pid in sorted(state["pids"].items(), key=lambda kv: (kv[0] == "etcd", kv[0] == "kube-apiserver")):
        if _alive(pid):
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            for _ in range(100):
                if not _alive(pid):
                    break
                time.sleep(0.1)
            else:
                os.killpg(pid, signal.SIGKILL)
            print(f"stopped {name} (pid {pid})")
    STATE_FILE.unlink()
    return 0


def status() -> int:
    if not STATE_FILE.exists():
        print("no local cluster is running")
        return 1
    state = json.loads(STATE_FILE.read_text())
    for name, pid in state["pids"].items():
        print(f"{name:16} pid {pid:7}  {'running' if _alive(pid) else 'DEAD'}")
    print(f"export KUBECONFIG={state['kubeconfig']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.harness", description="Local Kubernetes control plane built from source."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    cluster = sub.add_parser("cluster", help="start or stop a local cluster with kwok fake nodes")
    cluster.add_argument("action", choices=["up", "down", "status"])
    cluster.add_argument("--with-loadline", action="store_true", help="also run Loadline's components and a demo workload")
    cluster.add_argument("--nodes", type=int, default=10, help="number of kwok fake nodes (default 10)")
    cluster.add_argument("--node-cpu", default="32", help="CPU capacity of each fake node (default 32)")
    cluster.add_argument("--node-memory", default="256Gi", help="memory capacity of each fake node (default 256Gi)")
    sub.add_parser("build", help="build the Kubernetes components into the cache")
    args = parser.parse_args(argv)
    if args.command == "build":
        return build.main([])
    if args.action == "up":
        return up(args.nodes, args.node_cpu, args.node_memory, with_loadline=args.with_loadline)
    if args.action == "down":
        return down()
    return status()


if __name__ == "__main__":
    sys.exit(main())
