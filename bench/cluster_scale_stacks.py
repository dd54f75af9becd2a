"""The control-plane stacks bench/cluster_scale_bench.py compares, each started as it runs in a cluster.

- `loadline`: the chart's manager, descheduler and scheduler, each `loadline <component>` with the args and config
  files `helm template` renders for it (deploy/helm/loadline, one replica each; leader election: see below);
  only what a host process needs is changed: the listen address and ports (loopback, free ports), the config files'
  path (the rendered ConfigMaps written under the plane's root), a kubeconfig. The manager's admission webhooks are
  off (`manager.webhook.enabled=false`): the API server here has no route to a Service, and koord-manager runs
  without its webhooks too.
- `loadline-extender` (second mode): the same manager and descheduler; the stock kube-scheduler calling the chart's
  `loadline extender` (README "Keeping the stock kube-scheduler").
- `koordinator`: Koordinator v1.8.0's koord-manager (every controller), koord-scheduler (kube's default plugins +
  LoadAwareScheduling with its default args) and koord-descheduler (LowNodeLoad + MigrationController with the
  thresholds of Loadline's chart), client rate limits at their defaults.
- `kube-scheduler`: the stock kube-scheduler alone (default profile and client limits), the reference.

Every stack runs its components with their own defaults for the client's rate limit (kube-scheduler's qps 50 / burst
100; Loadline's are the same), not scheduler_perf's 5,000: this is the cost of the system as deployed.

Leader election (`leader_elect`) is the bench's choice for every stack alike, off by default: one replica needs no
election, and on this oversubscribed machine (load 14 on 2 cores) a 5 s lease renewal times out. koord-scheduler
(its renewal queued behind bindings in its client's rate limiter) and koord-manager lost their Leases and exited
mid-run at 1,000 nodes. With it on, each component adds about one Lease get and update every 2 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from tests.harness.build import KUBERNETES_VERSION
from tests.harness.controlplane import REPO_ROOT, ControlPlane
from tests.harness.processes import Component, free_port, http_ok, wait_until

CHART = REPO_ROOT / "deploy" / "helm" / "loadline"
RELEASE_NAMESPACE = "loadline-system"
LOADLINE_SCHEDULER_NAME = "loadline-scheduler"
KUBE_SCHEDULER_NAME = "default-scheduler"
KOORD_SCHEDULER_NAME = "koord-scheduler"
EXTENDER_WEIGHT = 5  # README's extender configuration

Obj = dict[str, Any]


@dataclass
class ChartRender:
    """What `helm template` renders for the bench: container args per component, ConfigMaps, other objects."""

    args: dict[str, list[str]]  # component -> container args
    config_maps: dict[str, dict[str, str]]  # name -> data
    objects: list[Obj]  # PriorityClasses, the slo-controller-config ConfigMap

    @property
    def descheduler_config(self) -> Obj:
        loaded = yaml.safe_load(self.config_maps["loadline-descheduler-config"]["descheduler.yaml"])
        return dict(loaded)


def render_chart(
    plane: ControlPlane, *, abnormalities: int, extender: bool, descheduling_interval: str = ""
) -> ChartRender:
    """The chart with one replica per component, webhooks off, the descheduler's anomaly rounds `abnormalities`
    (and its interval `descheduling_interval`, e.g. "5s", when not the chart's)."""
    interval = ["--set", f"descheduler.lowNodeLoad.deschedulingInterval={descheduling_interval}"]
    argv = [str(plane.binary("helm")), "template", "loadline", str(CHART), "-n", RELEASE_NAMESPACE,
            f"--kube-version={KUBERNETES_VERSION}", "--set", "manager.webhook.enabled=false",
            "--set", f"extender.enabled={str(extender).lower()}",
            "--set", f"descheduler.lowNodeLoad.anomalyCondition.consecutiveAbnormalities={abnormalities}",
            *(a for c in ("manager", "scheduler", "descheduler", "extender") for a in ("--set", f"{c}.replicas=1")),
            *(interval if descheduling_interval else [])]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env={"HOME": str(plane.root)}).stdout
    render = ChartRender({}, {}, [])
    for doc in yaml.safe_load_all(out):
        if not doc:
            continue
        kind, name = doc["kind"], doc["metadata"]["name"]
        if kind == "Deployment":
            container = doc["spec"]["template"]["spec"]["containers"][0]
            render.args[container["name"]] = [str(a) for a in container.get("args") or []]
        elif kind == "ConfigMap":
            render.config_maps[name] = dict(doc.get("data") or {})
            if name == "slo-controller-config":
                render.objects.append(doc)
        elif kind == "PriorityClass":
            render.objects.append(doc)
    return render


