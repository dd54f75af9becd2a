"""Single-layer OCI image archives written directly (no registry, no image builder), for `ctr images import`."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar"


@dataclass(frozen=True)
class LayerFile:
    path: str  # inside the image, without a leading slash
    data: bytes
    mode: int = 0o755


def _tar_bytes(files: list[LayerFile]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for f in files:
            info = tarfile.TarInfo(f.path)
            info.size, info.mode, info.mtime = len(f.data), f.mode, 0
            tar.addfile(info, io.BytesIO(f.data))
    return buf.getvalue()


def _blob(data: bytes) -> tuple[str, bytes]:
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def write_archive(dest: Path, name: str, files: list[LayerFile], config: dict[str, Any]) -> Path:
    """Write an OCI image layout tar with one uncompressed layer; `name` becomes the containerd image name."""
    layer_digest, layer = _blob(_tar_bytes(files))
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }
    config_digest, config_bytes = _blob(json.dumps(image_config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, "digest": config_digest, "size": len(config_bytes)},
        "layers": [{"mediaType": LAYER, "digest": layer_digest, "size": len(layer)}],
    }
    manifest_digest, manifest_bytes = _blob(json.dumps(manifest, sort_keys=True).encode())
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": MANIFEST,
                "digest": manifest_digest,
                "size": len(manifest_bytes),
                "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name},
            }
        ],
    }
    entries = [
        ("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode()),
        ("index.json", json.dumps(index).encode()),
        *((f"blobs/sha256/{d.split(':', 1)[1]}", b) for d, b in
          [(layer_digest, layer), (config_digest, config_bytes), (manifest_digest, manifest_bytes)]),
    ]  # fmt: skip
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_suffix(".partial")
    with tarfile.open(partial, "w") as tar:
        for path, data in entries:
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    partial.replace(dest)
    return dest
