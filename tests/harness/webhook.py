"""`loadline manager --webhook-only` as a host process serving the admission webhooks on loopback, and the webhook
configurations that send a real API server's admissions to it (`url: https://127.0.0.1:<port>/...`).

The chart's configurations call the manager's Service; on a control plane without nodes the webhook is a process
of this host, so the configurations name its URL instead, and the manager certifies 127.0.0.1. Used by
tests/integration/test_colocation_profile.py and bench/webhook_bench.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from tests.harness.build import KUBERNETES_VERSION
from tests.harness.controlplane import REPO_ROOT, ControlPlane
from tests.harness.processes import Component, free_port, wait_until

Obj = dict[str, Any]
CHART = REPO_ROOT / "deploy" / "helm" / "loadline"


def configurations(plane: ControlPlane, name: str, base_url: str, namespace_selector: Obj, *,
                   failure_policy: str = "Fail", timeout: int = 5) -> list[Obj]:  # fmt: skip
    """The chart's Mutating- and ValidatingWebhookConfiguration (rendered by helm: the same rules, match conditions
    and settings), named `name`, calling `base_url`, for the pods of the namespaces `namespace_selector` selects."""
    argv = [str(plane.binary("helm")), "template", "loadline", str(CHART), "-n", "loadline-system",
            f"--kube-version={KUBERNETES_VERSION}", "--show-only", "templates/webhook.yaml",
            "--set", f"manager.webhook.url={base_url}", "--set", f"manager.webhook.failurePolicy={failure_policy}",
            "--set", f"manager.webhook.timeoutSeconds={timeout}"]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env={"HOME": str(plane.root)}).stdout
    docs = [d for d in yaml.safe_load_all(out) if d and d["kind"].endswith("WebhookConfiguration")]
    for doc in docs:
        doc["metadata"] = {"name": name}
        for webhook in doc["webhooks"]:
            if "namespaceSelector" in webhook:
                webhook["namespaceSelector"] = namespace_selector
    return docs


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


def metric_value(text: str, metric: str, /, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels` (0 when none)."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(metric + "{") and not line.startswith(metric + " "):
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
