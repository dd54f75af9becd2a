"""Network interfaces: byte and packet rates every cycle from /proc/net/dev, link inventory and state from
netlink (pyroute2) on a slower cadence.

Why split, measured with `bench/agent_netdev_bench.py` on the build box (2 cores, 4 links, busy: load 6-8):

    /proc/net/dev pread + parse                       0.045 ms CPU
    this collector per cycle, counters only           0.09-0.13 ms CPU
    IPRoute().get_links(), one dump                   2.3-3.2 ms CPU (9 ms wall)
    netlink_links(): open + dump + fields + speed     5.3-6.1 ms CPU
    collector at 1 s, netlink every 30 s              0.02-0.03 % of one core (0.34-0.62 % if every cycle)
    100 / 300 pod veths (excluded) + 10 links         0.2-0.29 / 0.29-0.40 ms per cycle
    import pyroute2                                   +20.7 MB RSS in a bare interpreter, +8.6 MB after the
                                                      agent's own imports (asyncio, aiohttp, numpy); 0.3-1 s

So counters (64-bit in both sources) come from /proc/net/dev every cycle, and the netlink dump (index,
operstate, carrier, MTU, kind, MAC) runs every `inventory_seconds` (default 30) on this collector's own
daemon thread, never on the event loop; the cycle never waits for it: a finished dump is applied by the
next cycle. pyroute2 is imported by the first dump only. `netlink=False` takes the same inventory from
/sys/class/net instead (0.5 ms, no pyroute2, no link kind); the agent does so unless `--netlink` is set,
as it cannot spare pyroute2's RSS by default (pod interfaces are excluded by name either way). Both
sources see the agent's network namespace: host interfaces need `hostNetwork`.

Series (`device` = interface name), node_exporter's names:

    counters (exported as they are)
      node_network_{receive,transmit}_bytes_total, ..._packets_total, ..._errs_total, ..._drop_total
    gauges
      node_network_{receive,transmit}_bytes_per_second     bytes/s
      node_network_{receive,transmit}_packets_per_second   packets/s
      from the inventory, once known: node_network_up (operstate UP -> 1), node_network_carrier (0/1),
      node_network_mtu_bytes, node_network_speed_bytes (bytes/s from /sys/class/net/<if>/speed; left out
      when the driver does not know it)

Rates are the sampler's (`agent.store.rates`: first sample no rate, backwards drops a sample, stalls over
3x the interval drop it): each rated counter's block slot names its rate's key; an interface whose ifindex
changes (deleted and re-created under the same name) gets a new source, so it restarts from a fresh
baseline. Rates above 1 TB/s or 10^10 packets/s are dropped as garbage; link speed is not used as a bound
because virtual links report fictional speeds (tun 10 Mb/s, veth 10 Gb/s).

Pod-side interfaces (veth peers, Calico `cali*`, Cilium `lxc*`, cloud CNIs' `eni*`/`gke*`/`azv*`) are
left out by default: they grow with the pod count and duplicate the pods' traffic on the host side.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final

from agent.collectors.base import SeriesErrors
from agent.collectors.checked import check_all_u64
from agent.collectors.devices import Device
from agent.collectors.files import PseudoFileReader
from agent.collectors.worker import BlockingWorker
from agent.series import BlockBuilder, Kind, SampleBlock, SeriesKey

log = logging.getLogger("loadline.agent.netdev")

NET_RECEIVE_BYTES_TOTAL: Final = "node_network_receive_bytes_total"
NET_TRANSMIT_BYTES_TOTAL: Final = "node_network_transmit_bytes_total"
NET_RECEIVE_PACKETS_TOTAL: Final = "node_network_receive_packets_total"
NET_TRANSMIT_PACKETS_TOTAL: Final = "node_network_transmit_packets_total"
NET_RECEIVE_ERRS_TOTAL: Final = "node_network_receive_errs_total"
NET_TRANSMIT_ERRS_TOTAL: Final = "node_network_transmit_errs_total"
NET_RECEIVE_DROP_TOTAL: Final = "node_network_receive_drop_total"
NET_TRANSMIT_DROP_TOTAL: Final = "node_network_transmit_drop_total"
NET_RECEIVE_BYTES_PER_SECOND: Final = "node_network_receive_bytes_per_second"
NET_TRANSMIT_BYTES_PER_SECOND: Final = "node_network_transmit_bytes_per_second"
NET_RECEIVE_PACKETS_PER_SECOND: Final = "node_network_receive_packets_per_second"
NET_TRANSMIT_PACKETS_PER_SECOND: Final = "node_network_transmit_packets_per_second"
NET_UP: Final = "node_network_up"
NET_CARRIER: Final = "node_network_carrier"
NET_MTU_BYTES: Final = "node_network_mtu_bytes"
NET_SPEED_BYTES: Final = "node_network_speed_bytes"

DEFAULT_EXCLUDE: Final = r"^(veth|cali|lxc(?!_health)|gke|azv|eni)"
DEFAULT_EXCLUDE_KINDS: Final = frozenset({"veth"})

# /proc/net/dev columns after "<name>:": receive bytes packets errs drop fifo frame compressed multicast,
# then transmit bytes packets errs drop fifo colls carrier compressed.
_COLUMNS = 16
# (column, counter metric, rate metric or None, cap on the rate)
_FIELDS: Final = (
    (0, NET_RECEIVE_BYTES_TOTAL, NET_RECEIVE_BYTES_PER_SECOND, 1e12),
    (1, NET_RECEIVE_PACKETS_TOTAL, NET_RECEIVE_PACKETS_PER_SECOND, 1e10),
    (2, NET_RECEIVE_ERRS_TOTAL, None, math.inf),
    (3, NET_RECEIVE_DROP_TOTAL, None, math.inf),
    (8, NET_TRANSMIT_BYTES_TOTAL, NET_TRANSMIT_BYTES_PER_SECOND, 1e12),
    (9, NET_TRANSMIT_PACKETS_TOTAL, NET_TRANSMIT_PACKETS_PER_SECOND, 1e10),
    (10, NET_TRANSMIT_ERRS_TOTAL, None, math.inf),
    (11, NET_TRANSMIT_DROP_TOTAL, None, math.inf),
)


def parse_counters(rest: bytes) -> tuple[int, ...]:
    """The 16 counters after `<name>:` in /proc/net/dev; ValueError if short or not numbers, OutOfRangeError
    if one is outside [0, 2^64)."""
    fields = rest.split()
    if len(fields) < _COLUMNS:
        raise ValueError("short line")
    return check_all_u64(tuple(int(f) for f in fields[:_COLUMNS]), "counters")


def parse_proc_net_dev(data: bytes) -> tuple[dict[str, tuple[int, ...]], int]:
    """Interface -> its 16 counters, and the number of lines that could not be parsed."""
    out: dict[str, tuple[int, ...]] = {}
    bad = 0
    for line in data.splitlines()[2:]:  # two header lines
        name, sep, rest = line.partition(b":")  # interface names cannot contain ':'
        try:
            if not sep:
                raise ValueError("no ':'")
            out[name.strip().decode("ascii")] = parse_counters(rest)
        except ValueError:  # also UnicodeDecodeError
            bad += 1
    return out, bad


@dataclass(frozen=True, slots=True)
class LinkInfo:
    """One interface as netlink describes it."""

    index: int
    name: str
    operstate: str  # UP, DOWN, UNKNOWN (loopback, many virtual links), LOWERLAYERDOWN, ...
    flags: int
    mtu: int | None = None
    carrier: int | None = None
    kind: str | None = None  # IFLA_INFO_KIND: veth, bridge, vxlan, ...; None for physical NICs and lo
    address: str | None = None
    master: int | None = None  # ifindex of the bridge/bond this link is enslaved to
    speed_bytes_per_second: float | None = None


def netlink_links(sysfs_root: str = "/sys") -> list[LinkInfo]:
    """Dump links over rtnetlink (blocking; call it on a worker thread). Speed comes from sysfs: netlink
    only has it through ethtool's generic netlink family, which pyroute2 parses even more slowly."""
    from pyroute2 import IPRoute  # ~13 MB RSS, ~170 ms: only on nodes that run this collector

    ipr = IPRoute()
    try:
        messages = ipr.get_links()
    finally:
        ipr.close()
    links = []
    for msg in messages:
        name = msg.get("ifname")
        if not name:
            continue
        linkinfo = msg.get("linkinfo")
        links.append(
            LinkInfo(
                index=int(msg["index"]),
                name=name,
                operstate=str(msg.get("operstate") or "UNKNOWN"),
                flags=int(msg["flags"]),
                mtu=msg.get("mtu"),
                carrier=msg.get("carrier"),
                kind=linkinfo.get("kind") if linkinfo is not None else None,
                address=msg.get("address"),
                master=msg.get("master"),
                speed_bytes_per_second=_sysfs_speed(sysfs_root, name),
            )
        )
    return links


