"""A node's samples drawn instead of read: the collector behind `loadline agent --simulate` (see `agent.simulate`).

Per collect cycle, each pod's CPU is drawn from a gamma distribution with the mean and coefficient of variation
its profile declares (capped at its CPU limit), its memory around the mean with a small jitter; pods together
never use more than the node's CPU; the node adds its own system usage with noise. Pod profiles come from
annotations (`loadline.io/simulated-cpu`, `-memory`, `-burstiness`) or from requests/limits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from agent.collectors.base import SeriesErrors
from agent.collectors.devices import Device
from agent.series import (
    CPU_CFS_PERIODS,
    CPU_CFS_THROTTLED_PERIODS,
    CPU_USAGE_SECONDS,
    MEMORY_ANON_USAGE_BYTES,
    MEMORY_WORKING_SET_BYTES,
    NODE_CPU_CAPACITY_CORES,
    NODE_CPU_USAGE_SECONDS,
    NODE_MEMORY_TOTAL_BYTES,
    NODE_MEMORY_USAGE_BYTES,
    NODE_MEMORY_USAGE_WITH_PAGE_CACHE_BYTES,
    BlockBuilder,
    Kind,
    SampleBlock,
    SeriesKey,
)
from common.api.nodedigest import digest_node
from common.api.poddigest import digest_pod
from common.api.quantity import Quantity

if TYPE_CHECKING:
    from agent.config import AgentSettings

JSON = dict[str, Any]
log = logging.getLogger("loadline.agent.simulate")

ANNOTATION_CPU = "loadline.io/simulated-cpu"
ANNOTATION_MEMORY = "loadline.io/simulated-memory"
ANNOTATION_BURSTINESS = "loadline.io/simulated-burstiness"
FALLBACK_CPU = 0.1  # cores, for pods with neither requests nor limits (times the usage fraction)
FALLBACK_MEMORY = 128 * 1024 * 1024
MEMORY_JITTER = 0.02  # relative standard deviation of memory per sample, before burstiness
PAGE_CACHE_SHARE = 0.15  # of the node's free memory, shown as page cache
CFS_PERIOD = 0.1  # seconds, the kernel's default cpu.cfs_period_us


@dataclass(frozen=True)
class SimulationParams:
    usage_fraction: float = 0.4
    burstiness: float = 0.3
    node_noise: float = 0.2
    system_cpu: float = 0.3
    system_memory: float = float(1 << 30)

    @classmethod
    def from_settings(cls, s: AgentSettings) -> SimulationParams:
        return cls(
            usage_fraction=s.simulate_usage_fraction,
            burstiness=s.simulate_burstiness,
            node_noise=s.simulate_node_noise,
            system_cpu=s.simulate_system_cpu,
            system_memory=float(s.simulate_system_memory),
        )


@dataclass(frozen=True)
class UsageProfile:
    cpu: float  # mean cores
    memory: float  # mean bytes
    burstiness: float  # coefficient of variation of CPU
    cpu_limit: float | None = None
    memory_limit: float | None = None


class ProfileError(ValueError):
    pass


def _quantity(value: str, what: str) -> float:
    try:
        q = Quantity.parse(value.strip(), field=what)
    except ValueError as exc:
        raise ProfileError(str(exc)) from None
    if q.sign() < 0:
        raise ProfileError(f"{what}: must not be negative, got {value!r}")
    return q.as_float()


def usage_profile(pod: Mapping[str, Any], params: SimulationParams) -> UsageProfile:
    """The profile a pod declares, or its defaults. Raises `ProfileError` for an invalid annotation."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    digest = digest_pod(pod)  # a malformed pod (the digest's problem) has no requests or limits: the fallbacks

    def base_units(resources: Mapping[str, int]) -> dict[str, float]:  # cores and bytes
        cores_and_bytes = {"cpu": 1000, "memory": 1}
        return {name: resources[name] / unit for name, unit in cores_and_bytes.items() if name in resources}

    requests, limits = base_units(digest.requests), base_units(digest.limits)
    cpu_limit = limits.get("cpu")
    memory_limit = limits.get("memory")

    def declared(resource: str, annotation: str, fallback: float) -> float:
        if annotation in annotations:
            return _quantity(str(annotations[annotation]), annotation)
        for source in (requests, limits):
            if source.get(resource):
                return source[resource] * params.usage_fraction
        return fallback * params.usage_fraction

    burstiness = params.burstiness
    if ANNOTATION_BURSTINESS in annotations:
        text = str(annotations[ANNOTATION_BURSTINESS]).strip()
        try:
            burstiness = float(text)
        except ValueError:
            raise ProfileError(f"{ANNOTATION_BURSTINESS}: not a number: {text!r}") from None
        if not 0 <= burstiness <= 10:
            raise ProfileError(f"{ANNOTATION_BURSTINESS}: must be within 0..10, got {text!r}")
    return UsageProfile(
        cpu=declared("cpu", ANNOTATION_CPU, FALLBACK_CPU),
        memory=declared("memory", ANNOTATION_MEMORY, FALLBACK_MEMORY),
        burstiness=burstiness,
        cpu_limit=cpu_limit,
        memory_limit=memory_limit,
    )


