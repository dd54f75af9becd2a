"""Identity of the devices behind device series, and how their series become NodeMetric `devices[]` entries.

Every collector exposes `devices` (`agent.collectors.base.Collector`; GPU and InfiniBand have some): the
devices seen at its last inventory. Each
`Device` says which series (by metric name; the series key is `SeriesKey(metric, pod_uid, "", device.id)`)
feed which resource of Koordinator's `DeviceInfo.resources`, and how a stored value (base units: ratios in
0..1, bytes, bytes/s) becomes the integer Koordinator writes. The report aggregates the series as it likes
(window average, percentile) and calls `device_info` with a lookup of those aggregates, so nothing here
knows about windows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from agent.series import SeriesKey
from common.api.nodemetric import DeviceInfo, DeviceTopology
from common.api.quantity import Format, Quantity

DEVICE_TYPE_GPU = "gpu"
DEVICE_TYPE_RDMA = "rdma"


@dataclass(frozen=True, slots=True)
class DeviceResource:
    """One entry of `DeviceInfo.resources`: `name` = int(trunc(stored value of `metric` x `scale`))."""

    name: str  # e.g. koordinator.sh/gpu-core
    metric: str  # series holding the value, in base units
    scale: float = 1.0  # e.g. 100 for a 0..1 ratio that Koordinator writes as an integer percentage
    binary: bool = False  # BinarySI (byte counts: "4Gi") rather than DecimalSI

    def quantity(self, value: float) -> Quantity | None:
        """Koordinator writes these as integers, truncated like Go's int64(); NaN/inf/negative -> None."""
        scaled = value * self.scale
        if not math.isfinite(scaled) or scaled < 0:
            return None
        # The store keeps float32: 29 % comes back as 28.999998, which must not truncate to 28. Values within
        # float32 precision of an integer are that integer; the rest truncate.
        nearest = round(scaled)
        whole = nearest if abs(scaled - nearest) <= 1e-6 * max(1.0, scaled) else math.floor(scaled)
        return Quantity.from_int(whole, Format.BINARY_SI if self.binary else Format.DECIMAL_SI)


@dataclass(frozen=True, slots=True)
class Device:
    type: str  # DEVICE_TYPE_GPU | DEVICE_TYPE_RDMA
    id: str  # GPU UUID; "<hca>/<port>" for an RDMA port
    minor: int | None = None
    bus_id: str | None = None  # PCI address, goes to topology.busID
    health: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    node_resources: tuple[DeviceResource, ...] = ()  # read from series without a pod
    pod_resources: tuple[DeviceResource, ...] = ()  # read from the pod's series on this device

    def key(self, metric: str, pod: str = "") -> SeriesKey:
        return SeriesKey(metric, pod, "", self.id)


def device_info(device: Device, value_of: Callable[[SeriesKey], float | None], pod: str = "") -> DeviceInfo | None:
    """The `DeviceInfo` for the node (pod == "") or for one pod (its UID); None if no resource has a value.

    `value_of` returns the aggregated value of a series (e.g. its average over the report window) or None.
    """
    specs = device.pod_resources if pod else device.node_resources
    resources: dict[str, Quantity] = {}
    for spec in specs:
        value = value_of(device.key(spec.metric, pod))
        if value is None:
            continue
        quantity = spec.quantity(value)
        if quantity is not None:
            resources[spec.name] = quantity
    if not resources:
        return None
    # Only fields with a value are passed: a field set to None would be written as null (exclude_unset).
    info = DeviceInfo(type=device.type, id=device.id, health=device.health, resources=resources)
    if device.minor is not None:
        info.minor = device.minor
    if device.labels:
        info.labels = dict(device.labels)
    if device.bus_id:
        info.topology = DeviceTopology(bus_id=device.bus_id)
    return info
