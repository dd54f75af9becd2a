"""The results of a bench/cluster_scale_bench.py run and the tables it prints.

Every table row is printed and recorded (`Tables.rows`: table, row label, column -> number), so `--json` writes
the same figures the text shows and tests/integration/test_cluster_scale_bench.py checks that each is a number.
A figure that could not be measured is NaN in the row: the text shows `nan` and the test fails, so a bench that
stops measuring something does so loudly.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.cluster_scale_meter import Window

MIB = 2**20
INFRA = ("kube-apiserver", "etcd")
AVOIDED_AFTER = 3  # refused probes in a row, none bound after them: the node is avoided
NAN = float("nan")


def seconds(value: float) -> str:
    """A time, or that it did not happen within the run (NaN: the row's figure, which the test rejects)."""
    return f"{value:.1f}s" if math.isfinite(value) else "never within the run"


# --------------------------------------------------------------------------- results
@dataclass
class HotNode:
    node: str
    role: str  # avoid | evict
    threshold_percent: float
    stepped: float = 0.0  # when the node turned to 100 %
    reported_hot: float = 0.0  # first NodeMetric write seen over the threshold after the step
    probes: list[tuple[float, bool]] = field(default_factory=list)  # (created, bound), creation order
    evicted: float = 0.0  # first pod there the descheduler evicted

    @property
    def avoided(self) -> float | None:
        return avoided_since(self.probes)


def avoided_since(probes: Sequence[tuple[float, bool]]) -> float | None:
    """Creation time of the first probe from which on none was bound ((created, bound) in creation order), once
    at least AVOIDED_AFTER probes in a row were refused; None while the scheduler still binds them."""
    tail: list[float] = []
    for created, bound in probes:
        tail = [] if bound else [*tail, created]
    return tail[0] if len(tail) >= AVOIDED_AFTER else None


@dataclass
class StackResult:
    stack: str
    windows: list[tuple[str, Window, float]] = field(default_factory=list)  # (label, window, load average)
    waves: list[tuple[int, float, float]] = field(default_factory=list)  # (pods, first created, last bound)
    unbound: int = 0
    hot: list[HotNode] = field(default_factory=list)
    load: tuple[float, float] = (0.0, 0.0)  # load average at start and end
    processes: list[str] = field(default_factory=list)
    failed: str = ""  # a component of the stack exited mid-run: why (no summary then)

    @property
    def drain_rate(self) -> float:
        pods = sum(w[0] for w in self.waves)
        seconds = sum(w[2] - w[1] for w in self.waves)
        return pods / seconds if seconds > 0 else NAN


@dataclass
class Run:
    """What a run gathered: the agents-only window, each stack's result, every NodeMetric write the bench saw."""

    args: argparse.Namespace
    baseline: tuple[str, Window, float]
    results: list[StackResult]
    writes: list[tuple[float, str, int, int]]  # (seen, node, bytes, koordlet's bytes)
    gaps: list[float]  # seconds between two writes of the same node
    seconds: float  # the whole run, wall time


# --------------------------------------------------------------------------- tables
@dataclass
class Tables:
    lines: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)

    def text(self, line: str) -> None:
        self.lines.append(line)

    def row(self, table: str, label: str, values: dict[str, float], line: str) -> None:
        self.rows.append({"table": table, "row": label, "values": values})
        self.lines.append(line)


def cores(w: Window, name: str) -> float:
    return w.cpu.get(name, 0.0) / w.seconds if w.seconds > 0 else 0.0


def infra_cores(w: Window) -> float:
    return sum(cores(w, n) for n in INFRA)


def process_component(name: str) -> str:
    """The audit component (cluster_scale_meter.USER_AGENTS) a process's requests are counted under."""
    for role in ("manager", "descheduler", "extender", "scheduler", "agents"):
        if role in name:
            return role
    return name


HEADER = (f"    {'process':<26} {'cores':>6} {'RSS MiB':>7} {'peak':>7} {'req/s':>7} {'KiB/s out':>9} "
          f"{'KiB/s in':>9}  top requests/s (the API server: apiserver_request_total, every client)")  # fmt: skip


