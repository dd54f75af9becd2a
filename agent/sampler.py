"""One collect cycle: run the collectors, turn counters into rates, derive, write one ring column.

Every collector returns a `SampleBlock`; the sampler plans once per block layout what each slot is (a gauge, a
counter rated and stored, a derivation input, ...) and then handles a cycle with a few array operations.

Aggregation is deliberately not here: it runs on its own cadence (`agent.store.build_report`), never per
sample and never inside a scrape.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from agent.collectors.base import Collector, CollectorStats, SeriesErrors, run_collector
from agent.collectors.system import system_usage
from agent.series import (
    CPU_CFS_PERIODS,
    CPU_CFS_THROTTLED_PERIODS,
    CPU_CFS_THROTTLED_RATIO,
    CPU_USAGE_CORES,
    CPU_USAGE_SECONDS,
    DERIVATION_INPUTS,
    MEMORY_ANON_USAGE_BYTES,
    NODE_CPU_CAPACITY_CORES,
    NODE_CPU_USAGE_CORES,
    NODE_MEMORY_USAGE_BYTES,
    STORED_RATES,
    SYSTEM_CPU_USAGE_CORES,
    SYSTEM_MEMORY_USAGE_BYTES,
    BlockLayout,
    Kind,
    Sample,
    SampleBlock,
    SeriesKey,
)
from agent.store.aggregate import DEFAULT_WINDOWS
from agent.store.rates import RateDrops, SlotRates, stall_limit
from agent.store.ring import SampleRing


@dataclass(frozen=True)
class CycleResult:
    now: float
    samples: int  # raw samples from collectors
    stored: int  # values written into the ring column
    duration_seconds: float


class Sampler:
    def __init__(
        self,
        collectors: Sequence[Collector],
        *,
        interval: float = 1.0,
        windows: Sequence[float] = DEFAULT_WINDOWS,
        ring: SampleRing | None = None,
        clock: Callable[[], float] = time.monotonic,
        store_containers: bool = True,
    ) -> None:
        self.collectors = list(collectors)
        # False: container series are neither rated nor stored. Their raw values of the last cycle still go to
        # /metrics, and nothing in the agent reads their history (the NodeMetric, the window aggregates and QoS
        # are node, system and pod level); at 3 containers a pod they are most of the store and of the cycle.
        self.store_containers = store_containers
        self.interval = interval
        self.retention = max(windows)
        self.ring = ring or SampleRing(self.slots_for(self.retention))
        self.max_gap = stall_limit(interval)
        self.drops = RateDrops()  # why counter readings gave no rate, over every collector
        self.stats = {c.name: CollectorStats(c.name) for c in self.collectors}
        # The last cycle, for export: each collector's block, then the declared rates (network, InfiniBand) as
        # gauges. Replaced as a whole every cycle, so a reader on another thread sees one cycle.
        self.last_samples: list[Sequence[Sample]] = []
        self.last_cycle_at: float | None = None  # monotonic time of the last cycle
        self._clock = clock
        self._cycles = 0
        self.last_cycle_seconds: float | None = None  # duration of the last cycle (self-metrics)
        self._block_plans: dict[str, _BlockPlan] = {}  # per collector

    def _take_block(self, name: str, block: SampleBlock, at: float, cycle: _Cycle, errors: SeriesErrors) -> None:
        """Rate, derive and sum one collector's block into this cycle's column; counters that went backwards
        and rates beyond what is possible are dropped and counted in the collector's `errors`."""
        plan = self._block_plans.get(name)
        if plan is None or plan.layout is not block.layout:
            plan = self._block_plans[name] = _BlockPlan.build(
                block.layout, self.max_gap, self.drops, plan, containers=self.store_containers
            )
        keys, values, usage = cycle.keys, cycle.values, cycle.usage
        slots = block.array()
        gauges = slots[plan.gauges]
        _extend_present(keys, values, plan.gauge_keys, gauges)
        for role, role_slots in plan.gauge_roles:
            present = slots[role_slots]
            present = present[~np.isnan(present)]
            if role == _POD_MEMORY:
                usage.pods_memory += float(present.sum())
            elif present.size:
                usage.add_gauge(role, float(present[-1]))
        if not plan.counters.size:
            return
        readings = slots[plan.counters]
        rates = plan.rates.update(readings, at)
        identities = plan.rates.identities
        for position in plan.rates.went_backwards:
            errors.rejected(_series_name(identities[position]), SeriesErrors.BACKWARDS, "counter went backwards")
        for position in plan.rates.too_large:
            errors.rejected(_series_name(identities[position]), SeriesErrors.IMPLAUSIBLE, "rate above the maximum")
        if plan.cpu.size and usage.capacity:
            # A cgroup cannot use more CPUs than the node has; well above that, its counter jumped (garbage).
            # The margin covers the jitter of when in the cycle each cgroup is read.
            cpu = rates[plan.cpu]
            with np.errstate(invalid="ignore"):
                over = cpu > usage.capacity * _CPU_RATE_SLACK
            if over.any():
                for position in plan.cpu[over].tolist():
                    errors.rejected(
                        _series_name(identities[position]), SeriesErrors.IMPLAUSIBLE, "CPU rate above the node's CPUs"
                    )
                rates[plan.cpu[over]] = np.nan
        if plan.node_cpu is not None and usage.capacity:
            # Busy ticks are counted per CPU at tick granularity, so one interval can read a little above the
            # CPUs there are; the node cannot use more than it has (no percentile above capacity either).
            rates[plan.node_cpu] = min(rates[plan.node_cpu], usage.capacity)
        _extend_present(keys, values, plan.stored_keys, rates[plan.stored])
        if plan.exported.size:
            _extend_samples(cycle.exported, plan.exported_keys, rates[plan.exported])
        if plan.pod_cpu.size:
            pod_rates = rates[plan.pod_cpu]
            missing = np.isnan(pod_rates)
            if np.any(missing & ~np.isnan(readings[plan.pod_cpu])):
                usage.pods_cpu_complete = False
            usage.pods_cpu += float(pod_rates[~missing].sum())
        if plan.node_cpu is not None and not np.isnan(rates[plan.node_cpu]):
            usage.node_cpu = float(rates[plan.node_cpu])
        if plan.ratio_keys:
            periods, throttled = rates[plan.ratio_periods], rates[plan.ratio_throttled]
            with np.errstate(divide="ignore", invalid="ignore"):
                ratios = np.where(periods > 0, np.minimum(throttled / periods, 1.0), 0.0)
            ratios[np.isnan(periods) | np.isnan(throttled)] = np.nan
            _extend_present(keys, values, plan.ratio_keys, ratios)

    def slots_for(self, seconds: float) -> int:
        # +5 % slots so the longest window stays full even when cycles run a little fast.
        return int(seconds / self.interval * 1.05) + 2

    def ensure_retention(self, seconds: float) -> bool:
        """Keep `seconds` of history from now on (the longest window changed). A longer retention grows the
        ring and keeps every sample it holds; a shorter one only lets series expire sooner (the ring is not
        shrunk). Returns True if the ring grew."""
        self.retention = seconds
        slots = self.slots_for(seconds)
        if slots <= self.ring.slots:
            return False
        self.ring = regrow_ring(self.ring, slots)
        return True

    @property
    def cycles(self) -> int:
        return self._cycles

    def replace_block(self, collector: Collector, block: SampleBlock) -> None:
        """Put a fresher block of `collector` in place of its last cycle's (read at scrape time); the last cycle is
        replaced as a whole, as a cycle does, for readers on other threads."""
        position = self.collectors.index(collector)
        if position < len(self.last_samples):
            samples = list(self.last_samples)
            samples[position] = block
            self.last_samples = samples

    @property
    def latest(self) -> dict[SeriesKey, float]:
        """Raw values (gauges and cumulative counters) of the last cycle, for export. Built on demand: a
        scrape is rarer than a cycle."""
        return {s.key: s.value for samples in self.last_samples for s in samples}

    async def cycle(self) -> CycleResult:
        started = time.perf_counter()
        now = self._clock()
        cycle = _Cycle()
        raw: list[Sequence[Sample]] = []
        total = 0
        for collector in self.collectors:
            at = self._clock()
            stats = self.stats[collector.name]
            block = await run_collector(collector, stats, at)
            total += len(block)
            raw.append(block)
            errors = collector.errors
            before = errors.total
            self._take_block(collector.name, block, at, cycle, errors)
            if errors.total != before:
                stats.series_errors = dict(errors.by_reason)
        keys, values = cycle.keys, cycle.values
        for key, value in cycle.usage.system():
            keys.append(key)
            values.append(value)
        self.ring.append_column(now, keys, values)
        if cycle.exported:
            raw.append(cycle.exported)
        self.last_samples = raw
        self.last_cycle_at = now
        self.ring.drop_stale(now - self.retention)
        self._cycles += 1
        duration = time.perf_counter() - started
        self.last_cycle_seconds = duration
        return CycleResult(now, total, len(keys), duration)


