"""Every collector, one line each (node_exporter style). Add a source by adding a row here."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent.collectors.base import Collector
from agent.collectors.cgroups import CgroupCollector, PsiScope
from agent.collectors.node import NodeCollector
from agent.collectors.pods import PodRef


def _no_pods() -> Sequence[PodRef]:
    return ()


@dataclass(frozen=True)
class CollectorContext:
    """What collectors may need from the agent's configuration."""

    proc_root: Path = Path("/proc")
    cgroup_root: Path = Path("/sys/fs/cgroup")
    cgroup_parent: str = ""  # kubelet --cgroup-root below the mount
    pods: Callable[[], Sequence[PodRef]] = field(default=_no_pods)
    psi: PsiScope = PsiScope.PODS


@dataclass(frozen=True)
class CollectorSpec:
    name: str
    build: Callable[[CollectorContext], Collector]
    enabled_by_default: bool
    help: str


COLLECTORS: tuple[CollectorSpec, ...] = (
    CollectorSpec("node", lambda c: NodeCollector(c.proc_root), True, "node CPU, memory, PSI from /proc"),
    CollectorSpec(
        "cgroups",
        lambda c: CgroupCollector(c.pods, c.cgroup_root, cgroup_parent=c.cgroup_parent, psi=c.psi),
        True,
        "pod/container CPU, throttling, memory, PSI from cgroup v1/v2",
    ),
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
