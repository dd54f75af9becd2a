"""InfiniBand collector against sysfs trees built in tmp_path (shaped like mlx5 on a current kernel)."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import shutil
from pathlib import Path

import pytest

from agent.collectors.base import Collector, CollectorStats, SeriesErrors, run_collector
from agent.collectors.devices import DEVICE_TYPE_RDMA, device_info
from agent.collectors.files import PseudoFileReader
from agent.collectors.ib_sysfs import parse_rate, parse_state
from agent.collectors.infiniband import (
    IB_PHYSICAL_STATE_ID,
    IB_RATE_BYTES_PER_SECOND,
    IB_RECEIVED_BYTES_PER_SECOND,
    IB_RECEIVED_BYTES_TOTAL,
    IB_RECEIVED_PACKETS_PER_SECOND,
    IB_RECEIVED_PACKETS_TOTAL,
    IB_STATE_ID,
    IB_TRANSMITTED_BYTES_PER_SECOND,
    IB_TRANSMITTED_BYTES_TOTAL,
    IB_TRANSMITTED_PACKETS_PER_SECOND,
    InfinibandCollector,
)
from agent.sampler import Sampler
from agent.series import Kind, Sample, SeriesKey
from tests.fakes.infiniband import EDR, set_counters, write_hca, write_port
from tests.unit.agent.sampling import cycle

EDR_BYTES = 12.5e9
U32_MAX = 2**32 - 1


LOGGER = "loadline.agent.infiniband"


def logged(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[str]:
    """Messages of this collector's logger at `level` or above (other tests may leave loggers chatty)."""
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= level]










class KernfsLikeReader(PseudoFileReader):
    """On a plain filesystem a kept fd still reads an unlinked file; sysfs (kernfs) answers ENODEV."""

    def read(self, path: str) -> bytes:
        if path in self._fds and not os.path.exists(path):
            self.release((path,))
            raise OSError(errno.ENODEV, "No such device", path)
        return super().read(path)


def by_key(samples: list[Sample]) -> dict[SeriesKey, Sample]:
    return {s.key: s for s in samples}


def key(metric: str, device: str = "mlx5_0/1") -> SeriesKey:
    return SeriesKey(metric, "", "", device)


def test_parsers() -> None:
    assert parse_state(b"4: ACTIVE\n") == (4, "ACTIVE")
    assert parse_state(b"5: LinkUp\n") == (5, "LinkUp")
    assert parse_rate(EDR) == EDR_BYTES
    assert parse_rate(b"2.5 Gb/sec (1X SDR)") == 312_500_000
    assert parse_rate(b"56 Gb/sec (4X FDR)") == 7e9
    assert parse_rate(b"400 Gb/sec (4X NDR)") == 50e9
    assert parse_rate(b"10 Mb/sec") == 1_250_000
    for garbage in (b"", b"fast", b"Gb/sec", b"\xff\xfe"):
        with pytest.raises(ValueError):
            parse_rate(garbage)
    for garbage in (b"ACTIVE", b"x: ACTIVE", b""):
        with pytest.raises(ValueError):
            parse_state(garbage)


def test_no_infiniband_is_normal_and_looked_for_again(tmp_path: Path) -> None:
    c = InfinibandCollector(tmp_path, rescan_seconds=60.0)
    stats = CollectorStats("infiniband")
    assert asyncio.run(run_collector(c, stats, 0.0)) == []
    assert stats.last_success and c.errors.total == 0 and c.devices == ()
    write_hca(tmp_path)
    write_port(tmp_path)
    assert cycle(c, 30.0) == []  # not rescanned yet
    assert cycle(c, 60.0) != [] and c.ports == 1


