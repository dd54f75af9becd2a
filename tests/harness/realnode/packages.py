"""The Debian packages a real node needs, installed by the harness itself when a tool is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

# tool (or file) that must exist -> the Debian package that provides it
REQUIRED: dict[str, str] = {
    "containerd": "containerd",  # 1.6 in bookworm; also brings ctr
    "ctr": "containerd",
    "runc": "runc",  # crun fails here: "cgroups in hybrid mode not supported"
    "/usr/lib/cni/bridge": "containernetworking-plugins",
    "/usr/lib/cni/host-local": "containernetworking-plugins",
    "/usr/lib/cni/loopback": "containernetworking-plugins",
    "iptables": "iptables",  # kubelet's KUBE-* chains, the harness's service DNAT
    "gcc": "gcc",  # the pause image's static binary
    "/usr/lib/x86_64-linux-gnu/libc.a": "libc6-dev",
    "mount": "mount",
    "ip": "iproute2",
}

PACKAGES = sorted(set(REQUIRED.values()))


class PackagesMissing(RuntimeError):
    pass


def _present(tool: str) -> bool:
    return os.path.exists(tool) if tool.startswith("/") else shutil.which(tool) is not None


def missing_packages(required: dict[str, str] | None = None) -> list[str]:
    return sorted({package for tool, package in (required or REQUIRED).items() if not _present(tool)})


def ensure_packages(required: dict[str, str] | None = None, *, purpose: str = "a real node") -> None:
    """`apt-get install` whatever of `required` (tool or file -> package; default the real node's) is missing, once
    per machine; a failure names the packages."""
    missing = missing_packages(required)
    if not missing:
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise PackagesMissing(
            f"{purpose} needs the Debian packages {missing} (apt-get install -y {' '.join(missing)})"
        )
    print(f"[harness] apt-get install {' '.join(missing)} for {purpose}", file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
    ):
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise PackagesMissing(
                f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
            )
    still = missing_packages(required)
    if still:
        raise PackagesMissing(f"still missing after apt-get install: {still}")


if __name__ == "__main__":
    ensure_packages()
