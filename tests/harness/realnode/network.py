"""Host networking for a real test node: its address, and a one-Service stand-in for kube-proxy."""

from __future__ import annotations

import re
import subprocess

SERVICE_CHAIN = "LOADLINE-SERVICES"
KUBERNETES_SERVICE_IP = "10.0.0.1"  # first address of the control plane's --service-cluster-ip-range


def host_ip() -> str:
    """The source address of the default route (what kubelet would choose; never loopback)."""
    out = subprocess.run(
        ["ip", "-4", "route", "get", "192.0.2.255"], capture_output=True, text=True, check=False
    ).stdout
    match = re.search(r"\bsrc (\d+\.\d+\.\d+\.\d+)", out)
    if not match:
        raise RuntimeError(f"cannot find this machine's address (ip route get: {out.strip() or 'no route'})")
    return match.group(1)


def _iptables(*args: str) -> None:
    proc = subprocess.run(["iptables", "-w", "-t", "nat", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"iptables -t nat {' '.join(args)} failed: {proc.stderr.strip()}")


def route_kubernetes_service(node_ip: str, apiserver_port: int) -> None:
    """DNAT the `kubernetes` Service (what in-cluster clients dial) to the API server on this host, from pods
    (PREROUTING) and from host-network pods (OUTPUT). There is no kube-proxy; HostSnapshot.restore removes
    the chain with every other chain that appeared."""
    _iptables("-N", SERVICE_CHAIN)
    _iptables("-A", SERVICE_CHAIN, "-d", f"{KUBERNETES_SERVICE_IP}/32", "-p", "tcp", "--dport", "443",
              "-j", "DNAT", "--to-destination", f"{node_ip}:{apiserver_port}")  # fmt: skip
    for builtin in ("PREROUTING", "OUTPUT"):
        _iptables("-I", builtin, "1", "-j", SERVICE_CHAIN)
