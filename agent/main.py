"""`loadline agent`: the node agent.

    loadline agent --node-name NODE [--kubeconfig FILE]   # a daemon for one node (in a pod: NODE_NAME)
    loadline agent --standalone                            # no cluster: /metrics, /nodemetric on 127.0.0.1
    loadline agent --once                                  # no cluster: sample this machine ~10 s, print a table
    loadline agent --simulate                              # NodeMetrics for many fake (kwok) nodes

The daemon samples every collect interval on its own task, so nothing the API server does can leave a gap in
the history; aggregates for /metrics are prepared on the aggregation cadence; the NodeMetric status is
built and written every report interval (`agent.publisher`). Settings: `agent.config`.
"""

from __future__ import annotations

import argparse
import asyncio
import enum
import logging
import os
import sys
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agent import malloc
from agent.collectors.files import COMPILED_READER
from agent.collectors.registry import build_collectors
from agent.config import FLAG_ALIASES, RENAMED, AgentSettings, flag_name, load
from agent.loops import until_signalled
from agent.pipeline import USER_AGENT, NodePipeline, collector_context, local_node_name
from agent.podwatch import CgroupPodDiscovery, LocalPods, PodWatch
from agent.process import AgentProcess
from agent.report import NodeReporter
from agent.sampler import Sampler
from common.api.constants import SLO_API_VERSION
from common.config import ConfigError
from common.flags import add_deprecated_alias
from common.kube.kubeconfig import KubeConfigError

if typing.TYPE_CHECKING:
    from agent.publisher import NodeMetricCache, NodeMetricPublisher
    from agent.qos.enforcer import QoSEnforcer
    from common.kube.http import KubeHTTP
    from common.kube.reflector import Reflector
from common.logging import setup_logging

log = logging.getLogger("loadline.agent")


