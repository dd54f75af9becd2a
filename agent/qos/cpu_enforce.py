"""BE CPU suppress applied to the besteffort cgroup: the cfsQuota and cpuset policies, and their restore.

cfsQuota: koordlet's quota arithmetic (formulas.next_be_cfs_quota: 2000 µs floor, 1 % dead band,
increases capped at 10 % of the node per round). Beyond koordlet, a target of the whole node or
more means no limit at all: the quota is lifted (-1), reached through the same ramp.
cpuset: koordlet's sizing (≥ 2 CPUs, growth ≤ 10 % of the CPUs per round) and CPU choice, written
to the BE QoS cgroup and every pod/container below it, the looser union first (parents first),
then the target (children first), so no write ever leaves a child outside its parent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from agent.qos import metrics
from agent.qos.becgroup import BECgroup
from agent.qos.cpuset import Processor, be_allowed_cpus, pick_be_cpus
from agent.qos.formulas import (
    CFS_PERIOD_US,
    UNLIMITED_CFS_QUOTA,
    SuppressBreakdown,
    be_cpuset_size,
    capacity_cores,
    next_be_cfs_quota,
)
from common.cpulist import format_cpu_list
from common.logging import ctx

log = logging.getLogger("loadline.agent.qos")


@dataclass(frozen=True, slots=True)
class CpusetInputs:
    processors: Sequence[Processor]
    reserved_cpus: Sequence[int] = ()
    lse_cpus: Sequence[int] = ()
    lsr_cpus: Sequence[int] = ()

    def allowed(self) -> list[int]:
        return be_allowed_cpus(self.processors, self.reserved_cpus, (), self.lse_cpus)


def quota_step(suppress_milli: int, current_quota_us: int, capacity_milli: int) -> int | None:
    """The quota to write this round (None: leave it), koordlet's step plus the lift at full node."""
    step = next_be_cfs_quota(suppress_milli, current_quota_us, capacity_milli)
    full_node = capacity_cores(capacity_milli) * CFS_PERIOD_US
    if step.target_us < full_node:
        return step.quota_us
    if current_quota_us == UNLIMITED_CFS_QUOTA:
        return None
    if step.quota_us is None or step.quota_us >= full_node:
        return UNLIMITED_CFS_QUOTA
    return step.quota_us


class CPUSuppressor:
    def __init__(self, be: Callable[[], BECgroup | None]) -> None:
        self._be = be
        self.cpuset_touched = False  # restore the cpuset only if we changed it (kubelet may own it)

    # --- cfsQuota -------------------------------------------------------------------------------
    def apply_quota(self, breakdown: SuppressBreakdown) -> int | None:
        """Move the BE quota one round towards the suppress target; returns the quota written, if any."""
        be = self._be()
        if be is None:
            return None
        current = be.read_quota()
        new = quota_step(breakdown.suppress_milli, current, breakdown.capacity_milli)
        metrics.CFS_QUOTA_CORES.set(_cores(current if new is None else new))
        if new is None or new == current:
            return None
        be.write_quota(new)
        if new == UNLIMITED_CFS_QUOTA:
            metrics.ACTIONS.labels("cfs_quota_restored").inc()
            log.info("BE CPU no longer suppressed: quota lifted (-1)", extra=ctx(calculation=breakdown.explain()))
        else:
            metrics.ACTIONS.labels("cfs_quota_set").inc()
            level = logging.INFO if current == UNLIMITED_CFS_QUOTA else logging.DEBUG  # start logged, steps at debug
            log.log(
                level,
                "BE CPU suppressed: cfs quota %d us per %d us (%.2f cores)",
                new,
                CFS_PERIOD_US,
                new / CFS_PERIOD_US,
                extra=ctx(was=current, calculation=breakdown.explain()),
            )
        return new

    def restore_quota(self, why: str) -> bool:
        be = self._be()
        if be is None:
            return False
        current = be.read_quota()
        if current == UNLIMITED_CFS_QUOTA:
            metrics.CFS_QUOTA_CORES.set(-1)
            return False
        be.write_quota(UNLIMITED_CFS_QUOTA)
        metrics.CFS_QUOTA_CORES.set(-1)
        metrics.ACTIONS.labels("cfs_quota_restored").inc()
        log.info("BE cfs quota restored to -1 (was %d us): %s", current, why)
        return True

    # --- cpuset --------------------------------------------------------------------------------
    def apply_cpuset(self, breakdown: SuppressBreakdown, inputs: CpusetInputs) -> list[int] | None:
        """Resize the BE cpuset one round; returns the CPUs written, if any."""
        be = self._be()
        dirs = be.cpuset_dirs() if be is not None else []
        if be is None or not dirs:
            return None
        current = be.read_cpus(dirs[0])
        size = be_cpuset_size(breakdown.suppress_milli, len(current), len(inputs.processors))
        target = pick_be_cpus(
            size,
            inputs.processors,
            reserved=inputs.reserved_cpus,
            lse_cpus=inputs.lse_cpus,
            lsr_cpus=inputs.lsr_cpus,
        )
        metrics.CPUSET_CPUS.set(len(target) if target else len(current))
        if not target or all(be.read_cpus(d) == target for d in dirs):
            return None
        _write_cpuset(be, dirs, current, target)
        self.cpuset_touched = True
        metrics.ACTIONS.labels("cpuset_set").inc()
        level = logging.INFO if set(current) != set(target) else logging.DEBUG
        log.log(
            level,
            "BE CPU suppressed: cpuset %s",
            format_cpu_list(target),
            extra=ctx(was=format_cpu_list(current), calculation=breakdown.explain()),
        )
        return target

    def restore_cpuset(self, inputs: CpusetInputs, why: str) -> bool:
        if not self.cpuset_touched:
            return False
        be = self._be()
        dirs = be.cpuset_dirs() if be is not None else []
        if be is None or not dirs:
            self.cpuset_touched = False
            return False
        full = inputs.allowed()
        _write_cpuset(be, dirs, be.read_cpus(dirs[0]), full)
        self.cpuset_touched = False
        metrics.CPUSET_CPUS.set(len(full))
        metrics.ACTIONS.labels("cpuset_restored").inc()
        log.info("BE cpuset restored to %s: %s", format_cpu_list(full), why)
        return True


def _write_cpuset(be: BECgroup, dirs: Sequence[Path], current: Sequence[int], target: Sequence[int]) -> None:
    looser = sorted(set(current) | set(target))
    for d in dirs:  # grow parents before children
        be.write_cpus(d, looser)
    for d in reversed(dirs):  # then shrink children before parents
        be.write_cpus(d, list(target))


def _cores(quota_us: int) -> float:
    return -1.0 if quota_us < 0 else quota_us / CFS_PERIOD_US
