"""Every collector, one line each (node_exporter style). Add a source by adding a row here."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent.collectors.base import Collector
from agent.collectors.cgroups import CgroupCollector, PsiScope
from agent.collectors.node import NodeCollector
from agent.collectors.pods import PodRef

_log = logging.getLogger("loadline.agent.collectors")


def _no_pods() -> Sequence[PodRef]:
    return ()


@dataclass(frozen=True)
class CollectorContext:
    """What collectors may need from the agent's configuration."""

    proc_root: Path = Path("/proc")
    sys_root: Path = Path("/sys")
    cgroup_root: Path = Path("/sys/fs/cgroup")
    cgroup_parent: str = ""  # kubelet --cgroup-root below the mount
    pods: Callable[[], Sequence[PodRef]] = field(default=_no_pods)
    psi: PsiScope = PsiScope.OFF  # as the agent's default (`AgentSettings.psi`)
    interval: float = 1.0  # collect interval: rate collectors drop samples taken after a stall of 3 intervals
    container_interval: float | None = None  # None: every cycle; 0: when scraped (`ReadsOnScrape`)
    netlink: bool = False  # netdev's link inventory from netlink (pyroute2) rather than sysfs


@dataclass(frozen=True)
class CollectorSpec:
    name: str
    build: Callable[[CollectorContext], Collector]
    enabled_by_default: bool
    help: str


# The device collectors are imported when built: a disabled collector costs no import (node and cgroups always run).
def _gpu(c: CollectorContext) -> Collector:
    from agent.collectors.gpu import GpuCollector

    return GpuCollector(c.proc_root)


def _infiniband(c: CollectorContext) -> Collector:
    from agent.collectors.infiniband import InfinibandCollector

    return InfinibandCollector(c.sys_root)


def _netdev(c: CollectorContext) -> Collector:
    from agent.collectors.netdev import NetdevCollector

    return NetdevCollector(c.proc_root, c.sys_root, netlink=c.netlink)


COLLECTORS: tuple[CollectorSpec, ...] = (
    CollectorSpec("node", lambda c: NodeCollector(c.proc_root), True, "node CPU, memory, PSI from /proc"),
    CollectorSpec(
        "cgroups",
        lambda c: CgroupCollector(
            c.pods,
            c.cgroup_root,
            cgroup_parent=c.cgroup_parent,
            psi=c.psi,
            interval=c.interval,
            container_interval=c.container_interval,
        ),
        True,
        "pod/container CPU, throttling, memory, PSI from cgroup v1/v2",
    ),
    CollectorSpec("gpu", _gpu, True, "GPU per device and pod via NVML"),
    CollectorSpec("infiniband", _infiniband, True, "InfiniBand/RoCE ports from sysfs"),
    CollectorSpec("netdev", _netdev, True, "network rates and links"),
)


def build_collectors(ctx: CollectorContext, enabled: Collection[str] | None = None) -> list[Collector]:
    """Instantiate the enabled collectors in table order; unknown names are a configuration error."""
    known = {spec.name for spec in COLLECTORS}
    if enabled is not None and (unknown := set(enabled) - known):
        raise ValueError(f"unknown collectors {sorted(unknown)}; known: {sorted(known)}")
    return [
        spec.build(ctx)
        for spec in COLLECTORS
        if (spec.name in enabled if enabled is not None else spec.enabled_by_default)
    ]


def close_collectors(collectors: Iterable[Collector]) -> None:
    for collector in collectors:
        close = getattr(collector, "close", None)
        if callable(close):
            try:
                close()
            except Exception:
                _log.debug("closing collector %s failed", collector.name, exc_info=True)