_GAUGE = Kind.GAUGE

# What the sampler does with a counter series (see `_counter_plan`).
_RAW = 0  # kept raw only (export), not rated
_INPUT = 1  # rated as an input of a derived series, not stored
_STORED = 2  # rate stored under STORED_RATES[metric]
_POD_CPU = 3  # stored, and summed into the pods' CPU for system usage
_NODE_CPU = 4  # stored, and the node's CPU for system usage
_DECLARED = 5  # the collector declared the rate's key (`BlockLayout.rate_keys`): stored and exported
_NO_KEY = SeriesKey("")  # the stored key of counters that are not stored
_CPU_RATE_SLACK = 1.5  # a cgroup's CPU rate above this many times the node's CPUs is dropped as garbage


def _series_name(identity: Hashable) -> str:
    """A counter slot's (key, source) as a log names it: `cpu_usage_seconds_total pod=... container=...`."""
    key = identity[0] if isinstance(identity, tuple) else identity
    if not isinstance(key, SeriesKey):
        return str(key)
    labels = zip(("pod", "container", "device"), key[1:], strict=True)
    return " ".join([key.metric, *(f"{name}={value}" for name, value in labels if value)])


# What a gauge contributes to system usage (see `_gauge_role`).
_PLAIN = 0  # nothing: only stored
_POD_MEMORY = 1  # summed into the pods' memory
_NODE_MEMORY = 2  # the node's memory usage
_CAPACITY = 3  # the node's CPU capacity


