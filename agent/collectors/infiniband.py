"""InfiniBand / RDMA ports from sysfs: data and packet rates, error counters, link state and rate.

Reads `<sysfs_root>/class/infiniband/<hca>/ports/<n>/` (kernel ABI `sysfs-class-infiniband`). No such
directory (no HCA, no driver) is normal: no samples, no error, and the directory is looked for again every
`rescan_seconds`. Every `device` below is "<hca>/<port>", e.g. "mlx5_0/1".

Series (names follow node_exporter's `node_infiniband_*` so existing dashboards fit):

    counters (cumulative, exported as they are; the rates below are what the store keeps)
      node_infiniband_port_data_{received,transmitted}_bytes_total     bytes
      node_infiniband_port_packets_{received,transmitted}_total
      node_infiniband_{unicast,multicast}_packets_{received,transmitted}_total
      error/discard counters: node_infiniband_port_errors_received_total, ..._port_discards_{received,
      transmitted}_total, ..._symbol_error_total, ..._link_downed_total, ... and the mlx5 `hw_counters`
      in `_HW_COUNTERS` (out_of_buffer, CNP/ECN, retransmits) where present
    gauges
      node_infiniband_port_data_{received,transmitted}_bytes_per_second   bytes/s
      node_infiniband_port_packets_{received,transmitted}_per_second      packets/s
      node_infiniband_state_id            0 no change, 1 down, 2 init, 3 armed, 4 active, 5 active defer
      node_infiniband_physical_state_id   1 sleep, 2 polling, 3 disabled, 4 training, 5 link up, 6 error
                                          recovery, 7 phy test
      node_infiniband_rate_bytes_per_second   signalling rate, "100 Gb/sec (4X EDR)" -> 12.5e9

Units and counter rules:
- `port_rcv_data`/`port_xmit_data` count octets divided by 4 (the ABI's "divided by 4 (lanes)"; mlx5 shifts
  by 2): multiplied by a fixed 4, never by the link width (node_exporter #573/#579, netdata #14747).
- 64-bit files first: the legacy `counters_ext/port_{rcv,xmit}_{data,packets}_64` (kernels < 4.5) when
  present, else `counters/` (64-bit on current kernels for HCAs with extended port counters).
- IBA counters saturate instead of wrapping. A data or packet counter reading all ones (2^32-1 or 2^64-1)
  is a fault, not zero traffic: that sample is dropped (no raw counter, no rate) and counted as garbage,
  and the rate restarts from a fresh baseline once the counter reads normally again (after a reset).
- Rates are the sampler's (`agent.store.rates`, each counter's block slot names its rate's key), on the
  cycle's monotonic time: first sample no rate,
  a counter going backwards (reset, `perfquery -R`, driver reload) drops that sample, a gap of more than
  3x the interval drops it, and a rate above twice the port's link rate (or 400 GB/s when it has none) is
  dropped as garbage.
- Files that cannot be read when the port is first seen (ENOENT, EINVAL/EOPNOTSUPP for ports without a
  PMA, "N/A (no PMA)") are left out quietly, as procfs does; later failures count per series, and a file
  that vanished makes the next cycle rescan the ports.

NodeMetric `devices[]` gets one entry per port (see `devices.Device`): type `rdma`, id "<hca>/<port>",
minor = the HCA's uverbs number (/dev/infiniband/uverbs<minor>) when sysfs shows it, topology.busID = the
HCA's PCI address, health = port state ACTIVE and physical state LinkUp; labels `hca`, `port`,
`linkLayer` (InfiniBand | Ethernet for RoCE), `state`, `physState`, `rate` (sysfs text) and `netdevs`
(comma-separated, RoCE/IPoIB netdevs from `gid_attrs/ndevs/*`, else the HCA's `device/net/*`, matched to
the port by `dev_port` when the HCA has several ports); resources, as integer quantities averaged like any
other series: `loadline.io/rdma-rx-bytes-per-second`, `loadline.io/rdma-tx-bytes-per-second`,
`loadline.io/rdma-link-bytes-per-second`. No per-pod entries: sysfs port counters are per port only.

Cost: ~17 small files per port per cycle (more with hw_counters), re-read through kept-open fds with pread
(`files.PseudoFileReader`). `bench/agent_netdev_bench.py` on tmpfs fixtures: 2 ports 0.10-0.17 ms, 8 ports
~0.5 ms of CPU per cycle (0.05 % of one core at 1 s). The port scan (directory listings, probes, the GID
table's netdevs) runs at start, every `rescan_seconds` and after a file vanished.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from agent.collectors.base import SeriesErrors, classify_os_error
from agent.collectors.devices import DEVICE_TYPE_RDMA, Device, DeviceResource
from agent.collectors.files import PseudoFileReader
from agent.collectors.ib_sysfs import parse_counter, parse_rate, parse_state, pci_address, port_netdevs, uverbs_minor
from agent.series import BlockBuilder, Kind, SampleBlock, SeriesKey

log = logging.getLogger("loadline.agent.infiniband")

_P: Final = "node_infiniband_"
IB_RECEIVED_BYTES_TOTAL: Final = f"{_P}port_data_received_bytes_total"
IB_TRANSMITTED_BYTES_TOTAL: Final = f"{_P}port_data_transmitted_bytes_total"
IB_RECEIVED_PACKETS_TOTAL: Final = f"{_P}port_packets_received_total"
IB_TRANSMITTED_PACKETS_TOTAL: Final = f"{_P}port_packets_transmitted_total"
IB_RECEIVED_BYTES_PER_SECOND: Final = f"{_P}port_data_received_bytes_per_second"
IB_TRANSMITTED_BYTES_PER_SECOND: Final = f"{_P}port_data_transmitted_bytes_per_second"
IB_RECEIVED_PACKETS_PER_SECOND: Final = f"{_P}port_packets_received_per_second"
IB_TRANSMITTED_PACKETS_PER_SECOND: Final = f"{_P}port_packets_transmitted_per_second"
IB_STATE_ID: Final = f"{_P}state_id"
IB_PHYSICAL_STATE_ID: Final = f"{_P}physical_state_id"
IB_RATE_BYTES_PER_SECOND: Final = f"{_P}rate_bytes_per_second"

RDMA_RX_BYTES_PER_SECOND: Final = "loadline.io/rdma-rx-bytes-per-second"
RDMA_TX_BYTES_PER_SECOND: Final = "loadline.io/rdma-tx-bytes-per-second"
RDMA_LINK_BYTES_PER_SECOND: Final = "loadline.io/rdma-link-bytes-per-second"
RDMA_RESOURCES: Final = (
    DeviceResource(RDMA_RX_BYTES_PER_SECOND, IB_RECEIVED_BYTES_PER_SECOND),
    DeviceResource(RDMA_TX_BYTES_PER_SECOND, IB_TRANSMITTED_BYTES_PER_SECOND),
    DeviceResource(RDMA_LINK_BYTES_PER_SECOND, IB_RATE_BYTES_PER_SECOND),
)

DATA_LANES: Final = 4  # port_{rcv,xmit}_data count octets / 4, whatever the link width


@dataclass(frozen=True, slots=True)
class _RatedCounter:
    """A data or packet counter: exported raw and turned into a rate."""

    files: tuple[str, ...]  # candidates relative to the port directory, 64-bit first
    total: str
    rate: str
    scale: int
    bytes: bool  # caps: bytes/s against the link rate, packets/s against link rate / 8


_RATED: Final = (
    _RatedCounter(
        ("counters_ext/port_rcv_data_64", "counters/port_rcv_data"),
        IB_RECEIVED_BYTES_TOTAL,
        IB_RECEIVED_BYTES_PER_SECOND,
        DATA_LANES,
        True,
    ),
    _RatedCounter(
        ("counters_ext/port_xmit_data_64", "counters/port_xmit_data"),
        IB_TRANSMITTED_BYTES_TOTAL,
        IB_TRANSMITTED_BYTES_PER_SECOND,
        DATA_LANES,
        True,
    ),
    _RatedCounter(
        ("counters_ext/port_rcv_packets_64", "counters/port_rcv_packets"),
        IB_RECEIVED_PACKETS_TOTAL,
        IB_RECEIVED_PACKETS_PER_SECOND,
        1,
        False,
    ),
    _RatedCounter(
        ("counters_ext/port_xmit_packets_64", "counters/port_xmit_packets"),
        IB_TRANSMITTED_PACKETS_TOTAL,
        IB_TRANSMITTED_PACKETS_PER_SECOND,
        1,
        False,
    ),
)

# Counters exported raw only: (candidate files, 64-bit/legacy first; metric).
_RAW: Final[tuple[tuple[tuple[str, ...], str], ...]] = (
    (("counters_ext/port_unicast_rcv_packets", "counters/unicast_rcv_packets"), "unicast_packets_received_total"),
    (("counters_ext/port_unicast_xmit_packets", "counters/unicast_xmit_packets"), "unicast_packets_transmitted_total"),
    (
        ("counters_ext/port_multicast_rcv_packets", "counters/multicast_rcv_packets"),
        "multicast_packets_received_total",
    ),
    (
        ("counters_ext/port_multicast_xmit_packets", "counters/multicast_xmit_packets"),
        "multicast_packets_transmitted_total",
    ),
    (("counters/port_rcv_errors",), "port_errors_received_total"),
    (("counters/port_rcv_discards",), "port_discards_received_total"),
    (("counters/port_xmit_discards",), "port_discards_transmitted_total"),
    (("counters/port_xmit_wait",), "port_transmit_wait_total"),
    (("counters/port_rcv_constraint_errors",), "port_constraint_errors_received_total"),
    (("counters/port_xmit_constraint_errors",), "port_constraint_errors_transmitted_total"),
    (("counters/port_rcv_remote_physical_errors",), "port_receive_remote_physical_errors_total"),
    (("counters/port_rcv_switch_relay_errors",), "port_receive_switch_relay_errors_total"),
    (("counters/symbol_error",), "symbol_error_total"),
    (("counters/link_downed",), "link_downed_total"),
    (("counters/link_error_recovery",), "link_error_recovery_total"),
    (("counters/local_link_integrity_errors",), "local_link_integrity_errors_total"),
    (("counters/excessive_buffer_overrun_errors",), "excessive_buffer_overrun_errors_total"),
    (("counters/VL15_dropped",), "vl15_dropped_total"),
)
_HW_COUNTERS: Final = {  # mlx5 and irdma port hw_counters worth having
    "out_of_buffer": "out_of_buffer_drops_total",
    "out_of_sequence": "out_of_sequence_packets_received_total",
    "packet_seq_err": "packet_sequence_errors_total",
    "local_ack_timeout_err": "local_ack_timeout_errors_total",
    "rnr_nak_retry_err": "rnr_nak_retry_errors_total",
    "np_cnp_sent": "np_cnp_packets_sent_total",
    "np_ecn_marked_roce_packets": "np_ecn_marked_roce_packets_received_total",
    "rp_cnp_handled": "rp_cnp_packets_handled_total",
    "rp_cnp_ignored": "rp_cnp_packets_ignored_total",
    "req_cqe_error": "req_cqes_errors_total",
    "resp_cqe_error": "resp_cqes_errors_total",
    "roce_adp_retrans": "roce_adp_retransmits_total",
}

_SATURATED: Final = frozenset({2**32 - 1, 2**64 - 1})
_FALLBACK_MAX_BYTES_PER_SECOND: Final = 400e9  # twice a 1.6 Tb/s port: beyond any link, for ports without a rate


@dataclass(frozen=True, slots=True)
class _CounterFile:
    path: str
    total: SeriesKey
    rate: SeriesKey | None = None  # None: exported raw only
    scale: int = 1
    bytes: bool = True


@dataclass(slots=True)
class _Port:
    hca: str
    number: int
    directory: str
    link_layer: str
    netdevs: tuple[str, ...]
    bus_id: str | None
    minor: int | None
    counters: list[_CounterFile]
    state_key: SeriesKey
    phys_key: SeriesKey
    rate_key: SeriesKey
    link_bytes_per_second: float | None = None
    status: tuple[str, str, str] = ("", "", "")  # state, physical state, rate text: device labels
    active: bool = False
    saturated: set[str] = field(default_factory=set)  # files already reported as saturated
    stuck: set[str] = field(default_factory=set)  # files reading saturated now
    # Per counter file, bumped when it reads normally again after saturating: its source for the sampler's
    # rates, so the reading after the reset starts from a fresh baseline.
    epochs: dict[str, int] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.hca}/{self.number}"


class InfinibandCollector:
    def __init__(
        self,
        sysfs_root: str | Path = "/sys",
        *,
        rescan_seconds: float = 60.0,
        reader: PseudoFileReader | None = None,
    ) -> None:
        self._class_dir = f"{str(sysfs_root).rstrip('/')}/class/infiniband"
        self._rescan_seconds = rescan_seconds
        self._reader = reader or PseudoFileReader()
        self._builder = BlockBuilder()
        self._errors = SeriesErrors("infiniband")
        self._ports: list[_Port] = []
        self._devices: tuple[Device, ...] = ()
        self._rescan_at = -math.inf

    @property
    def name(self) -> str:
        return "infiniband"

    @property
    def errors(self) -> SeriesErrors:
        return self._errors

    @property
    def devices(self) -> Sequence[Device]:
        return self._devices

    @property
    def ports(self) -> int:
        return len(self._ports)

    def close(self) -> None:
        self._reader.close()

    def collect(self, now: float) -> SampleBlock:
        if now >= self._rescan_at:
            self._scan(now)
        out = self._builder
        changed = False
        for port in self._ports:
            changed |= self._collect_port(port, now, out)
        if changed:
            self._devices = tuple(_device(p) for p in self._ports)
        return out.finish()

    # ------------------------------------------------------------------ discovery
    def _scan(self, now: float) -> None:
        self._rescan_at = now + self._rescan_seconds
        try:
            hcas = sorted(os.listdir(self._class_dir))
        except FileNotFoundError:
            hcas = []  # no InfiniBand/RDMA here: normal
        except OSError as exc:
            self._errors.record_os_error(exc)
            hcas = []
        old = {p.id: p for p in self._ports}
        ports: list[_Port] = []
        for hca in hcas:
            ports.extend(self._scan_hca(hca, old))
        for gone in old.keys() - {p.id for p in ports}:
            self._reader.release_under(old[gone].directory)
        if len(ports) != len(old):
            log.info("InfiniBand: %d port(s) under %s", len(ports), self._class_dir)
        self._ports = ports
        self._devices = tuple(_device(p) for p in ports)

    def _scan_hca(self, hca: str, old: dict[str, _Port]) -> list[_Port]:
        hca_dir = f"{self._class_dir}/{hca}"
        try:
            numbers = sorted(int(n) for n in os.listdir(f"{hca_dir}/ports") if n.isdigit())
        except OSError as exc:
            self._errors.record_os_error(exc)
            return []
        bus_id = pci_address(f"{hca_dir}/device")
        minor = uverbs_minor(f"{hca_dir}/device/infiniband_verbs")
        ports = []
        for number in numbers:
            directory = f"{hca_dir}/ports/{number}"
            link_layer = (self._probe(f"{directory}/link_layer") or b"InfiniBand").decode("ascii", "replace").strip()
            port = _Port(
                hca,
                number,
                directory,
                link_layer,
                port_netdevs(hca_dir, directory, number, len(numbers)),
                bus_id,
                minor,
                self._counter_files(hca, number, directory),
                SeriesKey(IB_STATE_ID, "", "", f"{hca}/{number}"),
                SeriesKey(IB_PHYSICAL_STATE_ID, "", "", f"{hca}/{number}"),
                SeriesKey(IB_RATE_BYTES_PER_SECOND, "", "", f"{hca}/{number}"),
            )
            previous = old.get(port.id)
            if previous is not None:
                port.saturated = previous.saturated
                port.epochs, port.stuck = previous.epochs, previous.stuck
            ports.append(port)
        return ports

    def _probe(self, path: str) -> bytes | None:
        """Contents of a file that may legitimately be missing or unreadable; None then, not an error."""
        try:
            return self._reader.read(path)
        except OSError:
            return None

    def _usable_counter(self, candidates: tuple[str, ...], directory: str) -> str | None:
        for rel in candidates:
            data = self._probe(f"{directory}/{rel}")
            if data is None:
                continue
            try:
                parse_counter(data)
            except ValueError:
                continue  # "N/A (no PMA)" and the like: this port cannot count it
            return f"{directory}/{rel}"
        return None

    def _counter_files(self, hca: str, number: int, directory: str) -> list[_CounterFile]:
        device = f"{hca}/{number}"
        files = []
        for spec in _RATED:
            path = self._usable_counter(spec.files, directory)
            if path is not None:
                files.append(
                    _CounterFile(
                        path,
                        SeriesKey(spec.total, "", "", device),
                        SeriesKey(spec.rate, "", "", device),
                        spec.scale,
                        spec.bytes,
                    )
                )
        for candidates, metric in _RAW:
            path = self._usable_counter(candidates, directory)
            if path is not None:
                files.append(_CounterFile(path, SeriesKey(_P + metric, "", "", device)))
        try:
            hw = set(os.listdir(f"{directory}/hw_counters"))
        except OSError:
            hw = set()
        for name in sorted(hw & _HW_COUNTERS.keys()):
            path = self._usable_counter((f"hw_counters/{name}",), directory)
            if path is not None:
                files.append(_CounterFile(path, SeriesKey(_P + _HW_COUNTERS[name], "", "", device)))
        return files

    # ------------------------------------------------------------------ per cycle
    def _read(self, path: str, now: float) -> bytes | None:
        try:
            return self._reader.read(path)
        except OSError as exc:
            reason = classify_os_error(exc)
            self._errors.record(reason)
            if reason == SeriesErrors.VANISHED:
                self._rescan_at = now  # a port or HCA went away (driver reload): look again next cycle
            return None

    def _collect_port(self, port: _Port, now: float, out: BlockBuilder) -> bool:
        """Read one port; returns True if its device identity (state, rate) changed."""
        state, phys, rate_text = port.status
        data = self._read(f"{port.directory}/state", now)
        if data is not None:
            try:
                state_id, state = parse_state(data)
            except ValueError as exc:
                self._errors.bad_value(f"{port.directory}/state", exc)
            else:
                out.add(port.state_key, float(state_id))
        data = self._read(f"{port.directory}/phys_state", now)
        if data is not None:
            try:
                phys_id, phys = parse_state(data)
            except ValueError as exc:
                self._errors.bad_value(f"{port.directory}/phys_state", exc)
            else:
                out.add(port.phys_key, float(phys_id))
        data = self._read(f"{port.directory}/rate", now)
        if data is not None:
            try:
                port.link_bytes_per_second = parse_rate(data)
            except ValueError as exc:
                self._errors.bad_value(f"{port.directory}/rate", exc)
            else:
                rate_text = data.decode("ascii", "replace").strip()
                out.add(port.rate_key, port.link_bytes_per_second)

        link = port.link_bytes_per_second
        max_bytes = 2 * link if link else _FALLBACK_MAX_BYTES_PER_SECOND
        for counter in port.counters:
            data = self._read(counter.path, now)
            if data is None:
                continue
            try:
                value = parse_counter(data)
            except ValueError as exc:
                self._errors.bad_value(counter.path, exc)
                continue
            if counter.rate is not None and value in _SATURATED:
                self._saturated(port, counter)
                continue
            if counter.path in port.stuck:
                port.stuck.discard(counter.path)
                port.epochs[counter.path] = port.epochs.get(counter.path, 0) + 1  # reset: a fresh baseline
            total = float(value * counter.scale)
            if counter.rate is None:
                out.add(counter.total, total, Kind.COUNTER)
                continue
            cap = max_bytes if counter.bytes else max_bytes / 8
            epoch = port.epochs.get(counter.path)
            source = str(epoch) if epoch is not None else ""
            out.add(counter.total, total, Kind.COUNTER, source, rate=counter.rate, max_rate=cap)

        status = (state, phys, rate_text)
        if status == port.status:
            return False
        port.status = status
        port.active = state.upper() == "ACTIVE" and phys.replace(" ", "").lower() == "linkup"
        return True

    def _saturated(self, port: _Port, counter: _CounterFile) -> None:
        self._errors.record(SeriesErrors.GARBAGE)
        port.stuck.add(counter.path)
        if counter.path not in port.saturated:
            port.saturated.add(counter.path)
            log.warning(
                "InfiniBand %s: %s is stuck at its maximum (32-bit counter without extended port counters?); "
                "no rate until it is reset",
                port.id,
                counter.path.rsplit("/", 2)[-1],
            )


def _device(port: _Port) -> Device:
    state, phys, rate = port.status
    labels = {"hca": port.hca, "port": str(port.number), "linkLayer": port.link_layer}
    for name, value in (("state", state), ("physState", phys), ("rate", rate), ("netdevs", ",".join(port.netdevs))):
        if value:
            labels[name] = value
    return Device(
        type=DEVICE_TYPE_RDMA,
        id=port.id,
        minor=port.minor,
        bus_id=port.bus_id,
        health=port.active,
        labels=labels,
        node_resources=RDMA_RESOURCES,
    )
