"""The schedulers and deschedulers placement_bench.py compares, each a start function on the harness's plane.

A scheduler serves pods whose `schedulerName` is the one it is given; a descheduler drains one namespace
by the shared `DeschedulerConfiguration` (`descheduler_configuration`): Loadline's descheduler reads the
same Koordinator document koord-descheduler does, so both run with the same thresholds and limits.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.harness.controlplane import REPO_ROOT, ControlPlane
from tests.harness.processes import Component, free_port, http_ok, wait_until

HOT_PERCENT = 65.0  # LoadAware's default cpu threshold, the descheduler's high threshold and the bench's "hot"
LOW_PERCENT = 45.0  # the descheduler's low threshold: nodes below it receive the pods it moves


def _python(plane: ControlPlane, name: str, argv: list[str]) -> Component:
    component = Component(name, [sys.executable, "-m", "common.cli", *argv], plane.root / "logs" / f"{name}.log",
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})  # fmt: skip
    component.start()
    plane.extra.append(component)
    return component


# --------------------------------------------------------------------------- schedulers
def start_kube_scheduler(plane: ControlPlane, scheduler_name: str, extender: dict[str, Any] | None = None) -> Component:
    """The real kube-scheduler, default plugins; with `extender`, calling it for filter and prioritize."""
    return plane.start_kube_scheduler([{"schedulerName": scheduler_name}], name=f"kube-scheduler-{scheduler_name}",
                                      extenders=[extender] if extender else [])  # fmt: skip


def start_extender(plane: ControlPlane, extra_args: list[str]) -> tuple[Component, str]:
    """`python -m scheduler_plugin.extender` (LoadAwareScheduling, Koordinator's defaults); its base URL."""
    port = free_port()
    extender = Component(
        "loadline-extender",
        [sys.executable, "-m", "scheduler_plugin.extender", f"--kubeconfig={plane.kubeconfig}",
         "--bind-address=127.0.0.1", f"--port={port}", "--log-level=warning", *extra_args],
        plane.root / "logs" / "loadline-extender.log",
    )  # fmt: skip
    extender.start()
    plane.extra.append(extender)
    base = f"http://127.0.0.1:{port}"
    wait_until("extender /readyz", lambda: http_ok(f"{base}/readyz"), 60, alive=[extender])
    return extender, base


def start_loadline_scheduler(
    plane: ControlPlane, scheduler_name: str, load_aware_weight: int | None = None
) -> tuple[Component, str]:
    """`loadline scheduler`, its default profile (kube's default plugins + LoadAwareScheduling, Koordinator's args);
    `load_aware_weight` re-lists LoadAwareScheduling with that weight instead of the default profile's 1."""
    port = free_port()
    config = plane.root / f"{scheduler_name}.yaml"
    profile: dict[str, Any] = {"schedulerName": scheduler_name}
    if load_aware_weight is not None:
        profile["plugins"] = {"multiPoint": {"enabled": [{"name": "LoadAwareScheduling", "weight": load_aware_weight}]}}
    config.write_text(yaml.safe_dump({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"qps": 5000, "burst": 5000},
        "profiles": [profile]}))  # fmt: skip
    component = _python(plane, f"loadline-scheduler-{scheduler_name}",
                        ["scheduler", f"--kubeconfig={plane.kubeconfig}", f"--config={config}",
                         "--bind-address=127.0.0.1", f"--port={port}", "--no-leader-elect",
                         "--log-level=warning"])  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_until("loadline scheduler /readyz", lambda: http_ok(f"{url}/readyz"), 90, alive=[component])
    return component, url


def start_koord_scheduler(plane: ControlPlane, scheduler_name: str) -> Component:
    """Koordinator's koord-scheduler: kube's default plugins + LoadAwareScheduling with its default args."""
    from tests.harness import koordinator

    return koordinator.start_koord_scheduler(plane, name=scheduler_name, verbosity=1)


# --------------------------------------------------------------------------- deschedulers
def descheduler_configuration(kubeconfig: Path, namespace: str, interval: float) -> dict[str, Any]:
    """One koord-descheduler `DeschedulerConfiguration` for both deschedulers: LowNodeLoad on cpu (low 45 %,
    high 65 % = LoadAware's threshold, as docs/descheduler.md asks), anomaly after 2 rounds, the namespace of the
    run only; MigrationController evicting directly, every other limit at Koordinator's defaults."""
    return {
        "apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 100, "burst": 200},
        "leaderElection": {"leaderElect": False},
        "deschedulingInterval": f"{interval:g}s",
        "profiles": [{
            "name": "koord-descheduler",
            "plugins": {"balance": {"enabled": [{"name": "LowNodeLoad"}]},
                        "evict": {"disabled": [{"name": "*"}], "enabled": [{"name": "MigrationController"}]},
                        "filter": {"disabled": [{"name": "*"}], "enabled": [{"name": "MigrationController"}]}},
            "pluginConfig": [
                {"name": "LowNodeLoad", "args": {
                    "apiVersion": "descheduler/v1alpha2", "kind": "LowNodeLoadArgs",
                    "lowThresholds": {"cpu": LOW_PERCENT}, "highThresholds": {"cpu": HOT_PERCENT},
                    "anomalyCondition": {"consecutiveAbnormalities": 2},
                    "evictableNamespaces": {"include": [namespace]}, "nodeFit": True}},
                {"name": "MigrationController", "args": {
                    "apiVersion": "descheduler/v1alpha2", "kind": "MigrationControllerArgs",
                    "evictionPolicy": "Eviction", "defaultJobMode": "EvictDirectly",
                    "namespaces": {"include": [namespace]}}},
            ],
        }],
    }  # fmt: skip


def start_loadline_descheduler(plane: ControlPlane, namespace: str, interval: float) -> Component:
    """`loadline descheduler` on the shared DeschedulerConfiguration."""
    port = free_port()
    config = plane.root / f"loadline-descheduler-{namespace}.yaml"
    config.write_text(yaml.safe_dump(descheduler_configuration(plane.kubeconfig, namespace, interval)))
    component = _python(plane, f"loadline-descheduler-{namespace}",
                        ["descheduler", f"--kubeconfig={plane.kubeconfig}", f"--config={config}",
                         "--bind-address=127.0.0.1", f"--port={port}", "--no-leader-elect"])  # fmt: skip
    wait_until("loadline descheduler /readyz", lambda: http_ok(f"http://127.0.0.1:{port}/readyz"), 90,
               alive=[component])  # fmt: skip
    return component


def start_koord_descheduler(plane: ControlPlane, namespace: str, interval: float) -> Component:
    """Koordinator's koord-descheduler on the shared DeschedulerConfiguration."""
    from tests.harness import koordinator

    config = descheduler_configuration(plane.kubeconfig, namespace, interval)
    return koordinator.start_koord_descheduler(plane, config, name=f"koord-descheduler-{namespace}", verbosity=2)


def install_koordinator_crds(plane: ControlPlane) -> None:
    """The Koordinator CRDs koord-scheduler and koord-descheduler need beyond Loadline's (Reservation, ...)."""
    from tests.harness import koordinator

    koordinator.install_koord_crds(plane)
