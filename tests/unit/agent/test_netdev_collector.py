"""Netdev collector: fake /proc/net/dev files and a fake link dump, then this machine's real interfaces."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.collectors.base import CollectorStats, SeriesErrors, run_collector
from agent.collectors.netdev import (
    NET_CARRIER,
    NET_MTU_BYTES,
    NET_RECEIVE_BYTES_PER_SECOND,
    NET_RECEIVE_BYTES_TOTAL,
    NET_RECEIVE_DROP_TOTAL,
    NET_RECEIVE_PACKETS_PER_SECOND,
    NET_SPEED_BYTES,
    NET_TRANSMIT_BYTES_PER_SECOND,
    NET_TRANSMIT_ERRS_TOTAL,
    NET_UP,
    LinkInfo,
    NetdevCollector,
    netlink_links,
    parse_proc_net_dev,
    sysfs_links,
)
from agent.series import Kind, Sample, SeriesKey
from tests.fakes.netdev import HEADER, line
from tests.unit.agent.sampling import cycle

IFF_LOOPBACK = 0x8


LOGGER = "loadline.agent.netdev"


def logged(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[str]:
    """Messages of this collector's logger at `level` or above (other tests may leave loggers chatty)."""
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= level]




def write_net_dev(proc: Path, *lines: str) -> None:
    (proc / "net").mkdir(parents=True, exist_ok=True)
    (proc / "net" / "dev").write_text(HEADER + "".join(lines))


def key(metric: str, device: str) -> SeriesKey:
    return SeriesKey(metric, "", "", device)


def by_key(samples: list[Sample] | tuple[Sample, ...]) -> dict[SeriesKey, Sample]:
    return {s.key: s for s in samples}


class FakeLinks:
    """A netlink dump stand-in: counts calls, remembers the thread, can block or fail."""

    def __init__(self, links: list[LinkInfo]) -> None:
        self.links = links
        self.calls = 0
        self.threads: set[int] = set()
        self.gate: threading.Event | None = None
        self.error: Exception | None = None

    def __call__(self) -> list[LinkInfo]:
        self.calls += 1
        self.threads.add(threading.get_ident())
        if self.gate is not None:
            self.gate.wait(10)
        if self.error is not None:
            raise self.error
        return list(self.links)


