"""Host ports in use per node row (kube-scheduler's NodeInfo.UsedPorts, for all nodes at once).

Indexed by (protocol, port) first: a pod asks for a few ports, and each lookup yields just the
rows that use that port, whatever the number of nodes and pods. Counts rather than a set: two
pods bound to one node with the same port (bound directly through spec.nodeName; the kubelet
admits only one) keep the port taken until both are gone, where kube-scheduler's set forgets it
when the first leaves (docs/scheduling-differences.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from common.api.scheduling import DEFAULT_BIND_ALL_HOST_IP, HostPort

# (protocol, port) -> row -> host IP -> number of pods on that row holding it (negative in a simulation's delta)
PortRows = dict[int, dict[str, int]]


class HostPortTable:
    __slots__ = ("_by_port",)

    def __init__(self) -> None:
        self._by_port: dict[tuple[str, int], PortRows] = {}

    def __bool__(self) -> bool:
        return bool(self._by_port)

    def add(self, row: int, ports: Iterable[HostPort], sign: int = 1) -> None:
        """Count `ports` as taken (sign 1) or released (sign −1) on `row`."""
        for hp in ports:
            rows = self._by_port.setdefault((hp.protocol, hp.port), {})
            ips = rows.setdefault(row, {})
            count = ips.get(hp.ip, 0) + sign
            if count:
                ips[hp.ip] = count
                continue
            ips.pop(hp.ip, None)
            if not ips:
                del rows[row]
                if not rows:
                    del self._by_port[(hp.protocol, hp.port)]

    def clone(self) -> HostPortTable:
        out = HostPortTable()
        out._by_port = {key: {row: dict(ips) for row, ips in rows.items()} for key, rows in self._by_port.items()}
        return out

    def rows_using(self, protocol: str, port: int) -> PortRows:
        return self._by_port.get((protocol, port), {})

    def ports_of_row(self, row: int) -> list[HostPort]:
        """What one row holds (for `explain` and tests; a scan, not for the scheduling cycle)."""
        held = [HostPort(proto, port, ip) for (proto, port), rows in self._by_port.items()
                for ip, count in rows.get(row, {}).items() if count > 0]
        return sorted(held, key=lambda hp: (hp.protocol, hp.port, hp.ip))


def conflicting_rows(wanted: Sequence[HostPort], table: HostPortTable, delta: HostPortTable | None = None) -> set[int]:
    """Rows where some wanted port is taken (HostPortInfo.CheckConflict) in `table` plus a simulation's
    `delta`: a wanted 0.0.0.0 conflicts with the same protocol and port on any IP, a specific IP with
    the same IP or 0.0.0.0."""
    out: set[int] = set()
    for hp in wanted:
        base = table.rows_using(hp.protocol, hp.port)
        change = delta.rows_using(hp.protocol, hp.port) if delta is not None else {}
        # Rows the simulation left alone: `table`'s counts are all positive, so presence is use.
        if not change and hp.ip == DEFAULT_BIND_ALL_HOST_IP:
            out.update(base)
        elif hp.ip == DEFAULT_BIND_ALL_HOST_IP:
            out.update(row for row in base if row not in change)
        else:
            out.update(row for row, ips in base.items()
                       if row not in change and (hp.ip in ips or DEFAULT_BIND_ALL_HOST_IP in ips))
        for row, changed in change.items():
            held = dict(base.get(row, {}))
            for ip, count in changed.items():
                held[ip] = held.get(ip, 0) + count
            if hp.ip == DEFAULT_BIND_ALL_HOST_IP:
                taken = any(count > 0 for count in held.values())
            else:
                taken = held.get(hp.ip, 0) > 0 or held.get(DEFAULT_BIND_ALL_HOST_IP, 0) > 0
            if taken:
                out.add(row)
    return out