def test_rates_multiply_data_by_four_and_state_rate_gauges(tmp_path: Path) -> None:
    write_hca(tmp_path)
    d = write_port(tmp_path, hw={"out_of_buffer": 7, "np_cnp_sent": 2, "not_a_known_counter": 5})
    c = InfinibandCollector(tmp_path)
    first = by_key(cycle(c, 0.0))
    assert first[key(IB_RECEIVED_BYTES_TOTAL)].value == 4000  # 1000 words of 4 octets
    assert first[key(IB_RECEIVED_BYTES_TOTAL)].kind is Kind.COUNTER
    assert first[key(IB_RECEIVED_PACKETS_TOTAL)].value == 10
    assert key(IB_RECEIVED_BYTES_PER_SECOND) not in first  # first sample: baseline only
    assert first[key(IB_STATE_ID)].value == 4 and first[key(IB_PHYSICAL_STATE_ID)].value == 5
    assert first[key(IB_RATE_BYTES_PER_SECOND)].value == EDR_BYTES
    assert first[key("node_infiniband_port_discards_transmitted_total")].value == 3
    assert first[key("node_infiniband_link_downed_total")].value == 1
    assert first[key("node_infiniband_out_of_buffer_drops_total")].value == 7
    assert first[key("node_infiniband_np_cnp_packets_sent_total")].value == 2
    assert not any("not_a_known" in k.metric for k in first)

    # 2.5e8 words received and 5e8 sent in 2 s: 5e8 and 1e9 bytes/s, i.e. x4, not x4 x width
    set_counters(d, port_rcv_data=1000 + 250_000_000, port_xmit_data=2000 + 500_000_000)
    set_counters(d, port_rcv_packets=10 + 2_000_000, port_xmit_packets=20 + 1_000_000)
    second = by_key(cycle(c, 2.0))
    assert second[key(IB_RECEIVED_BYTES_PER_SECOND)].value == pytest.approx(5e8)
    assert second[key(IB_TRANSMITTED_BYTES_PER_SECOND)].value == pytest.approx(1e9)
    assert second[key(IB_RECEIVED_PACKETS_PER_SECOND)].value == pytest.approx(1e6)
    assert second[key(IB_TRANSMITTED_PACKETS_PER_SECOND)].value == pytest.approx(5e5)
    assert second[key(IB_RECEIVED_BYTES_PER_SECOND)].kind is Kind.GAUGE
    assert c.errors.total == 0


def test_devices_entry_for_an_rdma_port(tmp_path: Path) -> None:
    pci = write_hca(tmp_path, uverbs=3)
    (pci / "net" / "ib0").mkdir(parents=True)  # IPoIB netdev on the HCA's PCI function
    d = write_port(tmp_path)
    c = InfinibandCollector(tmp_path)
    cycle(c, 0.0)
    set_counters(d, port_rcv_data=1000 + 25_000_000, port_xmit_data=2000)
    samples = cycle(c, 1.0)
    assert isinstance(c, Collector)
    [device] = c.devices
    assert device.type == DEVICE_TYPE_RDMA and device.id == "mlx5_0/1" and device.minor == 3
    assert device.bus_id == "0000:3b:00.0" and device.health
    assert dict(device.labels) == {
        "hca": "mlx5_0",
        "port": "1",
        "linkLayer": "InfiniBand",
        "state": "ACTIVE",
        "physState": "LinkUp",
        "rate": "100 Gb/sec (4X EDR)",
        "netdevs": "ib0",
    }
    values = {s.key: s.value for s in samples}
    info = device_info(device, values.get)
    assert info is not None
    assert info.to_wire()["resources"] == {
        "loadline.io/rdma-rx-bytes-per-second": "100M",
        "loadline.io/rdma-tx-bytes-per-second": "0",
        "loadline.io/rdma-link-bytes-per-second": "12500M",
    }
    assert device_info(device, values.get, pod="some-pod") is None  # port counters are not per pod

    (d / "state").write_text("1: DOWN\n")
    (d / "phys_state").write_text("3: Disabled\n")
    cycle(c, 2.0)
    [device] = c.devices
    assert not device.health and device.labels["state"] == "DOWN"


def test_roce_ports_map_to_their_netdevs(tmp_path: Path) -> None:
    pci = write_hca(tmp_path, "mlx5_2", pci="0000:af:00.0")
    for name, dev_port in (("ens1f0", 0), ("ens1f1", 1)):
        (pci / "net" / name).mkdir(parents=True)
        (pci / "net" / name / "dev_port").write_text(f"{dev_port}\n")
    # Port 1 has a populated RoCE GID table (sparse: unset entries are empty or unreadable) ...
    p1 = write_port(tmp_path, "mlx5_2", 1, link_layer="Ethernet")
    ndevs = p1 / "gid_attrs" / "ndevs"
    ndevs.mkdir(parents=True)
    for index, owner in ((0, "ens1f0"), (1, "ens1f0"), (2, ""), (3, "vlan100")):
        (ndevs / str(index)).write_text(owner + ("\n" if owner else ""))
    # ... port 2 has none: the PCI function's netdevs, matched by dev_port.
    write_port(tmp_path, "mlx5_2", 2, link_layer="Ethernet")
    c = InfinibandCollector(tmp_path)
    cycle(c, 0.0)
    labels = {d.id: dict(d.labels) for d in c.devices}
    assert labels["mlx5_2/1"]["netdevs"] == "ens1f0,vlan100"
    assert labels["mlx5_2/2"]["netdevs"] == "ens1f1"
    assert labels["mlx5_2/1"]["linkLayer"] == "Ethernet"


