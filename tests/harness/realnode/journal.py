"""What a running real node must put back, kept on disk, so the run after a killed one can put it back.

`RealNode.stop()` restores the host from its `HostSnapshot` in memory. A run killed outright (SIGKILL, the
machine's processes stopped under it, a CI job's container frozen and resumed) never gets there: the kubepods
cgroups, mounts, network namespaces, veth links, iptables chains and sysctls the node changed stay, and every later
real node refuses to start beside them. So the node writes its snapshot here before it changes anything, and
removes the file once it has restored the host. The next holder of the machine lock (tests/harness/realnode/
machinelock.py) finds a journal only when its writer died: it restores the host from it, exactly as that node's
`stop()` would have done, and says so.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from tests.harness.realnode.hoststate import HostSnapshot

JOURNAL_PATH = Path("/tmp/loadline-realnode.journal.json")


def record(snapshot: HostSnapshot, *, root: Path, shim_marker: str, pid: int) -> None:
    state = {
        "pid": pid,
        "root": str(root),
        "shim_marker": shim_marker,
        "sysctls": snapshot.sysctls,
        "chains": [[tool, table, sorted(chains)] for (tool, table), chains in snapshot.chains.items()],
        "links": sorted(snapshot.links),
        "mounts": sorted(snapshot.mounts),
        "paths": {str(path): existed for path, existed in snapshot.paths.items()},
        "netns": sorted(snapshot.netns),
    }
    tmp = JOURNAL_PATH.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(JOURNAL_PATH)  # whole or absent: a half-written journal would restore the wrong state


def clear() -> None:
    JOURNAL_PATH.unlink(missing_ok=True)


def load() -> tuple[HostSnapshot, Path, str, int]:
    state = json.loads(JOURNAL_PATH.read_text())
    snapshot = HostSnapshot(
        sysctls=dict(state["sysctls"]),
        chains={(tool, table): set(chains) for tool, table, chains in state["chains"]},
        links=set(state["links"]),
        mounts=set(state["mounts"]),
        paths={Path(path): bool(existed) for path, existed in state["paths"].items()},
        netns=set(state["netns"]),
    )
    return snapshot, Path(state["root"]), str(state["shim_marker"]), int(state["pid"])


def sweep_dead_node() -> list[str]:
    """Restore the host from a dead node's journal, if there is one; the caller holds the machine lock, so its
    writer is gone. Returns what was done (empty: no journal). A journal that cannot be read is kept and reported:
    guessing what the host looked like would be worse than refusing to start."""
    if not JOURNAL_PATH.exists():
        return []
    try:
        snapshot, root, shim_marker, pid = load()
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RuntimeError(f"{JOURNAL_PATH} cannot be read ({exc}): restore the host by hand and remove it") from exc
    print(f"[realnode] a real node (pid {pid}, {root}) died without restoring the host: sweeping", file=sys.stderr)
    done = snapshot.restore(roots=[root], shim_marker=shim_marker)
    shutil.rmtree(root, ignore_errors=True)
    left = snapshot.leftovers(roots=[root], shim_marker=shim_marker)
    if left:
        raise RuntimeError(f"sweeping the dead real node of {JOURNAL_PATH} left: {'; '.join(left)}")
    clear()
    print(f"[realnode] swept: {'; '.join(done) or 'nothing'}", file=sys.stderr)
    return done