def _gauge_role(key: SeriesKey) -> int:
    metric = key[0]
    if key[1]:
        return _POD_MEMORY if metric == MEMORY_ANON_USAGE_BYTES and not key[2] else _PLAIN
    if metric == NODE_MEMORY_USAGE_BYTES:
        return _NODE_MEMORY
    return _CAPACITY if metric == NODE_CPU_CAPACITY_CORES else _PLAIN


def _counter_plan(key: SeriesKey) -> tuple[int, SeriesKey]:
    metric, pod, container, device = key
    stored_as = STORED_RATES.get(metric)
    if stored_as is None:
        return (_INPUT if metric in DERIVATION_INPUTS else _RAW), _NO_KEY
    if metric == CPU_USAGE_SECONDS and pod and not container:
        role = _POD_CPU
    elif stored_as == NODE_CPU_USAGE_CORES:
        role = _NODE_CPU
    else:
        role = _STORED
    return role, SeriesKey(stored_as, pod, container, device)


def _ratio_keys(key: SeriesKey) -> tuple[SeriesKey, SeriesKey] | None:
    """For a CFS periods key: the matching throttled-periods key and the ratio's key; None for other keys."""
    metric, pod, container, device = key
    if metric != CPU_CFS_PERIODS:
        return None
    return SeriesKey(CPU_CFS_THROTTLED_PERIODS, pod, container, device), SeriesKey(
        CPU_CFS_THROTTLED_RATIO, pod, container, device
    )


