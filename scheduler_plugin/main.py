"""`loadline scheduler`: the scheduling-framework scheduler for pods with `schedulerName: loadline-scheduler`."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from common.config import ConfigError
from common.logging import add_log_level_flag, setup_logging
from scheduler_plugin.framework.config import KubeSchedulerConfiguration
from scheduler_plugin.framework.profiles import load_scheduler_config
from scheduler_plugin.plugins.registry import frameworks_from_config
from scheduler_plugin.server.options import (
    DEFAULT_LEASE_NAME,
    DEFAULT_LEASE_NAMESPACE,
    DEFAULT_PORT,
    SchedulerOptions,
    client_limits_from,
    kubeconfig_from,
    leader_election_from,
)

DESCRIPTION = """\
Schedules the pods whose spec.schedulerName is one of its profiles' (default: loadline-scheduler)
with load-aware (NodeMetric), gang (PodGroup) and InfiniBand-topology placement. Profiles and plugin
arguments come from a KubeSchedulerConfiguration file (kubescheduler.config.k8s.io/v1), the same format
kube-scheduler reads; without --config one default profile is used. clientConnection.qps/burst limit the
API requests like kube-scheduler's (default 50/100).

Run two or more replicas with leader election: only the holder of the Lease schedules, the others keep
their caches warm and take over when it stops renewing. The HTTP port serves /healthz, /readyz,
/metrics (Prometheus, loadline_scheduler_*) and /explain/<namespace>/<pod> (see `loadline explain`).
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loadline scheduler", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--extender", action="store_true",
                        help="serve the filter and score plugins to a stock kube-scheduler as an HTTP extender "
                        "instead (no gangs or topology); `loadline scheduler --extender --help` lists its options")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: clientConnection.kubeconfig, $KUBECONFIG, "
                        "~/.kube/config, then the in-cluster service account)")
    parser.add_argument("--config", type=Path, help="KubeSchedulerConfiguration YAML (profiles, pluginConfig, "
                        "leaderElection, backoff)")
    parser.add_argument("--bind-address", default="0.0.0.0", help="address of the HTTP port (default: %(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help="HTTP port of /healthz, /readyz, /metrics and /explain; 0: any free port "
                        "(default: %(default)s)")  # fmt: skip
    parser.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=None,
                        help="elect a leader with a Lease before scheduling (default: leaderElection.leaderElect, "
                        "else on)")
    parser.add_argument("--lease-name", help=f"Lease name (default: leaderElection.resourceName, else "
                        f"{DEFAULT_LEASE_NAME})")
    parser.add_argument("--lease-namespace", help=f"Lease namespace (default: leaderElection.resourceNamespace, "
                        f"else {DEFAULT_LEASE_NAMESPACE})")
    parser.add_argument("--lease-duration", type=float, help="seconds a standby waits before taking over an "
                        "unrenewed Lease (default: leaderElection.leaseDuration, else 15)")
    parser.add_argument("--renew-deadline", type=float, help="seconds the leader keeps trying to renew before it "
                        "stops scheduling (default: leaderElection.renewDeadline, else 10)")
    parser.add_argument("--retry-period", type=float, help="seconds between Lease attempts (default: "
                        "leaderElection.retryPeriod, else 2)")
    parser.add_argument("--identity", help="leader-election identity (default: $POD_NAME or hostname, plus a "
                        "random suffix)")
    parser.add_argument("--explain-cache-size", type=int, default=1000,
                        help="how many pods' last attempts /explain keeps (default: %(default)s; 0 turns it off)")
    parser.add_argument("--unschedulable-timeout", type=float, default=300.0,
                        help="seconds after which unschedulable pods are retried even without a cluster event "
                        "(default: %(default)s)")
    parser.add_argument("--crd-retry-seconds", type=float, default=60.0,
                        help="how often to look again for a CRD that is not installed (NodeMetric, PodGroup in "
                        "either group); scheduling goes on without it meanwhile (default: %(default)s)")
    parser.add_argument("--tie-break-seed", type=int,
                        help="seed of the random choice among nodes with the same best score, as kube-scheduler "
                        "makes it; set it to make placements reproducible in tests and benchmarks (default: "
                        "unseeded)")
    add_log_level_flag(parser)
    parser.add_argument("--log-json", action="store_true", help="log one JSON object per line")
    return parser


def _options(args: argparse.Namespace, config: KubeSchedulerConfiguration) -> SchedulerOptions:
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port: {args.port} is not a port number")
    if args.explain_cache_size < 0:
        raise ConfigError("--explain-cache-size: must not be negative")
    if args.unschedulable_timeout <= 0:
        raise ConfigError("--unschedulable-timeout: must be positive")
    if args.crd_retry_seconds <= 0:
        raise ConfigError("--crd-retry-seconds: must be positive")
    flags = {
        "leader_elect": args.leader_elect,
        "lease_name": args.lease_name,
        "lease_namespace": args.lease_namespace,
        "lease_duration": args.lease_duration,
        "renew_deadline": args.renew_deadline,
        "retry_period": args.retry_period,
    }
    qps, burst = client_limits_from(config)
    return SchedulerOptions(
        kubeconfig=kubeconfig_from(config, args.kubeconfig),
        bind_address=args.bind_address,
        port=args.port,
        leader_election=leader_election_from(config, flags),
        identity=args.identity,
        explain_cache_size=args.explain_cache_size,
        unschedulable_timeout_seconds=args.unschedulable_timeout,
        crd_retry_seconds=args.crd_retry_seconds,
        client_qps=qps,
        client_burst=burst,
        tie_break_seed=args.tie_break_seed,
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--extender" in argv:
        from scheduler_plugin.extender.main import main as extender_main

        return extender_main([a for a in argv if a != "--extender"])
    args = _parser().parse_args(argv)
    setup_logging(args.log_level, json_output=args.log_json)
    try:
        if args.config is not None:
            if not args.config.is_file():
                raise ConfigError(f"--config: {args.config} is not a readable file")
            config = load_scheduler_config(args.config)
        else:
            config = KubeSchedulerConfiguration()
        frameworks_from_config(config)  # every profile and plugin argument is checked before connecting
        options = _options(args, config)
    except ConfigError as exc:
        print(f"loadline scheduler: {exc}", file=sys.stderr)
        return 2
    if options.kubeconfig is not None and not Path(options.kubeconfig).is_file():
        print(f"loadline scheduler: --kubeconfig: {options.kubeconfig} is not a readable file", file=sys.stderr)
        return 2
    from scheduler_plugin.server.process import StartupError, run_until_signalled

    try:
        asyncio.run(run_until_signalled(options, config))
    except StartupError as exc:
        print(f"loadline scheduler: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