def wait_until(predicate: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert predicate()


def settle(c: NetdevCollector) -> None:
    """Let a background link dump finish (the next collect picks it up)."""
    wait_until(lambda: c._pending is None or c._pending.done())


ETH0 = LinkInfo(
    2, "eth0", "UP", 0x1043, mtu=9000, carrier=1, address="02:00:00:00:00:01", speed_bytes_per_second=1.25e9
)
LO = LinkInfo(1, "lo", "UNKNOWN", 0x49, mtu=65536, carrier=1)


def test_parse_proc_net_dev() -> None:
    text = HEADER + line("lo", 100, 1, 100, 1) + line("eth0", 2**40, 7, 5, 3, rx_errs=2, tx_drop=9)
    text += "eth1:123 4 0 0 0 0 0 0 567 8 0 0 0 0 0 0\n"  # old kernels: no space after a long name
    text += "bad line without colon\n" + "  eth2: 1 2 3\n" + "  eth3: 1 2 3 4 5 6 7 8 9 x 11 12 13 14 15 16\n"
    counters, bad = parse_proc_net_dev(text.encode())
    assert bad == 3
    assert set(counters) == {"lo", "eth0", "eth1"}
    assert counters["eth0"][0] == 2**40 and counters["eth0"][2] == 2 and counters["eth0"][11] == 9
    assert counters["eth1"][0] == 123 and counters["eth1"][8] == 567


def test_rates_and_counters_from_proc_net_dev(tmp_path: Path) -> None:
    write_net_dev(tmp_path, line("lo", 1000, 10, 1000, 10), line("eth0", 5000, 50, 7000, 70, rx_drop=1, tx_errs=2))
    links = FakeLinks([LO, ETH0])
    c = NetdevCollector(tmp_path, list_links=links)
    first = by_key(cycle(c, 0.0))
    assert first[key(NET_RECEIVE_BYTES_TOTAL, "eth0")].value == 5000
    assert first[key(NET_RECEIVE_BYTES_TOTAL, "eth0")].kind is Kind.COUNTER
    assert first[key(NET_RECEIVE_DROP_TOTAL, "eth0")].value == 1
    assert first[key(NET_TRANSMIT_ERRS_TOTAL, "eth0")].value == 2
    assert key(NET_RECEIVE_BYTES_PER_SECOND, "eth0") not in first  # baseline only
    settle(c)
    write_net_dev(tmp_path, line("lo", 1000, 10, 1000, 10), line("eth0", 5000 + 250_000, 50 + 200, 7000 + 500, 71))
    second = by_key(cycle(c, 0.5))
    assert second[key(NET_RECEIVE_BYTES_PER_SECOND, "eth0")].value == pytest.approx(500_000)
    assert second[key(NET_RECEIVE_PACKETS_PER_SECOND, "eth0")].value == pytest.approx(400)
    assert second[key(NET_TRANSMIT_BYTES_PER_SECOND, "eth0")].value == pytest.approx(1000)
    assert second[key(NET_RECEIVE_BYTES_PER_SECOND, "lo")].value == 0.0
    # inventory gauges arrived with the dump
    assert second[key(NET_UP, "eth0")].value == 1.0 and second[key(NET_UP, "lo")].value == 0.0  # lo is UNKNOWN
    assert second[key(NET_MTU_BYTES, "eth0")].value == 9000 and second[key(NET_CARRIER, "eth0")].value == 1
    assert second[key(NET_SPEED_BYTES, "eth0")].value == 1.25e9
    assert key(NET_SPEED_BYTES, "lo") not in second  # unknown speed is left out, not 0
    assert {link.name for link in c.links} == {"lo", "eth0"}
    assert c.errors.total == 0


def test_counter_reset_and_recreated_interface(tmp_path: Path) -> None:
    write_net_dev(tmp_path, line("eth0", 10_000_000))
    links = FakeLinks([ETH0])
    c = NetdevCollector(tmp_path, list_links=links, inventory_seconds=1.0)
    cycle(c, 0.0)
    settle(c)
    write_net_dev(tmp_path, line("eth0", 100))  # driver reset its counters
    assert key(NET_RECEIVE_BYTES_PER_SECOND, "eth0") not in by_key(cycle(c, 1.0))
    write_net_dev(tmp_path, line("eth0", 1100))
    assert by_key(cycle(c, 2.0))[key(NET_RECEIVE_BYTES_PER_SECOND, "eth0")].value == pytest.approx(1000)
    settle(c)
    # eth0 deleted and re-created (new ifindex) with counters that happen to be higher: not a rate.
    links.links = [LinkInfo(7, "eth0", "UP", 0x1043, mtu=1500)]
    write_net_dev(tmp_path, line("eth0", 5_000_000))
    cycle(c, 3.0)  # applies the earlier dump (old ifindex) and starts a new one
    settle(c)
    write_net_dev(tmp_path, line("eth0", 9_000_000))
    got = by_key(cycle(c, 4.0))  # applies the new ifindex: baseline restarts
    assert key(NET_RECEIVE_BYTES_PER_SECOND, "eth0") not in got
    write_net_dev(tmp_path, line("eth0", 9_000_500))
    assert by_key(cycle(c, 5.0))[key(NET_RECEIVE_BYTES_PER_SECOND, "eth0")].value == pytest.approx(500)


def test_garbage_lines_count_and_skip_only_themselves(tmp_path: Path) -> None:
    write_net_dev(tmp_path, line("eth0", 1), "  eth1: 1 2 three\n", "no colon at all\n", line("eth2", 5))
    c = NetdevCollector(tmp_path, list_links=FakeLinks([]))
    got = by_key(cycle(c, 0.0))
    assert {k.device for k in got} == {"eth0", "eth2"}
    assert c.errors.by_reason == {SeriesErrors.GARBAGE: 2}


def test_pod_interfaces_are_excluded_by_name_and_kind(tmp_path: Path) -> None:
    write_net_dev(
        tmp_path,
        line("eth0", 1),
        line("veth1a2b3c", 1),
        line("cali0123456789a", 1),
        line("lxc_health", 1),
        line("lxc12ab", 1),
        line("podside0", 1),
    )
    links = FakeLinks([ETH0, LinkInfo(9, "podside0", "UP", 0x1043, kind="veth")])
    c = NetdevCollector(tmp_path, list_links=links)
    assert {k.device for k in by_key(cycle(c, 0.0))} == {"eth0", "lxc_health", "podside0"}
    settle(c)
    assert {k.device for k in by_key(cycle(c, 1.0))} == {"eth0", "lxc_health"}  # a veth by kind, once known
    everything = NetdevCollector(tmp_path, list_links=links, exclude=None, exclude_kinds=())
    assert len({k.device for k in by_key(everything.collect(0.0))}) == 6


def test_inventory_runs_on_a_slow_cadence_off_the_loop_and_never_delays_a_cycle(tmp_path: Path) -> None:
    write_net_dev(tmp_path, line("eth0", 1))
    links = FakeLinks([ETH0])
    links.gate = threading.Event()  # the dump "takes forever"
    c = NetdevCollector(tmp_path, list_links=links, inventory_seconds=30.0)
    started = time.perf_counter()
    for now in range(5):
        assert by_key(cycle(c, float(now)))  # counters every cycle, no waiting for netlink
    assert time.perf_counter() - started < 5.0  # the dump blocks for 10 s: nobody waited for it
    wait_until(lambda: links.calls == 1)
    assert c.inventory_pending
    links.gate.set()
    settle(c)
    for now in range(5, 95):
        cycle(c, float(now))
        settle(c)
    assert links.calls == 4  # t = 0, 30, 60, 90
    assert threading.get_ident() not in links.threads


def test_inventory_failure_leaves_counters_alone(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_net_dev(tmp_path, line("eth0", 1))
    links = FakeLinks([ETH0])
    links.error = ImportError("No module named 'pyroute2'")
    c = NetdevCollector(tmp_path, list_links=links, inventory_seconds=1.0)
    caplog.set_level(logging.INFO, logger="loadline.agent.netdev")
    for now in range(4):
        assert key(NET_RECEIVE_BYTES_TOTAL, "eth0") in by_key(cycle(c, float(now)))
        settle(c)
    assert c.errors.by_reason == {SeriesErrors.IO: 3}
    assert len(logged(caplog)) == 1 and "link dump failed" in logged(caplog)[0]
    links.error = None
    cycle(c, 4.0)
    settle(c)
    assert key(NET_MTU_BYTES, "eth0") in by_key(cycle(c, 5.0))
    assert "works again" in logged(caplog)[-1]


def test_missing_proc_net_dev_is_no_data_and_unreadable_fails_the_source(tmp_path: Path) -> None:
    links = FakeLinks([])
    c = NetdevCollector(tmp_path, list_links=links)
    stats = CollectorStats("netdev")
    assert asyncio.run(run_collector(c, stats, 0.0)) == []
    assert stats.last_success and c.errors.total == 0
    assert links.calls == 0 and not c.inventory_pending  # no netlink dump for a proc root without net/
    (tmp_path / "net" / "dev").mkdir(parents=True)  # unreadable as a file: EISDIR
    assert asyncio.run(run_collector(c, stats, 1.0)) == ()
    assert not stats.last_success and "IsADirectoryError" in (stats.last_error or "")
    assert c.errors.by_reason == {SeriesErrors.IO: 1}
    (tmp_path / "net" / "dev").rmdir()
    write_net_dev(tmp_path, line("eth0", 1))
    assert asyncio.run(run_collector(c, stats, 2.0))
    assert stats.last_success


# ------------------------------------------------------------------------------------ this machine
def loopback_traffic(nbytes: int) -> None:
    """Push `nbytes` through a TCP connection to 127.0.0.1 (both directions of it count on lo)."""
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_connection(server.getsockname()) as client:
        conn, _ = server.accept()
        with conn:
            chunk = b"x" * 65536
            sent = received = 0
            while sent < nbytes:
                client.sendall(chunk)
                sent += len(chunk)
                while received < sent - 4 * 65536:  # keep the socket buffers from filling up
                    received += len(conn.recv(1 << 20))
            while received < sent:
                received += len(conn.recv(1 << 20))


def test_real_loopback_bytes_per_second_rise_with_traffic() -> None:
    # This machine's /proc/net/dev and netlink. A long interval so that a loaded test box (slow transfer)
    # does not trip the stall rule.
    c = NetdevCollector()
    start = time.monotonic()
    first = by_key(cycle(c, start, interval=30.0))
    assert key(NET_RECEIVE_BYTES_TOTAL, "lo") in first
    time.sleep(0.3)
    quiet_at = time.monotonic()
    quiet = by_key(cycle(c, quiet_at))[key(NET_RECEIVE_BYTES_PER_SECOND, "lo")].value
    payload = 64 * 1024 * 1024
    loopback_traffic(payload)
    busy_at = time.monotonic()
    busy = by_key(cycle(c, busy_at))[key(NET_RECEIVE_BYTES_PER_SECOND, "lo")].value
    assert busy * (busy_at - quiet_at) >= payload  # every payload byte was received on lo (plus headers)
    assert quiet * (quiet_at - start) < payload / 4  # before: far less (other loopback users on the box)
    settle(c)
    c.close()


def test_real_netlink_inventory_of_this_machine() -> None:
    links = {link.name: link for link in netlink_links()}
    lo = links["lo"]
    assert lo.index == 1 and lo.flags & IFF_LOOPBACK and lo.kind is None
    assert lo.mtu == int(Path("/sys/class/net/lo/mtu").read_text())
    assert lo.address == "00:00:00:00:00:00"
    for name, link in links.items():  # the same interfaces /proc/net/dev lists
        assert link.operstate.upper() == Path(f"/sys/class/net/{name}/operstate").read_text().strip().upper()
    counters, _ = parse_proc_net_dev(Path("/proc/net/dev").read_bytes())
    assert set(links) == set(counters)

    c = NetdevCollector()
    cycle(c, time.monotonic())
    settle(c)
    got = by_key(cycle(c, time.monotonic()))
    assert got[key(NET_MTU_BYTES, "lo")].value == lo.mtu
    assert got[key(NET_UP, "lo")].value == (1.0 if lo.operstate == "UP" else 0.0)
    c.close()


# IFF_RUNNING and LOWER_UP/DORMANT/ECHO: netlink adds them, sysfs does not. IFF_PROMISC and IFF_ALLMULTI:
# sysfs shows the kernel's state (a bridge turns both on for each port it enslaves, e.g. a CNI bridge's veths),
# netlink only what a user asked for (dev_get_flags).
_FLAGS_THE_SOURCES_DISAGREE_ON = 0x40 | 0x100 | 0x200 | ~0xFFFF


def test_sysfs_inventory_agrees_with_netlink() -> None:
    """The pyroute2-free inventory (netlink=False) describes the same links.

    Links come and go while it runs (a real node's CNI bridge adds and removes pod veths), so only links that
    netlink sees both before and after the sysfs read must be in it, and sysfs may only list links netlink saw.
    """
    before = {link.name: link for link in netlink_links()}
    over_sysfs = {link.name: link for link in sysfs_links()}
    after = {link.name: link for link in netlink_links()}
    stable = {name for name in before.keys() & after.keys() if before[name] == after[name]}
    assert "lo" in stable
    assert stable <= set(over_sysfs), f"netlink links missing from sysfs: {stable - set(over_sysfs)}"
    assert set(over_sysfs) <= before.keys() | after.keys(), f"sysfs-only links: {set(over_sysfs) - before.keys() - after.keys()}"
    for name in stable:
        link, other = over_sysfs[name], before[name]
        assert (link.index, link.operstate, link.mtu, link.address) == (
            other.index,
            other.operstate,
            other.mtu,
            other.address,
        ), name
        assert link.flags & ~_FLAGS_THE_SOURCES_DISAGREE_ON == other.flags & ~_FLAGS_THE_SOURCES_DISAGREE_ON, name
    c = NetdevCollector(netlink=False)
    cycle(c, time.monotonic())
    settle(c)
    assert by_key(cycle(c, time.monotonic()))[key(NET_MTU_BYTES, "lo")].value == over_sysfs["lo"].mtu
    c.close()