class NodeAgent(AgentProcess):
    """The daemon for one node (one `NodePipeline`); usable in-process (tests) through `start()` / `stop()`."""

    def __init__(self, settings: AgentSettings, *, http: KubeHTTP | None = None, standalone: bool = False) -> None:
        if settings.node_name is None and not standalone:
            raise ValueError("the agent needs a node name")
        super().__init__(settings, http)
        self.standalone = standalone  # no API server: pods from cgroups (and the kubelet), nothing published
        self.node_name: str = settings.node_name or local_node_name()
        self.cache: NodeMetricCache | None = None
        self.qos: QoSEnforcer | None = None
        self.pipeline: NodePipeline | None = None

    def exported(self) -> list[tuple[NodePipeline, str]]:
        return [(self.pipeline, "")] if self.pipeline is not None else []

    @property
    def sampler(self) -> Sampler:
        assert self.pipeline is not None, "not started"
        return self.pipeline.sampler

    @property
    def reporter(self) -> NodeReporter:
        assert self.pipeline is not None, "not started"
        return self.pipeline.reporter

    @property
    def publisher(self) -> NodeMetricPublisher | None:
        return self.pipeline.publisher if self.pipeline is not None else None

    async def start(self) -> None:
        s = self.settings
        pods: PodWatch | LocalPods
        if self.standalone:
            discovery = CgroupPodDiscovery(s.cgroup_root, s.cgroup_parent, pod_logs_dir=s.pod_logs_dir)
            pods = self.local_pods = LocalPods(discovery, s.kubelet_url)
            http = None
        else:
            if self.http is None:
                from common.kube.http import KubeHTTP  # here: a standalone agent needs no API client (aiohttp)

                try:
                    self.http = await KubeHTTP.connect(s.kubeconfig, user_agent=USER_AGENT)
                except KubeConfigError:
                    raise
                except Exception as exc:  # e.g. a kubeconfig that is not YAML: still a configuration error
                    where = s.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
                    raise KubeConfigError(f"kubeconfig {where}: {type(exc).__name__}: {exc}") from exc
            http = self.http
            pods = self.podwatch = PodWatch(http, self.node_name, max_backoff_seconds=s.retry_max_seconds)
        collectors = build_collectors(collector_context(s, pods.pods), s.collectors)
        pipeline = self.pipeline = NodePipeline.from_settings(self.node_name, collectors, s, pods.infos)
        if s.publish and http is not None:
            from agent.publisher import NodeMetricCache

            self.cache = NodeMetricCache(http, name=self.node_name, max_backoff_seconds=s.retry_max_seconds)
            pipeline.attach_publisher(http, self.cache, s)
        if s.prediction and http is not None:
            from agent.prediction.node import NodePrediction, predictor_settings
            from agent.prediction.predictor import PeakPredictor

            # Peak prediction: prodReclaimableMetric / prodPeakMetric in the NodeMetric (docs/prediction.md).
            pipeline.prediction = NodePrediction(
                PeakPredictor(predictor_settings(s)),
                self.node_name,
                http,
                pod_objects=lambda: self.podwatch.index.objects(self.node_name),
                request_timeout_seconds=s.request_timeout_seconds,
            )
        if s.qos_enforcement and http is not None:
            from agent.qos.enforcer import QoSEnforcer
            from agent.qos.usage import usage_from_sampler

            # BE suppress and evict: off on the node until its NodeSLO sets resourceUsedThresholdWithBE.enable;
            # batch isolation: on from the start (s.batch_isolation).
            self.qos = QoSEnforcer(
                self.node_name,
                http,
                s.cgroup_root,
                lambda: usage_from_sampler(pipeline.sampler),
                cgroup_parent=s.cgroup_parent,
                sys_root=s.sys_root,
                interval_seconds=s.collect_interval_seconds,
                pods=lambda: self.podwatch.index.objects(self.node_name),
                batch_isolation=s.batch_isolation,
            )
        log.info(
            "%s for node %s: collect every %gs, %s, collectors %s, cgroup files read %s",
            "standalone agent (no API server, nothing published)" if self.standalone else "agent",
            self.node_name,
            s.collect_interval_seconds,
            pipeline.reporter.policy.describe(),
            ",".join(c.name for c in collectors),
            "by the C reader" if COMPILED_READER else "in Python (agent/collectors/_cgread.c was not built)",
        )
        await self.start_exporter(
            "127.0.0.1" if self.standalone else "0.0.0.0",
            raw=self.render_raw,
            read_on_scrape=pipeline.read_on_scrape,
            status=self._status_view,
        )
        self.spawn_loops()
        self.spawn(pods.run(), "pod watch" if http is not None else "local pods")
        if self.cache is not None and pipeline.publisher is not None:
            self.spawn(self.cache.run(), "nodemetric watch")
            self.spawn(pipeline.publisher.run(), "publisher")
        if self.qos is not None:
            self.spawn(self.qos.run(), "qos enforcement")
        if pipeline.prediction is not None:
            self.spawn(pipeline.prediction.run(lambda: pipeline.sampler.ring), "peak prediction")

    def watches(self) -> list[Reflector]:
        """The agent's list-watches: its node's pods, its NodeMetric, the QoS enforcer's Node and NodeSLO (and its
        own pod watch when it has one)."""
        found: list[Reflector] = []
        if (podwatch := getattr(self, "podwatch", None)) is not None:
            found.append(podwatch.reflector)
        if self.cache is not None:
            found.append(self.cache.reflector)
        if self.qos is not None:
            found.extend(self.qos.watches())
        return found

    def _stalled_watch(self, liveness: bool) -> str | None:
        watches = self.watches()
        if not watches:  # standalone: no API server, and no API client loaded (aiohttp)
            return None
        from common.kube.reflector import LIVENESS_STALL_SECONDS, STALL_SECONDS, stalled_watch

        return stalled_watch(watches, LIVENESS_STALL_SECONDS if liveness else STALL_SECONDS)

    def healthy(self) -> tuple[bool, str]:
        """Also fails while a watch makes no progress for LIVENESS_STALL_SECONDS, as the manager's (issue 29): the
        agent would enforce QoS and report pods from a stale view; a restart gets a fresh connection."""
        ok, why = super().healthy()
        if ok and (problem := self._stalled_watch(liveness=True)) is not None:
            return False, problem
        return ok, why

    def ready(self) -> tuple[bool, str]:
        """Also fails while a watch makes no progress for STALL_SECONDS (common/kube/reflector.py)."""
        if (problem := self._stalled_watch(liveness=False)) is not None:
            return False, problem
        return super().ready()

    async def _status_view(self) -> dict[str, Any]:
        assert self.pipeline is not None
        status = self.pipeline.status()  # on the loop: aggregation reads the ring sampling writes
        return {
            "apiVersion": SLO_API_VERSION,
            "kind": "NodeMetric",
            "metadata": {"name": self.node_name},
            "status": status,
        }

    def release(self) -> None:
        if self.pipeline is not None:
            self.pipeline.close()
        if self.standalone and self.pipeline is not None:  # the cgroup tree's inotify descriptor
            self.local_pods.discovery.close()


async def run_daemon(settings: AgentSettings, *, standalone: bool = False) -> int:
    malloc.limit_arenas()
    agent = NodeAgent(settings, standalone=standalone)
    try:
        await agent.start()
    except BaseException:
        await agent.stop()
        raise
    try:
        await until_signalled()
        log.info("stopping")
    finally:
        await agent.stop()
    return 0


