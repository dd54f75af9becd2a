"""What InfiniBand sysfs files say, and how an HCA port finds its PCI function, uverbs device and netdevs.

Formats from the kernel ABI (`Documentation/ABI/stable/sysfs-class-infiniband`) and prometheus/procfs.
"""

from __future__ import annotations

import math
import os
import re

from agent.collectors.checked import OutOfRangeError, parse_u64

_RATE_TEXT = re.compile(rb"\s*([0-9]+(?:\.[0-9]+)?)\s*([GM])b/sec")
_UVERBS = re.compile(r"uverbs([0-9]+)")


def parse_state(data: bytes) -> tuple[int, str]:
    """`4: ACTIVE` -> (4, "ACTIVE"); `5: LinkUp` -> (5, "LinkUp")."""
    number, sep, name = data.decode("ascii").partition(":")
    if not sep:
        raise ValueError(f"not '<id>: <name>': {data!r}")
    state = int(number)
    if not 0 <= state < 256:  # a u8 in the IB spec (PortInfo PortState / PortPhysicalState)
        raise OutOfRangeError(f"state {state} outside 0..255")
    return state, name.strip()


def parse_rate(data: bytes) -> float:
    """Signalling rate in bytes/s: `100 Gb/sec (4X EDR)` -> 12.5e9 (Gb/s x 125,000,000, as procfs does)."""
    match = _RATE_TEXT.match(data)
    if match is None:
        raise ValueError(f"not a rate: {data!r}")
    value = float(match.group(1))
    if not math.isfinite(value):  # float() turns a 400-digit number into inf rather than failing
        raise OutOfRangeError(f"rate {data!r} is not finite")
    return value * (125_000_000 if match.group(2) == b"G" else 125_000)


def parse_counter(data: bytes) -> int:
    """ValueError on garbage, OutOfRangeError outside [0, 2^64)."""
    return parse_u64(data, "counter")


def pci_address(device_link: str) -> str | None:
    """The PCI function behind an HCA (`device` -> ../../../0000:3b:00.0); None for soft RDMA (rxe, siw)."""
    try:
        name = os.path.basename(os.path.realpath(device_link, strict=True))
    except OSError:
        return None
    return name if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", name) else None


def uverbs_minor(verbs_dir: str) -> int | None:
    try:
        names = os.listdir(verbs_dir)
    except OSError:
        return None
    for name in sorted(names):
        if match := _UVERBS.fullmatch(name):
            return int(match.group(1))
    return None


def read_text(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(256).decode("ascii", "replace").strip()
    except (OSError, ValueError):
        return None


def port_netdevs(hca_dir: str, port_dir: str, number: int, ports_on_hca: int) -> tuple[str, ...]:
    """Netdevs of a port: the RoCE GID table's owners (`gid_attrs/ndevs/<idx>`, sparse; unset entries fail
    with EINVAL), else the netdevs of the HCA's PCI function (how `ibdev2netdev` does it), matched by
    `dev_port` (0-based) when the HCA has more than one port."""
    found: dict[str, None] = {}  # ordered set
    ndevs = f"{port_dir}/gid_attrs/ndevs"
    try:
        indices = sorted(int(i) for i in os.listdir(ndevs) if i.isdigit())
    except OSError:
        indices = []
    for index in indices:
        name = read_text(f"{ndevs}/{index}")
        if name:
            found[name] = None
    if found:
        return tuple(found)
    net = f"{hca_dir}/device/net"
    try:
        names = sorted(os.listdir(net))
    except OSError:
        return ()
    if ports_on_hca > 1:
        names = [n for n in names if read_text(f"{net}/{n}/dev_port") == str(number - 1)]
    return tuple(names)