def draw_cpu(rng: np.random.Generator, mean: float, cv: float) -> float:
    """A gamma draw with this mean and coefficient of variation (non-negative, right-skewed like real CPU)."""
    if mean <= 0:
        return 0.0
    if cv <= 0:
        return mean
    shape = 1.0 / (cv * cv)
    return float(rng.gamma(shape, mean / shape))


def node_capacity(node: Mapping[str, Any]) -> tuple[float, float]:
    """(cores, bytes) of a Node: allocatable, else capacity; 0 where absent or invalid (from its digest: a value
    that does not parse is left out of it; the simulated node then has none of that resource)."""
    digest = digest_node(node)
    cpu = digest.allocatable.get("cpu") or digest.capacity.get("cpu") or 0
    memory = digest.allocatable.get("memory") or digest.capacity.get("memory") or 0
    return cpu / 1000, float(memory)


class SimulatedNodeCollector:
    """Draws one node's samples (node and pod level) in the agent's internal vocabulary."""

    def __init__(
        self,
        node_name: str,
        pods: Callable[[], Sequence[JSON]],
        params: SimulationParams,
        *,
        cpu: float,
        memory: float,
        seed: int | None = None,
    ) -> None:
        self.node_name = node_name
        self._pods = pods
        self.params = params
        self.cpu_capacity = cpu
        self.memory_capacity = memory
        self._errors = SeriesErrors()
        self._builder = BlockBuilder()
        self._rng = np.random.default_rng(seed)
        self._profiles: dict[str, tuple[str, UsageProfile]] = {}  # uid -> (resourceVersion, profile)
        self._invalid: set[str] = set()  # uids whose bad annotation was logged
        self._cpu_seconds: dict[str, float] = {}
        self._cfs: dict[str, tuple[float, float]] = {}  # uid -> (periods, throttled periods), pods with a CPU limit
        self._node_cpu_seconds = 0.0
        self._last: float | None = None

    @property
    def name(self) -> str:
        return "simulated"

    @property
    def errors(self) -> SeriesErrors:
        return self._errors

    @property
    def devices(self) -> Sequence[Device]:
        return ()

    def close(self) -> None:
        pass

    def profile(self, pod: JSON) -> UsageProfile:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid"))
        version = str(meta.get("resourceVersion", ""))
        cached = self._profiles.get(uid)
        if cached is not None and cached[0] == version:
            return cached[1]
        try:
            profile = usage_profile(pod, self.params)
        except ProfileError as exc:
            if uid not in self._invalid:
                self._invalid.add(uid)
                log.warning("pod %s/%s: %s; using the default profile", meta.get("namespace"), meta.get("name"), exc)
            stripped = {
                **pod,
                "metadata": {
                    **meta,
                    "annotations": {
                        k: v
                        for k, v in (meta.get("annotations") or {}).items()
                        if k not in (ANNOTATION_CPU, ANNOTATION_MEMORY, ANNOTATION_BURSTINESS)
                    },
                },
            }
            profile = usage_profile(stripped, self.params)
            self._errors.record(SeriesErrors.GARBAGE)
        self._profiles[uid] = (version, profile)
        return profile

    def collect(self, now: float) -> SampleBlock:
        dt = self._elapsed(now)
        rng = self._rng
        pods = [p for p in self._pods() if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        uids: list[str] = []
        cpus: list[float] = []
        mems: list[float] = []
        throttled: dict[str, bool] = {}  # uid -> wanted more than its CPU limit this cycle (pods with one)
        for pod in pods:
            uid = str((pod.get("metadata") or {}).get("uid") or "")
            if not uid:
                continue
            prof = self.profile(pod)
            cpu = draw_cpu(rng, prof.cpu, prof.burstiness)
            if prof.cpu_limit is not None:
                throttled[uid] = cpu > prof.cpu_limit
                cpu = min(cpu, prof.cpu_limit)
            mem = prof.memory * (1.0 + rng.normal(0.0, MEMORY_JITTER * (1.0 + prof.burstiness)))
            mem = max(mem, 0.0)
            if prof.memory_limit is not None:
                mem = min(mem, prof.memory_limit)
            uids.append(uid)
            cpus.append(cpu)
            mems.append(mem)
        capacity = self.cpu_capacity or float("inf")
        total_cpu = sum(cpus)
        if total_cpu > capacity:  # the node cannot give out more CPU than it has
            scale = capacity / total_cpu
            cpus = [c * scale for c in cpus]
            total_cpu = capacity
        system_cpu = draw_cpu(rng, self.params.system_cpu, self.params.node_noise)
        node_cpu = min(total_cpu + system_cpu, capacity)
        system_mem = self.params.system_memory * max(1.0 + rng.normal(0.0, self.params.node_noise / 4), 0.0)
        total_mem = sum(mems)
        mem_capacity = self.memory_capacity or float("inf")
        node_mem = min(total_mem + system_mem, mem_capacity)

        out = self._builder
        seen = set(uids)
        for uid, cpu, mem in zip(uids, cpus, mems, strict=True):
            seconds = self._cpu_seconds.get(uid, 0.0) + cpu * dt
            self._cpu_seconds[uid] = seconds
            out.add(SeriesKey(CPU_USAGE_SECONDS, uid), seconds, Kind.COUNTER, uid)
            out.add(SeriesKey(MEMORY_ANON_USAGE_BYTES, uid), mem)
            out.add(SeriesKey(MEMORY_WORKING_SET_BYTES, uid), mem * 1.05)
            if uid in throttled:  # a demand above the quota runs out of it in every period of the cycle
                periods, throttled_periods = self._cfs.get(uid, (0.0, 0.0))
                periods += dt / CFS_PERIOD
                throttled_periods += dt / CFS_PERIOD if throttled[uid] else 0.0
                self._cfs[uid] = (periods, throttled_periods)
                out.add(SeriesKey(CPU_CFS_PERIODS, uid), periods, Kind.COUNTER, uid)
                out.add(SeriesKey(CPU_CFS_THROTTLED_PERIODS, uid), throttled_periods, Kind.COUNTER, uid)
        for gone in self._cpu_seconds.keys() - seen:
            del self._cpu_seconds[gone]
            self._cfs.pop(gone, None)
            self._profiles.pop(gone, None)
        self._node_cpu_seconds += node_cpu * dt
        out.add(SeriesKey(NODE_CPU_USAGE_SECONDS), self._node_cpu_seconds, Kind.COUNTER)
        if self.cpu_capacity:
            out.add(SeriesKey(NODE_CPU_CAPACITY_CORES), self.cpu_capacity)
        if self.memory_capacity:
            out.add(SeriesKey(NODE_MEMORY_TOTAL_BYTES), self.memory_capacity)
            cache = PAGE_CACHE_SHARE * max(self.memory_capacity - node_mem, 0.0)
            out.add(SeriesKey(NODE_MEMORY_USAGE_WITH_PAGE_CACHE_BYTES), node_mem + cache)
        out.add(SeriesKey(NODE_MEMORY_USAGE_BYTES), node_mem)
        return out.finish()

    def _elapsed(self, now: float) -> float:
        """Seconds since the previous cycle (the counters advance by usage x elapsed time)."""
        last, self._last = self._last, now
        return max(now - last, 0.0) if last is not None else 0.0
