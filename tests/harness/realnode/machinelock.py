"""One real node per machine: kubelets share the kubepods cgroups, sysctls and iptables chains of the host.

`make test` and `make demo` (or two test runs) on one machine take turns: the second waits on a lock file,
then until no kubepods tree is left (a node started by a harness without the lock), up to a timeout. The lock's
new holder first puts back what a killed node left (tests/harness/realnode/journal.py). Empty kubepods trees with
no kubelet on the machine are a dead node's that kept no journal: waiting for them is pointless, so it says so.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

from tests.harness.realnode import journal
from tests.harness.realnode.hoststate import kubepods_trees, tree_pids

LOCK_PATH = Path("/tmp/loadline-realnode.lock")
# Below the real-node tests' own 900 s timeout, so a test run says who holds the machine instead of timing out.
WAIT_SECONDS = 600.0


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
        except BlockingIOError:
            holder = f"another real node (lock {LOCK_PATH}, pid {_holder_pid()})"
        else:
            try:
                journal.sweep_dead_node()
            except BaseException:
                release(fd)
                raise
            trees = kubepods_trees()
            if not trees:
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                return fd
            fcntl.flock(fd, fcntl.LOCK_UN)
            if not _kubelet_running() and not any(tree_pids(t) for t in trees):
                os.close(fd)
                raise MachineBusy(
                    f"{trees[0]} exists with no process in it and no kubelet runs: a real node died here without a "
                    f"journal ({journal.JOURNAL_PATH}). Remove the kubepods trees (rmdir, deepest first), the node's "
                    "mounts under /tmp/loadline-node-*, its /run/netns entries and iptables chains by hand"
                )
            holder = f"a kubelet's cgroups ({trees[0]})"
        if time.monotonic() > deadline:
            os.close(fd)
            raise MachineBusy(f"this machine runs {holder}; gave up after {timeout:.0f}s (make cluster-down?)")
        if not noted:
            print(f"[realnode] waiting for {holder} to go (up to {timeout:.0f}s)", file=sys.stderr, flush=True)
            noted = True
        time.sleep(2)


def _holder_pid() -> str:
    try:
        return LOCK_PATH.read_text().strip() or "?"
    except OSError:
        return "?"


def _kubelet_running() -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "kubelet":
                    return True
            except OSError:
                continue
    return False


def release(fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def sweep_if_free() -> list[str]:
    """Put back what a dead real node left, unless a live one holds the machine (make cluster-down)."""
    fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return []
    try:
        return journal.sweep_dead_node()
    finally:
        release(fd)
