"""promtool and the prometheus server from Debian's `prometheus` package, unpacked into the cache.

Only the binaries are taken (`apt-get download` + `dpkg-deb -x`, both from one download): installing the package
would also install and start a Prometheus service we do not want. Tests and `make demo` run the server themselves
(tests/harness/prometheus.py), on loopback with a data directory of their own.
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


def _cached() -> dict[str, Path]:
    return {"promtool": promtool_path(), "prometheus": prometheus_path()}


def _run(*argv: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, check=False)


def ensure_promtool() -> Path:
    """The promtool binary: PATH first, then the cache, else fetched with apt-get (needs Debian's archive)."""
    return _ensure("promtool", promtool_path())


def ensure_prometheus() -> Path:
    """The prometheus server binary, found or fetched like promtool."""
    return _ensure("prometheus", prometheus_path())


def _ensure(name: str, dest: Path) -> Path:
    found = shutil.which(name)
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
        binary = Path(unpacked, "usr", "bin", name)
        if extract.returncode != 0 or not binary.exists():
            raise PromtoolMissing(f"prometheus package did not contain usr/bin/{name}:\n{extract.stderr}")
        # both binaries of the one download (promtool for `make test`, prometheus for tests and `make demo`)
        for other, target in _cached().items():
            source = Path(unpacked, "usr", "bin", other)
            if target == dest or (source.exists() and not target.exists()):
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target.with_suffix(".partial"))
                os.replace(target.with_suffix(".partial"), target)
    return dest


if __name__ == "__main__":
    try:
        print(ensure_promtool())
        print(ensure_prometheus())
    except PromtoolMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