def process_rows(tables: Tables, table: str, w: Window, processes: Sequence[str]) -> None:
    """One row per process: its CPU, RSS, requests by verb and resource (the audit log's count of its client; for
    the API server, what it served to everyone), bytes it sent to and received from the API server."""
    tables.text(HEADER)
    for name in processes:
        if name not in w.rss:
            continue  # not started yet
        rss, peak = w.rss[name]
        requests = w.served if name == "kube-apiserver" else w.requests_of(process_component(name))
        top = ", ".join(f"{k} {v / w.seconds:.2f}" for k, v in requests.most_common(4))
        sent, received = w.bytes.get((name, "sent"), 0), w.bytes.get((name, "received"), 0)
        values = {"cores": cores(w, name), "rss_mib": rss / MIB, "peak_mib": peak / MIB,
                  "requests_per_s": sum(requests.values()) / w.seconds, "kib_out_per_s": sent / w.seconds / 1024,
                  "kib_in_per_s": received / w.seconds / 1024}  # fmt: skip
        tables.row(table, name, values,
                   f"    {name:<26} {values['cores']:6.3f} {values['rss_mib']:7.0f} {values['peak_mib']:7.0f} "
                   f"{values['requests_per_s']:7.2f} {values['kib_out_per_s']:9.1f} {values['kib_in_per_s']:9.1f}  "
                   f"{top}")  # fmt: skip


# --------------------------------------------------------------------------- per stack
@dataclass
class Summary:
    standing_cores: float  # the stack's processes, in the last standing window
    standing_infra: float  # API server + etcd over the agents-only window, same window
    rss_mib: float  # sum of the stack's processes' peak RSS
    waves_cpu_per_k: float  # the stack's processes over the waves, CPU-s per 1,000 pods
    waves_infra_per_k: float  # API server + etcd over the waves less the agents-only rate, per 1,000 pods
    drain: float
    manager_cores: float  # the manager's highest CPU rate over any window
    manager_rss_mib: float
    processes: list[str]

    @property
    def standing(self) -> float:
        return self.standing_cores + self.standing_infra

    @property
    def waves(self) -> float:
        return self.waves_cpu_per_k + self.waves_infra_per_k


def summarize(result: StackResult, base: Window) -> Summary:
    standing = [w for label, w, _ in result.windows if label.startswith("+")][-1]
    waves = next(w for label, w, _ in result.windows if label == "waves")
    bound = max(sum(p for p, _, _ in result.waves), 1)
    manager = [p for p in result.processes if "manager" in p]
    return Summary(
        standing_cores=sum(cores(standing, p) for p in result.processes),
        standing_infra=infra_cores(standing) - infra_cores(base),
        rss_mib=sum(waves.rss.get(p, (0, 0))[1] for p in result.processes) / MIB,
        waves_cpu_per_k=sum(waves.cpu.get(p, 0.0) for p in result.processes) * 1000 / bound,
        waves_infra_per_k=(sum(waves.cpu.get(n, 0.0) for n in INFRA) - infra_cores(base) * waves.seconds)
        * 1000
        / bound,
        drain=result.drain_rate,
        manager_cores=max((cores(w, p) for _, w, _ in result.windows for p in manager), default=NAN),
        manager_rss_mib=max((w.rss.get(p, (0, 0))[1] for _, w, _ in result.windows for p in manager), default=0)
        / MIB
        if manager
        else NAN,
        processes=result.processes,
    )


def nodemetric_rows(tables: Tables, run: Run) -> None:
    writes = run.writes
    if len(writes) < 2:
        tables.row("nodemetric", "writes", {"writes_per_s": NAN}, "NodeMetrics: fewer than two writes seen")
        return
    span = writes[-1][0] - writes[0][0]
    ours, koordlet = sum(w[2] for w in writes), sum(w[3] for w in writes)
    nodes = len({w[1] for w in writes})
    gaps = sorted(run.gaps) or [NAN]
    values = {"writes_per_s": len(writes) / span, "kib_per_write": ours / len(writes) / 1024,
              "bytes_per_node_minute": ours / nodes / (span / 60),
              "koordlet_bytes_per_node_minute": koordlet / nodes / (span / 60),
              "gap_p50_s": statistics.median(gaps), "gap_p99_s": gaps[int(0.99 * (len(gaps) - 1))],
              "gap_max_s": gaps[-1]}  # fmt: skip
    tables.row("nodemetric", "writes", values,
               f"\nNodeMetric writes over {span:.0f}s ({nodes} nodes): {values['writes_per_s']:.2f}/s, "
               f"{values['kib_per_write']:.2f} KiB each; bytes per node per minute: Loadline "
               f"{values['bytes_per_node_minute']:,.0f}, koordlet's fields "
               f"{values['koordlet_bytes_per_node_minute']:,.0f}\n  seconds between two writes of a node: p50 "
               f"{values['gap_p50_s']:.1f}, p99 {values['gap_p99_s']:.1f}, max {values['gap_max_s']:.1f} "
               f"(report interval {run.args.report_interval:g}s)")  # fmt: skip


