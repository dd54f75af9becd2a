"""Helpers for the `loadline scheduler` integration tests: a tiny REST client, object builders,
NodeMetrics written like the agent writes them, and the scheduler run as a real subprocess
(`python -m scheduler_plugin ...`) whose log is reported with the other components'."""

from __future__ import annotations

import contextlib
import json
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from tests import objects
from tests.harness.controlplane import ControlPlane
from tests.harness.processes import Component, free_port, http_ok, wait_until
from tests.objects import MakeNodeMetric, rfc3339

SCHEDULER_NAME = "loadline-scheduler"
NM_PATH = "/apis/slo.koordinator.sh/v1alpha1/nodemetrics"
PG_GROUP = "scheduling.x-k8s.io"
PG_LABEL = "scheduling.x-k8s.io/pod-group"

Obj = dict[str, Any]


class ApiError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"{status}: {body[:500]}")
        self.status = status
        self.body = body


class Api:
    """Synchronous JSON access to the test control plane (admin token)."""

    def __init__(self, cluster: ControlPlane) -> None:
        self.server = cluster.server
        self.token = cluster.token
        self.context = ssl.create_default_context(cafile=str(cluster.pki.ca_cert))

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Obj:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.context) as response:
                text = response.read()
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, exc.read().decode(errors="replace")) from None
        return json.loads(text) if text else {}

    def get(self, path: str) -> Obj:
        return self.request("GET", path)

    def create(self, path: str, body: Any) -> Obj:
        return self.request("POST", path, body)

    def replace(self, path: str, body: Any) -> Obj:
        return self.request("PUT", path, body)

    def merge_patch(self, path: str, body: Any) -> Obj:
        return self.request("PATCH", path, body, "application/merge-patch+json")

    def delete(self, path: str) -> None:
        with contextlib.suppress(ApiError):
            self.request("DELETE", path)

    def delete_now(self, path: str) -> None:
        """Delete without a grace period (kwok's pods would otherwise linger while "terminating")."""
        with contextlib.suppress(ApiError):
            self.request("DELETE", path, {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})

    def pods(self, namespace: str) -> list[Obj]:
        return list(self.get(f"/api/v1/namespaces/{namespace}/pods").get("items") or [])

    def events(self, namespace: str) -> list[Obj]:
        return list(self.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events").get("items") or [])


# --------------------------------------------------------------------------- builders
def now_rfc3339(offset_seconds: float = 0.0) -> str:
    return rfc3339(time.time() + offset_seconds)


def pod(
    name: str,
    namespace: str,
    *,
    cpu: str = "100m",
    memory: str = "128Mi",
    node_selector: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    affinity: Mapping[str, Any] | None = None,
    scheduler: str = SCHEDULER_NAME,
) -> Obj:
    """tests/objects.py's pod as these tests create it: an image, and tolerating every taint (kwok nodes carry none;
    a shared cluster may add some)."""
    return objects.for_api_server(objects.pod(
        name, cpu, memory, namespace=namespace, image="fake", scheduler_name=scheduler,
        node_selector=dict(node_selector) if node_selector else None, labels=dict(labels or {}),
        annotations=dict(annotations or {}), affinity=dict(affinity) if affinity else None,
        tolerations=[{"operator": "Exists"}],
    ))  # fmt: skip


def create_pods(api: Api, pods: list[Obj]) -> None:
    for obj in pods:
        api.create(f"/api/v1/namespaces/{obj['metadata']['namespace']}/pods", obj)


def write_node_metric(
    api: Api, node: str, *, cpu: str, memory: str, update_time: str | None = None, extra_status: Obj | None = None
) -> None:
    """Create the node's NodeMetric if needed, then PUT its status as the agent does."""
    with contextlib.suppress(ApiError):
        api.create(NM_PATH, MakeNodeMetric(node).report_interval(60, aggregate_seconds=300).obj())
    current = api.get(f"{NM_PATH}/{node}")
    current["status"] = {
        **MakeNodeMetric(node).updated(update_time or now_rfc3339()).node_usage(cpu, memory).status(),
        **(extra_status or {}),
    }
    api.replace(f"{NM_PATH}/{node}/status", current)


# --------------------------------------------------------------------------- waiting
def wait_for(what: str, check: Callable[[], bool], timeout: float = 60, interval: float = 0.25) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def placements(api: Api, namespace: str) -> dict[str, str]:
    """Pod name -> node name ("" while pending)."""
    return {p["metadata"]["name"]: (p.get("spec") or {}).get("nodeName") or "" for p in api.pods(namespace)}


def bound_count(api: Api, namespace: str) -> int:
    return sum(1 for node in placements(api, namespace).values() if node)


# --------------------------------------------------------------------------- the scheduler process
@dataclass
class LoadlineScheduler:
    component: Component
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get_json(self, path: str) -> tuple[int, Obj]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as response:
                return int(response.status), json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as response:
            text: str = response.read().decode()
            return text

    def readyz(self) -> str:
        try:
            with urllib.request.urlopen(self.url + "/readyz", timeout=5) as response:
                body: str = response.read().decode()
                return body
        except (urllib.error.URLError, OSError):
            return ""

    def log(self) -> str:
        return self.component.log_path.read_text(errors="replace")

    def explain_cli(self, namespace: str, name: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "common", "explain", f"{namespace}/{name}", "--server", self.url, *args],
            capture_output=True, text=True, timeout=60, check=False,
        )


def scheduler_config(profile: Obj | None = None, **top: Any) -> Obj:
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{"schedulerName": SCHEDULER_NAME, **(profile or {})}],
        **top,
    }


@contextlib.contextmanager
def running_scheduler(
    cluster: ControlPlane,
    config: Obj | None = None,
    *,
    leader_elect: bool = False,
    lease_name: str | None = None,
    extra_args: tuple[str, ...] = (),
    wait_ready: bool = True,
) -> Iterator[LoadlineScheduler]:
    """`loadline scheduler` as a subprocess; stopped (SIGTERM) when the block ends."""
    name = f"loadline-scheduler-{uuid.uuid4().hex[:6]}"
    path = cluster.root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config or scheduler_config()))
    port = free_port()
    argv = [
        sys.executable, "-m", "scheduler_plugin", f"--kubeconfig={cluster.kubeconfig}", f"--config={path}",
        "--bind-address=127.0.0.1", f"--port={port}",
    ]  # fmt: skip
    if leader_elect:
        argv += ["--leader-elect", f"--lease-name={lease_name or name}", "--lease-namespace=default",
                 "--lease-duration=6", "--renew-deadline=4", "--retry-period=1"]
    else:
        argv.append("--no-leader-elect")
    argv += list(extra_args)
    component = Component(name, argv, cluster.root / "logs" / f"{name}.log")
    component.start()
    cluster.extra.append(component)  # its log tail is printed when the test fails
    scheduler = LoadlineScheduler(component, port)
    try:
        if wait_ready:
            wait_until(f"{name} /readyz", lambda: http_ok(f"{scheduler.url}/readyz"), 60, alive=[component])
        yield scheduler
    finally:
        cluster.stop_component(component)


SUITE = "loadline.test/suite"  # node label each test uses to keep its pods on its own kwok nodes


def events_for(api: Api, namespace: str, pod_name: str, reason: str) -> list[Obj]:
    return [
        e for e in api.events(namespace)
        if e.get("regarding", {}).get("name") == pod_name and e.get("reason") == reason
    ]  # fmt: skip


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"