def sysfs_links(sysfs_root: str = "/sys") -> list[LinkInfo]:
    """The same inventory from /sys/class/net, without pyroute2 (for agents that cannot spare its RSS).
    Differences: no link kind (only name patterns exclude pod interfaces), `flags` without the operational
    bits netlink adds (RUNNING, LOWER_UP) but with the kernel's PROMISC/ALLMULTI (a bridge sets both on its
    ports; netlink reports only those a user set), no carrier while a link is down; ~7 small reads per link."""
    base = f"{sysfs_root.rstrip('/')}/class/net"
    links = []
    for name in sorted(os.listdir(base)):
        index = _sysfs_int(f"{base}/{name}/ifindex")
        flags = _sysfs_int(f"{base}/{name}/flags", 16)
        if index is None or flags is None:
            continue  # gone while listing
        links.append(
            LinkInfo(
                index=index,
                name=name,
                operstate=(_sysfs_text(f"{base}/{name}/operstate") or "unknown").upper(),
                flags=flags,
                mtu=_sysfs_int(f"{base}/{name}/mtu"),
                carrier=_sysfs_int(f"{base}/{name}/carrier"),  # EINVAL while the link is down
                address=_sysfs_text(f"{base}/{name}/address"),
                speed_bytes_per_second=_sysfs_speed(sysfs_root, name),
            )
        )
    return links


