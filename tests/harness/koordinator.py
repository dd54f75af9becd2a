"""Koordinator's own koord-scheduler, koord-descheduler and koord-manager, run against a harness ControlPlane.

The binaries come from `koordbuild` (Koordinator v1.8.0, cached like the Kubernetes components). Each start function
installs the Koordinator CRDs Loadline does not define itself (Reservation, Device, PodMigrationJob, ...: without them
koord-scheduler's informers never sync), writes the component's config under the plane's root, starts it as a
`Component` registered in `plane.extra` (so `plane.stop()` and `plane.log_report()` cover it) and waits until it
serves. Loadline's own NodeMetric/NodeSLO/PodGroup CRDs stay in place: Koordinator reads the objects Loadline's CRDs
admit, which is the compatibility under test.

    with start_koord_scheduler(plane) as koord:          # schedulerName "koord-scheduler", LoadAware on
        ...                                                # pods with spec.schedulerName = koord.scheduler_name
    start_koord_scheduler(plane, load_aware_args={"usageThresholds": {"cpu": 70}})
    start_koord_scheduler(plane, config=my_kube_scheduler_configuration)   # a whole config of your own
    start_koord_descheduler(plane, low={"cpu": 45}, high={"cpu": 75}, dry_run=True)
    start_koord_manager(plane)                             # NodeMetric + NodeSLO per node, batch resources on Nodes
    start_koord_manager_webhook(plane, {"matchLabels": {...}})   # its pod webhooks (Colocation Profile) on loopback
    start_koordlet(plane, "<node>-koordlet")               # koordlet for a view of the real node (see below)

Every function returns a `KoordProcess`: a `Component` (stop/kill/log_tail/alive) that is also a context manager
(leaving the block stops it). `process.pid` is the process to sample for CPU time. Leader election is off unless
asked for (`leader_elect=True`: the Lease `<name>` in `koordinator-system`, see `lease_holder`). The pure parts
(configs, argv, which CRDs are extra) are plain functions, unit-tested in tests/unit/test_koordinator_harness.py.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml

from tests.harness import koordbuild
from tests.harness.controlplane import CRDS_DIR, ControlPlane
from tests.harness.processes import Component, free_port, http_ok, wait_until

KOORD_NAMESPACE = "koordinator-system"
KOORD_SCHEDULER_NAME = "koord-scheduler"
SCHEDULER_CONFIG_API = "kubescheduler.config.k8s.io/v1"
DESCHEDULER_CONFIG_API = "descheduler/v1alpha2"
# Loadline's LoadAwareSchedulingArgs defaults are Koordinator's chart values: the same args on both sides.
DEFAULT_LOAD_AWARE_ARGS: dict[str, Any] = {
    "filterExpiredNodeMetrics": True,
    "nodeMetricExpirationSeconds": 180,
    "resourceWeights": {"cpu": 1, "memory": 1},
    "usageThresholds": {"cpu": 65, "memory": 95},
    "estimatedScalingFactors": {"cpu": 85, "memory": 70},
}

Obj = dict[str, Any]


@dataclass
class KoordProcess(Component):
    """A running Koordinator component; `url` is its health (scheduler, descheduler) or metrics (manager) URL."""

    url: str = ""
    scheduler_name: str = ""
    config_path: Path | None = None
    extra_ports: dict[str, int] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError(f"{self.name} was never started")
        return self.proc.pid

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


# --- pure: which CRDs, which configs -------------------------------------------------------------------------
def crd_names(directory: Path) -> dict[str, Path]:
    """metadata.name -> file of every CustomResourceDefinition in a directory of YAML files."""
    found: dict[str, Path] = {}
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                found[str(doc["metadata"]["name"])] = path
    return found


def extra_crds(koordinator: Path, loadline: Path = CRDS_DIR) -> list[Path]:
    """Koordinator's CRD files for the kinds Loadline does not define (Loadline's own definitions stay in force)."""
    ours = crd_names(loadline)
    return sorted({path for name, path in crd_names(koordinator).items() if name not in ours})


def scheduler_config(
    kubeconfig: Path,
    *,
    scheduler_name: str = KOORD_SCHEDULER_NAME,
    load_aware_args: Mapping[str, Any] | None = None,
    load_aware_weight: int = 1,
    only_load_aware_score: bool = False,
    leader_elect: bool = False,
    lease_name: str = KOORD_SCHEDULER_NAME,
) -> Obj:
    """A KubeSchedulerConfiguration: the kube default plugins plus LoadAwareScheduling in filter, score and reserve
    (Koordinator's chart). `only_load_aware_score` disables every other score plugin, so the node koord-scheduler
    picks for a lone pod is LoadAware's own best (ties aside)."""
    score: Obj = {"enabled": [{"name": "LoadAwareScheduling", "weight": load_aware_weight}]}
    if only_load_aware_score:
        score["disabled"] = [{"name": "*"}]
    args = {**DEFAULT_LOAD_AWARE_ARGS, **(load_aware_args or {})}
    return {
        "apiVersion": SCHEDULER_CONFIG_API,
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 5000, "burst": 5000},
        "leaderElection": {
            "leaderElect": leader_elect,
            "resourceLock": "leases",
            "resourceName": lease_name,
            "resourceNamespace": KOORD_NAMESPACE,
        },
        "profiles": [
            {
                "schedulerName": scheduler_name,
                "plugins": {
                    "filter": {"enabled": [{"name": "LoadAwareScheduling"}]},
                    "score": score,
                    "reserve": {"enabled": [{"name": "LoadAwareScheduling"}]},
                },
                "pluginConfig": [
                    {
                        "name": "LoadAwareScheduling",
                        "args": {"apiVersion": SCHEDULER_CONFIG_API, "kind": "LoadAwareSchedulingArgs", **args},
                    }
                ],
            }
        ],
    }


