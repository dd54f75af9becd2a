"""Build the upstream Kubernetes components from the Go module proxy, by package name.

`go install pkg@version` refuses k8s.io/kubernetes and etcd because their go.mod files
carry `replace` directives, so each is built from a small wrapper module that requires
the upstream module and pins every staging module `k8s.io/<x> v0.0.0` to the published
`v0.N.M`. helm and kwok have no replaces and are built with `go install`.

Binaries land in a per-user cache keyed by version, so a second run is instant:
    $LOADLINE_CACHE (default ~/.cache/loadline)/bin/<name>-<version>/<name>

Standard library only: this runs before the project's virtualenv exists.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

KUBERNETES_VERSION = "1.36.3"
ETCD_VERSION = "3.6.8"  # the etcd client line k8s.io/kubernetes v1.36.3 requires
HELM_VERSION = "3.21.4"
KWOK_VERSION = "0.7.0"  # last release with built-in node/pod stages
GO_MIN = (1, 26)

_K8S_MINOR = KUBERNETES_VERSION.split(".")[1]
_STAGING_VERSION = "v0." + ".".join(KUBERNETES_VERSION.split(".")[1:])
_K8S_LDFLAGS = " ".join(
    [
        f"-X k8s.io/component-base/version.gitVersion=v{KUBERNETES_VERSION}",
        "-X k8s.io/component-base/version.gitMajor=1",
        f"-X k8s.io/component-base/version.gitMinor={_K8S_MINOR}",
        "-X k8s.io/component-base/version.gitTreeState=clean",
        "-X k8s.io/client-go/pkg/version.gitVersion=v" + KUBERNETES_VERSION,
        "-s -w",
    ]
)


class BuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class Component:
    name: str
    version: str
    wrapper: str  # "kubernetes", "etcd" or "install"
    main: str = ""  # Go source of main.go for wrapper builds
    install_pkg: str = ""
    ldflags: str = ""
    env: dict[str, str] = field(default_factory=dict)


_APISERVER_MAIN = """package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
"""

_SCHEDULER_MAIN = """package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
"""

_KUBELET_MAIN = """package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
"""

_CONTROLLER_MANAGER_MAIN = """package main

