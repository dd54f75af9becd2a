"""Loadline's container image, built from the top-level Dockerfile with no registry (`make image`).

The same Dockerfile users build with `docker build .` is built here by Debian's buildah (runc runtime,
no network inside the build):

* the base image is a Debian root filesystem bootstrapped by mmdebstrap (`--variant=essential` plus
  python3, no docs, man pages or locales), cached as a tarball;
* the loadline wheel is built on the host from a copy of the package's files, and every dependency's
  wheel plus pip's own are downloaded on the host for the base's Python (pip inside a build container
  cannot verify TLS on this machine); that wheel directory is the build context (`WHEELS=wheels`);
* buildah keeps its storage in a private directory under the cache that is unmounted and deleted
  afterwards (nothing in /var/lib/containers, no containers left); the result is an OCI archive in the cache, named inside as `localhost/loadline:<version>` (or `name=`).

The archive is keyed by a hash of what goes into it (the package's files, the Dockerfile, the base
recipe, the image name), so a second `make image` with nothing changed returns at once:
    $LOADLINE_CACHE/images/loadline-<key>.tar   and   loadline-<key>.json (name, sizes, build time)

Dependencies are resolved when the image is built (pyproject's ranges, like `pip install` would); an
image is rebuilt when the package changes, not when a dependency publishes a new release.
Standard library only, like build.py.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tests.harness.build import cache_root

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("agent", "manager", "scheduler_plugin", "common")  # [tool.setuptools.packages.find] include
IMAGE_REPOSITORY = "localhost/loadline"
# Bump when the recipe below changes in a way the hashed inputs do not show.
RECIPE = "2"
# overlay is a minute faster than vfs here; its mounts live under the build directory and are unmounted
# when the build ends (and by the next build if this process was killed).
STORAGE_DRIVER = "overlay"


@dataclass(frozen=True)
class DebianBase:
    """The base root filesystem: what mmdebstrap installs and what the wheels must be built for."""

    suite: str = "bookworm"
    packages: tuple[str, ...] = ("python3", "libstdc++6")  # numpy's wheels link libstdc++
    python: str = "3.11"  # bookworm's python3
    glibc_minor: int = 36  # bookworm's glibc 2.36: the newest manylinux tag its wheels may carry
    arch: str = "x86_64"

    def key(self) -> str:
        return _digest(json.dumps(asdict(self), sort_keys=True).encode() + MMDEBSTRAP_OPTIONS_TEXT.encode())[:12]

    def image_name(self) -> str:
        return f"localhost/loadline-base:{self.suite}-{self.key()}"


BASE = DebianBase()
# Documentation, man pages and translations are never read in the image.
MMDEBSTRAP_OPTIONS = [
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    "--dpkgopt=path-exclude=/usr/share/info/*",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
]
MMDEBSTRAP_OPTIONS_TEXT = " ".join(MMDEBSTRAP_OPTIONS)
# command -> the Debian package that provides it
TOOLS = {"buildah": "buildah", "mmdebstrap": "mmdebstrap", "runc": "runc"}


class ImageError(RuntimeError):
    pass


@dataclass(frozen=True)
class ImageRef:
    name: str  # the reference stored in the archive, e.g. localhost/loadline:0.1.0
    archive: Path  # OCI archive (`ctr images import`, `buildah pull oci-archive:...`, `skopeo copy`)
    size: int  # bytes of the image's uncompressed layers
    key: str
    build_seconds: float = 0.0  # 0 when the archive came from the cache


def _log(msg: str) -> None:
    print(f"[image] {msg}", file=sys.stderr, flush=True)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _run(argv: list[str], what: str, *, cwd: Path | None = None) -> str:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise ImageError(f"{what} failed (exit {proc.returncode}): {' '.join(argv)}\n{tail}")
    return proc.stdout


def package_version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def default_name() -> str:
    return f"{IMAGE_REPOSITORY}:{package_version()}"


def package_files() -> list[Path]:
    """The files the wheel is built from, relative to the repository (no caches or bytecode)."""
    files = [Path("pyproject.toml"), Path("setup.py")]
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*")):
            rel = path.relative_to(REPO)
            # no bytecode, and no extension built in place by an editable install: the wheel compiles its own
            if path.is_file() and "__pycache__" not in rel.parts and path.suffix not in (".pyc", ".pyo", ".so"):
                files.append(rel)
    return files


def image_key(name: str) -> str:
    h = hashlib.sha256()
    for part in (RECIPE, name, BASE.key(), (REPO / "Dockerfile").read_text()):
        h.update(part.encode() + b"\0")
    for rel in package_files():
        h.update(str(rel).encode() + b"\0" + (REPO / rel).read_bytes() + b"\0")
    return h.hexdigest()[:16]


def images_dir() -> Path:
    return cache_root() / "images"


def ensure_tools() -> None:
    """buildah, mmdebstrap and runc from Debian, installed with apt-get when missing (needs root)."""
    missing = [pkg for cmd, pkg in TOOLS.items() if shutil.which(cmd) is None]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ImageError(f"building the image needs {', '.join(missing)} (Debian: apt-get install {' '.join(missing)})")
    _log(f"installing Debian packages: {' '.join(missing)}")
    install = [
        "apt-get", "install", "-y", "-qq", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=600", *missing,
    ]  # fmt: skip
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if subprocess.run(install, env=env, capture_output=True, check=False).returncode != 0:
        _run(["apt-get", "update", "-qq", "-o", "DPkg::Lock::Timeout=600"], "apt-get update")
        proc = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ImageError(f"apt-get install {' '.join(missing)} failed:\n{proc.stderr[-2000:]}")


def ensure_base_rootfs() -> Path:
    """The Debian root filesystem tarball the base image is made of (mmdebstrap, cached)."""
    dest = images_dir() / f"rootfs-{BASE.suite}-{BASE.key()}.tar"
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    _log(f"bootstrapping a Debian {BASE.suite} root filesystem with {', '.join(BASE.packages)} (mmdebstrap, ~1-2 min)")
    partial = dest.with_suffix(".partial.tar")
    _run(
        [
            "mmdebstrap", "--mode=root", "--variant=essential", "--format=tar", "--quiet",
            f"--include={','.join(BASE.packages)}",
            # merged /usr set up by mmdebstrap itself instead of the usrmerge package, which pulls in perl
            "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
            *MMDEBSTRAP_OPTIONS, BASE.suite, str(partial),
        ],
        "mmdebstrap",
    )  # fmt: skip
    os.replace(partial, dest)
    for stale in dest.parent.glob("rootfs-*.tar"):  # earlier recipes
        if stale != dest:
            stale.unlink(missing_ok=True)
    _log(f"root filesystem ready in {time.monotonic() - started:.0f}s ({dest.stat().st_size / 2**20:.0f} MiB)")
    return dest


def _pip(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]


def build_wheelhouse(dest: Path) -> None:
    """loadline's wheel (built from a copy of its files) and every dependency's wheel for the base's Python."""
    src = dest.parent / "src"
    for rel in package_files():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, src / rel)
    # The long description is not needed in the image, and a README edit should not rebuild it.
    (src / "README.md").write_text("Loadline: load-aware colocation for Kubernetes. See the project's README.\n")
    dest.mkdir(parents=True)
    _run(_pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(dest), str(src)), "building the loadline wheel")
    wheel = next(dest.glob("loadline-*.whl"))
    platforms = [f"manylinux_2_{m}_{BASE.arch}" for m in range(5, BASE.glibc_minor + 1)]
    platforms += [f"manylinux1_{BASE.arch}", f"manylinux2010_{BASE.arch}", f"manylinux2014_{BASE.arch}"]
    platforms.append(f"linux_{BASE.arch}")  # loadline's own wheel (its C reader, built here on bookworm's glibc)
    abi = "cp" + BASE.python.replace(".", "")
    _run(
        _pip(
            "download", "--quiet", "--dest", str(dest), "--only-binary=:all:",
            "--python-version", BASE.python, "--implementation", "cp", "--abi", abi, "--abi", "abi3",
            "--abi", "none", *[f"--platform={p}" for p in platforms], str(wheel), "pip",
        ),
        "downloading the dependencies' wheels",
    )  # fmt: skip


