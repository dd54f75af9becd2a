"""The real node's journal (tests/harness/realnode/journal.py): what a killed node must put back survives on disk
exactly, and a journal that cannot be read stops the next node instead of restoring a guess."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.realnode import journal
from tests.harness.realnode.hoststate import HostSnapshot


@pytest.fixture
def journal_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "journal.json"
    monkeypatch.setattr(journal, "JOURNAL_PATH", path)
    return path


def test_a_recorded_snapshot_loads_back_equal(journal_path: Path) -> None:
    snapshot = HostSnapshot(
        sysctls={"kernel.panic": "1", "net.ipv4.ip_forward": "0"},
        chains={("iptables", "nat"): {"PREROUTING", "OUTPUT"}, ("ip6tables", "filter"): set()},
        links={"lo", "eth0"},
        mounts={"/", "/dev/shm"},
        paths={Path("/var/lib/kubelet"): False, Path("/etc/cni"): True},
        netns={"other"},
    )
    journal.record(snapshot, root=Path("/tmp/loadline-node-x"), shim_marker="/tmp/loadline-node-x/c.sock", pid=42)
    loaded, root, marker, pid = journal.load()
    assert loaded == snapshot
    assert (root, marker, pid) == (Path("/tmp/loadline-node-x"), "/tmp/loadline-node-x/c.sock", 42)
    assert not journal_path.with_suffix(".tmp").exists()
    journal.clear()
    assert not journal_path.exists() and journal.sweep_dead_node() == []


def test_an_unreadable_journal_is_refused_and_kept(journal_path: Path) -> None:
    journal_path.write_text('{"pid": 1, "root": "/tmp/x"')
    with pytest.raises(RuntimeError, match=r"cannot be read .*restore the host by hand"):
        journal.sweep_dead_node()
    assert journal_path.exists()
