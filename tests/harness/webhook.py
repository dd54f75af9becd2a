"""`loadline manager --webhook-only` as a host process serving the admission webhooks on loopback, and the webhook
configurations that send a real API server's admissions to it (`url: https://127.0.0.1:<port>/...`).

The chart's configurations call the manager's Service; on a control plane without nodes the webhook is a process
of this host, so the configurations name its URL instead, and the manager certifies 127.0.0.1. Used by
tests/integration/test_colocation_profile.py and bench/webhook_bench.py.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tests.harness.controlplane import REPO_ROOT, ControlPlane
from tests.harness.processes import Component, free_port, wait_until

Obj = dict[str, Any]
PROFILE_RESOURCE = {"apiGroups": ["config.koordinator.sh"], "apiVersions": ["v1alpha1"],
                    "resources": ["clustercolocationprofiles"], "scope": "Cluster"}  # fmt: skip


def _webhook(name: str, url: str, rules: list[Obj], *, failure_policy: str, timeout: int,
             namespace_selector: Obj | None) -> Obj:  # fmt: skip
    hook: Obj = {"name": name, "clientConfig": {"url": url}, "rules": rules, "failurePolicy": failure_policy,
                 "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": timeout,
                 "matchPolicy": "Equivalent"}  # fmt: skip
    if namespace_selector is not None:
        hook["namespaceSelector"] = namespace_selector
    return hook


def configurations(name: str, base_url: str, namespace_selector: Obj, *, failure_policy: str = "Fail",
                   timeout: int = 5, validate_profiles: bool = True) -> list[Obj]:  # fmt: skip
    """The Mutating- and ValidatingWebhookConfiguration `name` for a webhook at `base_url`, pods of the namespaces
    `namespace_selector` selects (and every ClusterColocationProfile when `validate_profiles`)."""
    pods = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "Namespaced"}
    common: dict[str, Any] = {"failure_policy": failure_policy, "timeout": timeout}
    mutating = _webhook("mpod.loadline.dev", f"{base_url}/mutate-pod", [{**pods, "operations": ["CREATE"]}],
                        namespace_selector=namespace_selector, **common)  # fmt: skip
    validating = [_webhook("vpod.loadline.dev", f"{base_url}/validate-pod", [{**pods, "operations": ["CREATE", "UPDATE"]}],
                           namespace_selector=namespace_selector, **common)]  # fmt: skip
    if validate_profiles:
        validating.append(_webhook("vprofile.loadline.dev", f"{base_url}/validate-profile",
                                   [{**PROFILE_RESOURCE, "operations": ["CREATE", "UPDATE"]}], namespace_selector=None,
                                   **common))  # fmt: skip
    meta = {"name": name}
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", "metadata": meta,
         "webhooks": [mutating]},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": meta,
         "webhooks": validating},
    ]  # fmt: skip


@dataclass
class WebhookManager:
    process: Component
    port: int
    metrics_port: int
    namespace: str
    secret: str
    configuration: str

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as response:
            return str(response.read().decode())

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=2) as response:
                return int(response.status) == 200
        except OSError:
            return False

    def start(self, timeout: float = 60) -> None:
        self.process.start()
        wait_until(f"{self.process.name} ready", self.ready, timeout, interval=0.2, alive=[self.process])

    def stop(self) -> None:
        self.process.stop()


def webhook_manager(plane: ControlPlane, namespace: str, configuration: str, *, port: int | None = None,
                    extra: tuple[str, ...] = (), name: str = "loadline-webhook-manager",
                    env: Mapping[str, str] | None = None) -> WebhookManager:  # fmt: skip
    """A `loadline manager --webhook-only` on loopback (not started); its Secret is `<configuration>-certs`."""
    port = port or free_port()
    metrics_port = free_port()
    secret = f"{configuration}-certs"
    argv = [sys.executable, "-m", "common.cli", "manager", f"--kubeconfig={plane.kubeconfig}",
            f"--namespace={namespace}", "--webhook-only", f"--webhook-port={port}", "--webhook-host=127.0.0.1",
            f"--webhook-configuration={configuration}", f"--webhook-secret={secret}", "--bind-address=127.0.0.1",
            f"--port={metrics_port}", f"--lease-name={configuration}", *extra]  # fmt: skip
    process = Component(name, argv, plane.root / "logs" / f"{name}.log",
                        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin", **(env or {})})  # fmt: skip
    return WebhookManager(process, port, metrics_port, namespace, secret, configuration)


def metric_value(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels` (0 when none)."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


def apply_json(plane: ControlPlane, objects: list[Obj], *, check: bool = True, server_side: bool = False) -> str:
    """`kubectl apply` (client-side by default: a webhook's refusal comes back as kubectl prints it)."""
    argv = ["apply", "-f", "-"] + (["--server-side"] if server_side else [])
    proc = plane.kubectl(*argv, input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
                         check=check)  # fmt: skip
    return proc.stdout + proc.stderr