def descheduler_config(
    kubeconfig: Path,
    *,
    low: Mapping[str, int],
    high: Mapping[str, int],
    interval_seconds: float = 5,
    dry_run: bool = False,
    low_node_load_args: Mapping[str, Any] | None = None,
    leader_elect: bool = False,
    lease_name: str = "koord-descheduler",
) -> Obj:
    """A DeschedulerConfiguration running LowNodeLoad (balance) with MigrationController evicting directly through
    the Eviction API (no Reservation, so no koord-scheduler needed). `consecutiveAbnormalities: 1` makes a node
    that is high once a source, like Loadline's LowNodeLoad without anomaly damping."""
    args: Obj = {
        "apiVersion": DESCHEDULER_CONFIG_API,
        "kind": "LowNodeLoadArgs",
        "lowThresholds": dict(low),
        "highThresholds": dict(high),
        "anomalyCondition": {"consecutiveAbnormalities": 1},
        "evictableNamespaces": {"exclude": ["kube-system", KOORD_NAMESPACE]},
        **(low_node_load_args or {}),
    }
    return {
        "apiVersion": DESCHEDULER_CONFIG_API,
        "kind": "DeschedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 100, "burst": 200},
        "leaderElection": {
            "leaderElect": leader_elect,
            "resourceLock": "leases",
            "resourceName": lease_name,
            "resourceNamespace": KOORD_NAMESPACE,
        },
        "deschedulingInterval": f"{interval_seconds}s",
        "dryRun": dry_run,
        "profiles": [
            {
                "name": "koord-descheduler",
                "plugins": {
                    "balance": {"enabled": [{"name": "LowNodeLoad"}]},
                    "evict": {"disabled": [{"name": "*"}], "enabled": [{"name": "MigrationController"}]},
                    "filter": {"disabled": [{"name": "*"}], "enabled": [{"name": "MigrationController"}]},
                },
                "pluginConfig": [
                    {
                        "name": "MigrationController",
                        "args": {
                            "apiVersion": DESCHEDULER_CONFIG_API,
                            "kind": "MigrationControllerArgs",
                            "evictionPolicy": "Eviction",
                            "defaultJobMode": "EvictDirectly",
                        },
                    },
                    {"name": "LowNodeLoad", "args": args},
                ],
            }
        ],
    }


