"""`loadline top`: nodes by their real load, from NodeMetrics (like `kubectl top nodes`, which reads metrics-server).

Per node: usage (NodeMetric `nodeUsage`) against allocatable, the p95 over a chosen window
(`aggregatedNodeUsages`), batch allocatable (`kubernetes.io/batch-cpu`/`batch-memory` in the Node's
allocatable, set by the manager) and what running pods request of it, and the class the LowNodeLoad descheduler
gives it, computed by the descheduler's own classification (scheduler_plugin/descheduler/classify.py): its
usage (systemUsage + the pods' usage), node pools, deviation and prod thresholds, expired NodeMetrics. Hot above
a high threshold in any resource, low below the low thresholds in every one, normal otherwise; unknown when the
descheduler would skip the node. Thresholds: a descheduler args file (`--descheduler-config`), or `--low`/`--high`
percentages of allocatable (the chart's defaults otherwise).

    loadline top [--window 5m] [--sort-by cpu] [-o wide|json] [--kubeconfig FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from common.api.constants import BATCH_CPU, BATCH_MEMORY
from common.api.nodemetric_digest import Usage, digest_node_metric
from common.api.quantity import Quantity
from common.api.wire import GoDuration
from common.humanize import human_bytes, human_cores
from scheduler_plugin.descheduler.args import LowNodeLoadArgs

NODES_PATH = "/api/v1/nodes"
NODEMETRICS_PATH = "/apis/slo.koordinator.sh/v1alpha1/nodemetrics"
PODS_PATH = "/api/v1/pods"
# The chart's LowNodeLoad thresholds (deploy/helm/loadline/values.yaml), percent of allocatable.
DEFAULT_LOW = {"cpu": 45.0, "memory": 55.0}
DEFAULT_HIGH = {"cpu": 75.0, "memory": 80.0}
T = TypeVar("T")
SORT_KEYS = ("name", "cpu", "memory", "p95-cpu", "p95-memory", "batch-cpu", "batch-memory", "class")
CLASSES = ("low", "prod-low", "normal", "prod-hot", "hot", "unknown")


@dataclass
class NodeRow:
    name: str
    cpu_cores: float | None = None
    cpu_allocatable_cores: float | None = None
    memory_bytes: float | None = None
    memory_allocatable_bytes: float | None = None
    p95_cpu_cores: float | None = None
    p95_memory_bytes: float | None = None
    system_cpu_cores: float | None = None
    system_memory_bytes: float | None = None
    batch_cpu_allocatable_cores: float | None = None
    batch_cpu_used_cores: float = 0.0
    batch_memory_allocatable_bytes: float | None = None
    batch_memory_used_bytes: float = 0.0
    pods: int = 0
    update_age_seconds: float | None = None
    load_class: str = "unknown"

    def percent(self, resource: str) -> float | None:
        used, alloc = (
            (self.cpu_cores, self.cpu_allocatable_cores)
            if resource == "cpu"
            else (self.memory_bytes, self.memory_allocatable_bytes)
        )
        if used is None or not alloc:
            return None
        return 100.0 * used / alloc


def _quantity(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return Quantity.parse(str(value)).as_float()
    except ValueError:
        return None


def _cores(usage: Usage | None) -> float | None:
    """A digest's cpu (milli-cores, Koordinator's vector unit) in cores."""
    return usage["cpu"] / 1000 if usage and "cpu" in usage else None


def _bytes(usage: Usage | None) -> float | None:
    return float(usage["memory"]) if usage and "memory" in usage else None


def build_rows(
    nodes: Sequence[Mapping[str, Any]],
    metrics: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    *,
    window: GoDuration | None,
    args: LowNodeLoadArgs | None = None,
    now: float | None = None,
) -> list[NodeRow]:
    from common.api.pod import pod_requests

    by_name = {str((m.get("metadata") or {}).get("name")): m for m in metrics}
    rows: dict[str, NodeRow] = {}
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name"))
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        row = rows[name] = NodeRow(
            name,
            cpu_allocatable_cores=_quantity(allocatable.get("cpu")),
            memory_allocatable_bytes=_quantity(allocatable.get("memory")),
        )
        batch_cpu = _quantity(allocatable.get(BATCH_CPU))
        row.batch_cpu_allocatable_cores = batch_cpu / 1000 if batch_cpu is not None else None  # milli-cores
        row.batch_memory_allocatable_bytes = _quantity(allocatable.get(BATCH_MEMORY))
        raw = by_name.get(name)
        if raw is None:
            continue
        load = digest_node_metric(raw)
        if load.problem is not None:
            continue  # unusable: shown without usage (class unknown)
        row.cpu_cores, row.memory_bytes = _cores(load.node_usage), _bytes(load.node_usage)
        row.system_cpu_cores, row.system_memory_bytes = _cores(load.system_usage), _bytes(load.system_usage)
        p95 = load.aggregated_usage("p95", window.seconds if window is not None else None)
        row.p95_cpu_cores, row.p95_memory_bytes = _cores(p95), _bytes(p95)
        row.update_age_seconds = None if load.update_time is None else time.time() - load.update_time
    for pod in pods:
        on = rows.get(str((pod.get("spec") or {}).get("nodeName") or ""))
        if on is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        on.pods += 1
        try:
            requests = pod_requests(pod)
        except ValueError:
            continue
        if BATCH_CPU in requests:
            on.batch_cpu_used_cores += requests[BATCH_CPU].as_float() / 1000
        if BATCH_MEMORY in requests:
            on.batch_memory_used_bytes += requests[BATCH_MEMORY].as_float()
    classes = load_classes(nodes, metrics, pods, args or default_args(), time.time() if now is None else now)
    for row in rows.values():
        row.load_class = classes.get(row.name, "unknown")
    return list(rows.values())


def default_args(low: Mapping[str, float] = DEFAULT_LOW, high: Mapping[str, float] = DEFAULT_HIGH) -> LowNodeLoadArgs:
    return LowNodeLoadArgs(low_thresholds=dict(low), high_thresholds=dict(high))


def load_classes(
    nodes: Sequence[Mapping[str, Any]],
    metrics: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    args: LowNodeLoadArgs,
    now: float,
) -> dict[str, str]:
    """Node → the class the descheduler's round would give it now (nodes it would skip are left out)."""
    from scheduler_plugin.descheduler.adapters import malformed_problem, node_snapshot, pod_snapshot, round_node_metric
    from scheduler_plugin.descheduler.classify import classify_pools, pods_by_node

    digests = (digest_node_metric(m) for m in metrics)
    usable = {d.node_name: round_node_metric(d) for d in digests if malformed_problem(d) is None}
    snapshots, pod_snapshots = _readable(node_snapshot, nodes), _readable(pod_snapshot, pods)
    classes: dict[str, str] = {}
    for found in classify_pools(args, snapshots, usable, pods_by_node(pod_snapshots), now=now):
        classes.update(found.class_names())
    return classes


