"""Per pod and per container CPU, CFS throttling, memory and PSI from cgroups (v1 and v2).

Pods come from the caller (`pods()`; later the API-server watch) and are matched to cgroups top-down by
QoS tier, UID and container ID, as koordlet does. Pod totals are read from the pod cgroup itself (it also
holds the sandbox/pause container, so it is not the sum of the containers).

Cost matters (target <= 1 % of a core at 1 s with 300 pods x 3 containers): paths, series keys and the block layout (one
slot per series, see `agent.series.SampleBlock`) are computed once per pod-list change, and what a cycle reads
(`_Plan`: the files by kind, the slots they go to) once per phase of the stagger while no target changes state.
A cycle then hands each kind of file of all its cgroups to the C reader in one call (`PseudoFileReader.read_keyed`:
read through kept-open fds, the wanted keys picked into int64 rows) and writes the slots with array operations: no
Python object per file. Where the C reader is not built or refuses a file, that kind is read in one comprehension
and parsed as one batch (a regex match per file, the numbers converted together). A batch with a failed read or a
file not in the kernel's usual layout is read again one cgroup at a time, which counts and names what went wrong;
a cgroup whose read had errors is read alone until it reads cleanly, so it does not hold the others back. On v1, where
CPU usage comes from cpuacct.usage, cpu.stat (CFS throttling only) is not read for cgroups without a CFS
quota (`cpu.cfs_quota_us` -1, re-checked every QUOTA_RECHECK_SECONDS): no quota, no throttling series.

Two sources are read less often than every cycle and their last values held in between (sample and hold,
staggered over the targets so each cycle does an even share):
- PSI files every PSI_UPDATE_SECONDS: the kernel recomputes the avg10/60/300 averages only that often, so a
  faster read returns the same averages (the stall totals held meanwhile are at most that much older). The
  agent reads no cgroup PSI by default (`--psi`, as koordlet's PSICollector feature gate).
- Container cgroups (CPU, throttling, memory) every `container_interval`, or with `container_interval=0` (the
  agent's default) when /metrics is scraped (`read_on_scrape`, at most once per cycle). Containers are three
  quarters of the cgroups at 3 a pod and their series are exported raw only (nothing in the agent keeps their
  history), so a read nobody scrapes is wasted: read at scrape time they cost a third of reading them every 5 s
  in the cycle (scraped every 15 s) and are fresher. The pod cgroups that the NodeMetric and QoS enforcement use
  are read every cycle.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import numpy as np
import numpy.typing as npt

from agent.collectors.base import SeriesErrors, classify_os_error
from agent.collectors.cgroup_layout import CgroupDriver, CgroupLayout, CgroupVersion, detect_layout
from agent.collectors.cgroup_stats import (
    CPU_STAT_KEYS,
    MEMORY_STAT_KEYS,
    BatchMiss,
    batch_cpu_stat,
    batch_ints,
    batch_memory_stat,
    keyed_cpu_stat,
    keyed_memory_stat,
    parse_cfs_quota,
    parse_cpu_stat,
    parse_int,
    parse_memory_stat,
    working_set,
)
from agent.collectors.devices import Device
from agent.collectors.files import PseudoFileReader
from agent.collectors.pods import PodRef, split_container_id, valid_pod_uid
from agent.collectors.psi import PsiKeys, batch_psi_values, psi_values
from agent.series import (
    CPU_CFS_PERIODS,
    CPU_CFS_THROTTLED_PERIODS,
    CPU_CFS_THROTTLED_SECONDS,
    CPU_USAGE_SECONDS,
    MEMORY_ANON_USAGE_BYTES,
    MEMORY_WORKING_SET_BYTES,
    MISSING,
    PSI_RESOURCES,
    BlockLayout,
    Kind,
    SampleBlock,
    SeriesKey,
)

COUNTER = Kind.COUNTER
GAUGE = Kind.GAUGE
QUOTA_RECHECK_SECONDS = 30.0  # how long a v1 cgroup's "no CFS quota" (cpu.stat not read) is trusted
PSI_UPDATE_SECONDS = 2.0  # the kernel's PSI averaging period (PSI_FREQ, 2 s)

# A target's slots in the block, from its offset: CPU and CFS counters, memory gauges, then 4 per PSI file
# (some avg10, some total, full avg10, full total) for targets with PSI.
_CPU, _PERIODS, _THROTTLED, _THROTTLED_SECONDS, _ANON, _WORKING_SET, _PSI = range(7)
_PSI_KINDS = (GAUGE, COUNTER, GAUGE, COUNTER)
_PSI_SLOTS = len(PSI_RESOURCES) * len(_PSI_KINDS)
_EMPTY = (MISSING,) * (_PSI + _PSI_SLOTS)  # a target's slots, empty
_PSI_RANGE = _PSI + np.arange(_PSI_SLOTS)  # a target's PSI slots, from its offset
F64 = npt.NDArray[np.float64]


def _same(rows: I64) -> I64:
    return rows


def every_cycles(seconds: float, interval: float) -> int:
    """How many collect cycles span `seconds` (at least 1: read every cycle)."""
    return max(1, round(seconds / interval))


class PsiScope(StrEnum):
    """Which cgroups get PSI series: each costs 3 extra reads and up to 12 series per cgroup."""

    OFF = "off"
    PODS = "pods"
    ALL = "all"  # pods and containers


@dataclass(frozen=True, slots=True)
class _Files:
    """Absolute paths of the files read for one cgroup, built once when the cgroup is found."""

    cpu_stat: str
    cpuacct_usage: str | None  # v1 only; v2 has usage in cpu.stat
    cfs_quota: str | None  # v1 only: cpu.stat is skipped while the quota is -1
    memory_stat: str
    memory_usage: str
    pressure: tuple[str, ...]  # one per PSI_RESOURCES, empty without PSI

    @classmethod
    def build(cls, layout: CgroupLayout, rel: str, psi: bool) -> _Files:
        v1 = layout.version is CgroupVersion.V1
        mem = f"{layout.memory}/{rel}"
        return cls(
            cpu_stat=f"{layout.cpu}/{rel}/cpu.stat",
            cpuacct_usage=f"{layout.cpuacct}/{rel}/cpuacct.usage" if v1 else None,
            cfs_quota=f"{layout.cpu}/{rel}/cpu.cfs_quota_us" if v1 else None,
            memory_stat=f"{mem}/memory.stat",
            memory_usage=f"{mem}/memory.usage_in_bytes" if v1 else f"{mem}/memory.current",
            pressure=tuple(f"{layout.cpuacct}/{rel}/{r}.pressure" for r in PSI_RESOURCES) if psi else (),
        )


@dataclass(slots=True)
class _Target:
    """One pod or container cgroup, with everything precomputed that does not change per cycle."""

    pod_uid: str
    container: str  # "" for the pod cgroup
    source: str  # counter identity: container ID, or the pod UID for the pod cgroup
    candidates: tuple[str, ...]  # possible paths relative to the kubepods directory
    psi: bool
    base: SeriesKey
    cpu: SeriesKey
    periods: SeriesKey
    throttled: SeriesKey
    throttled_seconds: SeriesKey
    anon: SeriesKey
    working_set: SeriesKey
    offset: int = 0  # first slot in the block layout
    width: int = 0  # its number of slots there
    rel: str | None = None  # the candidate found on disk; None until found
    fresh: bool = True  # found but not read yet: read everything, hold nothing
    files: _Files | None = None
    quota_checked: float = -math.inf  # cycle time cfs_quota was last read (v1)
    unlimited: bool = False  # v1: cfs_quota was -1 then, so cpu.stat is not read
    alone: bool = False  # its last read had errors: read one by one, so it does not fail the others' batch


_NO_SERIES = BlockLayout((), (), ())
I64 = npt.NDArray[np.int64]


def _offsets(targets: list[_Target]) -> I64:
    return np.fromiter((t.offset for t in targets), dtype=np.int64, count=len(targets))


@dataclass(slots=True)
class _Plan:
    """What one cycle reads, for one phase of the stagger: worked out once and reused for as long as no target
    changes state (found, gone, read for the first time, failing), so a steady cycle does no work per target."""

    unresolved: list[_Target]  # listed, no cgroup found yet: looked for every cycle
    single: list[tuple[_Target, bool]]  # (target, PSI held) read one by one: their last read had errors
    batch: list[tuple[_Target, bool]]  # (target, PSI held) read as one batch, file kind by file kind
    targets: list[_Target]  # of `batch`
    at: I64  # their offsets
    fresh: list[_Target]  # of `batch`, read for the first time
    cpu_stat: list[str]  # their files, by kind
    cpuacct_usage: list[str]  # v1
    memory_stat: list[str]
    memory_usage: list[str]
    psi: list[str]  # the pressure files of those whose PSI is read
    psi_at: I64  # the offsets of those
    # v1: those with a CFS quota (cpu.stat read), their cpu.stat files and offsets, as of the last quota checks;
    # worked out again once any of those checks is due (`quota_valid` is when the first falls due).
    quota: tuple[list[str], I64] = ([], np.empty(0, dtype=np.int64))
    quota_valid: tuple[float, float] = (math.inf, -math.inf)

    @classmethod
    def build(
        cls, unresolved: list[_Target], single: list[tuple[_Target, bool]], batch: list[tuple[_Target, bool]]
    ) -> _Plan:
        targets = [t for t, _ in batch]
        files = [t.files for t in targets if t.files is not None]
        psi_targets = [t for t, hold_psi in batch if not hold_psi and t.files is not None and t.files.pressure]
        return cls(
            unresolved,
            single,
            batch,
            targets,
            _offsets(targets),
            [t for t in targets if t.fresh],
            [f.cpu_stat for f in files],
            [f.cpuacct_usage for f in files if f.cpuacct_usage is not None],
            [f.memory_stat for f in files],
            [f.memory_usage for f in files],
            [path for t in psi_targets if t.files is not None for path in t.files.pressure],
            _offsets(psi_targets),
        )


class CgroupCollector:
    def __init__(
        self,
        pods: Callable[[], Sequence[PodRef]],
        cgroup_root: str | Path = "/sys/fs/cgroup",
        *,
        cgroup_parent: str = "",
        version: CgroupVersion | None = None,
        driver: CgroupDriver | None = None,
        psi: PsiScope = PsiScope.PODS,
        reader: PseudoFileReader | None = None,
        interval: float = 1.0,
        container_interval: float | None = None,
    ) -> None:
        """`interval` is the collect interval; `container_interval` (default: `interval`, i.e. every cycle) how
        often container cgroups are read in the cycle; 0: only by `read_on_scrape` (and once when found)."""
        self._pods = pods
        self._root = Path(cgroup_root)
        self._parent = cgroup_parent
        self._forced = (version, driver)
        self._psi = psi
        self._reader = reader or PseudoFileReader()
        self._errors = SeriesErrors("cgroups")
        self.layout: CgroupLayout | None = None
        self._targets: list[_Target] = []
        self._block = BlockLayout((), (), ())
        self._psi_every = every_cycles(PSI_UPDATE_SECONDS, interval)
        self._containers_on_scrape = container_interval == 0
        self._container_every = every_cycles(container_interval or interval, interval)
        self._scrape_plan: tuple[tuple[BlockLayout, int], _Plan] | None = None
        self._cycle = 0
        self._held: tuple[BlockLayout, F64] | None = None  # the last cycle's values, for holding
        # Plans by cycle phase (`_plan`), valid for one block layout and target state (`_state` counts changes).
        self._plans: dict[int, _Plan] = {}
        self._plans_for: tuple[BlockLayout, int, bool] | None = None
        self._state = 0
        self._period = math.lcm(self._psi_every, self._container_every)
        self._pods_seen: tuple[PodRef, ...] | None = None

    @property
    def name(self) -> str:
        return "cgroups"

    @property
    def errors(self) -> SeriesErrors:
        return self._errors

    @property
    def targets(self) -> int:
        return len(self._targets)

    def close(self) -> None:
        self._reader.close()

    # ------------------------------------------------------------------ targets
    def _ensure_layout(self) -> CgroupLayout | None:
        if self.layout is None:
            version, driver = self._forced
            self.layout = detect_layout(self._root, self._parent, version=version, driver=driver)
            self._pods_seen = None  # rebuild targets with the new layout
        return self.layout

    def _refresh_targets(self, layout: CgroupLayout, pods: Sequence[PodRef]) -> None:
        # Fast path: the same tuple again (the pod watch hands out a new tuple per change). A list may have been
        # mutated in place, so it is compared by value.
        if pods is self._pods_seen or (not isinstance(pods, tuple) and tuple(pods) == self._pods_seen):
            return
        self._pods_seen = pods = tuple(pods)
        old = {(t.pod_uid, t.container, t.source): t for t in self._targets}
        targets: list[_Target] = []
        for pod in pods:
            if not valid_pod_uid(pod.uid):
                self._errors.record(SeriesErrors.BAD_ID)
                continue
            pod_rel = layout.pod_dir(pod.qos, pod.uid)
            targets.append(
                self._reuse(layout, old, (pod.uid, "", pod.uid), (pod_rel,))
                or self._new_target(pod.uid, "", pod.uid, (pod_rel,), self._psi is not PsiScope.OFF)
            )
            for c in pod.containers:
                if not c.container_id:
                    continue  # not started yet: quietly skipped, as koordlet does
                parsed = split_container_id(c.container_id)
                if parsed is None:
                    self._errors.record(SeriesErrors.BAD_ID)
                    continue
                key = (pod.uid, c.name, c.container_id)
                candidates = tuple(f"{pod_rel}/{d}" for d in layout.container_dirs(*parsed))
                targets.append(
                    self._reuse(layout, old, key, candidates)
                    or self._new_target(pod.uid, c.name, c.container_id, candidates, self._psi is PsiScope.ALL)
                )
        for gone in old.values():  # pods/containers no longer listed: unpin their cgroups
            self._release(layout, gone)
        if len(targets) != len(self._targets) or any(a is not b for a, b in zip(targets, self._targets, strict=True)):
            self._targets = targets
            self._block = self._block_layout(layout, targets)

    @staticmethod
    def _block_layout(layout: CgroupLayout, targets: list[_Target]) -> BlockLayout:
        keys: list[SeriesKey] = []
        kinds: list[Kind] = []
        sources: list[str] = []
        for t in targets:
            t.offset = len(keys)
            keys += (t.cpu, t.periods, t.throttled, t.throttled_seconds, t.anon, t.working_set)
            kinds += (COUNTER, COUNTER, COUNTER, COUNTER, GAUGE, GAUGE)
            sources += (t.source, t.source, t.source, t.source, "", "")
            if t.psi and layout.psi:
                for resource in PSI_RESOURCES:
                    keys += PsiKeys.build(resource, t.base, node=False)
                    kinds += _PSI_KINDS
                    sources += ("", t.source, "", t.source)
            t.width = len(keys) - t.offset
        return BlockLayout(tuple(keys), tuple(kinds), tuple(sources))

    def _reuse(
        self,
        layout: CgroupLayout,
        old: dict[tuple[str, str, str], _Target],
        key: tuple[str, str, str],
        candidates: tuple[str, ...],
    ) -> _Target | None:
        target = old.pop(key, None)
        if target is not None and target.candidates != candidates:  # e.g. the pod's QoS tier changed
            self._release(layout, target)
            return None
        return target

    def _new_target(self, uid: str, container: str, source: str, candidates: tuple[str, ...], psi: bool) -> _Target:
        def key(metric: str) -> SeriesKey:
            return SeriesKey(metric, uid, container)

        return _Target(
            uid,
            container,
            source,
            candidates,
            psi,
            key(""),
            key(CPU_USAGE_SECONDS),
            key(CPU_CFS_PERIODS),
            key(CPU_CFS_THROTTLED_PERIODS),
            key(CPU_CFS_THROTTLED_SECONDS),
            key(MEMORY_ANON_USAGE_BYTES),
            key(MEMORY_WORKING_SET_BYTES),
        )

    def _release(self, layout: CgroupLayout, target: _Target) -> None:
        if target.rel is not None:
            for hierarchy in {layout.cpu, layout.cpuacct, layout.memory}:
                self._reader.release_under(f"{hierarchy}/{target.rel}")
            target.rel = target.files = None
            target.quota_checked, target.unlimited = -math.inf, False
            self._state += 1

    def _resolve(self, layout: CgroupLayout, target: _Target) -> bool:
        if target.rel is None:
            for candidate in target.candidates:
                if os.path.isdir(f"{layout.cpuacct}/{candidate}"):
                    target.rel = candidate
                    target.fresh = True
                    target.files = _Files.build(layout, candidate, target.psi and layout.psi)
                    self._state += 1
                    break
        return target.rel is not None

    # ------------------------------------------------------------------ collection
    @property
    def devices(self) -> Sequence[Device]:
        return ()

    def collect(self, now: float) -> SampleBlock:
        layout = self._ensure_layout()
        if layout is None:
            return SampleBlock(_NO_SERIES, [])  # no kubepods hierarchy (yet): nothing to report is not a failure
        self._refresh_targets(layout, self._pods())
        block = self._block
        held = self._held[1] if self._held is not None and self._held[0] is block else None
        # Start from the last cycle's values (one C-level copy) so a held target costs nothing; the slots of a
        # target read now are emptied first, so a failed read leaves NaN as it would without holding.
        values = held.copy() if held is not None else np.full(len(block), MISSING)
        v1 = layout.version is CgroupVersion.V1
        self._cycle += 1
        plan = self._plan(held is not None)
        if plan.unresolved:
            state = self._state
            for target in plan.unresolved:
                self._resolve(layout, target)
            if self._state != state:  # found now: read whole this cycle
                plan = self._plan(held is not None)
            for target in plan.unresolved:
                self._errors.record(SeriesErrors.VANISHED)  # listed, but no cgroup (exited or not created)
                if held is not None:
                    values[target.offset : target.offset + target.width] = _EMPTY[: target.width]
        self._read_plan(layout, plan, v1, now, values, holding=held is not None)
        self._held = (block, values)
        return SampleBlock(block, values)

    def read_on_scrape(self, now: float) -> SampleBlock | None:
        """With containers read at scrape time: every container cgroup read now into the last cycle's values (kept
        for the cycles that follow); that block, or None when containers are read in the cycle or no cycle ran."""
        layout = self.layout
        if not self._containers_on_scrape or self._held is None or self._held[0] is not self._block or not layout:
            return None
        block, values = self._held[0], self._held[1].copy()
        key = (block, self._state)
        if self._scrape_plan is None or self._scrape_plan[0] != key:
            single = [(t, False) for t in self._targets if t.container and t.files is not None and t.alone]
            batch = [(t, False) for t in self._targets if t.container and t.files is not None and not t.alone]
            self._scrape_plan = key, _Plan.build([], single, batch)
        self._read_plan(layout, self._scrape_plan[1], layout.version is CgroupVersion.V1, now, values, holding=True)
        self._held = (block, values)
        return SampleBlock(block, values)

    def _read_plan(
        self, layout: CgroupLayout, plan: _Plan, v1: bool, now: float, values: F64, *, holding: bool
    ) -> None:
        """Read the resolved targets of `plan` into their slots: as a batch, else (or where the batch failed) one
        by one; with `holding`, a slot read one by one is emptied first, so a failed read leaves NaN."""
        single = plan.single
        if plan.batch and not self._read_batch(plan, v1, now, values):
            single = single + plan.batch
        errors = self._errors
        for target, hold_psi in single:
            o = target.offset
            if holding:
                width = _PSI if hold_psi else target.width
                values[o : o + width] = _EMPTY[:width]
            before = errors.total
            read = self._collect_target(target, v1, now, values, not hold_psi)
            if target.alone != (errors.total != before):
                target.alone = not target.alone
                self._state += 1
            if not read:
                self._release(layout, target)  # the cgroup went away; look for it afresh next cycle
                continue
            if target.fresh:
                target.fresh = False
                self._state += 1

    def _plan(self, holding: bool) -> _Plan:
        """This cycle's plan: the one of its phase, worked out again after any change of targets or their state."""
        if self._plans_for != (key := (self._block, self._state, holding)):
            self._plans.clear()
            self._plans_for = key
        phase = self._cycle % self._period
        plan = self._plans.get(phase)
        if plan is None:
            plan = self._plans[phase] = self._build_plan(holding)
        return plan

    def _build_plan(self, holding: bool) -> _Plan:
        unresolved: list[_Target] = []
        single: list[tuple[_Target, bool]] = []
        batch: list[tuple[_Target, bool]] = []
        psi_every, container_every = self._psi_every, self._container_every
        for i, target in enumerate(self._targets):
            if target.files is None:
                unresolved.append(target)
                continue
            phase = self._cycle + i  # staggered: each cycle reads an even share of the held sources
            hold = holding and not target.fresh
            if hold and target.container and (self._containers_on_scrape or phase % container_every != 0):
                continue  # its slots hold the last values (copied in `collect`)
            # a container read at most every PSI period reads its PSI whenever it is read
            hold_psi = hold and phase % psi_every != 0 and not (target.container and container_every >= psi_every)
            (single if target.alone else batch).append((target, hold_psi))
        return _Plan.build(unresolved, single, batch)

    def _read_batch(self, plan: _Plan, v1: bool, now: float, values: F64) -> bool:
        """Read and parse the files of `plan.batch` kind by kind (one read comprehension and one array parse per
        kind) into their slots; False, with no slot written, if any read failed or any file was not in the kernel's
        usual layout: the caller then reads those targets one by one, which counts and names what went wrong.

        Same values as `_collect_target`: the same layouts, and integer arithmetic exact in int64."""
        read = self._reader.read_many
        if v1:  # cpu.stat only where a CFS quota is set (re-checked every QUOTA_RECHECK_SECONDS)
            if not plan.quota_valid[0] <= now < plan.quota_valid[1]:
                stat_targets = [t for t in plan.targets if not self._no_quota(t, now)]
                plan.quota = [t.files.cpu_stat for t in stat_targets if t.files is not None], _offsets(stat_targets)
                checked = [t.quota_checked for t in plan.targets]
                plan.quota_valid = (max(checked, default=now), min(checked, default=now) + QUOTA_RECHECK_SECONDS)
            stat_paths, stat_at = plan.quota
        else:
            stat_paths, stat_at = plan.cpu_stat, plan.at
        version = 1 if v1 else 2
        try:
            stat = self._read_kind(
                stat_paths, "cpu.stat", CPU_STAT_KEYS[version], lambda rows: keyed_cpu_stat(rows, version),
                lambda datas: batch_cpu_stat(datas, version),
            )  # fmt: skip
            cpu_ns = self._read_kind(plan.cpuacct_usage, "cpuacct.usage", None, _same, batch_ints) if v1 else stat[:, 0]
            memory = self._read_kind(
                plan.memory_stat, "memory.stat", MEMORY_STAT_KEYS[version], keyed_memory_stat,
                lambda datas: batch_memory_stat(datas, version),
            )  # fmt: skip
            usage = self._read_kind(plan.memory_usage, "memory usage", None, _same, batch_ints)
            psi_data = read(plan.psi, "pressure")
            if psi_data is None:
                return False
            psi = batch_psi_values(psi_data)
        except (OSError, BatchMiss):
            return False
        at = plan.at
        values[at + _CPU] = cpu_ns / 1e9
        # nr_periods stays 0 until a CFS quota applies: no quota, no throttling series (-1: no CFS stats at all)
        for slot in (_PERIODS, _THROTTLED, _THROTTLED_SECONDS):
            values[at + slot] = MISSING
        cfs = stat[:, 1] > 0
        stat, stat_at = stat[cfs], stat_at[cfs]
        values[stat_at + _PERIODS] = stat[:, 1]
        values[stat_at + _THROTTLED] = stat[:, 2]
        values[stat_at + _THROTTLED_SECONDS] = stat[:, 3] / 1e9
        values[at + _ANON] = memory[:, 0]
        values[at + _WORKING_SET] = np.maximum(usage - memory[:, 1], 0)
        if plan.psi:
            values[(plan.psi_at[:, None] + _PSI_RANGE).ravel()] = psi.ravel()
        if plan.fresh:
            for t in plan.fresh:
                t.fresh = False
            self._state += 1
        return True

    def _read_kind(
        self,
        paths: list[str],
        kind: str,
        keys: tuple[bytes, ...] | None,
        from_rows: Callable[[I64], I64],
        parse: Callable[[list[bytes]], I64],
    ) -> I64:
        """One kind of file of a batch as its array: the compiled reader's rows (`keys`, or one integer a file for
        None) when it reads them all cleanly, else read and parsed in Python. Raises OSError or BatchMiss: the
        caller reads the batch one by one."""
        reader = self._reader
        rows = (reader.read_keyed(paths, keys) if keys else reader.read_ints(paths)) if paths else None
        if rows is not None:
            try:
                return from_rows(rows)
            except BatchMiss:
                pass  # the Python parser says which file and why, or takes a layout the checks above do not
        datas = reader.read_many(paths, kind)
        if datas is None:
            raise BatchMiss("this reader reads one by one")
        return parse(datas)

    def _failed(self, exc: OSError) -> bool:
        """Count a failed read; True if the cgroup is gone."""
        reason = classify_os_error(exc)
        self._errors.record(reason)
        return reason == SeriesErrors.VANISHED

    def _no_quota(self, t: _Target, now: float) -> bool:
        """True if the v1 cgroup has no CFS quota, read at most every QUOTA_RECHECK_SECONDS. Unreadable or
        garbage counts as "maybe a quota" (cpu.stat is read and its errors counted as usual)."""
        path = t.files.cfs_quota if t.files is not None else None
        if path is None:
            return False  # v2: cpu.stat is always read
        if not t.quota_checked <= now < t.quota_checked + QUOTA_RECHECK_SECONDS:
            t.quota_checked = now
            try:
                t.unlimited = parse_cfs_quota(self._reader.read_once(path)) is None
            except (OSError, ValueError):
                t.unlimited = False
        return t.unlimited

    def _collect_target(self, t: _Target, v1: bool, now: float, values: F64, psi: bool) -> bool:
        """Read one cgroup into its slots (PSI only if asked); returns False if it vanished. Each file fails on
        its own.

        This runs for every pod and container every second, hence the flat, repetitive shape.
        """
        files = t.files
        assert files is not None
        read = self._reader.read
        garbage = self._errors
        gone = False
        o = t.offset
        cpu_stat = None
        if not self._no_quota(t, now):
            try:
                cpu_stat = parse_cpu_stat(read(files.cpu_stat), 1 if v1 else 2)
            except OSError as exc:
                gone |= self._failed(exc)
            except ValueError as exc:
                garbage.bad_value(files.cpu_stat, exc)
        if files.cpuacct_usage is not None:
            try:
                values[o + _CPU] = parse_int(read(files.cpuacct_usage)) / 1e9
            except OSError as exc:
                gone |= self._failed(exc)
            except ValueError as exc:
                garbage.bad_value(files.cpuacct_usage, exc)
        elif cpu_stat is not None and cpu_stat.usage_ns is not None:
            values[o + _CPU] = cpu_stat.usage_ns / 1e9
        # nr_periods stays 0 until a CFS quota applies: no quota, no throttling series
        if cpu_stat is not None and cpu_stat.cfs is not None and cpu_stat.cfs.periods > 0:
            periods, throttled, throttled_ns = cpu_stat.cfs
            values[o + _PERIODS] = float(periods)
            values[o + _THROTTLED] = float(throttled)
            values[o + _THROTTLED_SECONDS] = throttled_ns / 1e9

        gone |= self._read_memory(files, v1, o, values)

        slot = o + _PSI
        for path in files.pressure if psi else ():
            try:
                values[slot : slot + 4] = psi_values(read(path))
            except OSError as exc:
                gone |= self._failed(exc)
            except ValueError as exc:
                garbage.bad_value(path, exc)
            slot += 4
        return not gone

    def _read_memory(self, files: _Files, v1: bool, o: int, values: F64) -> bool:
        """Memory of one cgroup into its slots; True if the cgroup vanished."""
        read = self._reader.read
        gone = False
        mem = None
        try:
            mem = parse_memory_stat(read(files.memory_stat), 1 if v1 else 2)
        except OSError as exc:
            gone |= self._failed(exc)
        except ValueError as exc:
            self._errors.bad_value(files.memory_stat, exc)
        else:
            values[o + _ANON] = float(mem.anon_usage)
        try:
            usage = parse_int(read(files.memory_usage))
        except OSError as exc:
            gone |= self._failed(exc)
        except ValueError as exc:
            self._errors.bad_value(files.memory_usage, exc)
        else:
            if mem is not None:
                values[o + _WORKING_SET] = float(working_set(usage, mem.inactive_file))
        return gone
