"""One real node per machine: kubelets share the kubepods cgroups, sysctls and iptables chains of the host.

`make test` and `make demo` (or two test runs) on one machine take turns: the second waits on a lock file,
then until no kubepods tree is left (a node started by a harness without the lock), up to a timeout.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

from tests.harness.realnode.hoststate import kubepods_trees

LOCK_PATH = Path("/tmp/loadline-realnode.lock")
WAIT_SECONDS = 900.0


class MachineBusy(RuntimeError):
    pass


def acquire(timeout: float = WAIT_SECONDS) -> int:
    """A file descriptor holding the machine's real-node lock (close it to release)."""
    fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + timeout
    noted = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not kubepods_trees():
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                return fd
            fcntl.flock(fd, fcntl.LOCK_UN)
            holder = f"a kubelet's cgroups ({kubepods_trees()[0]})"
        except BlockingIOError:
            holder = f"another real node (lock {LOCK_PATH})"
        if time.monotonic() > deadline:
            os.close(fd)
            raise MachineBusy(f"this machine runs {holder}; gave up after {timeout:.0f}s (make cluster-down?)")
        if not noted:
            print(f"[realnode] waiting for {holder} to go (up to {timeout:.0f}s)", file=sys.stderr, flush=True)
            noted = True
        time.sleep(2)


def release(fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