def _readable(convert: Callable[[Mapping[str, Any]], T], objects: Sequence[Mapping[str, Any]]) -> list[T]:
    """The objects the descheduler can read; it leaves a malformed one out of its round, and so does top."""
    out = []
    for obj in objects:
        try:
            out.append(convert(obj))
        except Exception:  # as scheduler_plugin/descheduler/inputs.py: any error makes the object "malformed"
            continue
    return out


def sort_rows(rows: list[NodeRow], key: str) -> list[NodeRow]:
    if key == "name":
        return sorted(rows, key=lambda r: r.name)
    if key == "class":
        return sorted(rows, key=lambda r: (-CLASSES.index(r.load_class) if r.load_class != "unknown" else 1, r.name))
    attr = {
        "cpu": "cpu_cores",
        "memory": "memory_bytes",
        "p95-cpu": "p95_cpu_cores",
        "p95-memory": "p95_memory_bytes",
        "batch-cpu": "batch_cpu_used_cores",
        "batch-memory": "batch_memory_used_bytes",
    }[key]
    # largest first, nodes without a value last (as `kubectl top --sort-by`)
    return sorted(rows, key=lambda r: (getattr(r, attr) is None, -(getattr(r, attr) or 0.0), r.name))


def _c(value: float | None) -> str:
    return human_cores(value) if value is not None else "<unknown>"


def _b(value: float | None) -> str:
    return human_bytes(value).replace(" ", "") if value is not None else "<unknown>"


def _pct(value: float | None) -> str:
    return f"{value:.0f}%" if value is not None else "<unknown>"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "<unknown>"
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f}m"


