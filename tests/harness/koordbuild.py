"""Build Koordinator's own koord-scheduler, koord-descheduler, koord-manager and koordlet from the Go module proxy.

Koordinator is Loadline's peer: the compatibility tests run its components against the same control plane, and
the benchmarks put its figures beside ours. Its go.mod carries a large `replace` block, so `go install ...@v1.8.0`
refuses; like the Kubernetes wrapper in `build.py`, a small module adopts Koordinator's go.mod verbatim (requires and
replaces) under another module path and builds the `cmd/` main packages of the dependency directly.

Binaries land beside the Kubernetes ones: $LOADLINE_CACHE/bin/<name>-v<version>/<name>. The CRDs Koordinator's
components need (Reservation, Device, PodMigrationJob, ...) come from the same module, see `crd_dir()`.

koordlet needs cgo: its performance collector links libpfm4 (`pkg/koordlet/util/perf_group`, `#cgo LDFLAGS:
-lpfm`), so its build needs gcc and Debian's `libpfm4-dev`, which are installed (apt-get, as root) when missing, as
the real node's packages are (tests/harness/realnode/packages.py). The other three are built with cgo too: Go's
build cache keys every package by CGO_ENABLED, so one setting for all four compiles their shared dependency graph
once (koordlet alone with cgo recompiled all of it: 1,343 s here, against about a minute when it follows the others).

Standard library only: this runs before the project's virtualenv exists.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

from tests.harness.build import BuildError, _go_env, _log, _run, build_cli, building, cache_root, go_binary, module_info

KOORDINATOR_VERSION = "1.8.0"
KOORDINATOR_MODULE = "github.com/koordinator-sh/koordinator"
KOORD_COMPONENTS = ("koord-scheduler", "koord-descheduler", "koord-manager", "koordlet")
# what a cgo build of koordlet needs: tool or file -> Debian package
KOORDLET_BUILD_PACKAGES = {"gcc": "gcc", "/usr/include/perfmon/pfmlib.h": "libpfm4-dev"}


def binary_path(name: str) -> Path:
    if name not in KOORD_COMPONENTS:
        raise BuildError(f"unknown Koordinator component {name!r}; known: {', '.join(KOORD_COMPONENTS)}")
    return cache_root() / "bin" / f"{name}-v{KOORDINATOR_VERSION}" / name


def _wrapper_dir() -> Path:
    return cache_root() / "src" / f"koordinator-v{KOORDINATOR_VERSION}"


def _wrapper_gomod(upstream: str) -> str:
    """Koordinator's go.mod under our module path, requiring Koordinator itself."""
    body, count = re.subn(
        r"^module\s+\S+\s*$", "module loadline.dev/koordinator-components", upstream, count=1, flags=re.M
    )
    if count != 1:
        raise BuildError("Koordinator's go.mod has no module line")
    # a `toolchain` line would ask for a Go release the proxy-only machine cannot fetch
    body = re.sub(r"^toolchain\s+\S+\s*$", "", body, flags=re.M)
    return body + f"\nrequire {KOORDINATOR_MODULE} v{KOORDINATOR_VERSION}\n"


_TOOLS_GO = (
    "//go:build tools\n\npackage tools\n\nimport (\n"
    + "".join(f'\t_ "{KOORDINATOR_MODULE}/cmd/{name}"\n' for name in KOORD_COMPONENTS)
    + ")\n"
)


def prepare_module() -> Path:
    """The wrapper module (idempotent); returns the directory of Koordinator's own module source."""
    go = go_binary()
    env = _go_env(go)
    wdir = _wrapper_dir()
    wdir.mkdir(parents=True, exist_ok=True)
    stamp = wdir / ".module-dir"
    if stamp.exists() and Path(stamp.read_text().strip()).is_dir():
        return Path(stamp.read_text().strip())
    info = module_info(go, env, wdir, KOORDINATOR_MODULE, f"v{KOORDINATOR_VERSION}")
    source = Path(info["Dir"])
    (wdir / "go.mod").write_text(_wrapper_gomod(Path(info["GoMod"]).read_text()))
    upstream_sum = source / "go.sum"
    if upstream_sum.exists():
        shutil.copyfile(upstream_sum, wdir / "go.sum")
    (wdir / "tools.go").write_text(_TOOLS_GO)
    stamp.write_text(f"{source}\n")
    return source


def crd_dir() -> Path:
    """Koordinator's generated CRDs (config/crd/bases) at the pinned version."""
    path = prepare_module() / "config" / "crd" / "bases"
    if not path.is_dir():
        raise BuildError(f"Koordinator v{KOORDINATOR_VERSION} has no CRD directory at {path}")
    return path


def build_one(name: str, force: bool = False) -> Path:
    dest = binary_path(name)
    if dest.exists() and not force:
        return dest
    prepare_module()
    go = go_binary()
    env = _go_env(go)
    from tests.harness.realnode.packages import ensure_packages

    ensure_packages(KOORDLET_BUILD_PACKAGES, purpose="building Koordinator's components (cgo; koordlet links libpfm4)")
    env["CGO_ENABLED"] = "1"  # all four alike, so they share one compile of their dependencies (module docstring)
    with building(name, KOORDINATOR_VERSION, dest) as tmp_out:
        _run(
            [go, "build", "-mod=mod", "-trimpath", "-ldflags", "-s -w", "-o", str(tmp_out / name),
             f"{KOORDINATOR_MODULE}/cmd/{name}"],
            _wrapper_dir(),
            env,
            f"go build {name}",
        )  # fmt: skip
    return dest


def ensure(names: list[str] | None = None, force: bool = False) -> dict[str, Path]:
    wanted = names or list(KOORD_COMPONENTS)
    for name in wanted:
        binary_path(name)  # validates the name
    missing = [n for n in wanted if force or not binary_path(n).exists()]
    if missing:
        _log(
            f"Koordinator v{KOORDINATOR_VERSION}: {len(missing)} component(s) to build: {', '.join(missing)} "
            "(first build ~5 min on 2 cores)"
        )
    return {name: build_one(name, force=force) for name in wanted}


def main(argv: list[str] | None = None) -> int:
    return build_cli(
        argv,
        prog="python -m tests.harness.koordbuild",
        description=f"Build Koordinator v{KOORDINATOR_VERSION}'s {', '.join(KOORD_COMPONENTS)} from the Go module "
        "proxy into the per-user cache (LOADLINE_CACHE, default ~/.cache/loadline).",
        components=KOORD_COMPONENTS,
        build=lambda names, force: {**ensure(names, force=force), "crds": crd_dir()},
        paths_help="print name=path for each component, and crds=DIR",
    )


if __name__ == "__main__":
    sys.exit(main())
