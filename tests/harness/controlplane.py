"""A real Kubernetes control plane on loopback: etcd + kube-apiserver (+ kwok, kube-scheduler).

Used by the pytest fixtures (tests/conftest.py), by `make cluster` and by benchmarks.
Everything lives under one temporary root, which `stop()` removes.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.harness import build
from tests.harness.pki import Pki, make_pki
from tests.harness.processes import Component, free_port, http_ok, wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
CRDS_DIR = REPO_ROOT / "deploy" / "crds"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"


@dataclass
class ControlPlane:
    root: Path
    binaries: dict[str, Path]
    pki: Pki
    token: str
    port: int
    etcd: Component
    apiserver: Component
    kubeconfig: Path
    extra: list[Component] = field(default_factory=list)
    keep_root: bool = False
    audit_log: Path | None = None  # with `start(audit=True)`: every service account's request, one JSON line each

    def binary(self, name: str) -> Path:
        """Path of a component, building it on first use (kwok, kube-scheduler and helm are optional)."""
        if name not in self.binaries:
            self.binaries.update(build.ensure([name]))
        return self.binaries[name]

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # --- lifecycle ---------------------------------------------------------------
    @classmethod
    def start(
        cls,
        root: Path | None = None,
        *,
        install_crds: bool = True,
        keep_root: bool = False,
        real_nodes: bool = False,
        audit: bool | None = None,
        disable_admission: Sequence[str] = (),
        profiling: bool = False,
        apiserver_args: Sequence[str] = (),
    ) -> ControlPlane:
        """`real_nodes`: a plane for kubelets (tests/harness/realnode) — listening beyond loopback so pods
        reach it, with ServiceAccount admission (pods get tokens; kube-controller-manager creates the accounts).
        `audit`: the API server's audit log of service-account requests (`audit_events()`), for RBAC tests; on by
        default with `real_nodes` (where Loadline runs with its own service accounts), off otherwise.
        `disable_admission`: more admission plugins to turn off. `profiling`: the API server serves
        /debug/pprof (a bench's CPU profile of it). `apiserver_args`: more kube-apiserver flags (e.g. a
        benchmark's own audit policy)."""
        started = time.monotonic()
        binaries = build.ensure(["etcd", "kube-apiserver", "kubectl"])
        root = root or Path(tempfile.mkdtemp(prefix="loadline-cp-"))
        root.mkdir(parents=True, exist_ok=True)
        try:
            pki = make_pki(root / "pki")
            token = secrets.token_hex(16)
            (root / "tokens.csv").write_text(f'{token},admin,admin-uid,"system:masters"\n')
            etcd_port, peer_port, port = free_port(), free_port(), free_port()
            audit = real_nodes if audit is None else audit
            audit_args = _audit_args(root) if audit else []
            etcd = Component(
                "etcd",
                [
                    str(binaries["etcd"]),
                    f"--data-dir={root / 'etcd'}",
                    f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                    f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                    f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                    f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                    f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                    "--unsafe-no-fsync=true",
                    "--log-level=warn",
                ],
                root / "logs" / "etcd.log",
            )
            apiserver = Component(
                "kube-apiserver",
                [
                    str(binaries["kube-apiserver"]),
                    f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                    f"--secure-port={port}",
                    # Pods on a real node reach it through the `kubernetes` Service's DNAT to this host's address.
                    f"--bind-address={'0.0.0.0' if real_nodes else '127.0.0.1'}",
                    "--advertise-address=127.0.0.1",
                    # A loopback advertise address is only valid without an endpoint reconciler.
                    "--endpoint-reconciler-type=none",
                    f"--cert-dir={root / 'apiserver-certs'}",
                    f"--tls-cert-file={pki.serving_cert}",
                    f"--tls-private-key-file={pki.serving_key}",
                    f"--token-auth-file={root / 'tokens.csv'}",
                    "--authorization-mode=RBAC",
                    f"--service-account-issuer=https://127.0.0.1:{port}",
                    f"--service-account-key-file={pki.sa_pub}",
                    f"--service-account-signing-key-file={pki.sa_key}",
                    # Without kube-controller-manager nothing would create default ServiceAccounts, nor lift
                    # the not-ready taint TaintNodesByCondition puts on every new Node.
                    "--disable-admission-plugins="
                    + ",".join([*(() if real_nodes else ("ServiceAccount",)), "TaintNodesByCondition",
                                *disable_admission]),
                    f"--kubelet-client-certificate={pki.kubelet_client_cert}",
                    f"--kubelet-client-key={pki.kubelet_client_key}",
                    # A real node's hostname (--hostname-override) resolves nowhere: dial its address.
                    "--kubelet-preferred-address-types=InternalIP,Hostname",
                    "--service-cluster-ip-range=10.0.0.0/24",
                    # No kube-proxy routes Service IPs here: the API server calls a webhook behind a Service (the
                    # chart's manager) at a ready endpoint's pod IP, which the host reaches over the CNI bridge.
                    *(["--enable-aggregator-routing=true"] if real_nodes else []),
                    "--allow-privileged=true",
                    f"--profiling={str(profiling).lower()}",
                    "--v=1",
                    *audit_args,
                    *apiserver_args,
                ],
                root / "logs" / "kube-apiserver.log",
            )
            plane = cls(root, binaries, pki, token, port, etcd, apiserver, root / "kubeconfig", keep_root=keep_root)
            plane.audit_log = audit_log_path(root) if audit else None
            plane._write_kubeconfig()
            etcd.start()
            wait_until(
                "etcd health", lambda: http_ok(f"http://127.0.0.1:{etcd_port}/health", expect=b"true"), 30, alive=[etcd]
            )
            plane.start_apiserver()
            if install_crds:
                plane.install_crds()
        except BaseException:
            if "plane" in locals():
                plane.stop()
            elif not keep_root:
                shutil.rmtree(root, ignore_errors=True)
            raise
        plane.startup_seconds = time.monotonic() - started
        return plane

    startup_seconds: float = 0.0

    def start_apiserver(self, timeout: float = 90) -> None:
        self.apiserver.start()
        wait_until(
            "kube-apiserver /readyz",
            lambda: http_ok(f"{self.server}/readyz", token=self.token, ca_file=self.pki.ca_cert, expect=b"ok"),
            timeout,
            alive=[self.etcd, self.apiserver],
        )

    def stop_apiserver(self) -> None:
        self.apiserver.stop()

    def stop(self) -> None:
        for comp in reversed(self.extra):
            comp.stop()
        self.apiserver.stop()
        self.etcd.stop()
        if not self.keep_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def stop_component(self, component: Component) -> None:
        component.stop()  # stays in `extra` so its log is still reported

    def components(self) -> list[Component]:
        return [self.etcd, self.apiserver, *self.extra]

    def log_report(self, lines: int = 40) -> str:
        return "\n".join(f"----- {c.name} ({c.log_path}) -----\n{c.log_tail(lines)}" for c in self.components())

    def audit_events(self) -> list[dict[str, Any]]:
        """The audit log so far (ResponseComplete stage only: one event per request, with its status code)."""
        if self.audit_log is None:
            raise RuntimeError("the control plane was started without audit=True")
        return read_audit_log(self.audit_log)

    # --- clients -----------------------------------------------------------------
    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "loadline",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": base64.b64encode(self.pki.ca_cert.read_bytes()).decode(),
                    },
                }
            ],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "loadline", "context": {"cluster": "loadline", "user": "admin"}}],
            "current-context": "loadline",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))
        self.kubeconfig.chmod(0o600)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 180
    ) -> subprocess.CompletedProcess[str]:
        argv = [
            str(self.binaries["kubectl"]),
            f"--kubeconfig={self.kubeconfig}",
            f"--cache-dir={self.root / 'kubectl-cache'}",
            *args,
        ]
        proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
        return proc

    def apply(self, objects: Sequence[Mapping[str, Any]] | Mapping[str, Any]) -> None:
        items = [objects] if isinstance(objects, Mapping) else list(objects)
        self.kubectl(
            "apply", "--server-side", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
        )

    def install_crds(self, directory: Path = CRDS_DIR) -> None:
        self.kubectl("apply", "--server-side", "-f", str(directory))
        # Polled rather than `kubectl wait`: a CRD created an instant ago may have no status.conditions yet, which
        # `kubectl wait` reports as an error instead of waiting.
        wait_until("every CRD Established", self._crds_established, 60, interval=0.5)

    def _crds_established(self) -> bool:
        crds = json.loads(self.kubectl("get", "crd", "-o", "json").stdout)["items"]
        return all(
            any(
                c.get("type") == "Established" and c.get("status") == "True"
                for c in (crd.get("status") or {}).get("conditions") or []
            )
            for crd in crds
        )

    # --- optional components --------------------------------------------------------
    def start_kwok(self, *, node_lease_duration_seconds: int = 40) -> Component:
        """kwok managing every node annotated `kwok.x-k8s.io/node=fake` (nodes Ready, pods Running).
        kwok renews each node's Lease every quarter of `node_lease_duration_seconds`: a benchmark with thousands
        of nodes passes a long one so the renewals do not load the API server."""
        kwok = Component(
            "kwok",
            [
                str(self.binary("kwok")),
                f"--kubeconfig={self.kubeconfig}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
                "--cidr=10.0.0.0/16",
                "--node-ip=10.0.0.1",
                f"--node-lease-duration-seconds={node_lease_duration_seconds}",
                f"--server-address=127.0.0.1:{free_port()}",
            ],
            self.root / "logs" / "kwok.log",
            env={**os.environ, "HOME": str(self.root / "kwok-home")},
        )
        kwok.start()
        self.extra.append(kwok)
        return kwok

    def start_controller_manager(self, controllers: Sequence[str] = ("*",), *, extra_args: Sequence[str] = ()) -> Component:
        """kube-controller-manager with its default controllers (DaemonSets, Deployments, ReplicaSets,
        ServiceAccounts and their tokens, the kube-root-ca.crt ConfigMap pods' token volumes mount, ...), or only
        `controllers` (e.g. without the node lifecycle controller, which evicts the pods of a kwok node whose
        Lease a loaded host renewed late); `extra_args`: more flags (e.g. `--kube-api-qps`)."""
        port = free_port()
        kcm = Component(
            "kube-controller-manager",
            [
                str(self.binary("kube-controller-manager")),
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--leader-elect=false",
                f"--service-account-private-key-file={self.pki.sa_key}",
                f"--root-ca-file={self.pki.ca_cert}",
                "--use-service-account-credentials=false",
                "--concurrent-deployment-syncs=10",
                "--concurrent-replicaset-syncs=10",
                "--concurrent-daemonset-syncs=4",
                f"--controllers={','.join(controllers)}",
                "--v=1",
                *extra_args,
            ],
            self.root / "logs" / "kube-controller-manager.log",
        )
        kcm.start()
        self.extra.append(kcm)
        wait_until(
            "kube-controller-manager /healthz",
            lambda: http_ok(f"https://127.0.0.1:{port}/healthz", insecure=True),
            60,
            alive=[kcm],
        )
        return kcm

    def start_kube_scheduler(
        self, profiles: list[dict[str, Any]] | None = None, *, name: str = "kube-scheduler", verbosity: int = 1,
        extra_args: Sequence[str] = (), **config: Any
    ) -> Component:
        """The real kube-scheduler with a KubeSchedulerConfiguration built from `profiles` and `config`
        (`extra_args`: more flags, e.g. `--authorization-always-allow-paths=/metrics,...` for a bench)."""
        port = free_port()
        document: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig), "qps": 5000, "burst": 5000},
            "leaderElection": {"leaderElect": False},
            "profiles": profiles or [{"schedulerName": "default-scheduler"}],
            **config,
        }
        path = self.root / f"{name}-config.yaml"
        path.write_text(yaml.safe_dump(document))
        scheduler = Component(
            name,
            [
                str(self.binary("kube-scheduler")),
                f"--config={path}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--v={verbosity}",
                *extra_args,
            ],
            self.root / "logs" / f"{name}.log",
        )
        scheduler.start()
        self.extra.append(scheduler)
        wait_until(
            f"{name} /healthz",
            lambda: http_ok(f"https://127.0.0.1:{port}/healthz", insecure=True),
            60,
            alive=[scheduler],
        )
        return scheduler