def hot_rows(tables: Tables, result: StackResult, args: argparse.Namespace) -> None:
    """Per hot node: step -> NodeMetric over the threshold -> avoided by the scheduler / evicted from."""
    for hot in result.hot:
        reported = hot.reported_hot - hot.stepped if hot.reported_hot else NAN
        if hot.role == "avoid":
            avoided = hot.avoided
            total = avoided - hot.stepped if avoided else NAN
            values = {"reported_s": reported, "acted_s": total}
            line = (f"  hot node {hot.node} (62 % -> 100 %): NodeMetric over {hot.threshold_percent:g} % "
                    f"{seconds(reported)} after the step; scheduler avoids it {seconds(total)} after the step "
                    f"({len(hot.probes)} probes, {sum(b for _, b in hot.probes)} bound)")  # fmt: skip
        else:
            total = hot.evicted - hot.stepped if hot.evicted else NAN
            values = {"reported_s": reported, "acted_s": total}
            line = (f"  hot node {hot.node} (73 % -> 100 %): NodeMetric over {hot.threshold_percent:g} % "
                    f"{seconds(reported)} after the step; descheduler evicts {seconds(total)} after the step "
                    f"(deschedulingInterval {args.descheduling_interval or 'chart'}, "
                    f"{args.abnormalities} abnormal round(s))")  # fmt: skip
        tables.row(f"hot {result.stack}", f"{hot.role} {hot.node}", values, line)


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def target(tables: Tables, name: str, ratio: float, ok: bool, detail: str) -> None:
    line = f"  {name}: {detail} ratio {ratio:.2f}: {verdict(ok)}"
    tables.row("targets", name, {"ratio": ratio, "met": float(ok)}, line)