def manager_argv(
    binary: Path,
    kubeconfig: Path,
    *,
    metrics_port: int,
    health_port: int,
    controllers: Sequence[str] = ("*",),
    leader_elect: bool = False,
    verbosity: int = 2,
    webhooks: bool = False,
) -> list[str]:
    """koord-manager with its ports on loopback, without webhooks (no certificates to serve) unless `webhooks`."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--enable-leader-election={str(leader_elect).lower()}",
        f"--leader-election-namespace={KOORD_NAMESPACE}",
        f"--feature-gates=WebhookFramework={str(webhooks).lower()}",
        f"--config-namespace={KOORD_NAMESPACE}",
        f"--controllers={','.join(controllers)}",
        f"--metrics-addr=127.0.0.1:{metrics_port}",
        f"--health-probe-addr=127.0.0.1:{health_port}",
        "--enable-pprof=false",
        f"--v={verbosity}",
    ]


# --- the cluster side ----------------------------------------------------------------------------------------
def install_koord_crds(plane: ControlPlane) -> list[Path]:
    """Apply Koordinator's CRDs for the kinds Loadline lacks (once per plane) and the `koordinator-system`
    namespace; returns the files applied."""
    files = extra_crds(koordbuild.crd_dir())
    marker = plane.root / ".koord-crds"
    if not marker.exists():
        plane.kubectl("apply", "--server-side", *(arg for path in files for arg in ("-f", str(path))))
        plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KOORD_NAMESPACE}}
        plane.apply(namespace)
        marker.write_text(json.dumps([str(p) for p in files]))
    return files


def lease_holder(plane: ControlPlane, name: str) -> str:
    """holderIdentity of the Lease `name` in koordinator-system ('' when none)."""
    out = plane.kubectl("get", "lease", "-n", KOORD_NAMESPACE, name, "-o", "json", check=False)
    if out.returncode != 0:
        return ""
    return str(json.loads(out.stdout).get("spec", {}).get("holderIdentity") or "")


def _launch(plane: ControlPlane, process: KoordProcess, ready: str, timeout: float) -> KoordProcess:
    process.start()
    plane.extra.append(process)
    try:
        wait_until(ready, lambda: http_ok(process.url, insecure=True), timeout, alive=[process])
    except BaseException:
        process.stop()
        raise
    return process


def _config_and_serving_flags(
    plane: ControlPlane, name: str, document: dict[str, Any]
) -> tuple[Path, int, int, list[str]]:
    """Write `document` (pointed at the plane's kubeconfig) as the component's config file; pick its ports.
    Returns (config path, secure port, insecure port, flags) for koord-scheduler and koord-descheduler alike."""
    document["clientConnection"] = {**document.get("clientConnection", {}), "kubeconfig": str(plane.kubeconfig)}
    path = plane.root / f"{name}-config.yaml"
    path.write_text(yaml.safe_dump(document))
    port, insecure = free_port(), free_port()
    flags = [
        f"--config={path}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        # the deprecated insecure port still binds (default 10251, shared machine-wide) unless moved
        "--address=127.0.0.1",
        f"--port={insecure}",
    ]
    return path, port, insecure, flags


def start_koord_scheduler(
    plane: ControlPlane,
    config: Mapping[str, Any] | None = None,
    *,
    name: str = KOORD_SCHEDULER_NAME,
    load_aware_args: Mapping[str, Any] | None = None,
    only_load_aware_score: bool = False,
    leader_elect: bool = False,
    verbosity: int = 2,
    extra_args: Sequence[str] = (),
    timeout: float = 90,
) -> KoordProcess:
    """koord-scheduler serving pods of `spec.schedulerName == name`; healthy on return. `config`: a whole
    KubeSchedulerConfiguration instead of `scheduler_config(...)` (its clientConnection.kubeconfig is set)."""
    install_koord_crds(plane)
    document = dict(config) if config is not None else scheduler_config(
        plane.kubeconfig, scheduler_name=name, load_aware_args=load_aware_args,
        only_load_aware_score=only_load_aware_score, leader_elect=leader_elect, lease_name=name,
    )  # fmt: skip
    profiles = document.get("profiles") or [{}]
    path, port, insecure, serving = _config_and_serving_flags(plane, name, document)
    process = KoordProcess(
        name,
        [
            str(koordbuild.ensure(["koord-scheduler"])["koord-scheduler"]),
            *serving,
            "--authentication-skip-lookup=true",
            f"--v={verbosity}",
            *extra_args,
        ],
        plane.root / "logs" / f"{name}.log",
        url=f"https://127.0.0.1:{port}/healthz",
        scheduler_name=str(profiles[0].get("schedulerName", "default-scheduler")),
        config_path=path,
        extra_ports={"secure": port, "insecure": insecure},
    )
    return _launch(plane, process, f"{name} /healthz", timeout)


def start_koord_descheduler(
    plane: ControlPlane,
    config: Mapping[str, Any] | None = None,
    *,
    name: str = "koord-descheduler",
    low: Mapping[str, int] | None = None,
    high: Mapping[str, int] | None = None,
    interval_seconds: float = 5,
    dry_run: bool = False,
    low_node_load_args: Mapping[str, Any] | None = None,
    leader_elect: bool = False,
    verbosity: int = 3,
    timeout: float = 90,
) -> KoordProcess:
    """koord-descheduler with LowNodeLoad (thresholds in percent; Koordinator's chart values by default)."""
    install_koord_crds(plane)
    document = dict(config) if config is not None else descheduler_config(
        plane.kubeconfig, low=low or {"cpu": 45, "memory": 55}, high=high or {"cpu": 75, "memory": 80},
        interval_seconds=interval_seconds, dry_run=dry_run, low_node_load_args=low_node_load_args,
        leader_elect=leader_elect, lease_name=name,
    )  # fmt: skip
    path, port, insecure, serving = _config_and_serving_flags(plane, name, document)
    process = KoordProcess(
        name,
        [
            str(koordbuild.ensure(["koord-descheduler"])["koord-descheduler"]),
            *serving,
            # its default is a directory relative to the working directory; keep its self-signed cert in the root
            f"--cert-dir={plane.root / f'{name}-certs'}",
            f"--v={verbosity}",
        ],
        plane.root / "logs" / f"{name}.log",
        url=f"https://127.0.0.1:{port}/healthz",
        config_path=path,
        extra_ports={"secure": port, "insecure": insecure},
    )
    return _launch(plane, process, f"{name} /healthz", timeout)


def start_koord_manager(
    plane: ControlPlane,
    *,
    name: str = "koord-manager",
    controllers: Sequence[str] = ("*",),
    leader_elect: bool = False,
    verbosity: int = 2,
    timeout: float = 90,
) -> KoordProcess:
    """koord-manager (slo-controller: NodeMetric, NodeSLO, batch resources on Nodes) reading the ConfigMap
    `slo-controller-config` in koordinator-system. With webhooks off it registers no readiness check, so readiness
    is its /metrics answering."""
    install_koord_crds(plane)
    metrics_port, health_port = free_port(), free_port()
    process = KoordProcess(
        name,
        manager_argv(
            koordbuild.ensure(["koord-manager"])["koord-manager"],
            plane.kubeconfig,
            metrics_port=metrics_port,
            health_port=health_port,
            controllers=controllers,
            leader_elect=leader_elect,
            verbosity=verbosity,
        ),
        plane.root / "logs" / f"{name}.log",
        url=f"http://127.0.0.1:{metrics_port}/metrics",
        extra_ports={"metrics": metrics_port, "health": health_port},
    )
    return _launch(plane, process, f"{name} /metrics", timeout)


# --- koord-manager's pod webhooks (ClusterColocationProfile) on loopback -------------------------------------
# koord-manager finds its webhook configurations by name (env MUTATING_WEBHOOK_NAME / VALIDATING_WEBHOOK_NAME,
# pkg/webhook/util/util.go), keeps their webhooks as a template, writes its CA bundle into them and, with
# WEBHOOK_HOST set, turns each `service:` client config into `url: https://WEBHOOK_HOST:WEBHOOK_PORT<path>`
# (pkg/webhook/util/configuration/configuration.go) and its certificates into WEBHOOK_CERT_DIR, certifying that host
# as an IP (pkg/webhook/util/generator/selfsigned.go). So the configurations must exist before it starts.
KOORD_POD_WEBHOOKS = ("mpod-create.koordinator.sh", "vpod.koordinator.sh")


def koord_webhook_configurations(
    manifests: Path,
    name: str,
    namespace_selector: Obj,
    *,
    failure_policy: str = "Fail",
    timeout_seconds: int = 5,
) -> list[Obj]:
    """Koordinator's own pod webhooks as its config/webhook/manifests.yaml declares them (Pod CREATE to /mutate-pod;
    Pod CREATE and UPDATE to /validate-pod, no matchConditions), for the namespaces `namespace_selector` selects,
    both configurations named `name`; the other webhooks (nodes, configmaps, quotas, reservations) left out."""
    docs = [d for d in yaml.safe_load_all(manifests.read_text()) if d]
    out = []
    for doc in docs:
        webhooks = [w for w in doc["webhooks"] if w["name"] in KOORD_POD_WEBHOOKS]
        for webhook in webhooks:
            webhook.update(namespaceSelector=namespace_selector, failurePolicy=failure_policy,
                           timeoutSeconds=timeout_seconds)  # fmt: skip
            webhook["clientConfig"]["service"].update(name="koordinator-webhook-service", namespace=KOORD_NAMESPACE)
        out.append({"apiVersion": doc["apiVersion"], "kind": doc["kind"], "metadata": {"name": name},
                    "webhooks": webhooks})  # fmt: skip
    return out


def start_koord_manager_webhook(
    plane: ControlPlane,
    namespace_selector: Obj,
    *,
    name: str = "koord-manager-webhook",
    failure_policy: str = "Fail",
    timeout_seconds: int = 5,
    verbosity: int = 1,
    timeout: float = 90,
) -> KoordProcess:
    """koord-manager serving only its pod webhooks (no controllers) on 127.0.0.1 over TLS, through the
    configurations `name` (see above); ready once its /readyz (the webhook-ready check) passes, when it has
    written its CA bundle and URL into them."""
    install_koord_crds(plane)
    module = koordbuild.crd_dir().parents[2]
    configs = koord_webhook_configurations(module / "config" / "webhook" / "manifests.yaml", name,
                                           namespace_selector, failure_policy=failure_policy,
                                           timeout_seconds=timeout_seconds)  # fmt: skip
    plane.apply(configs)
    metrics_port, health_port, webhook_port = free_port(), free_port(), free_port()
    argv = manager_argv(koordbuild.ensure(["koord-manager"])["koord-manager"], plane.kubeconfig,
                        metrics_port=metrics_port, health_port=health_port, controllers=("-*",),
                        verbosity=verbosity, webhooks=True)  # fmt: skip
    env = {**os.environ, "WEBHOOK_HOST": "127.0.0.1", "WEBHOOK_PORT": str(webhook_port),
           "WEBHOOK_CERT_DIR": str(plane.root / f"{name}-certs"), "POD_NAMESPACE": KOORD_NAMESPACE,
           "MUTATING_WEBHOOK_NAME": name, "VALIDATING_WEBHOOK_NAME": name}  # fmt: skip
    process = KoordProcess(
        name, argv, plane.root / "logs" / f"{name}.log", env=env,
        url=f"http://127.0.0.1:{health_port}/readyz",
        extra_ports={"metrics": metrics_port, "health": health_port, "webhook": webhook_port},
    )  # fmt: skip
    return _launch(plane, process, f"{name} /readyz (its webhook configurations written)", timeout)


# --- koordlet beside Loadline's agent on the real node ---------------------------------------------------------
# koordlet takes everything about "its" node from NODE_NAME: the Node (allocatable, and the address and port of
# the kubelet it lists pods from), the NodeSLO, and the NodeMetric whose status it writes (it never creates one).
# It has no flag for the NodeMetric's name alone. So that it never writes the NodeMetric Loadline's agent
# publishes, it runs for a second Node object, a *view* of the real node: the same allocatable, the same
# InternalIP and kubelet port (so koordlet lists the real node's pods from the real kubelet and reads this
# machine's /proc and cgroups), unschedulable and tainted so nothing is ever placed on it. Loadline's manager gives
# that Node its NodeMetric and NodeSLO as for any node; koordlet writes that NodeMetric's status. Everything koordlet
# could change on the host is switched off: the QoS strategies and runtime hooks that write cgroups (feature gates),
# NRI, node topology reports; its TSDB, checkpoints, audit log and hook socket live under the plane's root.
KOORDLET_VIEW_LABEL = "loadline.io/koordlet-view-of"
KOORDLET_VIEW_TAINT = "loadline.io/koordlet-view"
# Every gate that would make koordlet write host state (cgroups, resctrl, sysctls, sched features) or extra
# objects (NodeResourceTopology, Devices): off. Metric collection and the NodeMetric report stay on.
KOORDLET_FEATURE_GATES = {
    "BECPUSuppress": False,
    "CPUBurst": False,
    "RdtResctrl": False,
    "NodeTopologyReport": False,
    "GroupIdentity": False,
    "CPUSetAllocator": False,
    "BatchResource": False,
}


def koordlet_view_node(real: Mapping[str, Any], name: str, colocation: Mapping[str, Any] | None = None) -> Obj:
    """The Node object koordlet runs for (see above), without its status (`koordlet_view_status`). `colocation`:
    a ColocationStrategy for this node only (annotation `node.koordinator.sh/colocation-strategy`), e.g. koordlet's
    report interval and windows."""
    real_name = str(real["metadata"]["name"])
    annotations = {}
    if colocation:
        annotations["node.koordinator.sh/colocation-strategy"] = json.dumps(dict(colocation))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {KOORDLET_VIEW_LABEL: real_name}, "annotations": annotations},
        "spec": {
            "unschedulable": True,
            "taints": [
                {"key": KOORDLET_VIEW_TAINT, "value": real_name, "effect": "NoSchedule"},
                {"key": KOORDLET_VIEW_TAINT, "value": real_name, "effect": "NoExecute"},
            ],
        },
    }


