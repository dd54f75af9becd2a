"""The predictor's models on disk (a hostPath in the chart), so a restarted agent keeps what it learnt.

One JSON file, `peak-models.json` in the checkpoint directory, written whole: to a temporary file beside it, fsync,
rename over the old one, fsync the directory, so a crash leaves the old file or the new one, never half of one.

    {"format": "loadline.io/peak-models", "version": 1, "savedAt": <epoch s>,
     "cpu": {"buckets": {...}, "halfLifeSeconds": 43200}, "memory": {...},
     "models": [{"uid": ..., "firstSample": <s>, "lastUpdated": <s>,
                 "cpu": {"referenceTimestamp": <s>, "bucketWeights": {"12": 10000, ...}, "totalWeight": ...},
                 "memory": {...}}, ...]}

Each histogram is in the shape of Koordinator's HistogramCheckpoint (`pkg/util/histogram/histogram_checkpoint.go`).
koordlet writes one file per model instead (`/prediction-checkpoints/<uid>`); the two do not read each other's.

Reading never raises: a file that is not JSON (corrupt, truncated), of another format or version, with other
buckets or half-lives, or with a malformed model, is a `Restored` with `models=None` and the reason, which the
predictor logs and counts before starting from empty models (a reset). The bad file is kept aside as
`peak-models.json.rejected` for a human to look at, and the next save replaces it.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

FORMAT: Final = "loadline.io/peak-models"
VERSION: Final = 1
FILENAME: Final = "peak-models.json"
MAX_BYTES: Final = 64 << 20  # far above 512 pods (~0.5 MB); a larger file is not ours


@dataclass(frozen=True, slots=True)
class Restored:
    models: list[dict[str, Any]] | None  # None: nothing usable (see `reason`)
    reason: str  # why not, or what was restored
    saved_at: float | None = None


def header(cpu: dict[str, Any], memory: dict[str, Any]) -> dict[str, Any]:
    """The part of a checkpoint that must match for its histograms to mean the same thing."""
    return {"format": FORMAT, "version": VERSION, "cpu": cpu, "memory": memory}


def path_in(directory: Path) -> Path:
    return directory / FILENAME


def save(directory: Path, head: dict[str, Any], models: list[dict[str, Any]], saved_at: float) -> int:
    """Write the checkpoint atomically; returns its size in bytes. Raises OSError."""
    directory.mkdir(parents=True, exist_ok=True)
    body = json.dumps({**head, "savedAt": saved_at, "models": models}, separators=(",", ":")).encode()
    target = path_in(directory)
    tmp = target.with_name(target.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, body)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return len(body)


def _reject(target: Path, reason: str) -> Restored:
    with contextlib.suppress(OSError):
        os.replace(target, target.with_name(target.name + ".rejected"))
    return Restored(None, reason)


def load(directory: Path, head: dict[str, Any]) -> Restored:
    """Read the checkpoint in `directory`; see the module docstring for what counts as unusable."""
    target = path_in(directory)
    try:
        with open(target, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return Restored(None, f"no checkpoint at {target} (first start)")
    except OSError as exc:
        return Restored(None, f"cannot read {target}: {exc}")
    if len(raw) > MAX_BYTES:
        return _reject(target, f"{target} is larger than {MAX_BYTES} bytes: not a checkpoint of ours")
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return _reject(target, f"{target} is not JSON (corrupt or truncated, {len(raw)} bytes): {exc}")
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return _reject(target, f"{target} is not a Loadline peak-model checkpoint (format {_field(doc, 'format')})")
    if doc.get("version") != VERSION:
        return _reject(target, f"{target} has version {doc.get('version')!r}, this agent reads version {VERSION}")
    for name in ("cpu", "memory"):
        if doc.get(name) != head[name]:
            return _reject(target, f"{target} has other {name} histograms ({doc.get(name)!r}, now {head[name]!r})")
    models = doc.get("models")
    if not isinstance(models, list):
        return _reject(target, f"{target} has no list of models")
    saved_at = doc.get("savedAt")
    saved = float(saved_at) if isinstance(saved_at, (int, float)) and not isinstance(saved_at, bool) else None
    return Restored(models, f"{len(models)} models from {target}", saved)


def reject(directory: Path, reason: str) -> Restored:
    """Set the checkpoint aside after its models turned out malformed."""
    return _reject(path_in(directory), reason)


def _field(doc: Any, name: str) -> str:
    return repr(doc.get(name)) if isinstance(doc, dict) else f"a JSON {type(doc).__name__}"


__all__ = ["FILENAME", "FORMAT", "VERSION", "Restored", "header", "load", "path_in", "reject", "save"]