def summary_rows(tables: Tables, summaries: dict[str, Summary], run: Run) -> None:
    tables.text(f"\nper stack:\n  {'stack':<18} {'standing cores':>14} {'+apisrv/etcd':>12} {'RSS MiB':>8} "
                f"{'waves cpu-s/1k':>14} {'+apisrv/etcd':>12} {'pods/s':>7} {'manager cores':>13} "
                f"{'manager MiB':>11}")  # fmt: skip
    for name, s in summaries.items():
        values = {"standing_cores": s.standing_cores, "standing_infra_cores": s.standing_infra,
                  "rss_mib": s.rss_mib, "waves_cpu_s_per_1k": s.waves_cpu_per_k,
                  "waves_infra_cpu_s_per_1k": s.waves_infra_per_k, "drain_pods_per_s": s.drain}  # fmt: skip
        if name != "kube-scheduler":
            values |= {"manager_cores": s.manager_cores, "manager_mib": s.manager_rss_mib}
        tables.row("stacks", name, values,
                   f"  {name:<18} {s.standing_cores:14.3f} {s.standing_infra:12.3f} {s.rss_mib:8.0f} "
                   f"{s.waves_cpu_per_k:14.2f} {s.waves_infra_per_k:12.2f} {s.drain:7.1f} "
                   + (f"{s.manager_cores:13.3f} {s.manager_rss_mib:11.0f}" if "manager_cores" in values
                      else f"{'-':>13} {'-':>11}"))  # fmt: skip
    args = run.args
    tables.text("\ntargets (issue 31):")
    loadline = next((s for n, s in summaries.items() if n.startswith("loadline")), None)
    koord, kube = summaries.get("koordinator"), summaries.get("kube-scheduler")
    if loadline and koord:
        r1, r2 = loadline.standing / koord.standing, loadline.waves / koord.waves
        target(tables, "footprint standing <= Koordinator's", r1, r1 <= 1,
               f"processes + API server/etcd they cause, {loadline.standing:.3f} vs {koord.standing:.3f} cores;")
        target(tables, "footprint over the waves <= Koordinator's", r2, r2 <= 1,
               f"CPU-s per 1,000 pods, {loadline.waves:.2f} vs {koord.waves:.2f};")
    else:
        tables.text("  footprint <= Koordinator's: not measured (no koordinator stack in this run)")
    if loadline and kube:
        tables.row("stated", "footprint vs kube-scheduler alone",
                   {"standing": loadline.standing / max(kube.standing, 1e-9), "waves": loadline.waves / kube.waves},
                   f"  (against kube-scheduler alone: standing {loadline.standing:.3f} vs {kube.standing:.3f} cores, "
                   f"over the waves {loadline.waves:.2f} vs {kube.waves:.2f} CPU-s per 1,000 pods: "
                   f"{loadline.waves / kube.waves:.2f}x)")  # fmt: skip
    if run.writes:
        ratio = sum(w[2] for w in run.writes) / sum(w[3] for w in run.writes)
        target(tables, "NodeMetric bytes per node per minute <= koordlet's", ratio, ratio <= 1,
               "Loadline's status over koordlet v1.8.0's fields of the same status;")
    limit = args.report_interval + 5
    for result in run.results:
        avoid = [h for h in result.hot if h.role == "avoid"]
        if not avoid:
            continue
        worst = max((h.avoided or math.inf) - h.stepped for h in avoid)
        target(tables, f"{result.stack}: hot node avoided within one report interval + 5 s", worst / limit,
               worst <= limit, f"worst step -> avoided {seconds(worst)} vs {limit:g}s;")
    if loadline:
        ok = loadline.manager_cores <= 1 and loadline.manager_rss_mib <= 1024
        target(tables, "manager <= 1 core and <= 1 GiB", max(loadline.manager_cores, loadline.manager_rss_mib / 1024),
               ok, f"{loadline.manager_cores:.3f} cores, {loadline.manager_rss_mib:.0f} MiB peak;")
    if loadline and kube:
        ratio = loadline.drain / kube.drain
        target(tables, "scheduler drain >= 1.0x kube-scheduler's while the rest runs", ratio, ratio >= 1,
               f"{loadline.drain:.1f} vs {kube.drain:.1f} pods/s;")
    tables.text("  every RSS (peak, MiB): " + "; ".join(f"{n} {s.rss_mib:.0f} ({', '.join(s.processes)})"
                                                      for n, s in summaries.items()))  # fmt: skip


def report(run: Run) -> Tables:
    args = run.args
    tables = Tables()
    pods = args.pods_per_node * args.nodes
    tables.text(f"cluster scale: {args.nodes} kwok nodes x 32 cores, {pods} pods per stack in {args.waves} waves, "
                f"report interval {args.report_interval:g}s, nodeUsage over {args.aggregate_duration:g}s, "
                f"mode {args.mode}; {os.cpu_count()} CPUs")  # fmt: skip
    label, base, load = run.baseline
    tables.text(f"\n[{label}] {base.seconds:.0f}s, load average {load:.1f}")
    process_rows(tables, label, base, ["agents", *INFRA])
    nodemetric_rows(tables, run)
    summaries = {}
    for result in run.results:
        tables.text(f"\n== stack {result.stack} (load average {result.load[0]:.1f} at its start, "
                    f"{result.load[1]:.1f} at its end)")  # fmt: skip
        previous = infra_cores(base)
        for label, w, load in result.windows:
            share = infra_cores(w) - previous
            standing = label.startswith("+")
            tables.text(f"  [{label}] {w.seconds:.0f}s, load {load:.1f}: API server + etcd {infra_cores(w):.3f} cores"
                        + (f" ({share:+.3f} over the window before)" if standing else ""))  # fmt: skip
            if standing:
                previous = infra_cores(w)
            process_rows(tables, f"{result.stack} {label}", w, [*result.processes, "agents", *INFRA])
        if result.failed or not any(label == "waves" for label, _, _ in result.windows):
            tables.text(f"  stack {result.stack} FAILED, not summarized: {result.failed or 'no waves'}")
            continue
        summaries[result.stack] = summarize(result, base)
        hot_rows(tables, result, args)
    summary_rows(tables, summaries, run)
    tables.text(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}; "
                f"whole run {run.seconds:.0f}s")  # fmt: skip
    return tables
