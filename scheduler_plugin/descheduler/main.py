"""`loadline descheduler`: the LowNodeLoad descheduler daemon.

    loadline descheduler --config args.yaml [--kubeconfig ~/.kube/config] [--no-leader-elect]

``--config`` holds Koordinator's LowNodeLoadArgs (or a whole DeschedulerConfiguration); it is
validated before anything else and every bad field is named (exit status 2). After that nothing
the cluster holds stops the process: see controller.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
from typing import Any

from common.kube.http import KubeHTTP
from common.kube.leader import LeaderElector, default_identity
from common.logging import add_log_level_flag, ctx, setup_logging
from scheduler_plugin.descheduler.args import LOADLINE_NAMESPACE, ArgsError, LowNodeLoadArgs
from scheduler_plugin.descheduler.config import load_args_file
from scheduler_plugin.descheduler.controller import CONTROLLER_NAME, Descheduler
from scheduler_plugin.descheduler.health import start_health_server

log = logging.getLogger("loadline.descheduler")

DEFAULT_HEALTH_ADDRESS = "0.0.0.0:10260"
EXIT_CONFIG = 2


class _FlagError(ValueError):
    pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="loadline descheduler",
        description="LowNodeLoad descheduler: drains nodes that are hot by real usage through the Eviction API.",
    )
    p.add_argument("--config", required=True, help="LowNodeLoadArgs (or DeschedulerConfiguration) YAML file")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    host, port = DEFAULT_HEALTH_ADDRESS.rsplit(":", 1)
    p.add_argument(
        "--bind-address", default=host, help="address of /healthz, /readyz and /metrics (default %(default)s)"
    )
    p.add_argument(
        "--port", type=int, default=int(port), help="HTTP port of /healthz, /readyz and /metrics; 0: any free port "
        "(default %(default)s)"
    )  # fmt: skip
    p.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=True, help="elect a leader (Lease)")
    p.add_argument(
        "--lease-namespace",
        default=os.environ.get("POD_NAMESPACE") or LOADLINE_NAMESPACE,
        help="namespace of the Lease (default $POD_NAMESPACE or loadline-system)",
    )
    p.add_argument("--lease-name", default=CONTROLLER_NAME, help="name of the Lease")
    p.add_argument("--lease-duration", type=float, default=15.0, help="seconds")
    p.add_argument("--renew-deadline", type=float, default=10.0, help="seconds")
    p.add_argument("--retry-period", type=float, default=2.0, help="seconds")
    p.add_argument("--once", action="store_true", help="run one round once the caches are synced, then exit")
    add_log_level_flag(p)
    p.add_argument("--log-json", action="store_true", help="JSON log lines")
    return p


def main(argv: list[str] | None = None) -> int:
    opts = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    setup_logging(opts.log_level, json_output=opts.log_json)
    try:
        args = load_args_file(opts.config)
    except ArgsError as exc:
        print(f"loadline descheduler: invalid --config {opts.config}:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        if not 0 <= opts.port <= 65535:
            raise _FlagError(f"--port: {opts.port} is not a TCP port")
        address = (opts.bind_address, opts.port)
        if opts.leader_elect and not (opts.lease_duration > opts.renew_deadline > opts.retry_period > 0):
            raise _FlagError("leader election needs --lease-duration > --renew-deadline > --retry-period > 0")
    except _FlagError as exc:
        print(f"loadline descheduler: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        return asyncio.run(_run(opts, args, address))
    except KeyboardInterrupt:
        return 0


async def _connect(kubeconfig: str | None) -> KubeHTTP | None:
    try:
        return await KubeHTTP.connect(kubeconfig, user_agent=CONTROLLER_NAME)
    except Exception as exc:  # a missing/unreadable kubeconfig or no in-cluster account: a start-up error
        print(f"loadline descheduler: cannot load the cluster configuration: {exc}", file=sys.stderr)
        return None


async def _run(opts: argparse.Namespace, args: LowNodeLoadArgs, address: tuple[str, int]) -> int:
    http = await _connect(opts.kubeconfig)
    if http is None:
        return EXIT_CONFIG
    identity = default_identity()
    descheduler = Descheduler(args, http, identity=identity)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        runner, port = await start_health_server(
            address[0], address[1], healthy=descheduler.healthy, ready=descheduler.ready
        )
    except OSError as exc:
        print(f"loadline descheduler: --bind-address/--port {opts.bind_address}:{opts.port}: {exc}", file=sys.stderr)
        await http.close()
        return EXIT_CONFIG
    log.info(
        "descheduler starting",
        extra=ctx(
            identity=identity,
            server=http.server,
            health_port=port,
            interval=f"{args.descheduling_interval:g}s",
            dry_run=args.dry_run,
            paused=args.paused,
            leader_elect=opts.leader_elect and not opts.once,
        ),
    )
    tasks: list[asyncio.Task[Any]] = [
        asyncio.create_task(descheduler.run_reflectors(), name="reflectors"),
        asyncio.create_task(_freeze_after_sync(descheduler), name="gc-freeze"),
    ]
    status = 0
    try:
        if opts.once:
            status = await _once(descheduler, stop)
        else:
            if opts.leader_elect:
                elector = LeaderElector(
                    http,
                    name=opts.lease_name,
                    namespace=opts.lease_namespace,
                    identity=identity,
                    lease_seconds=opts.lease_duration,
                    renew_deadline_seconds=opts.renew_deadline,
                    retry_period_seconds=opts.retry_period,
                )
                log.info("standing for election", extra=ctx(lease=f"{opts.lease_namespace}/{opts.lease_name}"))
                tasks.append(asyncio.create_task(elector.run(descheduler.lead), name="leader"))
            else:
                tasks.append(asyncio.create_task(descheduler.lead(), name="rounds"))
            await stop.wait()
            log.info("stopping")
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await runner.cleanup()
        await http.close()
    return status


async def _freeze_after_sync(descheduler: Descheduler) -> None:
    """Move the objects of the first full sync out of the cyclic GC's sight.

    The stores hold millions of small dicts (100k pods); every full collection would walk them all,
    stalling a round for a second or more. They are acyclic JSON, freed by reference counting when
    replaced, so the collector has nothing to find among them.
    """
    await asyncio.gather(*(r.synced.wait() for r in descheduler.required_reflectors))
    gc.freeze()
    log.debug("caches synced; %d objects moved out of the cyclic GC", gc.get_freeze_count())


async def _once(descheduler: Descheduler, stop: asyncio.Event, sync_timeout: float = 120.0) -> int:
    deadline = asyncio.get_running_loop().time() + sync_timeout
    while not descheduler.synced():
        if stop.is_set():
            return 0
        if asyncio.get_running_loop().time() > deadline:
            log.error("caches not synced in time", extra=ctx(unsynced=descheduler.unsynced_names()))
            return 1
        await asyncio.sleep(0.1)
    descheduler.leading = True
    report = await descheduler.run_round()
    return 0 if report.result in ("ok", "paused") else 1