def set_report_interval(render: ChartRender, *, report_seconds: float, aggregate_seconds: float) -> None:
    """The colocation strategy's metricReportIntervalSeconds and metricAggregateDurationSeconds (the NodeMetric spec
    the manager writes, which the agents follow) where the bench's differ from the chart's (Koordinator's 60 and
    300): the smoke shape reports every few seconds, and a manager would otherwise set every node back to 60 s."""
    data = render.config_maps["slo-controller-config"]
    colocation = json.loads(data.get("colocation-config") or "{}")
    colocation |= {"metricReportIntervalSeconds": int(report_seconds) or 1,
                   "metricAggregateDurationSeconds": int(aggregate_seconds) or 1}  # fmt: skip
    data["colocation-config"] = json.dumps(colocation)
    for obj in render.objects:
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == "slo-controller-config":
            obj["data"] = dict(data)


def host_argv(plane: ControlPlane, render: ChartRender, component: str, *, leader_elect: bool) -> tuple[list[str], int]:
    """The chart's args of `component` for a host process: loopback, a free port, config files from the ConfigMaps."""
    port = free_port()
    files = {key: value for data in render.config_maps.values() for key, value in data.items()}
    args = [f"--kubeconfig={plane.kubeconfig}"]
    for arg in render.args[component]:
        if arg.startswith("--bind-address="):
            args.append("--bind-address=127.0.0.1")
        elif arg.startswith("--port="):
            args.append(f"--port={port}")
        elif arg.startswith("--config=/etc/loadline/"):
            key = arg.rsplit("/", 1)[1]
            path = plane.root / f"chart-{key}"
            path.write_text(files[key])
            args.append(f"--config={path}")
        else:
            args.append(arg)
    if not leader_elect and component != "extender":  # (the extender is not elected)
        args.append("--no-leader-elect")
    return [sys.executable, "-m", "common.cli", component, *args], port


def start_chart_component(plane: ControlPlane, render: ChartRender, component: str, *, leader_elect: bool) -> Component:
    argv, port = host_argv(plane, render, component, leader_elect=leader_elect)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "POD_NAME": f"loadline-{component}-0"}
    process = Component(f"loadline-{component}", argv, plane.root / "logs" / f"loadline-{component}.log", env=env)
    process.start()
    plane.extra.append(process)
    wait_until(f"loadline {component} /readyz", lambda: http_ok(f"http://127.0.0.1:{port}/readyz"), 120,
               alive=[process])  # fmt: skip
    return process


def start_kube_scheduler(plane: ControlPlane, *, leader_elect: bool, extender_url: str = "") -> Component:
    """kube-scheduler, default profile and client limits (the Lease, when elected, in kube-system)."""
    extender = {"urlPrefix": extender_url, "filterVerb": "filter", "prioritizeVerb": "prioritize",
                "weight": EXTENDER_WEIGHT, "nodeCacheCapable": True, "httpTimeout": "5s"}  # fmt: skip
    extenders = [extender] if extender_url else []
    return plane.start_kube_scheduler(
        [{"schedulerName": KUBE_SCHEDULER_NAME}],
        name="kube-scheduler",
        clientConnection={"kubeconfig": str(plane.kubeconfig)},
        leaderElection={"leaderElect": leader_elect, "resourceNamespace": "kube-system",
                        "resourceName": "kube-scheduler"},
        extenders=extenders,
    )


# --------------------------------------------------------------------------- stacks
@dataclass
class Stack:
    """A scheduler's `schedulerName`, and the components of the stack in the order they start (name, start)."""

    name: str
    scheduler_name: str
    load_aware: bool  # its scheduler avoids hot nodes and its descheduler moves pods off them
    manager: bool  # something computes batch resources (batch pods request them; without, plain cpu/memory)
    starts: list[tuple[str, Callable[[], list[Component]]]] = field(default_factory=list)


