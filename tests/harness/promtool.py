"""promtool (`promtool check metrics`) from Debian's `prometheus` package, unpacked into the cache.

Only the binary is taken (`apt-get download` + `dpkg-deb -x`): installing the package
would also install and try to start a Prometheus server we do not want.
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


def _run(*argv: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, check=False)


def ensure_promtool() -> Path:
    """The promtool binary: PATH first, then the cache, else fetched with apt-get (needs Debian's archive)."""
    found = shutil.which("promtool")
    if found:
        return Path(found)
    dest = promtool_path()
    if dest.exists():
        return dest
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise PromtoolMissing("promtool is required (Debian/Ubuntu: apt-get install prometheus)")
    print("[tools] fetching promtool from Debian's prometheus package", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="loadline-promtool-") as work:
        attempt = _run("apt-get", "download", "prometheus", cwd=work)
        if attempt.returncode != 0 and os.geteuid() == 0:
            _run("apt-get", "update", "-qq")  # a fresh machine has no package lists yet
            attempt = _run("apt-get", "download", "prometheus", cwd=work)
        debs = glob.glob(os.path.join(work, "prometheus_*.deb"))
        if attempt.returncode != 0 or not debs:
            raise PromtoolMissing(f"could not download Debian's prometheus package for promtool:\n{attempt.stderr}")
        unpacked = os.path.join(work, "root")
        extract = _run("dpkg-deb", "-x", debs[0], unpacked)
        binary = Path(unpacked, "usr", "bin", "promtool")
        if extract.returncode != 0 or not binary.exists():
            raise PromtoolMissing(f"prometheus package did not contain usr/bin/promtool:\n{extract.stderr}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(binary, dest.with_suffix(".partial"))
        os.replace(dest.with_suffix(".partial"), dest)
    return dest


if __name__ == "__main__":
    try:
        print(ensure_promtool())
    except PromtoolMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
