"""A fake /proc/net/dev."""

from __future__ import annotations

HEADER = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier "
    "compressed\n"
)


def line(name: str, rx: int = 0, rx_packets: int = 0, tx: int = 0, tx_packets: int = 0, **more: int) -> str:
    fields = [rx, rx_packets, more.get("rx_errs", 0), more.get("rx_drop", 0), 0, 0, 0, 0]
    fields += [tx, tx_packets, more.get("tx_errs", 0), more.get("tx_drop", 0), 0, 0, 0, 0]
    return f"{name:>6}: " + " ".join(str(f) for f in fields) + "\n"
