"""One node's pipeline: collectors → sampler → reporter → publisher.

The daemon is one pipeline over the real collectors, `--simulate` one per simulated node over a simulated
collector, `--once` one without a publisher. Everything a node needs between its collectors and the API server
is wired here, once; the callers own only what is not per node (the pod source, the HTTP client, the exporter's
server, their tasks).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agent.collectors.base import Collector, ReadsOnScrape
from agent.collectors.registry import CollectorContext, close_collectors
from agent.exporter import ExportInput, NodeSelfState, render_raw
from agent.report import Aggregates, NodeReporter, PodIdentity, ReportPolicy, build_status, current_devices
from agent.sampler import Sampler
from common.api.malformed import MalformedObjectError
from common.api.nodemetric import NodeMetricStatus
from common.version import __version__

if TYPE_CHECKING:
    from agent.config import AgentSettings
    from agent.prediction.node import NodePrediction
    from agent.publisher import NodeMetricCache, NodeMetricPublisher
    from common.kube.http import KubeHTTP

log = logging.getLogger("loadline.agent")
USER_AGENT = f"loadline-agent/{__version__}"


def local_node_name() -> str:
    """This machine's host name as a node name (lower case, DNS characters)."""
    import re
    import socket

    name = re.sub(r"[^a-z0-9.-]+", "-", socket.gethostname().lower()).strip("-.")
    return name[:253] or "localhost"


def base_policy(settings: AgentSettings) -> ReportPolicy:
    """The report policy of the configuration (a NodeMetric's spec may override it per node)."""
    return ReportPolicy(
        aggregate_duration_seconds=settings.aggregate_duration_seconds,
        report_interval_seconds=settings.report_interval_seconds,
        windows=tuple(settings.aggregate_windows),
        node_memory_collect_policy=settings.node_memory_collect_policy,
        pod_windows=settings.pod_window_metrics,
    )


def collector_context(settings: AgentSettings, pods: Callable[[], Any]) -> CollectorContext:
    return CollectorContext(
        proc_root=settings.proc_root,
        sys_root=settings.sys_root,
        cgroup_root=settings.cgroup_root,
        cgroup_parent=settings.cgroup_parent,
        pods=pods,
        psi=settings.psi,
        interval=settings.collect_interval_seconds,
        container_interval=settings.container_interval_seconds,
        netlink=settings.netlink,
    )


