"""This machine as a real Kubernetes node: containerd + runc + CNI bridge + kubelet against a ControlPlane.

    plane = ControlPlane.start(real_nodes=True)
    node = RealNode.start(plane)          # Ready node `node.name`, images importable with node.import_image
    ...
    node.stop()                           # pods, processes, mounts, links, chains, sysctls, cgroups: gone

The control plane must also run kube-controller-manager and kube-scheduler for DaemonSets and Deployments
(tests/integration/conftest.py starts them). Whatever a failed start or a crashed test leaves is removed by
`stop()`, which also runs at interpreter exit and on SIGTERM.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from tests.harness import build
from tests.harness.controlplane import ControlPlane
from tests.harness.processes import Component, http_ok, wait_until
from tests.harness.realnode import containerd, journal, machinelock
from tests.harness.realnode.hoststate import HostSnapshot
from tests.harness.realnode.kubelet import KubeletPorts, kubelet_component
from tests.harness.realnode.network import host_ip, route_kubernetes_service
from tests.harness.realnode.packages import ensure_packages
from tests.harness.realnode.pause import PAUSE_IMAGE, pause_archive

REAL_NODE_LABEL = "loadline.dev/real-node"
POD_SUBNET = "10.244.77.0/24"
BRIDGE = "lltest0"  # not cni0: never collide with a bridge of the machine's own
KUBEPODS_CPU = Path("/sys/fs/cgroup/cpu/kubepods")


def _log(msg: str) -> None:
    print(f"[realnode] {msg}", file=sys.stderr, flush=True)


@dataclass
class RealNode:
    plane: ControlPlane
    name: str
    ip: str
    root: Path
    snapshot: HostSnapshot
    containerd: Component | None = None
    kubelet: Component | None = None
    ports: KubeletPorts | None = None
    startup_seconds: float = 0.0
    # cpu.shares of kubepods (0: kubelet's own, 1024 per allocatable core). A shared machine's other work runs
    # beside kubepods at 1024 per busy process; a large weight lets test pods get the CPU they ask for.
    pods_cpu_weight: int = 0
    lock: int | None = None  # machinelock file descriptor while the node runs
    restored: list[str] = field(default_factory=list)  # what stop() had to sweep from the host
    leftovers: list[str] = field(default_factory=list)  # what differs from before start() after stop()
    _stopped: bool = False

    # --- lifecycle ------------------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        plane: ControlPlane,
        *,
        name: str = "loadline-real-0",
        images: list[Path] | None = None,
        pods_cpu_weight: int = 0,
    ) -> RealNode:
        started = time.monotonic()
        ensure_packages()
        kubelet_binary = build.ensure(["kubelet"])["kubelet"]
        sandbox = pause_archive()
        lock = machinelock.acquire()
        try:
            snapshot = HostSnapshot.take()  # before the node's directory exists: a refusal leaves nothing behind
            node = cls(plane, name, host_ip(), Path(tempfile.mkdtemp(prefix="loadline-node-")), snapshot)
            # on disk before anything changes: a run killed outright is swept by the next one (journal.py)
            journal.record(snapshot, root=node.root, shim_marker=node.shim_marker, pid=os.getpid())
        except BaseException:
            machinelock.release(lock)
            raise
        node.lock, node.pods_cpu_weight = lock, pods_cpu_weight
        atexit.register(node.stop)
        _stop_on_sigterm()
        try:
            node._start(kubelet_binary, [sandbox, *(images or [])])
        except BaseException:
            node.stop()
            raise
        node.startup_seconds = time.monotonic() - started
        return node

    def _start(self, kubelet_binary: Path, images: list[Path]) -> None:
        logs = self.root / "logs"
        containerd.write_cni_config(self.root / "containerd", POD_SUBNET, BRIDGE)
        self.containerd = containerd.start_containerd(self.root / "containerd", PAUSE_IMAGE, logs)
        for archive in images:
            self.import_image(archive)
        route_kubernetes_service(self.ip, self.plane.port)
        self.kubelet, self.ports = kubelet_component(
            binary=kubelet_binary,
            root=self.root / "kubelet",
            kubeconfig=self.plane.kubeconfig,
            node_name=self.name,
            node_ip=self.ip,
            runtime_socket=containerd.socket_path(self.root / "containerd"),
            client_ca=self.plane.pki.ca_cert,
            log_dir=logs,
            labels={REAL_NODE_LABEL: "true"},
        )
        self.start_kubelet()

    def start_kubelet(self, timeout: float = 90) -> None:
        assert self.kubelet is not None and self.ports is not None and self.containerd is not None
        self.kubelet.start()
        healthz = f"http://127.0.0.1:{self.ports.healthz}/healthz"
        wait_until(
            "kubelet /healthz", lambda: http_ok(healthz), timeout, interval=0.2, alive=[self.kubelet, self.containerd]
        )
        wait_until(f"node {self.name} Ready", self.ready, timeout, interval=0.5, alive=[self.kubelet, self.containerd])
        if self.pods_cpu_weight:
            # kubelet sizes kubepods' cpu.shares from allocatable once at start; it never resets it.
            (KUBEPODS_CPU / "cpu.shares").write_text(f"{self.pods_cpu_weight}\n")

    def restart_kubelet(self) -> None:
        """Stop and start the kubelet (pods keep running under containerd, as on a real node)."""
        assert self.kubelet is not None
        self.kubelet.stop()
        self.start_kubelet()

    def ready(self) -> bool:
        proc = self.plane.kubectl("get", "node", self.name, "-o", "json", check=False)
        if proc.returncode != 0:
            return False
        conditions = json.loads(proc.stdout)["status"].get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def import_image(self, archive: Path) -> None:
        started = time.monotonic()
        containerd.import_image(self.root / "containerd", archive)
        _log(f"imported {archive.name} in {time.monotonic() - started:.1f}s")

    @property
    def shim_marker(self) -> str:
        """In the command line of this node's containerd shims (and of nothing else): its socket's path."""
        return str(containerd.socket_path(self.root / "containerd"))

    def components(self) -> list[Component]:
        return [c for c in (self.containerd, self.kubelet) if c is not None]

    def log_report(self, lines: int = 40) -> str:
        return "\n".join(f"----- {c.name} ({c.log_path}) -----\n{c.log_tail(lines)}" for c in self.components())

    def stop(self) -> None:
        """Remove the node's pods (through the kubelet while it runs), stop it, then sweep the host."""
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        try:
            if self.kubelet is not None and self.kubelet.alive():
                self._drain()
        finally:
            for component in (self.kubelet, self.containerd):
                if component is not None:
                    component.stop()
            self.restored = self.snapshot.restore(roots=[self.root], shim_marker=self.shim_marker)
            if self.restored:
                _log("restored: " + "; ".join(self.restored))
            self.plane.kubectl("delete", "node", self.name, "--wait=false", check=False, timeout=30)
            shutil.rmtree(self.root, ignore_errors=True)
            self.leftovers = self.snapshot.leftovers(roots=[self.root], shim_marker=self.shim_marker)
            if self.leftovers:
                _log("LEFT BEHIND: " + "; ".join(self.leftovers))
            journal.clear()  # restored as far as it goes; what is left is reported above and by the tests
            if self.lock is not None:
                machinelock.release(self.lock)
                self.lock = None

    def _drain(self, timeout: float = 30) -> None:
        """Delete every pod bound here and wait until the kubelet has stopped their sandboxes (CNI DEL runs,
        volumes are unmounted). Whatever is left after `timeout` the host sweep removes."""
        selector = f"spec.nodeName={self.name}"
        self.plane.kubectl("delete", "pods", "-A", f"--field-selector={selector}", "--grace-period=0", "--force",
                           "--wait=false", check=False, timeout=60)  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sandboxes = containerd.ctr(self.root / "containerd", "tasks", "ls", "-q", check=False).stdout.split()
            if not sandboxes:
                return
            time.sleep(0.5)
        _log(f"pods still running {timeout:.0f}s after their deletion; sweeping")


def _stop_on_sigterm() -> None:
    """SIGTERM (a CI job being cancelled) becomes SystemExit, so try/finally and atexit teardown still run."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:

        def _exit(signum: int, frame: FrameType | None) -> None:
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, _exit)
