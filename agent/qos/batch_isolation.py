"""Batch pods held to the batch resources they were admitted with (koordlet's batchresource hook, reconciler mode).

Every enforcement round (one collect interval) the enforcer hands over the node's pods; for each batch pod
(agent.qos.batch_resource says which, and what its cgroups get) the pod and container cgroups are read and the
values that differ are written: a cgroup is held within one round of appearing, and a value something changed back
is set again the next round. Nothing is ever undone: the kubelet owns the cgroups' lives, and a pod that stops being a
batch pod keeps what it had until the kubelet recreates its cgroups.

- CFS quotas are written in the order cgroup v1 accepts (a child's quota above its parent's is EINVAL): a pod quota
  that loosens is written before its containers', one that tightens after them.
- A memory limit below what the cgroup holds is not written (the kernel would reclaim and, on v2, OOM-kill at the
  write; the kubelet likewise defers a memory limit decrease below usage): it is counted as deferred, logged once,
  and written in the first round the cgroup's working set is below it. From then on the kernel holds the pod to it:
  allocating past it OOM-kills the pod's process, as for any memory limit.
- A value the kernel refuses is counted, logged once per pod and file, and an Event says so on the pod
  (`BatchIsolationFailed`); it is tried again every round. A cgroup that disappears while it is written (the pod is
  stopping) is counted as gone, quietly.
- Dry run: the same reads and comparisons, every difference logged once and counted as `dry_run`, nothing written.

Which pods: those with batch resources whose Koordinator QoS (the `koordinator.sh/qosClass` label, else the
kubelet's) is BE. koordlet acts only on the label; an unlabelled pod with only batch resources is BestEffort to the
kubelet, so it is held too. A labelled non-BE pod with batch resources is left alone and logged once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from agent.collectors.cgroup_layout import CgroupLayout, detect_layout
from agent.qos import metrics
from agent.qos.batch_cgroup import CgroupDirs, Knob, UnsafePath, container_dirs, is_gone, pod_dirs
from agent.qos.batch_resource import (
    UNLIMITED,
    BatchSpec,
    BatchSpecError,
    BatchTargets,
    CgroupTargets,
    IsolationMode,
    NodeLimits,
    batch_spec,
    batch_targets,
)
from common.api.pod import KoordQoSClass, KubeQoSClass, koord_qos_label, kube_qos_class
from common.api.quantity import QuantityError
from common.kube.events import EventRecorder

log = logging.getLogger("loadline.agent.qos")

REASON_FAILED: Final = "BatchIsolationFailed"


@dataclass
class RoundResult:
    """What one round did (also counted in /metrics): pods held, and writes by (knob, level, result)."""

    pods: int = 0
    writes: dict[tuple[str, str, str], int] = field(default_factory=dict)

    def count(self, knob: Knob, level: str, result: str) -> None:
        key = (knob.value, level, result)
        self.writes[key] = self.writes.get(key, 0) + 1
        metrics.BATCH_WRITES.labels(knob.value, level, result).inc()


@dataclass
class _Pod:
    """What is remembered of a pod between rounds: its parsed spec (per resourceVersion) and what was logged."""

    version: str = ""
    spec: BatchSpec | None = None
    error: str = ""
    noted: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class _Held:
    """The pod being held this round."""

    uid: str
    pod: Mapping[str, Any]
    state: _Pod
    result: RoundResult


class BatchIsolator:
    def __init__(
        self,
        cgroup_root: str | Path,
        recorder: EventRecorder,
        *,
        cgroup_parent: str = "",
        dry_run: bool = False,
    ) -> None:
        self.cgroup_root = Path(cgroup_root)
        self.cgroup_parent = cgroup_parent
        self.recorder = recorder
        self.dry_run = dry_run
        self._layout: CgroupLayout | None = None
        self._pods: dict[str, _Pod] = {}
        metrics.BATCH_MODE.labels((IsolationMode.DRY_RUN if dry_run else IsolationMode.ON).value).set(1)

    # --- one round -------------------------------------------------------------------------------------
    async def round(
        self, pods: Mapping[str, Mapping[str, Any]], node: NodeLimits, *, cfs_quota: bool = True
    ) -> RoundResult:
        """Hold every batch pod in `pods` (by UID) to its batch resources. `cfs_quota` False: BE suppression by
        cfsQuota holds them, and their quotas are lifted."""
        result = RoundResult()
        for gone in set(self._pods) - set(pods):
            del self._pods[gone]
        layout = self._current_layout()
        for uid, pod in pods.items():
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            state = self._pods.setdefault(uid, _Pod())
            targets = self._targets(pod, state, node, cfs_quota)
            if targets is None or layout is None:
                continue
            try:
                held = await self._hold(layout, _Held(uid, pod, state, result), targets)
            except UnsafePath as exc:
                await self._note(pod, state, "unsafe", f"{_name(pod)}: not held, its cgroup path is unsafe: {exc}",
                                 problem="unsafe_path")  # fmt: skip
                continue
            result.pods += held
        metrics.BATCH_PODS.set(result.pods)
        return result

    def _current_layout(self) -> CgroupLayout | None:
        if self._layout is None or not Path(self._layout.cpu).is_dir():
            self._layout = detect_layout(self.cgroup_root, self.cgroup_parent)
        return self._layout

    def _targets(self, pod: Mapping[str, Any], state: _Pod, node: NodeLimits, cfs_quota: bool) -> BatchTargets | None:
        version = str((pod.get("metadata") or {}).get("resourceVersion") or "")
        if version != state.version or not version:
            state.version = version
            try:
                state.spec, state.error = batch_spec(pod), ""
            except BatchSpecError as exc:
                state.spec, state.error = None, str(exc)
        if state.error:
            self._log_once(state, "malformed", f"{_name(pod)}: batch resources unreadable, not held: {state.error}",
                           problem="malformed")  # fmt: skip
            return None
        if state.spec is None:
            return None
        label = koord_qos_label((pod.get("metadata") or {}).get("labels") or {})
        if label not in (KoordQoSClass.BE, KoordQoSClass.NONE):
            self._log_once(state, "not_be", f"{_name(pod)}: batch resources on a {label.value} pod: not held (only BE "
                           "pods are, as in koordlet)", problem="not_best_effort")  # fmt: skip
            return None
        targets = batch_targets(state.spec, node, cfs_quota=cfs_quota)
        if targets.clamped:
            clamped = ", ".join(targets.clamped)
            self._log_once(state, f"clamped:{clamped}", f"{_name(pod)}: {clamped}: held to the node's capacity",
                           problem="above_node_capacity")  # fmt: skip
        return targets

    async def _hold(self, layout: CgroupLayout, held: _Held, targets: BatchTargets) -> int:
        pod = held.pod
        try:
            tier = kube_qos_class(pod)
        except (QuantityError, ValueError):
            tier = KubeQoSClass.BEST_EFFORT  # only batch resources: the kubelet made it BestEffort
        pod_cgroup = pod_dirs(layout, tier, held.uid)
        if not pod_cgroup.exists():
            return 0  # not created yet (or gone): the next round looks again
        containers: list[tuple[CgroupDirs, CgroupTargets]] = []
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            name = str(status.get("name") or "")
            wanted = targets.containers.get(name)
            if wanted is not None:
                dirs = container_dirs(layout, pod_cgroup, name, str(status.get("containerID") or ""))
                if dirs is not None:
                    containers.append((dirs, wanted))
        for knob in (Knob.CPU_SHARES, Knob.MEMORY_LIMIT):
            for dirs, wanted in [(pod_cgroup, targets.pod), *containers]:
                await self._apply(held, dirs, knob, wanted)
        # Quotas: a loosening pod quota first (its containers' may exceed the old one), a tightening one last.
        pod_first = _loosens(pod_cgroup, targets.pod)
        order = [(pod_cgroup, targets.pod), *containers] if pod_first else [*containers, (pod_cgroup, targets.pod)]
        for dirs, wanted in order:
            await self._apply(held, dirs, Knob.CFS_QUOTA, wanted)
        return 1

    async def _apply(self, held: _Held, dirs: CgroupDirs, knob: Knob, targets: CgroupTargets) -> None:
        pod, state, result = held.pod, held.state, held.result
        where = f"{_name(pod)} {dirs.level}{' ' + dirs.name if dirs.name else ''} {dirs.path(knob).name}"
        try:
            period = dirs.period_us() if knob is Knob.CFS_QUOTA else 0
            wanted = dirs.wanted(knob, targets, period)
            try:
                current: int | None = dirs.current(knob)
            except ValueError:
                current = None  # garbage in the file: write what it should hold
            if current == wanted:
                return
            lowers = wanted != UNLIMITED and (current is None or current == UNLIMITED or wanted < current)
            if knob is Knob.MEMORY_LIMIT and lowers:
                used = dirs.working_set()
                if used > wanted:
                    result.count(knob, dirs.level, "deferred")
                    self._log_once(state, f"deferred:{where}", f"{where}: limit {wanted} below the {used} bytes the "
                                   "cgroup holds: not set until its working set is below it")  # fmt: skip
                    return
            text = dirs.render(knob, wanted, period)
            if self.dry_run:
                result.count(knob, dirs.level, "dry_run")
                self._log_once(state, f"dry:{where}={text}", f"dry run: would set {where} to {text} (now {current})")
                return
            dirs.write(knob, text)
        except OSError as exc:
            if is_gone(exc):
                result.count(knob, dirs.level, "gone")
                self._log_once(state, "gone", f"{_name(pod)}: cgroup went away while being held (the pod is stopping)",
                               level=logging.INFO)  # fmt: skip
                return
            result.count(knob, dirs.level, "refused")
            message = f"could not set {where} for the pod's batch resources: {exc.strerror or exc}"
            await self._note(pod, state, f"refused:{where}:{exc.errno}", message, event=True)
            return
        except ValueError as exc:  # an unreadable period or usage: nothing sensible to write
            result.count(knob, dirs.level, "refused")
            await self._note(pod, state, f"unreadable:{where}", f"{where}: cgroup unreadable: {exc}", event=True)
            return
        result.count(knob, dirs.level, "set")
        state.noted = {k for k in state.noted if where not in k}  # a later failure is news again
        log.debug("%s set to %s (was %s)", where, text, current)

    # --- logging once per pod ------------------------------------------------------------------------
    def _log_once(
        self, state: _Pod, key: str, message: str, *, problem: str | None = None, level: int = logging.WARNING
    ) -> bool:
        if key in state.noted:
            return False
        state.noted.add(key)
        if problem is not None:
            metrics.BATCH_POD_PROBLEMS.labels(problem).inc()
        log.log(level, message)
        return True

    async def _note(
        self, pod: Mapping[str, Any], state: _Pod, key: str, message: str, *, problem: str | None = None,
        event: bool = False,
    ) -> None:  # fmt: skip
        if self._log_once(state, key, message, problem=problem) and event:
            await self.recorder.record(pod, reason=REASON_FAILED, action="SetCgroup", note=message, type="Warning")


def _loosens(dirs: CgroupDirs, targets: CgroupTargets) -> bool:
    """Whether the pod's new quota is no tighter than what the cgroup has (unreadable: assume it loosens)."""
    try:
        current = dirs.current(Knob.CFS_QUOTA)
        wanted = dirs.wanted(Knob.CFS_QUOTA, targets, dirs.period_us())
    except (OSError, ValueError):
        return True
    return wanted == UNLIMITED or (current != UNLIMITED and wanted >= current)


def _name(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"pod {meta.get('namespace', '')}/{meta.get('name', '')}"