import (
	"os"
	_ "time/tzdata"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
"""

_KUBECTL_MAIN = """package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
"""

_ETCD_MAIN = """package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
"""

COMPONENTS: dict[str, Component] = {
    c.name: c
    for c in [
        Component("kube-apiserver", KUBERNETES_VERSION, "kubernetes", _APISERVER_MAIN, ldflags=_K8S_LDFLAGS),
        Component("etcd", ETCD_VERSION, "etcd", _ETCD_MAIN, ldflags="-s -w"),
        Component("kubectl", KUBERNETES_VERSION, "kubernetes", _KUBECTL_MAIN, ldflags=_K8S_LDFLAGS),
        Component("kube-scheduler", KUBERNETES_VERSION, "kubernetes", _SCHEDULER_MAIN, ldflags=_K8S_LDFLAGS),
        # kubelet and kube-controller-manager make this machine a real node (tests/harness/realnode)
        Component("kubelet", KUBERNETES_VERSION, "kubernetes", _KUBELET_MAIN, ldflags=_K8S_LDFLAGS),
        Component(
            "kube-controller-manager", KUBERNETES_VERSION, "kubernetes", _CONTROLLER_MANAGER_MAIN, ldflags=_K8S_LDFLAGS
        ),
        Component(
            "kwok",
            KWOK_VERSION,
            "install",
            install_pkg=f"sigs.k8s.io/kwok/cmd/kwok@v{KWOK_VERSION}",
            ldflags=f"-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=v{KWOK_VERSION}",
        ),
        Component(
            "helm",
            HELM_VERSION,
            "install",
            install_pkg=f"helm.sh/helm/v3/cmd/helm@v{HELM_VERSION}",
            ldflags=f"-s -w -X helm.sh/helm/v3/internal/version.version=v{HELM_VERSION}",
        ),
    ]
}


def cache_root() -> Path:
    base = os.environ.get("LOADLINE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "loadline"
    )
    return Path(base)


def binary_path(name: str) -> Path:
    comp = COMPONENTS[name]
    return cache_root() / "bin" / f"{name}-v{comp.version}" / name


def _log(msg: str) -> None:
    print(f"[build] {msg}", file=sys.stderr, flush=True)


def go_binary() -> str:
    go = shutil.which("go")
    if go is None:
        for candidate in ("/usr/local/go/bin/go", os.path.expanduser("~/go/bin/go")):
            if os.access(candidate, os.X_OK):
                go = candidate
                break
    if go is None:
        raise BuildError(
            "the Go toolchain is required to build the Kubernetes components, etcd, kwok and helm "
            f"(go >= {GO_MIN[0]}.{GO_MIN[1]}); install Go and make sure `go` is on PATH"
        )
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False).stdout.strip()
    m = re.match(r"go(\d+)\.(\d+)", out)
    if not m or (int(m.group(1)), int(m.group(2))) < GO_MIN:
        raise BuildError(f"go {out or '?'} is too old: Kubernetes v{KUBERNETES_VERSION} needs go >= 1.26")
    return go


def _run(cmd: list[str], cwd: Path, env: dict[str, str], what: str) -> None:
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: list[str] = []
    assert proc.stdout is not None
    last_note = started
    for line in proc.stdout:
        tail.append(line.rstrip())
        del tail[:-40]
        now = time.monotonic()
        if now - last_note > 30:
            _log(f"  … {what}: {now - started:.0f}s")
            last_note = now
    rc = proc.wait()
    if rc != 0:
        raise BuildError(f"{what} failed (exit {rc}):\n" + "\n".join(tail))


def _go_env(go: str) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CGO_ENABLED", "0")
    env.setdefault("GOFLAGS", "-mod=mod")
    env["GOTOOLCHAIN"] = "local"
    env["PATH"] = os.path.dirname(go) + os.pathsep + env.get("PATH", "")
    return env


def module_info(go: str, env: dict[str, str], workdir: Path, module: str, version: str) -> dict[str, str]:
    """`go mod download -json module@version`: where the module's source and go.mod are in the module cache."""
    # the module proxy times out now and then while other downloads share the link: retry before giving up
    attempts, error = 4, ""
    for attempt in range(attempts):
        if attempt:
            _log(f"retrying the download of {module} ({error.strip().splitlines()[-1][:160] if error.strip() else '?'})")
            time.sleep(5 * attempt)
        out = subprocess.run(
            [go, "mod", "download", "-json", f"{module}@{version}"],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        try:
            info: dict[str, str] = json.loads(out.stdout)
        except json.JSONDecodeError:
            info = {"Error": out.stdout + out.stderr}
        if out.returncode == 0 and not info.get("Error"):
            return info
        error = info.get("Error") or out.stderr or out.stdout
    raise BuildError(f"cannot download {module}@{version} after {attempts} tries: {error}")


def _staging_modules(go: str, env: dict[str, str], workdir: Path) -> list[str]:
    """The k8s.io modules k8s.io/kubernetes requires at the fake version v0.0.0."""
    gomod = Path(module_info(go, env, workdir, "k8s.io/kubernetes", f"v{KUBERNETES_VERSION}")["GoMod"]).read_text()
    return sorted(set(re.findall(r"^\s*(k8s\.io/[\w.-]+) v0\.0\.0\s*$", gomod, re.M)))


def _wrapper_dir(kind: str) -> Path:
    return (
        cache_root()
        / "src"
        / (f"kubernetes-v{KUBERNETES_VERSION}" if kind == "kubernetes" else f"etcd-v{ETCD_VERSION}")
    )


def _prepare_wrapper(kind: str, go: str, env: dict[str, str]) -> Path:
    wdir = _wrapper_dir(kind)
    wdir.mkdir(parents=True, exist_ok=True)
    for comp in COMPONENTS.values():
        if comp.wrapper == kind:
            (wdir / "cmd" / comp.name).mkdir(parents=True, exist_ok=True)
            (wdir / "cmd" / comp.name / "main.go").write_text(comp.main)
    stamp = wdir / ".tidy-ok"
    if stamp.exists():
        return wdir
    if kind == "kubernetes":
        staging = _staging_modules(go, env, wdir)
        lines = [
            "module loadline.dev/kubernetes-components",
            "",
            "go 1.26.0",
            "",
            "godebug default=go1.26",
            "",
            f"require k8s.io/kubernetes v{KUBERNETES_VERSION}",
            "",
            "replace (",
            f"\tk8s.io/kubernetes => k8s.io/kubernetes v{KUBERNETES_VERSION}",
            *[f"\t{m} => {m} {_STAGING_VERSION}" for m in staging],
            ")",
            "",
        ]
    else:
        lines = [
            "module loadline.dev/etcd",
            "",
            "go 1.26.0",
            "",
            f"require go.etcd.io/etcd/server/v3 v{ETCD_VERSION}",
            "",
        ]
    (wdir / "go.mod").write_text("\n".join(lines))
    _log(f"resolving Go modules for the {kind} wrapper (first time: several hundred MB from the module proxy)")
    _run([go, "mod", "tidy"], wdir, env, f"go mod tidy ({kind})")
    stamp.write_text("ok\n")
    return wdir


def build_one(name: str, force: bool = False) -> Path:
    comp = COMPONENTS[name]
    dest = binary_path(name)
    if dest.exists() and not force:
        return dest
    go = go_binary()
    env = _go_env(go)
    with building(name, comp.version, dest) as tmp_out:
        if comp.wrapper == "install":
            env2 = dict(env, GOBIN=str(tmp_out))
            # `go install pkg@version` must not see the -mod flag
            env2["GOFLAGS"] = ""
            _run([go, "install", "-ldflags", comp.ldflags, comp.install_pkg], tmp_out, env2, f"go install {name}")
        else:
            wdir = _prepare_wrapper(comp.wrapper, go, env)
            _run(
                [go, "build", "-ldflags", comp.ldflags, "-o", str(tmp_out / name), f"./cmd/{name}"],
                wdir,
                env,
                f"go build {name}",
            )
    return dest


@contextlib.contextmanager
def building(name: str, version: str, dest: Path) -> Iterator[Path]:
    """A scratch directory for one build; the binary the body leaves there as <name> moves into the cache at `dest`
    atomically (a killed build never leaves a half-written binary that a later run would take as cached)."""
    started = time.monotonic()
    _log(f"building {name} v{version} (not in cache {dest.parent})")
    tmp_out = Path(tempfile.mkdtemp(prefix=f"loadline-build-{name}-"))
    try:
        yield tmp_out
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp_dest = dest.with_suffix(".partial")
        shutil.copy2(tmp_out / name, tmp_dest)
        os.replace(tmp_dest, dest)
    finally:
        shutil.rmtree(tmp_out, ignore_errors=True)
    _log(f"built {name} in {time.monotonic() - started:.0f}s -> {dest}")


def ensure(names: list[str] | None = None, force: bool = False) -> dict[str, Path]:
    """Return paths of the requested components, building whatever is not cached."""
    wanted = names or list(COMPONENTS)
    unknown = [n for n in wanted if n not in COMPONENTS]
    if unknown:
        raise BuildError(f"unknown component(s) {unknown}; known: {sorted(COMPONENTS)}")
    missing = [n for n in wanted if force or not binary_path(n).exists()]
    if missing:
        _log(f"{len(missing)} of {len(wanted)} components to build: {', '.join(missing)} (first build takes a while)")
    started = time.monotonic()
    paths = {}
    for name in wanted:
        if name in missing:
            _log(f"[{missing.index(name) + 1}/{len(missing)}] {name}")
        paths[name] = build_one(name, force=force)
    if missing:
        _log(f"all components ready in {time.monotonic() - started:.0f}s")
    return paths


def build_cli(
    argv: list[str] | None,
    *,
    prog: str,
    description: str,
    components: Sequence[str],
    build: Callable[[list[str] | None, bool], Mapping[str, Path]],
    paths_help: str = "print name=path for each component",
) -> int:
    """The command line of a builder (this module, koordbuild): `[components ...] [--force] [--print-paths]`.

    `build(names or None, force)` returns what --print-paths prints as name=path; a BuildError is exit code 1 with
    its message (argparse's own usage errors stay exit code 2).
    """
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("components", nargs="*", help=f"subset to build (default: all of {', '.join(components)})")
    parser.add_argument("--force", action="store_true", help="rebuild even when cached")
    parser.add_argument("--print-paths", action="store_true", help=paths_help)
    args = parser.parse_args(argv)
    try:
        paths = build(args.components or None, args.force)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.print_paths:
        for name, path in paths.items():
            print(f"{name}={path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return build_cli(
        argv,
        prog="python -m tests.harness.build",
        description="Build kube-apiserver, kube-scheduler, kubelet, kube-controller-manager, kubectl, etcd, helm "
        "and kwok from the Go module proxy "
        "into the per-user cache (LOADLINE_CACHE, default ~/.cache/loadline).",
        components=list(COMPONENTS),
        build=lambda names, force: ensure(names, force=force),
    )


if __name__ == "__main__":
    sys.exit(main())
