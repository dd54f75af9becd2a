"""`python -m scheduler_plugin.extender`: the extender process (see the package docstring)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import textwrap
from pathlib import Path

from common.config import ConfigError
from common.http_server import start_site
from common.kube.http import KubeHTTP
from common.logging import add_log_level_flag, setup_logging
from scheduler_plugin.extender.assume import DEFAULT_TTL_SECONDS
from scheduler_plugin.extender.cache import ExtenderCache
from scheduler_plugin.extender.engine import ExtenderEngine
from scheduler_plugin.extender.profiles import extender_frameworks
from scheduler_plugin.extender.server import DEFAULT_MAX_BODY_BYTES, ExtenderServer, normalize_prefix
from scheduler_plugin.extender.wire import ScoreScaling
from scheduler_plugin.framework.interfaces import watched_by
from scheduler_plugin.framework.runtime import Framework
from scheduler_plugin.framework.snapshot import Snapshot

log = logging.getLogger("loadline.extender")

DEFAULT_PORT = 10262

EPILOG = textwrap.dedent(
    """\
    kube-scheduler configuration that calls this extender (KubeSchedulerConfiguration, top level):

      extenders:
      - urlPrefix: http://<host>:%(port)d%(prefix)s
        filterVerb: filter
        prioritizeVerb: prioritize
        weight: 5                # scores are 0..10; kube-scheduler adds score x weight x 10 to its own
        nodeCacheCapable: true   # send node names only; false sends full Node objects
        httpTimeout: 5s
        ignorable: false         # true: scheduling goes on without us when we are unreachable
        # managedResources left empty: consulted for every pod

    Without --config the extender runs LoadAwareScheduling (Koordinator's arguments, defaults:
    cpu 65 %%, memory 95 %%) as Filter and Score. --config takes a KubeSchedulerConfiguration
    (kubescheduler.config.k8s.io/v1): profiles' plugins and pluginConfig choose and tune the
    Filter/Score plugins; a pod whose schedulerName matches a profile uses it, others the first.
    Gang (Coscheduling) and InfiniBand-topology placement need the full scheduler
    (`loadline scheduler`). The extender needs read access (list/watch) to nodes, pods and
    nodemetrics.slo.koordinator.sh.

    Endpoints: POST <prefix>/filter, POST <prefix>/prioritize, GET /healthz, /readyz, /metrics.
    """
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loadline extender",
        description=(
            "Loadline's scheduler extender: LoadAwareScheduling (and any other Filter/Score plugin) "
            "served over kube-scheduler's HTTP extender API, for clusters that keep the stock kube-scheduler."
        ),
        epilog=EPILOG % {"port": DEFAULT_PORT, "prefix": ""},
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="kubeconfig of the cluster to cache nodes, pods and NodeMetrics from "
        "(default: $KUBECONFIG, then ~/.kube/config, then the in-cluster service account)",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="KubeSchedulerConfiguration YAML selecting and configuring the plugins (default: LoadAwareScheduling)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help="HTTP port of the verbs, /healthz, /readyz and /metrics; 0: any free port (default: %(default)s)",
    )
    parser.add_argument(
        "--bind-address", default="0.0.0.0", metavar="ADDR", help="address to listen on (default: %(default)s)"
    )
    parser.add_argument(
        "--url-prefix",
        default="",
        metavar="PATH",
        help="path the verbs are served under, matching the path of kube-scheduler's urlPrefix "
        "(default: none, i.e. /filter and /prioritize)",
    )
    parser.add_argument(
        "--max-body-mb", type=int, default=DEFAULT_MAX_BODY_BYTES // 2**20, metavar="MB",
        help="largest request accepted; full-Node mode on big clusters sends large bodies (default: %(default)s)",
    )
    parser.add_argument(
        "--score-scaling", choices=["relative", "absolute"], default="relative",
        help="how plugin scores (0..100 per plugin, weighted) become extender scores 0..10: relative = min-max "
        "over the nodes of each request, so the best gets 10 (default); absolute = total x 10 / maximum",
    )
    parser.add_argument(
        "--assume-seconds", type=float, default=DEFAULT_TTL_SECONDS, metavar="S",
        help="after prioritize, count the pod on its best-scored node for up to S seconds, until its binding "
        "reaches our pod watch, so a burst of pods does not pile onto one cold node; 0 turns this off "
        "(default: %(default)s)",
    )
    add_log_level_flag(parser)
    parser.add_argument("--log-json", action="store_true", help="log one JSON object per line")
    return parser


async def serve(
    frameworks: dict[str, Framework],
    snapshot: Snapshot,
    *,
    kubeconfig: str | None,
    host: str,
    port: int,
    prefix: str = "",
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    assume_seconds: float = DEFAULT_TTL_SECONDS,
    score_scaling: ScoreScaling = "relative",
    stop: asyncio.Event | None = None,
) -> int:
    """Run caches and HTTP server until `stop` is set (or SIGINT/SIGTERM when `stop` is None)."""
    try:
        http = await KubeHTTP.connect(kubeconfig, user_agent="loadline-extender")
    except Exception as exc:  # kubeconfig missing or unreadable: say so, do not trace back
        log.error("cannot load the cluster configuration: %s", exc)
        return 1
    plugins = (plugin for framework in frameworks.values() for plugin in framework.plugins.values())
    cache = ExtenderCache(http, snapshot, resources=watched_by(plugins))
    engine = ExtenderEngine(frameworks, snapshot, default_profile=next(iter(frameworks)),
                            assume_seconds=assume_seconds, score_scaling=score_scaling)
    server = ExtenderServer(engine, ready=lambda: cache.synced, not_progressing=cache.not_progressing, prefix=prefix)
    stopping = stop or asyncio.Event()
    if stop is None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stopping.set)
    try:
        runner, address = await start_site(server.app(max_body_bytes), host, port)
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", host, port, exc)
        await http.close()
        return 1
    try:
        cache.start()
        log.info("extender listening on %s%s (profiles: %s)", address, normalize_prefix(prefix) or "/",
                 ", ".join(frameworks))
        synced = asyncio.create_task(_announce_sync(cache))
        await stopping.wait()
        synced.cancel()
        return 0
    finally:
        await cache.stop()
        await runner.cleanup()
        await http.close()


async def _announce_sync(cache: ExtenderCache) -> None:
    await cache.wait_synced()
    log.info("caches synced (%d nodes); serving", cache.snapshot.num_nodes)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    setup_logging(args.log_level, json_output=args.log_json)
    snapshot = Snapshot()
    try:
        frameworks = extender_frameworks(Path(args.config) if args.config else None, snapshot=snapshot)
    except ConfigError as exc:
        print(f"loadline extender: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"loadline extender: cannot read {args.config}: {exc.strerror}", file=sys.stderr)
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(
            serve(
                frameworks,
                snapshot,
                kubeconfig=args.kubeconfig,
                host=args.bind_address,
                port=args.port,
                prefix=args.url_prefix,
                max_body_bytes=args.max_body_mb * 2**20,
                assume_seconds=args.assume_seconds,
                score_scaling=args.score_scaling,
            )
        )
    return 0