def _sysfs_text(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(256).decode("ascii", "replace").strip()
    except OSError:
        return None


def _sysfs_int(path: str, base: int = 10) -> int | None:
    text = _sysfs_text(path)
    try:
        return int(text, base) if text else None
    except ValueError:
        return None


def _sysfs_speed(sysfs_root: str, name: str) -> float | None:
    """Mb/s -> bytes/s; drivers without a speed fail the read with EINVAL or say -1."""
    try:
        with open(f"{sysfs_root.rstrip('/')}/class/net/{name}/speed", "rb") as f:
            mbits = int(f.read(64))
    except (OSError, ValueError):
        return None
    return mbits * 125_000.0 if mbits > 0 else None


@dataclass(slots=True)
class _Interface:
    """Precomputed keys of one interface (built when it first shows up)."""

    name: str
    counters: tuple[tuple[int, SeriesKey, SeriesKey | None, float], ...]
    up: SeriesKey
    carrier: SeriesKey
    mtu: SeriesKey
    speed: SeriesKey
    ifindex: int | None = None
    source: str = ""  # the counters' identity for the sampler's rates: changes when the link is re-created


class NetdevCollector:
    def __init__(
        self,
        proc_root: str | Path = "/proc",
        sysfs_root: str | Path = "/sys",
        *,
        inventory_seconds: float = 30.0,
        exclude: str | None = DEFAULT_EXCLUDE,
        exclude_kinds: Collection[str] = DEFAULT_EXCLUDE_KINDS,
        netlink: bool = True,
        list_links: Callable[[], list[LinkInfo]] | None = None,
        reader: PseudoFileReader | None = None,
    ) -> None:
        self._path = f"{str(proc_root).rstrip('/')}/net/dev"
        self._inventory_seconds = inventory_seconds
        self._exclude = re.compile(exclude) if exclude else None
        self._exclude_kinds = frozenset(exclude_kinds)
        self._list_links = list_links or partial(netlink_links if netlink else sysfs_links, str(sysfs_root))
        self._reader = reader or PseudoFileReader()
        self._builder = BlockBuilder()
        self._errors = SeriesErrors("netdev")
        self._worker = BlockingWorker("loadline-netlink")
        self._pending: Future[list[LinkInfo]] | None = None
        self._inventory_at = -math.inf
        self._inventory_failing = False
        self._links: dict[str, LinkInfo] = {}
        # By the name as /proc/net/dev spells it (bytes: no decoding per line). Excluded names are remembered
        # too (rebuilt each cycle, so churning pod veths do not accumulate): a line of an excluded interface
        # costs one partition and one set lookup, which matters with hundreds of pod veths.
        self._interfaces: dict[bytes, _Interface] = {}
        self._excluded_names: set[bytes] = set()

    @property
    def name(self) -> str:
        return "netdev"

    @property
    def errors(self) -> SeriesErrors:
        return self._errors

    @property
    def links(self) -> Sequence[LinkInfo]:
        """The last netlink inventory (for an info metric: address, kind, operstate as labels)."""
        return tuple(self._links.values())

    @property
    def devices(self) -> Sequence[Device]:
        return ()

    @property
    def inventory_pending(self) -> bool:
        return self._pending is not None

    def close(self) -> None:
        self._reader.close()
        self._worker.close()

    def collect(self, now: float) -> SampleBlock:
        out = self._builder
        try:
            data = self._reader.read(self._path)
        except FileNotFoundError:
            return out.finish()  # a proc root without net/ (not a real procfs): nothing to report, no inventory
        except OSError as exc:
            self._errors.record_os_error(exc)
            raise
        self._poll_inventory(now)
        seen: set[bytes] = set()
        excluded: set[bytes] = set()
        was_excluded = self._excluded_names
        for line in data.splitlines()[2:]:  # two header lines
            raw_name, sep, rest = line.partition(b":")  # interface names cannot contain ':'
            raw_name = raw_name.strip()
            if raw_name in was_excluded:
                excluded.add(raw_name)
                continue
            try:
                if not sep:
                    raise ValueError("no ':'")
                iface = self._interfaces.get(raw_name) or self._new_interface(raw_name)
                if iface is None:
                    excluded.add(raw_name)
                    continue
                values = parse_counters(rest)
            except ValueError as exc:  # also UnicodeDecodeError
                self._errors.bad_value(f"{self._path} {raw_name.decode(errors='replace')}", exc)
                continue
            seen.add(raw_name)
            source = iface.source
            for column, total_key, rate_key, cap in iface.counters:
                out.add(total_key, float(values[column]), Kind.COUNTER, source, rate=rate_key, max_rate=cap)
            link = self._links.get(iface.name)
            if link is not None:
                out.add(iface.up, 1.0 if link.operstate == "UP" else 0.0)
                if link.carrier is not None:
                    out.add(iface.carrier, float(link.carrier))
                if link.mtu is not None:
                    out.add(iface.mtu, float(link.mtu))
                if link.speed_bytes_per_second is not None:
                    out.add(iface.speed, link.speed_bytes_per_second)
        self._excluded_names = excluded
        for gone in self._interfaces.keys() - seen:
            del self._interfaces[gone]
        return out.finish()

    def _new_interface(self, raw_name: bytes) -> _Interface | None:
        name = raw_name.decode("ascii")
        if self._excluded(name):
            return None

        def key(metric: str) -> SeriesKey:
            return SeriesKey(metric, "", "", name)

        iface = _Interface(
            name,
            tuple((col, key(total), key(rate) if rate else None, cap) for col, total, rate, cap in _FIELDS),
            key(NET_UP),
            key(NET_CARRIER),
            key(NET_MTU_BYTES),
            key(NET_SPEED_BYTES),
        )
        self._interfaces[raw_name] = iface
        return iface

    def _excluded(self, name: str) -> bool:
        if self._exclude is not None and self._exclude.search(name):
            return True
        link = self._links.get(name)
        return link is not None and link.kind in self._exclude_kinds

    # ------------------------------------------------------------------ inventory (netlink, background)
    def _poll_inventory(self, now: float) -> None:
        pending = self._pending
        if pending is not None:
            if not pending.done():
                return
            self._pending = None
            self._apply_inventory(pending)
        if now >= self._inventory_at:
            self._inventory_at = now + self._inventory_seconds
            self._pending = self._worker.submit(self._list_links)

    def _apply_inventory(self, done: Future[list[LinkInfo]]) -> None:
        try:
            links = done.result()
        except Exception as exc:  # no pyroute2, netlink refused, ...: counters go on without inventory
            self._errors.record(SeriesErrors.IO)
            if not self._inventory_failing:
                log.warning("netdev: netlink link dump failed (%s: %s); counters continue", type(exc).__name__, exc)
                self._inventory_failing = True
            return
        if self._inventory_failing:
            log.info("netdev: netlink link dump works again")
            self._inventory_failing = False
        self._links = {link.name: link for link in links}
        for raw_name, iface in list(self._interfaces.items()):
            link = self._links.get(iface.name)
            if link is None:
                continue
            if iface.ifindex is not None and iface.ifindex != link.index:
                iface.source = str(link.index)  # re-created under the same name: its counters restarted
            iface.ifindex = link.index
            if link.kind in self._exclude_kinds:
                del self._interfaces[raw_name]  # excluded from the next cycle on
