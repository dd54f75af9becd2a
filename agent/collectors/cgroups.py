"""Per pod and per container CPU, CFS throttling, memory and PSI from cgroups (v1 and v2).

Pods come from the caller (`pods()`; later the API-server watch) and are matched to cgroups top-down by
QoS tier, UID and container ID, as koordlet does. Pod totals are read from the pod cgroup itself (it also
holds the sandbox/pause container, so it is not the sum of the containers).

Cost matters (target <= 1 % of a core at 1 s with 100 pods): paths and series keys are computed once per
pod-list change, files are read through kept-open fds, and only the few keys needed are parsed. On v1, where
CPU usage comes from cpuacct.usage, cpu.stat (CFS throttling only) is not read for cgroups without a CFS
quota (`cpu.cfs_quota_us` -1, re-checked every QUOTA_RECHECK_SECONDS): no quota, no throttling series.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from agent.collectors.base import SeriesErrors, classify_os_error
from agent.collectors.cgroup_layout import CgroupDriver, CgroupLayout, CgroupVersion, detect_layout
from agent.collectors.cgroup_stats import parse_cfs_quota, parse_cpu_stat, parse_int, parse_memory_stat, working_set
from agent.collectors.files import PseudoFileReader
from agent.collectors.pods import PodRef, split_container_id, valid_pod_uid
from agent.collectors.psi import PsiKeys, parse_psi, psi_samples
from agent.series import (
    CPU_CFS_PERIODS,
    CPU_CFS_THROTTLED_PERIODS,
    CPU_CFS_THROTTLED_SECONDS,
    CPU_USAGE_SECONDS,
    MEMORY_ANON_USAGE_BYTES,
    MEMORY_WORKING_SET_BYTES,
    PSI_RESOURCES,
    Kind,
    Sample,
    SeriesKey,
)

COUNTER = Kind.COUNTER
GAUGE = Kind.GAUGE
QUOTA_RECHECK_SECONDS = 30.0  # how long a v1 cgroup's "no CFS quota" (cpu.stat not read) is trusted
_new_tuple = tuple.__new__  # Sample(...) without the Python-level NamedTuple __new__: one per value per cycle


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
    pressure: tuple[tuple[str, PsiKeys], ...]  # (path, series keys), empty without PSI

    @classmethod
    def build(cls, layout: CgroupLayout, rel: str, psi: bool, base: SeriesKey) -> _Files:
        v1 = layout.version is CgroupVersion.V1
        mem = f"{layout.memory}/{rel}"
        return cls(
            cpu_stat=f"{layout.cpu}/{rel}/cpu.stat",
            cpuacct_usage=f"{layout.cpuacct}/{rel}/cpuacct.usage" if v1 else None,
            cfs_quota=f"{layout.cpu}/{rel}/cpu.cfs_quota_us" if v1 else None,
            memory_stat=f"{mem}/memory.stat",
            memory_usage=f"{mem}/memory.usage_in_bytes" if v1 else f"{mem}/memory.current",
            pressure=tuple(
                (f"{layout.cpuacct}/{rel}/{r}.pressure", PsiKeys.build(r, base, node=False)) for r in PSI_RESOURCES
            )
            if psi
            else (),
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
    rel: str | None = None  # the candidate found on disk; None until found
    files: _Files | None = None
    quota_checked: float = -math.inf  # cycle time cfs_quota was last read (v1)
    unlimited: bool = False  # v1: cfs_quota was -1 then, so cpu.stat is not read


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
    ) -> None:
        self._pods = pods
        self._root = Path(cgroup_root)
        self._parent = cgroup_parent
        self._forced = (version, driver)
        self._psi = psi
        self._reader = reader or PseudoFileReader()
        self._errors = SeriesErrors()
        self.layout: CgroupLayout | None = None
        self._targets: list[_Target] = []
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
        self._targets = targets

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

    def _resolve(self, layout: CgroupLayout, target: _Target) -> bool:
        if target.rel is None:
            for candidate in target.candidates:
                if os.path.isdir(f"{layout.cpuacct}/{candidate}"):
                    target.rel = candidate
                    target.files = _Files.build(layout, candidate, target.psi and layout.psi, target.base)
                    break
        return target.rel is not None

    # ------------------------------------------------------------------ collection
    def collect(self, now: float) -> Sequence[Sample]:
        layout = self._ensure_layout()
        if layout is None:
            return []  # no kubepods hierarchy (yet): nothing to report is not a failure
        self._refresh_targets(layout, self._pods())
        out: list[Sample] = []
        v1 = layout.version is CgroupVersion.V1
        for target in self._targets:
            if not self._resolve(layout, target):
                self._errors.record(SeriesErrors.VANISHED)  # listed, but no cgroup (exited or not created)
                continue
            if not self._collect_target(target, v1, now, out):
                self._release(layout, target)  # the cgroup went away; look for it afresh next cycle
        return out

    def _failed(self, exc: OSError) -> bool:
        """Count a failed read; True if the cgroup is gone."""
        reason = classify_os_error(exc)
        self._errors.record(reason)
        return reason == SeriesErrors.VANISHED

    def _no_quota(self, t: _Target, path: str, now: float) -> bool:
        """True if the v1 cgroup has no CFS quota, read at most every QUOTA_RECHECK_SECONDS. Unreadable or
        garbage counts as "maybe a quota" (cpu.stat is read and its errors counted as usual)."""
        if not t.quota_checked <= now < t.quota_checked + QUOTA_RECHECK_SECONDS:
            t.quota_checked = now
            try:
                t.unlimited = parse_cfs_quota(self._reader.read_once(path)) is None
            except (OSError, ValueError):
                t.unlimited = False
        return t.unlimited

    def _collect_target(self, t: _Target, v1: bool, now: float, out: list[Sample]) -> bool:
        """Read one cgroup; returns False if it vanished. Each file fails on its own.

        This runs for every pod and container every second, hence the flat, repetitive shape.
        """
        files = t.files
        assert files is not None
        read = self._reader.read
        garbage = self._errors
        gone = False
        new = _new_tuple
        cpu_stat = None
        if files.cfs_quota is None or not self._no_quota(t, files.cfs_quota, now):
            try:
                cpu_stat = parse_cpu_stat(read(files.cpu_stat), 1 if v1 else 2)
            except OSError as exc:
                gone |= self._failed(exc)
            except ValueError:
                garbage.record(SeriesErrors.GARBAGE)
        usage_ns: int | None = None
        if files.cpuacct_usage is not None:
            try:
                usage_ns = parse_int(read(files.cpuacct_usage))
            except OSError as exc:
                gone |= self._failed(exc)
            except ValueError:
                garbage.record(SeriesErrors.GARBAGE)
        elif cpu_stat is not None:
            usage_ns = cpu_stat.usage_ns
        if usage_ns is not None:
            out.append(new(Sample, (t.cpu, usage_ns / 1e9, COUNTER, t.source)))
        # nr_periods stays 0 until a CFS quota applies: no quota, no throttling series
        if cpu_stat is not None and cpu_stat.cfs is not None and cpu_stat.cfs.periods > 0:
            periods, throttled, throttled_ns = cpu_stat.cfs
            out.append(new(Sample, (t.periods, float(periods), COUNTER, t.source)))
            out.append(new(Sample, (t.throttled, float(throttled), COUNTER, t.source)))
            out.append(new(Sample, (t.throttled_seconds, throttled_ns / 1e9, COUNTER, t.source)))

        mem = None
        try:
            mem = parse_memory_stat(read(files.memory_stat), 1 if v1 else 2)
        except OSError as exc:
            gone |= self._failed(exc)
        except ValueError:
            garbage.record(SeriesErrors.GARBAGE)
        else:
            out.append(new(Sample, (t.anon, float(mem.anon_usage), GAUGE, "")))
        try:
            usage = parse_int(read(files.memory_usage))
        except OSError as exc:
            gone |= self._failed(exc)
        except ValueError:
            garbage.record(SeriesErrors.GARBAGE)
        else:
            if mem is not None:
                out.append(new(Sample, (t.working_set, float(working_set(usage, mem.inactive_file)), GAUGE, "")))

        for path, psi_keys in files.pressure:
            try:
                reading = parse_psi(read(path))
            except OSError as exc:
                gone |= self._failed(exc)
            except ValueError:
                garbage.record(SeriesErrors.GARBAGE)
            else:
                psi_samples(reading, psi_keys, t.source, out)
        return not gone
