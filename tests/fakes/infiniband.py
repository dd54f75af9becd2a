"""A fake InfiniBand sysfs tree (mlx5 shaped: ports, counters, HCA PCI functions)."""

from __future__ import annotations

from pathlib import Path

EDR = b"100 Gb/sec (4X EDR)\n"


def port_dir(sys: Path, hca: str = "mlx5_0", port: int = 1) -> Path:
    return sys / "class" / "infiniband" / hca / "ports" / str(port)


def write_port(
    sys: Path,
    hca: str = "mlx5_0",
    port: int = 1,
    *,
    state: str = "4: ACTIVE",
    phys: str = "5: LinkUp",
    rate: bytes = EDR,
    link_layer: str = "InfiniBand",
    counters: dict[str, object] | None = None,
    hw: dict[str, object] | None = None,
) -> Path:
    d = port_dir(sys, hca, port)
    (d / "counters").mkdir(parents=True, exist_ok=True)
    (d / "state").write_text(state + "\n")
    (d / "phys_state").write_text(phys + "\n")
    (d / "rate").write_bytes(rate)
    (d / "link_layer").write_text(link_layer + "\n")
    base: dict[str, object] = {
        "port_rcv_data": 1000,
        "port_xmit_data": 2000,
        "port_rcv_packets": 10,
        "port_xmit_packets": 20,
        "unicast_rcv_packets": 9,
        "multicast_rcv_packets": 1,
        "port_rcv_errors": 0,
        "port_rcv_discards": 0,
        "port_xmit_discards": 3,
        "symbol_error": 0,
        "link_downed": 1,
        "VL15_dropped": 0,
    }
    base.update(counters or {})
    set_counters(d, **base)
    if hw is not None:
        (d / "hw_counters").mkdir(exist_ok=True)
        for name, value in hw.items():
            (d / "hw_counters" / name).write_text(f"{value}\n")
    return d


def set_counters(d: Path, **values: object) -> None:
    for name, value in values.items():
        (d / "counters" / name).write_text(f"{value}\n")


def write_hca(sys: Path, hca: str = "mlx5_0", pci: str = "0000:3b:00.0", uverbs: int = 0) -> Path:
    """The HCA's PCI function, with its uverbs char device and netdevs, and the class symlink to it."""
    pci_dir = sys / "devices" / "pci0000:00" / pci
    (pci_dir / "infiniband_verbs" / f"uverbs{uverbs}").mkdir(parents=True, exist_ok=True)
    hca_dir = sys / "class" / "infiniband" / hca
    hca_dir.mkdir(parents=True, exist_ok=True)
    (hca_dir / "device").symlink_to(pci_dir)
    return pci_dir