def regrow_ring(ring: SampleRing, slots: int) -> SampleRing:
    """A ring of `slots` columns holding every column of `ring`, oldest first (written through the public
    API, so row bookkeeping stays the ring's own)."""
    grown = SampleRing(slots, initial_rows=max(min(ring.high_water, ring.max_rows), 1), max_rows=ring.max_rows)
    if ring.head < 0:
        return grown
    written = min(ring.columns_written, ring.slots)
    order = [(ring.head - written + 1 + i) % ring.slots for i in range(written)]
    rows = ring.rows()
    keys = list(rows)
    index = np.fromiter(rows.values(), dtype=np.int64, count=len(rows))
    for col in order:
        values = ring.values[index, col]
        present = np.flatnonzero(~np.isnan(values))
        grown.append_column(float(ring.times[col]), [keys[i] for i in present.tolist()], values[present])
    grown.rejected_samples = ring.rejected_samples
    return grown


I64 = npt.NDArray[np.int64]


def _extend_present(
    keys: list[SeriesKey], values: list[float], slot_keys: list[SeriesKey], slots: npt.NDArray[np.float64]
) -> None:
    """Append the (key, value) pairs whose value is not NaN."""
    present = ~np.isnan(slots)
    if present.all():
        keys.extend(slot_keys)
        values.extend(slots.tolist())
        return
    where = np.flatnonzero(present)
    keys.extend([slot_keys[i] for i in where.tolist()])
    values.extend(slots[where].tolist())


def _extend_samples(out: list[Sample], slot_keys: list[SeriesKey], slots: npt.NDArray[np.float64]) -> None:
    """Append a gauge `Sample` per slot whose value is not NaN."""
    for i in np.flatnonzero(~np.isnan(slots)).tolist():
        out.append(Sample(slot_keys[i], float(slots[i])))


def _indices(positions: list[int]) -> I64:
    return np.asarray(positions, dtype=np.int64)