def render_table(rows: Sequence[NodeRow], *, window: str, wide: bool) -> str:
    header = ["NAME", "CPU(cores)", "CPU%", "MEMORY", "MEMORY%", f"P95-CPU({window})"]
    if wide:
        header += [f"P95-MEMORY({window})", "SYSTEM-CPU", "SYSTEM-MEMORY"]
    header += ["BATCH-CPU(used/alloc)", "BATCH-MEMORY(used/alloc)", "CLASS"]
    if wide:
        header += ["PODS", "UPDATED"]
    table = [header]
    for r in rows:
        line = [r.name, _c(r.cpu_cores), _pct(r.percent("cpu")), _b(r.memory_bytes), _pct(r.percent("memory"))]
        line.append(_c(r.p95_cpu_cores))
        if wide:
            line += [_b(r.p95_memory_bytes), _c(r.system_cpu_cores), _b(r.system_memory_bytes)]
        line += [
            f"{human_cores(r.batch_cpu_used_cores)}/{_c(r.batch_cpu_allocatable_cores)}",
            f"{_b(r.batch_memory_used_bytes)}/{_b(r.batch_memory_allocatable_bytes)}",
            r.load_class,
        ]
        if wide:
            line += [str(r.pods), _age(r.update_age_seconds)]
        table.append(line)
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ("   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table)
    return "".join(line + "\n" for line in lines)


def _thresholds(text: str | None, default: Mapping[str, float], flag: str) -> dict[str, float]:
    if text is None:
        return dict(default)
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        try:
            if not sep or key not in ("cpu", "memory"):
                raise ValueError
            out[key] = float(value.rstrip("%"))
        except ValueError:
            raise SystemExit(f"loadline top: {flag}: expected cpu=PERCENT,memory=PERCENT, got {text!r}") from None
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loadline top",
        description="Nodes by their real load, from NodeMetrics: usage, p95 over a window, batch allocatable and "
        "used, and the class the LowNodeLoad descheduler gives the node (low / prod-low / normal / prod-hot / hot; "
        "unknown when it would skip the node, e.g. its NodeMetric expired).",
    )
    parser.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    parser.add_argument(
        "--window", default=None, metavar="DURATION", help="window of the p95 column, e.g. 5m (default: the longest)"
    )
    parser.add_argument(
        "--sort-by", default="name", choices=SORT_KEYS, help="column to sort by, largest first (default: name)"
    )
    parser.add_argument("-o", "--output", choices=("table", "wide", "json"), default="table", help="output format")
    parser.add_argument(
        "--low",
        metavar="cpu=P,memory=P",
        help=f"low thresholds, percent of allocatable (default: the chart's, {_show(DEFAULT_LOW)})",
    )
    parser.add_argument(
        "--high",
        metavar="cpu=P,memory=P",
        help=f"high thresholds, percent of allocatable (default: the chart's, {_show(DEFAULT_HIGH)})",
    )
    parser.add_argument(
        "--descheduler-config",
        metavar="FILE",
        help="classify as the descheduler with this LowNodeLoad args file does (its node pools and thresholds; "
        "--low/--high are then ignored)",
    )
    return parser


def _show(thresholds: Mapping[str, float]) -> str:
    return ",".join(f"{k}={v:g}" for k, v in thresholds.items())


async def fetch(kubeconfig: str | None) -> tuple[list[Any], list[Any], list[Any]]:
    from common.kube.http import KubeHTTP

    http = await KubeHTTP.connect(kubeconfig, user_agent="loadline-top")
    try:
        nodes, metrics, pods = await asyncio.gather(
            http.get(NODES_PATH), http.get(NODEMETRICS_PATH), http.get(PODS_PATH, fieldSelector="spec.nodeName!=")
        )
    finally:
        await http.close()
    return nodes.get("items") or [], metrics.get("items") or [], pods.get("items") or []


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    low, high = _thresholds(args.low, DEFAULT_LOW, "--low"), _thresholds(args.high, DEFAULT_HIGH, "--high")
    lowload = default_args(low, high)
    if args.descheduler_config:
        from scheduler_plugin.descheduler.config import load_args_file

        try:
            lowload = load_args_file(args.descheduler_config)
        except (OSError, ValueError) as exc:
            print(f"loadline top: {exc}", file=sys.stderr)
            return 2
    try:
        window = GoDuration.parse(args.window) if args.window else None
    except ValueError as exc:
        print(f"loadline top: --window: {exc}", file=sys.stderr)
        return 2
    from common.kube.http import KubeError
    from common.kube.kubeconfig import KubeConfigError

    try:
        nodes, metrics, pods = asyncio.run(fetch(args.kubeconfig))
    except KubeConfigError as exc:
        print(
            f"loadline top: invalid configuration:\n  {exc}\n  pass --kubeconfig FILE or set $KUBECONFIG",
            file=sys.stderr,
        )
        return 2
    except (KubeError, OSError) as exc:
        print(f"loadline top: {exc}", file=sys.stderr)
        return 1
    rows = sort_rows(build_rows(nodes, metrics, pods, window=window, args=lowload), args.sort_by)
    if args.output == "json":
        print(json.dumps([asdict(r) for r in rows], indent=2))
    else:
        label = window.canonical() if window is not None else "longest"
        sys.stdout.write(render_table(rows, window=label, wide=args.output == "wide"))
    return 0
