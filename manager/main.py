"""`loadline manager`: batch (overcommit) resources per node, NodeMetric lifecycle and NodeSLOs.

Every replica watches; the one holding the Lease reconciles and writes. SIGTERM/SIGINT stop it
cleanly and release the Lease so a standby takes over at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from common.config import ConfigError, load_settings
from common.flags import add_deprecated_alias
from common.kube.events import EventRecorder
from common.kube.http import KubeHTTP
from common.kube.leader import LeaderElector, default_identity
from common.kube.reflector import LIVENESS_STALL_SECONDS, STALL_SECONDS, stalled_watch
from common.logging import add_log_level_flag, setup_logging
from manager.admission.service import AdmissionService
from manager.controller import Controller
from manager.server import start_http_server
from manager.settings import RENAMED, ManagerSettings

log = logging.getLogger("loadline.manager")


def _default(field: str) -> object:
    return ManagerSettings.model_fields[field].default


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="loadline manager", description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--config", type=Path, help="YAML file with settings (flags and LOADLINE_MANAGER_* env win)")
    p.add_argument(
        "--kubeconfig",
        type=Path,
        help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then the in-cluster service account)",
    )
    p.add_argument("--namespace", help=f"namespace of the ConfigMap and the Lease (default {_default('namespace')})")
    p.add_argument("--config-map", dest="config_map", help=f"ConfigMap name (default {_default('config_map')})")
    p.add_argument("--lease-name", dest="lease_name", help=f"name of the Lease (default {_default('lease_name')})")
    p.add_argument(
        "--leader-elect",
        dest="leader_elect",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="elect a leader with a Lease; only the leader writes (default: on)",
    )
    p.add_argument(
        "--lease-duration",
        dest="lease_duration_seconds",
        type=float,
        metavar="SECONDS",
        help=f"a standby takes over a Lease unrenewed this long (default {_default('lease_duration_seconds')})",
    )
    p.add_argument(
        "--renew-deadline",
        dest="renew_deadline_seconds",
        type=float,
        metavar="SECONDS",
        help=f"the leader steps down if it cannot renew within this (default {_default('renew_deadline_seconds')})",
    )
    p.add_argument(
        "--retry-period",
        dest="retry_period_seconds",
        type=float,
        metavar="SECONDS",
        help=f"how often the Lease is tried or renewed (default {_default('retry_period_seconds')})",
    )
    p.add_argument(
        "--resync",
        dest="resync_seconds",
        type=float,
        metavar="SECONDS",
        help=f"each node is reconciled at least this often, besides events (default {_default('resync_seconds')})",
    )
    p.add_argument("--workers", type=int, help=f"nodes reconciled concurrently, 1-64 (default {_default('workers')})")
    p.add_argument(
        "--bind-address", dest="bind_address", help=f"address of the HTTP server (default {_default('bind_address')})"
    )
    p.add_argument(
        "--port",
        dest="port",
        type=int,
        help=f"HTTP port of /healthz /readyz /metrics (formerly --metrics-port); 0: any free port (default "
        f"{_default('port')})",
    )
    add_deprecated_alias(p, "--metrics-port", "--port")
    w = p.add_argument_group(
        "admission webhooks (Colocation Profile)",
        "HTTPS webhooks that apply ClusterColocationProfiles to new pods and check pods and profiles; every replica "
        "serves them. The Secret and the Mutating/ValidatingWebhookConfiguration must exist (the chart makes them).",
    )
    w.add_argument("--webhook-port", dest="webhook_port", type=int, metavar="PORT",
                   help="HTTPS port of /mutate-pod, /validate-pod, /validate-profile; 0 = no webhooks (default 0)")
    w.add_argument("--webhook-only", dest="webhook_only", action=argparse.BooleanOptionalAction, default=None,
                   help="serve the webhooks only: no NodeMetric, NodeSLO or batch-resource writes (default: off)")
    w.add_argument("--webhook-certs", dest="webhook_certs", choices=["self-signed", "external"],
                   help="self-signed: make a CA and serving certificate in the Secret, renew them before they expire "
                   "and write the CA bundle into the webhook configurations; external: serve the certificate another "
                   "issuer (cert-manager) keeps in the Secret (default self-signed)")
    w.add_argument("--webhook-secret", dest="webhook_secret",
                   help=f"Secret (in --namespace) with the certificates (default {_default('webhook_secret')})")
    w.add_argument("--webhook-configuration", dest="webhook_configuration",
                   help="name of the Mutating- and ValidatingWebhookConfiguration to keep the CA bundle of (default "
                   f"{_default('webhook_configuration')})")
    w.add_argument("--webhook-service", dest="webhook_service",
                   help=f"Service the API server calls: <service>.<namespace>.svc is certified (default "
                   f"{_default('webhook_service')})")
    w.add_argument("--webhook-host", dest="webhook_hosts", action="append", metavar="NAME_OR_IP",
                   help="one more DNS name or IP address to certify, e.g. the host of a url: webhook (repeatable)")
    w.add_argument("--webhook-cert-validity-seconds", dest="webhook_cert_validity_seconds", type=float,
                   help="validity of a serving certificate; renewed after two thirds of it (default one year)")
    w.add_argument("--webhook-ca-validity-seconds", dest="webhook_ca_validity_seconds", type=float,
                   help="validity of a CA; a new one joins the bundle after two thirds of it (default ten years)")
    w.add_argument("--webhook-skip-namespace", dest="webhook_skip_namespaces", action="append", metavar="NAMESPACE",
                   help="pods of this namespace are let through unchanged; --namespace always is (default: "
                   "kube-system; repeatable, replaces the default)")
    add_log_level_flag(p, default=None, dest="log_level")
    p.add_argument("--log-json", dest="log_json", action="store_const", const=True, help="log one JSON object per line")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    flags: dict[str, Any] = {k: v for k, v in vars(args).items() if k != "config"}
    try:
        settings = load_settings(
            ManagerSettings, file=args.config, env_prefix="LOADLINE_MANAGER", flags=flags, renamed=RENAMED
        )
    except ConfigError as exc:
        print(f"loadline manager: {exc}", file=sys.stderr)
        return 2
    setup_logging(settings.log_level, json_output=settings.log_json)
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(run(settings))
    return 0


async def run(settings: ManagerSettings) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        http = await KubeHTTP.connect(settings.kubeconfig, user_agent="loadline-manager")
    except Exception as exc:  # unreadable kubeconfig, no in-cluster account: a start-up error
        where = settings.kubeconfig or "$KUBECONFIG, ~/.kube/config or the in-cluster service account"
        log.error("cannot configure the API client from %s: %s", where, exc)
        return 2
    identity = default_identity()
    recorder = EventRecorder(http, "loadline-manager", identity)
    controller = None
    tasks: list[asyncio.Task[Any]] = []
    if not settings.webhook_only:
        controller = Controller(
            http,
            namespace=settings.namespace,
            config_map=settings.config_map,
            recorder=recorder,
            workers=settings.workers,
            resync_seconds=settings.resync_seconds,
        )
        tasks += [asyncio.create_task(r.run(), name=f"watch {r.name}") for r in controller.reflectors]
    # Every replica serves the admission webhooks (no leadership needed); the leader writes the profiles' Events.
    admission = AdmissionService(http, settings, recorder) if settings.webhook_port else None
    if admission is not None:
        tasks += admission.tasks()

    async def initial_sync() -> None:
        if controller is None:
            return
        await controller.wait_synced()
        # The caches now hold every Node, Pod and NodeMetric of the cluster and live as long as the process:
        # moved out of the collector's generations, they stop making each full collection walk them all.
        gc.collect()
        gc.freeze()
        log.info("watches synced: %d nodes, %d pods", len(controller.nodes.store), len(controller.pods.store))

    tasks.append(asyncio.create_task(initial_sync(), name="initial sync"))

    async def lead() -> None:
        duties = [] if controller is None else [controller.lead()]
        if admission is not None:
            duties.append(admission.checker.run())
        try:
            await asyncio.gather(*duties)
        except Exception:
            log.exception("reconciling stopped by an unexpected error")
            raise

    if settings.leader_elect:
        elector = LeaderElector(
            http,
            name=settings.lease_name,
            namespace=settings.namespace,
            identity=identity,
            lease_seconds=settings.lease_duration_seconds,
            renew_deadline_seconds=settings.renew_deadline_seconds,
            retry_period_seconds=settings.retry_period_seconds,
        )
        tasks.append(asyncio.create_task(elector.run(lead), name="leader election"))
    else:
        tasks.append(asyncio.create_task(lead(), name="reconcile"))
    critical = [t for t in tasks if t.get_name() != "initial sync"]

    def not_progressing(stall_seconds: float) -> str | None:
        if controller is not None and (problem := controller.not_progressing(stall_seconds)) is not None:
            return problem
        return stalled_watch(admission.caches.reflectors, stall_seconds) if admission is not None else None

    def healthy() -> str | None:
        dead = [t.get_name() for t in critical if t.done()]
        return f"stopped: {', '.join(dead)}" if dead else not_progressing(LIVENESS_STALL_SECONDS)

    def ready() -> str | None:
        if (problem := not_progressing(STALL_SECONDS)) is not None:
            return problem
        if controller is not None and not controller.synced:
            return "watches not synced yet"
        if controller is not None and not controller.config.ready:
            return "no valid slo-controller-config yet"
        return admission.ready() if admission is not None else None

    runner, address = await start_http_server(settings.bind_address, settings.port, healthy=healthy, ready=ready)
    log.info(
        "manager started",
        extra={
            "ctx": {
                "identity": identity,
                "configmap": "-" if settings.webhook_only else f"{settings.namespace}/{settings.config_map}",
                "address": address,
                "webhooks": f"port {settings.webhook_port}" if settings.webhook_port else "off",
            }
        },
    )
    stopper = asyncio.create_task(stop.wait(), name="signal")
    status = 0
    try:
        done, _ = await asyncio.wait([stopper, *critical], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stopper:
                status = 1
                log.error(
                    "%s ended unexpectedly: %r", task.get_name(), task.exception() if not task.cancelled() else None
                )
    finally:
        for task in (*tasks, stopper):
            task.cancel()
        # Cancelling the elector releases the Lease (if we hold it) so a standby takes over now.
        await asyncio.gather(*tasks, stopper, return_exceptions=True)
        await runner.cleanup()
        await http.close()
        log.info("manager stopped")
    return status