@dataclass(frozen=True)
class _BlockPlan:
    """What `Sampler.cycle` does with each slot of one `BlockLayout`, worked out once per layout. Positions
    named "slot" index the block; the others index the rated counters (`counters`)."""

    layout: BlockLayout
    gauges: I64  # slots of gauges, stored as they are
    gauge_keys: list[SeriesKey]
    gauge_roles: list[tuple[int, I64]]  # slots of the gauges with a role in system usage, by `_gauge_role`
    counters: I64  # slots of counters that are rated (raw-only counters are left to export)
    rates: SlotRates
    stored: I64  # counter positions whose rate is stored ...
    stored_keys: list[SeriesKey]  # ... under these keys
    pod_cpu: I64  # counter positions of pod CPU
    cpu: I64  # counter positions of every pod and container CPU rate (bounded by the node's CPUs)
    node_cpu: int | None  # counter position
    ratio_periods: I64  # counter positions of CFS periods ...
    ratio_throttled: I64  # ... and of their throttled periods ...
    ratio_keys: list[SeriesKey]  # ... giving these throttling ratios
    exported: I64  # counter positions whose rate the collector declared: also exported as gauges ...
    exported_keys: list[SeriesKey]  # ... under these keys

    @classmethod
    def build(
        cls, layout: BlockLayout, max_gap: float, drops: RateDrops, previous: _BlockPlan | None, *, containers: bool
    ) -> _BlockPlan:
        gauges: list[int] = []
        by_role: dict[int, list[int]] = {}
        node_cpu = None
        counters: list[int] = []
        stored: list[int] = []
        stored_keys: list[SeriesKey] = []
        pod_cpu: list[int] = []
        cpu: list[int] = []
        exported: list[int] = []
        exported_keys: list[SeriesKey] = []
        max_rates: list[float] = []
        counter_position: dict[SeriesKey, int] = {}
        declared = layout.rate_keys
        for slot, (key, kind) in enumerate(zip(layout.keys, layout.kinds, strict=True)):
            if key.container and not containers:
                continue
            if kind is _GAUGE:
                gauges.append(slot)
                if (role := _gauge_role(key)) != _PLAIN:
                    by_role.setdefault(role, []).append(slot)
                continue
            rate_key = declared[slot] if declared else None
            if rate_key is not None:
                role, stored_key = _DECLARED, rate_key
            else:
                role, stored_key = _counter_plan(key)
            if role == _RAW:
                continue
            position = counter_position[key] = len(counters)
            counters.append(slot)
            max_rates.append(layout.max_rates[slot] if declared else math.inf)
            if role == _INPUT:
                continue
            stored.append(position)
            stored_keys.append(stored_key)
            if stored_key.metric == CPU_USAGE_CORES:
                cpu.append(position)
            if role == _DECLARED:
                exported.append(position)
                exported_keys.append(stored_key)
            elif role == _POD_CPU:
                pod_cpu.append(position)
            elif role == _NODE_CPU:
                node_cpu = position
        ratio_periods: list[int] = []
        ratio_throttled: list[int] = []
        ratio_keys: list[SeriesKey] = []
        for key, position in counter_position.items():
            pair = _ratio_keys(key)
            if pair is not None and (throttled := counter_position.get(pair[0])) is not None:
                ratio_periods.append(position)
                ratio_throttled.append(throttled)
                ratio_keys.append(pair[1])
        slot_rates = SlotRates(
            [(layout.keys[slot], layout.sources[slot]) for slot in counters], max_gap, drops, max_rates
        )
        if previous is not None:
            slot_rates.carry_over(previous.rates)
        return cls(
            layout,
            _indices(gauges),
            [layout.keys[slot] for slot in gauges],
            [(role, _indices(role_slots)) for role, role_slots in by_role.items()],
            _indices(counters),
            slot_rates,
            _indices(stored),
            stored_keys,
            _indices(pod_cpu),
            _indices(cpu),
            node_cpu,
            _indices(ratio_periods),
            _indices(ratio_throttled),
            ratio_keys,
            _indices(exported),
            exported_keys,
        )


@dataclass
class _UsageSums:
    node_cpu: float | None = None
    pods_cpu: float = 0.0
    pods_cpu_complete: bool = True  # False if some pod's CPU counter gave no rate this cycle
    pods_memory: float = 0.0

    node_memory: float | None = None
    capacity: float | None = None

    def add_gauge(self, role: int, value: float) -> None:
        if role == _POD_MEMORY:
            self.pods_memory += value
        elif role == _NODE_MEMORY:
            self.node_memory = value
        elif role == _CAPACITY:
            self.capacity = value

    def system(self) -> list[tuple[SeriesKey, float]]:
        out = []
        # A pod without a CPU rate this cycle (first sample, reset) would inflate system usage: skip it.
        if self.node_cpu is not None and self.pods_cpu_complete:
            value = system_usage(self.node_cpu, (self.pods_cpu,))
            capacity = self.capacity
            out.append((SeriesKey(SYSTEM_CPU_USAGE_CORES), min(value, capacity) if capacity else value))
        if self.node_memory is not None:
            out.append((SeriesKey(SYSTEM_MEMORY_USAGE_BYTES), system_usage(self.node_memory, (self.pods_memory,))))
        return out


@dataclass
class _Cycle:
    """What one cycle gathers across collectors: the ring column, the usage sums, the rates to export."""

    keys: list[SeriesKey] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    usage: _UsageSums = field(default_factory=_UsageSums)
    exported: list[Sample] = field(default_factory=list)
