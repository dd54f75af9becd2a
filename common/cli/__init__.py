"""`loadline`: one command, one subcommand per component, plus the cluster CLIs.

Each component's subcommand lives in its package as `<package>/main.py`; the cluster CLIs, which read
the cluster and run nowhere in particular (`top`, `explain`), live in this package. Each exposes
`main(argv) -> int`; this table is the only place that lists them.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from dataclasses import dataclass

from common.version import __version__


@dataclass(frozen=True)
class Subcommand:
    module: str
    summary: str


SUBCOMMANDS: dict[str, Subcommand] = {
    "agent": Subcommand("agent.main", "node agent: samples cgroups, /proc, GPUs and InfiniBand; publishes NodeMetrics"),
    "manager": Subcommand("manager.main", "controller: batch (overcommit) resources per node and NodeSLO watermarks"),
    "scheduler": Subcommand("scheduler_plugin.main", "scheduler: load-aware, gang and InfiniBand-topology placement"),
    "extender": Subcommand(
        "scheduler_plugin.extender.main", "the same load-aware filter and score behind kube-scheduler's extender API"
    ),
    "descheduler": Subcommand(
        "scheduler_plugin.descheduler.main", "LowNodeLoad descheduler: drains hot nodes through the Eviction API"
    ),
    "explain": Subcommand("common.cli.explain", "why a pod went where it went, or why it is pending"),
    "top": Subcommand("common.cli.top", "nodes by real load from NodeMetrics: usage, p95, batch, low/normal/hot class"),
}


class _NotBuilt(Exception):
    pass


def _load(name: str) -> object:
    spec = SUBCOMMANDS[name]
    try:
        module = importlib.import_module(spec.module)
    except ModuleNotFoundError as exc:
        if exc.name and spec.module.startswith(exc.name):
            raise _NotBuilt from None
        raise
    entry = getattr(module, "main", None)
    if entry is None:
        raise _NotBuilt
    return entry


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loadline",
        description="Loadline: load-aware colocation for Kubernetes, wire-compatible with Koordinator.",
        epilog="Run `loadline <command> --help` for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"loadline {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    for name, spec in SUBCOMMANDS.items():
        sub.add_parser(name, help=spec.summary, add_help=False)
    sub.add_parser("version", help="print the version")
    return parser


def disable_created_series() -> None:
    """Counters and histograms would each add a `<name>_created` gauge to /metrics (prometheus_client's default in
    the text format): a second series per metric that nobody queries. Every component starts through main(). Where
    prometheus_client is not loaded yet, its own switch (an environment variable read at its import) does it, so a
    component that never uses it (the standalone agent) does not import it for this."""
    if "prometheus_client" not in sys.modules:
        os.environ["PROMETHEUS_DISABLE_CREATED_SERIES"] = "true"
        return
    import prometheus_client

    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in prometheus_client


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if not args or args[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "version":
        print(f"loadline {__version__}")
        return 0
    if command not in SUBCOMMANDS:
        parser.parse_args(args)  # prints argparse's "invalid choice" message and exits 2
        return 2
    # Importing a component makes some 100,000 tracked objects (modules, classes, pydantic schemas) that live
    # as long as the process: the cyclic collector, run every 700 allocations meanwhile, walked them ~150 times
    # (0.2 s of `loadline scheduler`'s start) and found nothing to free.
    gc.disable()
    try:
        entry = _load(command)
    except _NotBuilt:
        print(
            f"loadline {command}: not available in this build yet ({SUBCOMMANDS[command].summary}).",
            file=sys.stderr,
        )
        return 2
    finally:
        gc.enable()
    disable_created_series()
    result = entry(rest)  # type: ignore[operator]
    return int(result or 0)