def koordlet_view_status(real: Mapping[str, Any]) -> Obj:
    """The real node's capacity, allocatable, InternalIP and kubelet port (a status merge patch)."""
    status = real.get("status") or {}
    return {
        "status": {
            "capacity": status.get("capacity") or {},
            "allocatable": status.get("allocatable") or {},
            "addresses": [a for a in status.get("addresses") or [] if a.get("type") in ("InternalIP", "Hostname")],
            "daemonEndpoints": status.get("daemonEndpoints") or {},
        }
    }


def koordlet_argv(
    binary: Path,
    kubeconfig: Path,
    state_dir: Path,
    *,
    metrics_port: int,
    extra_args: Sequence[str] = (),
    verbosity: int = 2,
) -> list[str]:
    """koordlet on the host (with env agent_mode=hostMode: host paths for /proc, /sys, cgroups), serving its
    Prometheus metrics on loopback, its state under `state_dir`, writing nothing to the host (gates above)."""
    gates = ",".join(f"{k}={str(v).lower()}" for k, v in KOORDLET_FEATURE_GATES.items())
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--addr=127.0.0.1:{metrics_port}",
        f"--feature-gates={gates}",
        "--enable-nri-runtime-hook=false",
        f"--runtime-hooks-addr={state_dir / 'koordlet.sock'}",
        f"--runtime-hooks-host-endpoint={state_dir / 'koordlet.sock'}",
        f"--runtime-hooks-config-path={state_dir / 'hookserver.d'}",
        f"--tsdb-path={state_dir / 'metric-data'}/",
        f"--prediction-checkpoint-filepath={state_dir / 'prediction-checkpoints'}",
        f"--audit-log-dir={state_dir / 'audit'}",
        f"--pod-resources-proxy-path={state_dir / 'pod-resources'}",
        f"--xpu-device-infos-dir={state_dir / 'xpu-device-infos'}/",
        "--cgroup-root-dir=/sys/fs/cgroup/",
        f"--v={verbosity}",
        *extra_args,
    ]


def start_koordlet(
    plane: ControlPlane,
    node_name: str,
    *,
    name: str = "koordlet",
    extra_args: Sequence[str] = (),
    verbosity: int = 2,
    timeout: float = 90,
) -> KoordProcess:
    """koordlet for the Node `node_name` (a view made by `koordlet_view_node`); ready once its /metrics answers.
    Its state (TSDB, prediction checkpoints) is a fresh directory under the plane's root."""
    state = plane.root / f"{name}-state"
    shutil.rmtree(state, ignore_errors=True)
    for sub in ("metric-data", "prediction-checkpoints", "audit", "hookserver.d"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    metrics_port = free_port()
    process = KoordProcess(
        name,
        koordlet_argv(
            koordbuild.ensure(["koordlet"])["koordlet"],
            plane.kubeconfig,
            state,
            metrics_port=metrics_port,
            extra_args=extra_args,
            verbosity=verbosity,
        ),
        plane.root / "logs" / f"{name}.log",
        url=f"http://127.0.0.1:{metrics_port}/metrics",
        extra_ports={"metrics": metrics_port},
        env={**os.environ, "NODE_NAME": node_name, "agent_mode": "hostMode"},
    )
    return _launch(plane, process, f"{name} /metrics", timeout)