def apply_chart_objects(plane: ControlPlane, render: ChartRender) -> None:
    """The release namespace, the chart's PriorityClasses (Koordinator's four) and its slo-controller-config."""
    plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RELEASE_NAMESPACE}}])
    plane.apply(render.objects)


def loadline_stack(plane: ControlPlane, render: ChartRender, *, extender: bool, leader_elect: bool) -> Stack:
    def start(component: str) -> Component:
        return start_chart_component(plane, render, component, leader_elect=leader_elect)

    def scheduler() -> list[Component]:
        if not extender:
            return [start("scheduler")]
        ext = start("extender")
        return [ext, start_kube_scheduler(plane, leader_elect=leader_elect, extender_url=_extender_url(ext))]

    return Stack(
        "loadline-extender" if extender else "loadline",
        KUBE_SCHEDULER_NAME if extender else LOADLINE_SCHEDULER_NAME,
        load_aware=True,
        manager=True,
        starts=[("manager", lambda: [start("manager")]),
                ("descheduler", lambda: [start("descheduler")]),
                ("scheduler", scheduler)],
    )  # fmt: skip


def _extender_url(process: Component) -> str:
    port = next(a.split("=", 1)[1] for a in process.argv if a.startswith("--port="))
    return f"http://127.0.0.1:{port}"


def koordinator_stack(plane: ControlPlane, render: ChartRender, *, abnormalities: int, leader_elect: bool) -> Stack:
    """koord-manager, koord-descheduler (the thresholds of Loadline's chart), koord-scheduler."""
    from tests.harness import koordinator

    loadline_descheduler = render.descheduler_config
    slo_controller_config = render.config_maps["slo-controller-config"]
    koordinator.install_koord_crds(plane)
    plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": koordinator.KOORD_NAMESPACE}},
                 {"apiVersion": "v1", "kind": "ConfigMap",  # the same colocation settings as Loadline's chart
                  "metadata": {"name": "slo-controller-config", "namespace": koordinator.KOORD_NAMESPACE},
                  "data": slo_controller_config}])  # fmt: skip
    scheduler_config = koordinator.scheduler_config(plane.kubeconfig, leader_elect=leader_elect)
    scheduler_config["clientConnection"] = {"kubeconfig": str(plane.kubeconfig)}  # its default limits
    thresholds = {k: loadline_descheduler[k] for k in ("lowThresholds", "highThresholds", "evictableNamespaces")}
    interval = float(str(loadline_descheduler.get("deschedulingInterval", "60s")).rstrip("s"))
    descheduler_args = {**thresholds, "anomalyCondition": {"consecutiveAbnormalities": abnormalities}}

    def descheduler() -> list[Component]:
        config = koordinator.descheduler_config(
            plane.kubeconfig, low=thresholds["lowThresholds"], high=thresholds["highThresholds"],
            interval_seconds=interval, dry_run=False, low_node_load_args=descheduler_args, leader_elect=leader_elect,
            lease_name="koord-descheduler")  # fmt: skip
        config.pop("clientConnection", None)
        config["clientConnection"] = {"kubeconfig": str(plane.kubeconfig)}
        return [koordinator.start_koord_descheduler(plane, config, verbosity=1)]

    return Stack(
        "koordinator", KOORD_SCHEDULER_NAME, load_aware=True, manager=True,
        starts=[("manager", lambda: [koordinator.start_koord_manager(plane, leader_elect=leader_elect, verbosity=1)]),
                ("descheduler", descheduler),
                ("scheduler", lambda: [koordinator.start_koord_scheduler(plane, scheduler_config, verbosity=1)])],
    )  # fmt: skip


def kube_stack(plane: ControlPlane, *, leader_elect: bool) -> Stack:
    return Stack("kube-scheduler", KUBE_SCHEDULER_NAME, load_aware=False, manager=False,
                 starts=[("scheduler", lambda: [start_kube_scheduler(plane, leader_elect=leader_elect)])])  # fmt: skip