# containers/image keeps a blob-info cache here for root whatever --root says; removed again if buildah made it.
SYSTEM_BLOB_CACHE = Path("/var/lib/containers/cache/blob-info-cache-v1.boltdb")


class Buildah:
    """buildah with a private storage directory; close() removes its containers, images, mounts and files."""

    def __init__(self, work: Path) -> None:
        self.root = work / "storage"
        self.runroot = work / "run"
        self.root.mkdir(parents=True)
        self.runroot.mkdir(parents=True)
        self._made = [p for p in (SYSTEM_BLOB_CACHE, *SYSTEM_BLOB_CACHE.parents[:2]) if not p.exists()]

    def cmd(self, *args: str) -> list[str]:
        return [
            "buildah", "--root", str(self.root), "--runroot", str(self.runroot), "--storage-driver", STORAGE_DRIVER, *args,
        ]  # fmt: skip

    def run(self, *args: str, what: str) -> str:
        return _run(self.cmd(*args), what)

    def close(self) -> None:
        for args in (("rm", "--all"), ("rmi", "--all", "--force")):
            subprocess.run(self.cmd(*args), capture_output=True, check=False)
        for mountpoint in _mounts_under(self.root.parent):
            subprocess.run(["umount", "--lazy", mountpoint], capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.runroot, ignore_errors=True)
        for path in self._made:  # the file, then its directories if nothing else is in them
            with suppress(OSError):
                path.rmdir() if path.is_dir() else path.unlink()


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()) + "/"
    with open("/proc/self/mounts") as f:
        points = [line.split()[1].replace("\\040", " ") for line in f]
    return sorted((p for p in points if p.startswith(prefix)), reverse=True)