class NodePipeline:
    """Sampling, aggregation, the NodeMetric status and (optionally) its publishing, for one node."""

    def __init__(
        self,
        node_name: str,
        collectors: Sequence[Collector],
        *,
        pods: Callable[[], Mapping[str, PodIdentity]],
        policy: ReportPolicy,
        interval: float,
        min_aggregate_seconds: float = 60.0,
        min_report_seconds: float = 30.0,
    ) -> None:
        self.node_name = node_name
        self.collectors = list(collectors)
        self.pods = pods
        self.sampler = Sampler(
            self.collectors, interval=interval, windows=(policy.retention_seconds,), store_containers=False
        )
        self.reporter = NodeReporter(
            node_name,
            ring=lambda: self.sampler.ring,
            base_policy=policy,
            pods=pods,
            devices=lambda: current_devices(self.collectors),
            on_policy_change=self._policy_changed,
            min_aggregate_seconds=min_aggregate_seconds,
            min_report_seconds=min_report_seconds,
        )
        self.publisher: NodeMetricPublisher | None = None
        self.prediction: NodePrediction | None = None  # fills prodReclaimableMetric / prodPeakMetric when set
        self.last_aggregation_seconds = 0.0
        self._raw: tuple[int, bytes] | None = None  # (cycle, rendered raw series) for scrapes within one cycle
        self._on_scrape = [c for c in self.collectors if isinstance(c, ReadsOnScrape)]
        self._read_on_scrape_at = -1  # the cycle after which they were last read

    @classmethod
    def from_settings(
        cls,
        node_name: str,
        collectors: Sequence[Collector],
        settings: AgentSettings,
        pods: Callable[[], Mapping[str, PodIdentity]],
    ) -> NodePipeline:
        return cls(
            node_name,
            collectors,
            pods=pods,
            policy=base_policy(settings),
            interval=settings.collect_interval_seconds,
            min_aggregate_seconds=settings.spec_min_aggregate_duration_seconds,
            min_report_seconds=settings.spec_min_report_interval_seconds,
        )

    # -- publishing ----------------------------------------------------------------------------------------
    def attach_publisher(
        self,
        http: KubeHTTP,
        cache: NodeMetricCache,
        settings: AgentSettings,
        *,
        initial_delay_seconds: float | None = None,
        rng: random.Random | None = None,
    ) -> NodeMetricPublisher:
        """Write this node's NodeMetric status every report interval, following its spec if configured."""
        from agent.publisher import NodeMetricPublisher, spec_listener
        from common.ratelimit import TokenBucket

        reporter = self.reporter
        publisher = self.publisher = NodeMetricPublisher(
            http,
            self.node_name,
            self.status,
            interval=lambda: reporter.policy.report_interval_seconds,
            limiter=TokenBucket(settings.publish_qps, settings.publish_burst),
            cache=cache,
            create=settings.create_nodemetric,
            retry_initial_seconds=settings.retry_initial_seconds,
            retry_max_seconds=settings.retry_max_seconds,
            request_timeout_seconds=settings.request_timeout_seconds,
            initial_delay_seconds=initial_delay_seconds,
            rng=rng,
        )
        if settings.follow_nodemetric_spec:
            from common.kube.malformed import MalformedObjects

            malformed = MalformedObjects(("NodeMetric",))
            node = self.node_name

            def spec_problem(problem: MalformedObjectError | None) -> None:
                # The agent's policy for a spec it cannot read: the policy in force stays; counted once per version.
                if problem is None:
                    malformed.clear("NodeMetric", node)
                else:
                    malformed.report("NodeMetric", node, cache.get(node), problem)

            reporter.on_spec_problem = spec_problem
            cache.listen(self.node_name, spec_listener(reporter.apply_spec))
            existing = cache.get(self.node_name)
            if existing is not None:
                reporter.apply_spec(existing.get("spec"))
        cache.listen(self.node_name, publisher.on_object)
        return publisher

    def _policy_changed(self, policy: ReportPolicy) -> None:
        if self.sampler.ensure_retention(policy.retention_seconds):
            log.info(
                "node %s: sample store grown to %d slots for %gs of history",
                self.node_name,
                self.sampler.ring.slots,
                policy.retention_seconds,
            )
        if self.publisher is not None:
            self.publisher.wake()  # the report interval may have shortened

    # -- reading -------------------------------------------------------------------------------------------
    def aggregate(self, now: float | None = None) -> Aggregates:
        agg = self.reporter.aggregate(time.monotonic() if now is None else now)
        self.last_aggregation_seconds = agg.duration_seconds
        return agg

    def status_model(self) -> NodeMetricStatus:
        """The NodeMetric status as it would be written now."""
        agg = self.aggregate()
        status = build_status(agg, self.pods(), devices=self.reporter.devices())
        if self.prediction is not None:
            self.prediction.fill(status, agg)
        return status

    def status(self) -> dict[str, Any]:
        """`status_model` in wire form (what the publisher writes)."""
        return self.status_model().to_wire()

    def export_input(self, agg: Aggregates | None, *, node_label: str = "") -> ExportInput:
        return ExportInput(raw=list(self.sampler.last_samples), aggregates=agg, pods=dict(self.pods()), node=node_label)

    def read_on_scrape(self) -> None:
        """Before a scrape renders the raw series (on the loop, as a cycle): the series read only for scrapes
        (containers, by default) are read now, at most once per cycle."""
        cycle = self.sampler.cycles
        if self._read_on_scrape_at == cycle or not cycle:
            return
        self._read_on_scrape_at = cycle
        now = time.monotonic()
        for collector in self._on_scrape:
            try:
                block = collector.read_on_scrape(now)
            except Exception as exc:  # the scrape serves the last cycle's values instead
                self.sampler.stats[collector.name].failures += 1
                log.warning("node %s: %s: reading at scrape time failed: %s", self.node_name, collector.name, exc)
                continue
            if block is not None:
                self.sampler.replace_block(collector, block)
                self._raw = None

    def render_raw(self, *, node_label: str = "") -> bytes:
        """The raw series of the last collect cycle (/metrics), rendered at most once per cycle."""
        cycle = self.sampler.cycles
        cached = self._raw
        if cached is not None and cached[0] == cycle:
            return cached[1]
        body = render_raw([self.export_input(None, node_label=node_label)])
        self._raw = (cycle, body)
        return body

    def self_state(self) -> NodeSelfState:
        return NodeSelfState(self.node_name, self.sampler, self.publisher)

    def close(self) -> None:
        close_collectors(self.collectors)