def test_prefers_legacy_64_bit_files(tmp_path: Path) -> None:
    write_hca(tmp_path)
    d = write_port(tmp_path, counters={"port_rcv_data": U32_MAX})  # the 32-bit one saturated long ago
    (d / "counters_ext").mkdir()
    (d / "counters_ext" / "port_rcv_data_64").write_text("123456789012\n")
    c = InfinibandCollector(tmp_path)
    assert by_key(cycle(c, 0.0))[key(IB_RECEIVED_BYTES_TOTAL)].value == 4 * 123456789012
    assert c.errors.total == 0


def test_saturated_counter_drops_samples_and_resumes_after_reset(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_hca(tmp_path)
    d = write_port(tmp_path, counters={"port_rcv_data": U32_MAX - 1000})
    c = InfinibandCollector(tmp_path)
    cycle(c, 0.0)
    caplog.set_level(logging.WARNING, logger="loadline.agent.infiniband")
    for now in (1.0, 2.0, 3.0):
        set_counters(d, port_rcv_data=U32_MAX)  # IBA counters stick at all ones instead of wrapping
        got = by_key(cycle(c, now))
        assert key(IB_RECEIVED_BYTES_TOTAL) not in got  # stuck at max is a fault, not zero traffic
        assert key(IB_RECEIVED_BYTES_PER_SECOND) not in got
        assert key(IB_TRANSMITTED_BYTES_TOTAL) in got  # the other counters go on
    assert c.errors.by_reason == {SeriesErrors.GARBAGE: 3}
    warnings = logged(caplog, logging.WARNING)
    assert len(warnings) == 1 and "port_rcv_data" in warnings[0]
    set_counters(d, port_rcv_data=100)  # perfquery -R: reset to zero, counting again
    got = by_key(cycle(c, 4.0))
    assert got[key(IB_RECEIVED_BYTES_TOTAL)].value == 400
    assert key(IB_RECEIVED_BYTES_PER_SECOND) not in got  # a fresh baseline, not (400 - 4*(2^32-1001)) / 1 s
    set_counters(d, port_rcv_data=100 + 1_000_000)
    assert by_key(cycle(c, 5.0))[key(IB_RECEIVED_BYTES_PER_SECOND)].value == pytest.approx(4e6)
    set_counters(d, port_rcv_data=2**64 - 1)  # 64-bit all ones as well
    assert key(IB_RECEIVED_BYTES_TOTAL) not in by_key(cycle(c, 6.0))


def test_counter_reset_and_garbage_jump_never_give_bad_rates(tmp_path: Path) -> None:
    write_hca(tmp_path)
    d = write_port(tmp_path, counters={"port_rcv_data": 10_000_000})
    c = InfinibandCollector(tmp_path)
    cycle(c, 0.0)
    set_counters(d, port_rcv_data=5)  # driver reload: backwards
    got = by_key(cycle(c, 1.0))
    assert key(IB_RECEIVED_BYTES_PER_SECOND) not in got and got[key(IB_RECEIVED_BYTES_TOTAL)].value == 20
    set_counters(d, port_rcv_data=5 + 1_000)
    assert by_key(cycle(c, 2.0))[key(IB_RECEIVED_BYTES_PER_SECOND)].value == pytest.approx(4000)
    # 2^40 words in one second would be 4.4 TB/s on a 12.5 GB/s link: garbage, dropped.
    set_counters(d, port_rcv_data=2**40)
    assert key(IB_RECEIVED_BYTES_PER_SECOND) not in by_key(cycle(c, 3.0))
    set_counters(d, port_rcv_data=2**40 + 10)
    assert by_key(cycle(c, 4.0))[key(IB_RECEIVED_BYTES_PER_SECOND)].value == pytest.approx(40)
    # A stall (agent starved for 10 s at a 1 s interval) drops the sample instead of averaging over it.
    set_counters(d, port_rcv_data=2**40 + 1_000_000)
    assert key(IB_RECEIVED_BYTES_PER_SECOND) not in by_key(cycle(c, 14.0))


def test_unsupported_files_are_left_out_quietly_and_garbage_counts(tmp_path: Path) -> None:
    write_hca(tmp_path)
    d = write_port(tmp_path, counters={"port_xmit_wait": "N/A (no PMA)"})
    c = InfinibandCollector(tmp_path)
    first = by_key(cycle(c, 0.0))
    assert not any("transmit_wait" in k.metric for k in first)
    assert c.errors.total == 0  # a port without that counter is not an error
    set_counters(d, port_rcv_errors="abc", port_rcv_packets="")
    (d / "state").write_text("ACTIVE\n")
    (d / "rate").write_text("unknown\n")
    got = by_key(cycle(c, 1.0))
    assert key("node_infiniband_port_errors_received_total") not in got
    assert key(IB_RECEIVED_PACKETS_TOTAL) not in got and key(IB_STATE_ID) not in got
    assert key(IB_RECEIVED_BYTES_TOTAL) in got and key(IB_PHYSICAL_STATE_ID) in got
    assert c.errors.by_reason == {SeriesErrors.GARBAGE: 4}
    assert c.devices[0].labels["state"] == "ACTIVE"  # the last good reading stays


def test_vanished_files_and_ports(tmp_path: Path) -> None:
    write_hca(tmp_path)
    write_port(tmp_path, port=1)
    d2 = write_port(tmp_path, port=2)
    write_hca(tmp_path, "mlx5_1", pci="0000:3c:00.0", uverbs=1)
    write_port(tmp_path, "mlx5_1", 1)
    reader = KernfsLikeReader()
    c = InfinibandCollector(tmp_path, rescan_seconds=3600.0, reader=reader)
    cycle(c, 0.0)
    assert c.ports == 3
    kept = reader.open_count
    (d2 / "counters" / "port_xmit_data").unlink()  # one file gone
    got = by_key(cycle(c, 1.0))
    assert key(IB_TRANSMITTED_BYTES_PER_SECOND, "mlx5_0/2") not in got
    assert key(IB_RECEIVED_BYTES_PER_SECOND, "mlx5_0/2") in got
    assert c.errors.by_reason == {SeriesErrors.VANISHED: 1}
    # A whole HCA goes away (driver unloaded): the next cycles rescan instead of failing forever.
    shutil.rmtree(tmp_path / "class" / "infiniband" / "mlx5_1")
    got = by_key(cycle(c, 2.0))
    assert key(IB_RECEIVED_BYTES_PER_SECOND, "mlx5_0/1") in got
    cycle(c, 3.0)
    assert sorted(d.id for d in c.devices) == ["mlx5_0/1", "mlx5_0/2"]
    errors_then = c.errors.total
    cycle(c, 4.0)
    assert c.errors.total == errors_then  # settled: nothing missing any more
    assert c.ports == 2
    assert reader.open_count < kept  # fds of the gone HCA and file were closed


def test_rates_reach_the_store_through_the_sampler(tmp_path: Path) -> None:
    write_hca(tmp_path)
    d = write_port(tmp_path)
    now = [0.0]
    sampler = Sampler([InfinibandCollector(tmp_path)], windows=(10.0,), clock=lambda: now[0])
    for i in range(4):
        set_counters(d, port_rcv_data=1000 + i * 1_000_000)
        asyncio.run(sampler.cycle())
        now[0] += 1.0
    latest = sampler.latest
    assert latest[key(IB_RECEIVED_BYTES_PER_SECOND)] == pytest.approx(4e6)
    assert latest[key(IB_RECEIVED_BYTES_TOTAL)] == 4 * (1000 + 3_000_000)
    assert key(IB_RECEIVED_BYTES_PER_SECOND) in sampler.ring  # rates are stored (and aggregated) ...
    assert key(IB_RECEIVED_BYTES_TOTAL) not in sampler.ring  # ... raw counters are only exported
