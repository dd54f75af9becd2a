"""promtool and the prometheus server from Debian's `prometheus` package, unpacked into the cache.

Only the binaries and the web UI's assets are taken (`apt-get download` + `dpkg-deb -x`, all from one download):
installing the package would also install and start a Prometheus service we do not want. Tests and `make demo` run
the server themselves (tests/harness/prometheus.py), on loopback with a data directory of their own. Debian's build
reads its UI from disk (`--web.local-assets`, default /usr/share/prometheus/web/), not from the binary: without the
assets every page of the UI, the graph page `make demo` links to among them, is an HTTP 500.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.harness.build import cache_root


class PromtoolMissing(RuntimeError):
    pass


def promtool_path() -> Path:
    return cache_root() / "bin" / "promtool" / "promtool"


def prometheus_path() -> Path:
    return cache_root() / "bin" / "promtool" / "prometheus"


def web_assets_path() -> Path:
    return cache_root() / "bin" / "promtool" / "web"


# where each cached part is in the package
_PACKAGED = {"promtool": "usr/bin/promtool", "prometheus": "usr/bin/prometheus", "web": "usr/share/prometheus/web"}


def _cached() -> dict[str, Path]:
    return {"promtool": promtool_path(), "prometheus": prometheus_path(), "web": web_assets_path()}


def _run(*argv: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, check=False)


def ensure_promtool() -> Path:
    """The promtool binary: PATH first, then the cache, else fetched with apt-get (needs Debian's archive)."""
    return _ensure("promtool", promtool_path())


def ensure_prometheus() -> Path:
    """The prometheus server binary, found or fetched like promtool."""
    return _ensure("prometheus", prometheus_path())


def ensure_web_assets(binary: Path) -> Path:
    """The directory of the UI's templates and static files for `binary`'s `--web.local-assets`: the installed
    package's beside an installed binary, else the cache's, fetched like promtool."""
    installed = Path("/usr/share/prometheus/web")
    if not binary.is_relative_to(cache_root()) and (installed / "templates").is_dir():
        return installed
    return _ensure("web", web_assets_path())


def _ensure(name: str, dest: Path) -> Path:
    found = shutil.which(name) if name != "web" else None
    if found:
        return Path(found)
    if dest.exists():
        return dest
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise PromtoolMissing(f"{name} is required (Debian/Ubuntu: apt-get install prometheus)")
    print(f"[tools] fetching {name} from Debian's prometheus package", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="loadline-promtool-") as work:
        attempt = _run("apt-get", "download", "prometheus", cwd=work)
        if attempt.returncode != 0 and os.geteuid() == 0:
            _run("apt-get", "update", "-qq")  # a fresh machine has no package lists yet
            attempt = _run("apt-get", "download", "prometheus", cwd=work)
        debs = glob.glob(os.path.join(work, "prometheus_*.deb"))
        if attempt.returncode != 0 or not debs:
            raise PromtoolMissing(f"could not download Debian's prometheus package for {name}:\n{attempt.stderr}")
        unpacked = os.path.join(work, "root")
        extract = _run("dpkg-deb", "-x", debs[0], unpacked)
        if extract.returncode != 0 or not Path(unpacked, _PACKAGED[name]).exists():
            raise PromtoolMissing(f"prometheus package did not contain {_PACKAGED[name]}:\n{extract.stderr}")
        _unpack_ui_libraries(debs[0], work, unpacked)
        # every part of the one download (promtool for `make test`, prometheus and its UI for tests and `make demo`)
        for part, target in _cached().items():
            source = Path(unpacked, _PACKAGED[part])
            if target == dest or (source.exists() and not target.exists()):
                target.parent.mkdir(parents=True, exist_ok=True)
                partial = target.with_suffix(".partial")
                shutil.rmtree(partial, ignore_errors=True)
                if source.is_dir():  # the UI, its libraries' symlinks resolved (the data of every time zone left out)
                    shutil.copytree(source, partial, ignore=_timezone_data)
                    shutil.rmtree(target, ignore_errors=True)  # os.replace does not replace a directory
                else:
                    shutil.copy2(source, partial)
                os.replace(partial, target)
    return dest


def _ui_dependencies(deb: str) -> list[str]:
    """The JavaScript libraries and fonts a package depends on (Debian's `libjs-*`, `fonts-*`)."""
    depends = _run("dpkg-deb", "-f", deb, "Depends").stdout
    names = (alternative.split("|")[0].split("(")[0].strip() for alternative in depends.split(","))
    return [n for n in names if n.startswith(("libjs-", "fonts-"))]


def _unpack_ui_libraries(prometheus_deb: str, work: str, unpacked: str) -> None:
    """Debian's UI links its libraries (jQuery, Bootstrap, D3, ...) from their own packages under
    /usr/share/javascript: those packages (and theirs, transitively) unpacked beside it."""
    pending, seen = _ui_dependencies(prometheus_deb), set[str]()
    while pending:
        package = pending.pop()
        if package in seen:
            continue
        seen.add(package)
        attempt = _run("apt-get", "download", package, cwd=work)
        debs = glob.glob(os.path.join(work, f"{package}_*.deb"))
        if attempt.returncode != 0 or not debs:
            raise PromtoolMissing(f"could not download {package}, which Prometheus' UI needs:\n{attempt.stderr}")
        extract = _run("dpkg-deb", "-x", debs[0], unpacked)
        if extract.returncode != 0:
            raise PromtoolMissing(f"could not unpack {package}:\n{extract.stderr}")
        pending.extend(_ui_dependencies(debs[0]))


def _timezone_data(directory: str, names: list[str]) -> list[str]:
    # moment-timezone's per-zone data (214 MB): the UI loads moment-timezone-with-data.min.js, which carries it
    return ["data"] if os.path.basename(directory) == "moment-timezone" else []


if __name__ == "__main__":
    try:
        print(ensure_promtool())
        print(ensure_web_assets(ensure_prometheus()))
    except PromtoolMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