def audit_log_path(root: Path) -> Path:
    return root / "logs" / "audit.log"


def read_audit_log(path: Path) -> list[dict[str, Any]]:
    """An audit log's ResponseComplete events (one per request, with its status code); also read by `make demo`,
    whose foreground process has the keeper's log file but not its ControlPlane."""
    if not path.exists():
        return []
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in events if e.get("stage") == "ResponseComplete"]


def _audit_args(root: Path) -> list[str]:
    """Metadata (who, verb, URI, status code) of every service account's request; nothing of anyone else's
    (the admin token's kubectl calls would only fill the log)."""
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
            {"level": "None"},
        ],
    }
    path = root / "audit-policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    audit_log_path(root).parent.mkdir(parents=True, exist_ok=True)
    return [f"--audit-policy-file={path}", f"--audit-log-path={audit_log_path(root)}", "--audit-log-format=json",
            "--audit-log-mode=blocking"]  # fmt: skip


def fake_node(
    name: str,
    *,
    cpu: str = "32",
    memory: str = "256Gi",
    pods: str = "110",
    labels: Mapping[str, str] | None = None,
    extra_allocatable: Mapping[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A Node object kwok will manage, with the capacity the test chooses."""
    resources = {"cpu": cpu, "memory": memory, "pods": pods, **(extra_allocatable or {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **(labels or {}),
            },
        },
        "spec": {"taints": taints} if taints else {},
        "status": {"allocatable": resources, "capacity": resources, "phase": "Running"},
    }
