"""The pod sandbox ("pause") image, built here: a static C program that sleeps until SIGTERM/SIGINT and reaps
children (it is PID 1 of pods that share their PID namespace). No registry is reachable from this machine."""

from __future__ import annotations

import hashlib
import subprocess
import tempfile
from pathlib import Path

from tests.harness.build import cache_root
from tests.harness.realnode.ociarchive import LayerFile, write_archive

PAUSE_IMAGE = "localhost/loadline/pause:3.10"

_SOURCE = r"""
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(void) {
    struct sigaction sa = {0};
    sa.sa_handler = stop;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = reap;
    sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    sigaction(SIGCHLD, &sa, NULL);
    for (;;) pause();
}
"""


def pause_archive() -> Path:
    """The pause image's OCI archive, compiled once per source version into the component cache."""
    digest = hashlib.sha256(_SOURCE.encode()).hexdigest()[:12]
    dest = cache_root() / "images" / f"pause-{digest}.tar"
    if dest.exists():
        return dest
    with tempfile.TemporaryDirectory(prefix="loadline-pause-") as tmp:
        src, binary = Path(tmp) / "pause.c", Path(tmp) / "pause"
        src.write_text(_SOURCE)
        proc = subprocess.run(
            ["gcc", "-static", "-Os", "-s", "-o", str(binary), str(src)], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(f"building the pause binary failed:\n{proc.stderr}")
        return write_archive(
            dest,
            PAUSE_IMAGE,
            [LayerFile("pause", binary.read_bytes())],
            {"Entrypoint": ["/pause"], "User": "65535:65535"},
        )
