"""kubelet v1.36.3 configured for this machine (cgroup v1 hosts, containerd 1.6, no CAP_SYS_RESOURCE)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.harness.processes import Component, free_port


@dataclass(frozen=True)
class KubeletPorts:
    port: int  # HTTPS, authenticated by webhook (tokens) or x509 (the apiserver's client cert)
    healthz: int  # plain HTTP on 127.0.0.1


def kubelet_config(root: Path, *, runtime_socket: Path, client_ca: Path, ports: KubeletPorts) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # 1.36 refuses cgroup v1 unless told; containerd 1.6 lacks the RuntimeConfig call the systemd driver needs.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{runtime_socket}",
        "port": ports.port,
        "healthzPort": ports.healthz,
        "healthzBindAddress": "127.0.0.1",
        "readOnlyPort": 0,
        "resolvConf": "",
        "podLogsDir": str(root / "pod-logs"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        # A shared test machine: evict nothing for disk or memory pressure, never garbage-collect the imported
        # images (there is no registry to pull them back from).
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "nodeStatusUpdateFrequency": "5s",
        "nodeStatusReportFrequency": "10s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "5s",
        "maxPods": 60,
        "protectKernelDefaults": False,
    }


def kubelet_component(
    *,
    binary: Path,
    root: Path,
    kubeconfig: Path,
    node_name: str,
    node_ip: str,
    runtime_socket: Path,
    client_ca: Path,
    log_dir: Path,
    labels: dict[str, str],
) -> tuple[Component, KubeletPorts]:
    """A kubelet Component (not started yet) and its ports."""
    ports = KubeletPorts(free_port(), free_port())
    root.mkdir(parents=True, exist_ok=True)
    config = root / "kubelet-config.yaml"
    config.write_text(
        yaml.safe_dump(kubelet_config(root, runtime_socket=runtime_socket, client_ca=client_ca, ports=ports))
    )
    argv = [
        str(binary),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={root / 'root'}",
        f"--cert-dir={root / 'pki'}",
        f"--hostname-override={node_name}",
        # Not loopback ("nodeIP can't be loopback address"): the machine's own address, so logs/exec work.
        f"--node-ip={node_ip}",
        f"--node-labels={','.join(f'{k}={v}' for k, v in labels.items())}",
        "--v=1",
    ]
    return Component("kubelet", argv, log_dir / "kubelet.log"), ports
