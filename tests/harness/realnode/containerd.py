"""containerd (Debian's 1.6) with its own root, state, socket and CNI config: never a system containerd's."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

from tests.harness.processes import Component, wait_until

CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins
NAMESPACE = "k8s.io"  # the CRI plugin's containerd namespace


def _config(root: Path, sandbox_image: str) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{root / "root"}"
state = "{root / "state"}"
oom_score = 0

[grpc]
  address = "{socket_path(root)}"

[ttrpc]
  address = "{root / "containerd.sock.ttrpc"}"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{root / "opt"}"

[{cri}]
  sandbox_image = "{sandbox_image}"
  # No CAP_SYS_RESOURCE here: runc cannot lower oom_score_adj, every sandbox would fail without this.
  restrict_oom_score_adj = true
  enable_cdi = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[{cri}.containerd]
  default_runtime_name = "runc"
  snapshotter = "overlayfs"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false

[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{root / "net.d"}"
  max_conf_num = 1
"""


def socket_path(root: Path) -> Path:
    return root / "containerd.sock"


def write_cni_config(root: Path, subnet: str, bridge: str) -> None:
    """bridge + host-local on a private subnet; no masquerade (pods only talk to this host)."""
    conf = {
        "cniVersion": "1.0.0",
        "name": "loadline-test",
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(root / "ipam"),
                },
            },
            {"type": "loopback"},
        ],
    }
    net_d = root / "net.d"
    net_d.mkdir(parents=True, exist_ok=True)
    (net_d / "10-loadline.conflist").write_text(json.dumps(conf, indent=2))


def start_containerd(root: Path, sandbox_image: str, log_dir: Path) -> Component:
    root.mkdir(parents=True, exist_ok=True)
    config = root / "config.toml"
    config.write_text(_config(root, sandbox_image))
    containerd = Component("containerd", ["containerd", f"--config={config}"], log_dir / "containerd.log")
    containerd.start()
    wait_until(
        "containerd socket",
        lambda: ctr(root, "version", check=False).returncode == 0,
        30,
        interval=0.2,
        alive=[containerd],
    )
    return containerd


def ctr(root: Path, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    argv = ["ctr", f"--address={socket_path(root)}", f"--namespace={NAMESPACE}", *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc


def archive_images(archive: Path) -> dict[str, str]:
    """image name -> manifest digest, from an OCI archive's index.json (containerd's name annotation, else the
    OCI ref.name, which buildah sets to the full reference)."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise RuntimeError(f"{archive} has no index.json: not an OCI archive")
        index = json.load(member)
    names = {}
    for desc in index.get("manifests") or []:
        annotations = desc.get("annotations") or {}
        name = annotations.get("io.containerd.image.name") or annotations.get("org.opencontainers.image.ref.name")
        if name:
            names[name] = desc["digest"]
    if not names:
        raise RuntimeError(f"{archive} names no image (no ref.name annotation in index.json)")
    return names


def import_image(root: Path, archive: Path) -> list[str]:
    """`ctr images import` an OCI archive into the CRI namespace (kubelet then never pulls it), named as the
    archive says. ctr alone drops a full reference in ref.name (it only prefixes bare tags), so the import
    makes digest-named images and tags each with its name."""
    names = archive_images(archive)
    ctr(root, "images", "import", "--base-name=loadline-import", "--digests", str(archive))
    for name, digest in names.items():
        ctr(root, "images", "tag", "--force", f"loadline-import@{digest}", name)
        ctr(root, "images", "rm", f"loadline-import@{digest}", check=False)
    listed = ctr(root, "images", "ls", "-q").stdout.split()
    missing = [n for n in names if n not in listed]
    if missing:
        raise RuntimeError(f"importing {archive} did not create {missing} (containerd has {listed})")
    return sorted(names)
