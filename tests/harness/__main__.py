"""`python -m tests.harness cluster up|down|status`: a local cluster for people (make cluster)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

from tests.harness import build, demo
from tests.harness.controlplane import ControlPlane, fake_node
from tests.harness.realnode import machinelock

STATE_DIR = demo.STATE_DIR
STATE_FILE = demo.STATE_FILE
_alive = demo.pid_alive


def up(nodes: int, cpu: str, memory: str) -> int:
    if STATE_FILE.exists():
        state = json.loads(STATE_FILE.read_text())
        if any(_alive(pid) for pid in state.get("pids", {}).values()) or demo.running_state() is not None:
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
    pids = {c.name: c.proc.pid for c in plane.components() if c.proc is not None}
    state = {"kubeconfig": str(plane.kubeconfig), "pids": pids, "kubectl": str(plane.binaries["kubectl"])}
    STATE_FILE.write_text(json.dumps(state))
    print(f"export KUBECONFIG={plane.kubeconfig}")
    print(f"alias kubectl={plane.binaries['kubectl']}", file=sys.stderr)
    print("try: kubectl get nodes; kubectl get nodemetrics   (make cluster-down stops it)", file=sys.stderr)
    return 0


def down() -> int:
    if not STATE_FILE.exists():
        swept = machinelock.sweep_if_free()  # a real node killed outright (kill -9, a frozen machine)
        print(f"no local cluster is running{'; swept what a dead real node left' if swept else ''}")
        return 0
    state = json.loads(STATE_FILE.read_text())
    if "keeper" in state:  # make demo's cluster: its keeper drains the real node and restores the host
        if demo.running_state() is not None:
            demo.stop_keeper(state)
        STATE_FILE.unlink(missing_ok=True)
        return 0
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
    if "keeper" in state:
        alive = demo.running_state() is not None
        print(
            f"make demo's cluster: keeper pid {state['keeper']} {'running' if alive else 'DEAD'}, log {demo.KEEPER_LOG}"
        )
        if state.get("prometheus"):
            print(f"Prometheus: {state['prometheus']}")
        print(demo.env_lines(state))
        return 0 if alive else 1
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
    cluster.add_argument("--with-loadline", action="store_true",
                         help="make demo: a real node beside kwok nodes, Loadline installed with helm, and a story")  # fmt: skip
    cluster.add_argument("--nodes", type=int, default=10, help="number of kwok fake nodes (default 10)")
    cluster.add_argument("--node-cpu", default="32", help="CPU capacity of each fake node (default 32)")
    cluster.add_argument("--node-memory", default="256Gi", help="memory capacity of each fake node (default 256Gi)")
    sub.add_parser("build", help="build the Kubernetes components into the cache")
    args = parser.parse_args(argv)
    if args.command == "build":
        return build.main([])
    if args.action == "up" and args.with_loadline:
        return demo.up(min(args.nodes, 3))
    if args.action == "up":
        return up(args.nodes, args.node_cpu, args.node_memory)
    if args.action == "down":
        return down()
    return status()


if __name__ == "__main__":
    sys.exit(main())