def _remove_stale_builds() -> None:
    """Build directories of processes that died before cleaning up: unmount and delete them."""
    for stale in images_dir().glob("build-*-*"):
        pid = stale.name.split("-")[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            for mountpoint in _mounts_under(stale):
                subprocess.run(["umount", "--lazy", mountpoint], capture_output=True, check=False)
            shutil.rmtree(stale, ignore_errors=True)


def _work_dir() -> Path:
    images_dir().mkdir(parents=True, exist_ok=True)
    _remove_stale_builds()
    return Path(tempfile.mkdtemp(prefix=f"build-{os.getpid()}-", dir=images_dir()))


@contextmanager
def buildah_session(work: Path | None = None) -> Iterator[Buildah]:
    """A private buildah; without `work`, in a directory of its own that is deleted afterwards."""
    own = work is None
    b = Buildah(work or _work_dir())
    try:
        yield b
    finally:
        b.close()
        if own:
            shutil.rmtree(b.root.parent, ignore_errors=True)


def load_archive(b: Buildah, ref: ImageRef) -> None:
    """Put the archived image into `b`'s storage under its name."""
    b.run("pull", "--quiet", f"oci-archive:{ref.archive}", what="loading the archive")


def _import_base(b: Buildah, rootfs: Path) -> str:
    name = BASE.image_name()
    ctr = b.run("from", "--pull-never", "scratch", what="buildah from scratch").strip()
    b.run("add", ctr, str(rootfs), "/", what="unpacking the root filesystem")
    b.run("config", "--cmd", "/bin/sh", "--created-by", f"mmdebstrap {BASE.suite} {' '.join(BASE.packages)}",
          ctr, what="buildah config")  # fmt: skip
    b.run("commit", "--rm", "--quiet", ctr, name, what="committing the base image")
    return name


# An archive used (returned by ensure_image) within this long is kept: several checkouts share the cache, and a run
# that waits for the machine's real node (up to 15 min) imports its archive only then.
KEEP_USED_SECONDS = 6 * 3600


def _prune(keep: Path) -> None:
    """Older loadline archives: the newest two besides this one stay, and any used in the last KEEP_USED_SECONDS."""
    old = sorted(images_dir().glob("loadline-*.tar"), key=lambda p: p.stat().st_mtime, reverse=True)
    recent = time.time() - KEEP_USED_SECONDS
    for stale in [p for p in old if p != keep][2:]:
        with suppress(FileNotFoundError):
            if stale.stat().st_mtime > recent:
                continue
        stale.unlink(missing_ok=True)
        stale.with_suffix(".json").unlink(missing_ok=True)


def ensure_image(name: str | None = None, *, force: bool = False) -> ImageRef:
    """The OCI archive of Loadline's image named `name` (default localhost/loadline:<version>), built if needed."""
    name = name or default_name()
    if not re.fullmatch(r"[a-z0-9][a-z0-9._/:-]*(:[\w][\w.-]*)?", name):
        raise ImageError(f"invalid image name {name!r} (expected e.g. registry.example.com/loadline:0.2.0)")
    key = image_key(name)
    archive = images_dir() / f"loadline-{key}.tar"
    meta = archive.with_suffix(".json")
    if archive.exists() and meta.exists() and not force:
        info = json.loads(meta.read_text())
        with suppress(FileNotFoundError):
            os.utime(archive)  # in use: _prune keeps it a while
        return ImageRef(name=info["name"], archive=archive, size=int(info["size"]), key=key)
    ensure_tools()
    started = time.monotonic()
    rootfs = ensure_base_rootfs()
    _log(f"building {name} from {REPO / 'Dockerfile'} (inputs changed: key {key})")
    work = _work_dir()
    try:
        _log("wheels: loadline built here, dependencies downloaded for Python " + BASE.python)
        build_wheelhouse(work / "context" / "wheels")
        _log(f"wheels ready at {time.monotonic() - started:.0f}s; importing the base image")
        with buildah_session(work) as b:
            base = _import_base(b, rootfs)
            _log(f"buildah bud --runtime runc --network none (base {base})")
            b.run(
                "bud", "--runtime", "runc", "--network", "none", "--pull-never", "--layers=false", "--quiet",
                "--file", str(REPO / "Dockerfile"), "--build-arg", f"BASE={base}", "--build-arg", "WHEELS=wheels",
                "--tag", name, str(work / "context"),
                what="buildah bud",
            )  # fmt: skip
            _log(f"image built in {time.monotonic() - started:.0f}s; writing the OCI archive")
            partial = work / "image.tar"
            b.run("push", "--quiet", name, f"oci-archive:{partial}:{name}",
                  what="writing the OCI archive")  # fmt: skip
        size = unpacked_size(partial)
        os.replace(partial, archive)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    seconds = time.monotonic() - started
    meta.write_text(json.dumps({"name": name, "size": size, "build_seconds": round(seconds, 1)}) + "\n")
    _prune(archive)
    return ImageRef(name=name, archive=archive, size=size, key=key, build_seconds=seconds)


def push(ref: ImageRef, destination: str) -> None:
    """Copy the archive to a registry (`docker://host/repo:tag`) with buildah and the user's registry login."""
    with buildah_session() as b:
        load_archive(b, ref)
        b.run("push", ref.name, destination, what=f"buildah push {destination}")


def _manifest(tar: tarfile.TarFile) -> dict[str, Any]:
    index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
    digest = index["manifests"][0]["digest"].split(":")[1]
    return json.load(tar.extractfile(f"blobs/sha256/{digest}"))  # type: ignore[arg-type,no-any-return]


def archive_layers(archive: Path) -> list[int]:
    """Sizes of the archive's layer blobs as stored (gzip-compressed tars)."""
    with tarfile.open(archive) as tar:
        return [int(layer["size"]) for layer in _manifest(tar)["layers"]]


def unpacked_size(archive: Path) -> int:
    """Bytes of the image's layers uncompressed: what it takes in a container runtime's store."""
    total = 0
    with tarfile.open(archive) as tar:
        for layer in _manifest(tar)["layers"]:
            blob = tar.extractfile("blobs/sha256/" + layer["digest"].split(":")[1])
            assert blob is not None
            stream = gzip.GzipFile(fileobj=blob) if layer["mediaType"].endswith("gzip") else blob
            while chunk := stream.read(1 << 20):
                total += len(chunk)
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.harness.image",
        description="Build Loadline's image from the Dockerfile with buildah, offline, into an OCI archive in the "
        "cache (LOADLINE_CACHE, default ~/.cache/loadline/images).",
    )
    parser.add_argument("--name", default="", help=f"image reference (default {default_name()})")
    parser.add_argument("--force", action="store_true", help="rebuild even when cached")
    parser.add_argument("--push", action="store_true", help="then push it to the registry its name points at")
    args = parser.parse_args(argv)
    try:
        ref = ensure_image(args.name or None, force=args.force)
        if args.push:
            _log(f"pushing {ref.name}")
            push(ref, f"docker://{ref.name}")
    except ImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    how = f"built in {ref.build_seconds:.0f}s" if ref.build_seconds else "cached"
    layers = ", ".join(f"{n / 2**20:.0f}" for n in archive_layers(ref.archive))
    print(f"{ref.name}: {ref.size / 2**20:.0f} MiB unpacked, archive {ref.archive.stat().st_size / 2**20:.0f} MiB "
          f"(layers {layers} MiB), {how}")  # fmt: skip
    print(f"archive: {ref.archive}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
