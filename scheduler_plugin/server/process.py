"""`loadline scheduler` as one asyncio program: informers, HTTP port, leader election, scheduling loop.

Order at start (kube-scheduler's): serve /healthz at once, list + watch everything,
wait until the caches are synced, then stand for election; only the leader runs the
scheduling loop, while a standby keeps its caches (and queue) warm so a failover is
one Lease expiry away. On SIGTERM the Lease is released, so a standby takes over
without waiting for it to expire.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
from typing import Any

from common.http_server import start_site
from common.kube.http import KubeHTTP
from common.kube.leader import LeaderElector, default_identity
from common.kube.malformed import MalformedObjects
from common.kube.reflector import freeze_cache_objects, pause_gc_until_frozen, relax_gc_for_caches
from common.logging import ctx
from common.ratelimit import TokenBucket
from common.supervise import Supervised
from scheduler_plugin.framework.config import KubeSchedulerConfiguration
from scheduler_plugin.framework.interfaces import watched_by
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.coscheduling.podgroups import PodGroups
from scheduler_plugin.plugins.loadaware.nodeload import NodeLoads
from scheduler_plugin.plugins.registry import frameworks_from_config
from scheduler_plugin.plugins.storage import PersistentVolumeClaims, PersistentVolumes
from scheduler_plugin.server import metrics as m
from scheduler_plugin.server.apihealth import ApiHealth
from scheduler_plugin.server.binder import APIBinder
from scheduler_plugin.server.cache import ClusterCache
from scheduler_plugin.server.explain_view import explain_pod
from scheduler_plugin.server.http_api import build_app
from scheduler_plugin.server.options import SchedulerOptions
from scheduler_plugin.server.reporter import Reporter
from scheduler_plugin.server.scheduler import Scheduler

log = logging.getLogger("loadline.scheduler")


class StartupError(Exception):
    """The process cannot start (no usable kubeconfig or in-cluster credentials)."""


class SchedulerProcess:
    def __init__(self, options: SchedulerOptions, config: KubeSchedulerConfiguration, http: KubeHTTP) -> None:
        self.options = options
        self.http = http
        self.identity = options.identity or default_identity()
        self.snapshot = Snapshot()
        self.health = ApiHealth()
        self.loops = Supervised()
        # Events over their own connections and with a rate limit of their own at the same qps/burst, as
        # kube-scheduler's event client (cmd/kube-scheduler/app/options/options.go, createClients: a second clientset
        # from the same rest.Config, so a second token bucket): sharing one bucket, events took half of the
        # bindings' 50/s (bench/cluster_scale_bench.py: Loadline drained at 0.4-0.8x kube-scheduler's pods/s).
        limiter = http.limiter
        event_limiter = TokenBucket(limiter.qps, limiter.burst) if limiter is not None else None
        self.event_http = http.sibling(user_agent="loadline-scheduler/events", limiter=event_limiter)
        self.reporter = Reporter(http, self.identity, event_http=self.event_http, health=self.health)
        self.binder = APIBinder(http, before_bind=self.reporter.settle, health=self.health)
        self.frameworks = frameworks_from_config(config, snapshot=self.snapshot, binder=self.binder,
                                                 tie_break_seed=options.tie_break_seed, api=http)
        self.scheduler = Scheduler(
            self.frameworks,
            self.snapshot,
            self.binder,
            self.reporter,
            initial_backoff_seconds=config.pod_initial_backoff_seconds,
            max_backoff_seconds=config.pod_max_backoff_seconds,
            unschedulable_timeout_seconds=options.unschedulable_timeout_seconds,
            explain_capacity=options.explain_cache_size,
        )
        watched = watched_by(p for f in self.frameworks.values() for p in f.plugins.values())
        kinds = ("Node", "Pod", "PodDisruptionBudget", *(r.kind for r in watched))
        self.malformed = MalformedObjects(dict.fromkeys(kinds))
        self.cache = ClusterCache(
            http, self.snapshot, self.scheduler, self.malformed, crd_retry_seconds=options.crd_retry_seconds,
            resources=watched,
        )
        election = options.leader_election
        # The Lease is renewed over its own connections: behind thousands of queued bindings and events a
        # renewal would miss the renew deadline and the leader would stop in the middle of a backlog.
        self.election_http = http.sibling(user_agent="loadline-scheduler/leader-election") if election.enabled else None
        self.elector = (
            LeaderElector(
                self.election_http or http,
                name=election.name,
                namespace=election.namespace,
                identity=self.identity,
                lease_seconds=election.lease_seconds,
                renew_deadline_seconds=election.renew_deadline_seconds,
                retry_period_seconds=election.retry_period_seconds,
            )
            if election.enabled
            else None
        )
        self._export_cache_gauges()

    def _export_cache_gauges(self) -> None:
        snap = self.snapshot
        m.CACHE_SIZE.labels("nodes").set_function(lambda: float(snap.num_nodes))
        m.CACHE_SIZE.labels("pods").set_function(lambda: float(len(snap.pods)))
        m.CACHE_SIZE.labels("assumed_pods").set_function(lambda: float(sum(r.assumed for r in snap.records.values())))
        m.CACHE_SIZE.labels("pod_groups").set_function(lambda: float(len(snap.store(PodGroups))))
        m.CACHE_SIZE.labels("node_metrics").set_function(lambda: float(len(snap.store(NodeLoads))))
        m.CACHE_SIZE.labels("persistent_volumes").set_function(lambda: float(len(snap.store(PersistentVolumes))))
        m.CACHE_SIZE.labels("persistent_volume_claims").set_function(
            lambda: float(len(snap.store(PersistentVolumeClaims))))
        # PVs and claims VolumeBinding assumed in Reserve whose writes the watch has not shown yet
        pvs, claims = snap.store(PersistentVolumes), snap.store(PersistentVolumeClaims)
        m.CACHE_SIZE.labels("assumed_volumes").set_function(lambda: float(pvs.assumed_count() + claims.assumed_count()))

    def not_progressing(self, stall_seconds: float) -> str | None:
        """A watch failing, the scheduling loop waiting for its restart or not turning for `stall_seconds`."""
        if (problem := self.cache.not_progressing(stall_seconds)) is not None:
            return problem
        if down := self.loops.down():
            return f"restarting: {', '.join(down)}"
        if (still := self.scheduler.loop_still_seconds()) >= stall_seconds:
            return f"the scheduling loop has not turned for {still:.0f}s"
        return None

    def is_leader(self) -> bool:
        return self.elector.is_leader if self.elector is not None else self.scheduler.leading

    def explain(self, namespace: str, name: str) -> tuple[int, dict[str, Any]]:
        return explain_pod(self.scheduler, namespace, name, is_leader=self.is_leader())

    async def run(self) -> None:
        app = build_app(
            ready=self.cache.synced,
            is_leader=self.is_leader,
            explain=self.explain,
            not_progressing=self.not_progressing,
        )
        runner, address = await start_site(app, self.options.bind_address, self.options.port)
        log.info(
            "serving /healthz /readyz /metrics /explain",
            extra=ctx(
                address=address,
                identity=self.identity,
                profiles=",".join(self.frameworks),
            ),
        )
        informers = asyncio.create_task(self.cache.run(), name="informers")
        try:
            await self.cache.wait_synced()
            log.info("caches synced", extra=ctx(nodes=self.snapshot.num_nodes, pods=len(self.snapshot.pods)))
            freeze_cache_objects()
            scheduling = functools.partial(self.loops.run, "scheduling", self.scheduler.run)
            if self.elector is None:
                await scheduling()
            else:
                election = self.options.leader_election
                log.info("standing for leader election", extra=ctx(lease=f"{election.namespace}/{election.name}"))
                await self.elector.run(scheduling)
        finally:
            informers.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await informers
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.reporter.drain(), timeout=5)
            await runner.cleanup()
            await self.event_http.close()
            if self.election_http is not None:
                await self.election_http.close()


async def run_until_signalled(options: SchedulerOptions, config: KubeSchedulerConfiguration) -> None:
    relax_gc_for_caches()
    pause_gc_until_frozen(asyncio.get_running_loop())  # until the caches are synced (`SchedulerProcess.run`)
    try:
        http = await KubeHTTP.connect(
            options.kubeconfig,
            user_agent="loadline-scheduler",
            limiter=TokenBucket(options.client_qps, options.client_burst),
        )
    except Exception as exc:  # kubernetes' ConfigException, a bad file: the message says which
        where = options.kubeconfig or "$KUBECONFIG, ~/.kube/config or the in-cluster service account"
        raise StartupError(f"cannot load API server credentials from {where}: {exc}") from None
    try:
        process = SchedulerProcess(options, config, http)
        main = asyncio.current_task()
        loop = asyncio.get_running_loop()
        assert main is not None
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):  # not in the main thread
                loop.add_signal_handler(sig, main.cancel)
        try:
            await process.run()
        except asyncio.CancelledError:
            log.info("shutting down")
    finally:
        await http.close()