# ------------------------------------------------------------------------------------------------ CLI
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loadline agent",
        description="Loadline node agent: samples cgroups and /proc, publishes the node's NodeMetric, serves /metrics.",
        epilog="Every setting is also an environment variable LOADLINE_AGENT_<SETTING> and a key of the --config "
        "YAML file; flags win over the environment, which wins over the file. Durations: seconds or 30s, 5m. "
        "Without any cluster configuration (no --kubeconfig, $KUBECONFIG, ~/.kube/config or in-cluster service "
        "account) the agent runs standalone.",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--standalone",
        action="store_true",
        help="no API server: sample this machine and serve /metrics, /healthz and /nodemetric (JSON of the "
        "NodeMetric it would write) on 127.0.0.1, naming pods by the cgroups and the kubelet's pod list",
    )
    mode.add_argument("--once", action="store_true", help="no cluster: sample this machine, print what it measured")
    mode.add_argument(
        "--simulate",
        action="store_true",
        help="publish NodeMetrics for many fake (kwok) nodes; pods may declare loadline.io/simulated-cpu, "
        "loadline.io/simulated-memory and loadline.io/simulated-burstiness (see agent/simulate.py)",
    )
    parser.add_argument("--config", metavar="FILE", help="YAML file of settings (also LOADLINE_AGENT_CONFIG)")
    for name, field in AgentSettings.model_fields.items():
        flags = [flag_name(name), *FLAG_ALIASES.get(name, ())]
        default = field.get_default(call_default_factory=True)
        help_text = field.description or name.replace("_", " ")
        choices = _choices(name, field.annotation)
        if choices:
            help_text += f"; choices: {', '.join(choices)}"
        if default is not None and "unset:" not in help_text:
            help_text += f" (default: {_show(default) or repr('')})"
        if field.annotation is bool:
            parser.add_argument(
                *flags, dest=name, nargs="?", const="true", default=None, metavar="true|false", help=help_text
            )
        else:
            parser.add_argument(*flags, dest=name, default=None, metavar=name.upper(), help=help_text)
    for old, new in RENAMED.items():
        add_deprecated_alias(parser, flag_name(old), flag_name(new))
    return parser


def _choices(name: str, annotation: Any) -> list[str]:
    if name == "collectors":
        from agent.collectors.registry import COLLECTORS

        return [f"{spec.name}{'' if spec.enabled_by_default else ' (off by default)'}" for spec in COLLECTORS]
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [str(member.value) for member in list(annotation)]
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return [str(a) for a in args]
    return []


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(_show(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if hasattr(value, "value"):
        return str(value.value)
    return str(value)


def cluster_configured(settings: AgentSettings, environ: Mapping[str, str] | None = None) -> bool:
    """A kubeconfig named or found, or an in-cluster service account (what `KubeHTTP.connect` would use)."""
    env = os.environ if environ is None else environ
    if settings.kubeconfig or env.get("KUBECONFIG") or env.get("KUBERNETES_SERVICE_HOST"):
        return True
    return bool((Path.home() / ".kube" / "config").is_file())


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    flags = {name: getattr(args, name) for name in AgentSettings.model_fields}
    config_file = args.config or os.environ.get("LOADLINE_AGENT_CONFIG")
    try:
        settings = load(flags, file=config_file)
    except ConfigError as exc:
        print(f"loadline agent: {exc}", file=sys.stderr)
        return 2
    standalone = args.standalone or not (args.once or args.simulate or cluster_configured(settings))
    if settings.node_name is None and not (args.once or args.simulate or standalone):
        print(
            "loadline agent: invalid configuration:\n"
            "  node_name: required (set --node-name, LOADLINE_AGENT_NODE_NAME or NODE_NAME; "
            "or use --standalone or --once)",
            file=sys.stderr,
        )
        return 2
    setup_logging(settings.log_level, json_output=settings.log_json)
    try:
        if args.once:
            from agent.once import run_once

            return asyncio.run(run_once(settings))
        if args.simulate:
            from agent.simulate import run_simulation

            return asyncio.run(run_simulation(settings))
        return asyncio.run(run_daemon(settings, standalone=standalone))
    except KeyboardInterrupt:
        return 130
    except KubeConfigError as exc:
        print(
            f"loadline agent: invalid configuration:\n  {exc}\n"
            "  pass --kubeconfig FILE or set $KUBECONFIG (or LOADLINE_AGENT_KUBECONFIG); in a pod, the service "
            "account is used; without a cluster: loadline agent --standalone",
            file=sys.stderr,
        )
        return 2
    except OSError as exc:
        print(f"loadline agent: {exc}", file=sys.stderr)
        return 1
