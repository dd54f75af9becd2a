"""Hostile input on the real API server while the scheduler, descheduler and manager run (issue 12).

Hypothesis generates NodeMetrics, NodeSLOs, PodGroups and slo-controller-config values across
what the CRDs and the API server accept: quantities with every suffix, extreme mantissas and
exponents, JSON integers up to int64, huge podsMetric lists towards the request size limit,
missing, null and unknown fields, update times from year 1 to 9999. Each is written to a
control plane of its own (the manager acts on every NodeMetric and NodeSLO in its cluster).
Afterwards:

* no process exited, no informer handler raised (`loadline_kube_handler_errors_total` is 0 and
  no "handler failed" in any log);
* the scheduler counted every malformed NodeMetric and PodGroup version it was sent, exactly:
  the oracle here decides "malformed" from the exact value of each quantity (Fraction
  arithmetic, not Loadline's parser) against the range rule (±2^53 in Koordinator's unit) and
  the sign;
* pods keep being scheduled on the healthy nodes;
* no node whose NodeMetric is unusable receives more pods than the node without a usable NodeMetric (the
  manager creates a NodeMetric for every node; this one's agent never fills it in).

The resource dimension (issue 29): bound pods with large and unusable parts (resource-status cpusets up to
`0-4294967295` and 8,192 listed CPUs, limits and requests of 9Pi and 8Ei, up to 80 extended resources, annotations up to 200 KB):
every such pod is counted by the scheduler, the healthy nodes keep being scheduled, and no process's resident
memory grows by more than RSS_GROWTH_BOUND over the run.

`LOADLINE_FUZZ_EXAMPLES` sets the number of generated examples (each writes one to three
objects); `make test` runs the default below, `make fuzz` a longer run.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.harness.controlplane import REPO_ROOT, ControlPlane, fake_node
from tests.harness.processes import Component, free_port, http_ok, wait_until
from tests.integration.scheduler_support import (
    NM_PATH,
    PG_GROUP,
    Api,
    ApiError,
    LoadlineScheduler,
    create_pods,
    placements,
    pod,
    running_scheduler,
    wait_for,
)

EXAMPLES = int(os.environ.get("LOADLINE_FUZZ_EXAMPLES", "60"))
# The time limit grows with the examples (pyproject's 600 s stopped `make fuzz`: 500 examples took 364 s at a load
# of 2.5 and over 600 s at a load of 20 on this 2-core machine).
EXAMPLE_SECONDS = 3.0
pytestmark = [pytest.mark.integration, pytest.mark.timeout(max(600.0, 300 + EXAMPLE_SECONDS * EXAMPLES))]
MAX_UNITS = 2**53  # the range rule (common/api/quantity.py), restated: an independent oracle
SYSTEM_NS = "loadline-system"
CONFIG_MAP = "slo-controller-config"
PG_PATH = f"/apis/{PG_GROUP}/v1alpha1/namespaces/fuzz/podgroups"
SLO_PATH = "/apis/slo.koordinator.sh/v1alpha1/nodeslos"
POOL = "loadline.test/fuzz-pool"
FUZZ_NODES = ("fuzz-0", "fuzz-1")
BARE_NODE = "bare-0"  # never has a NodeMetric
HEALTHY_NODES = ("healthy-0", "healthy-1")
# Where the pods with hostile parts are bound: a node of its own, for a pod whose limit exceeds its request is
# estimated at its limit by LoadAware (as Koordinator's DefaultEstimator does) until a NodeMetric reports it, so a
# 9Pi limit makes its node full, the safe direction.
HOSTILE_POD_NODE = "hostile-0"
# Resident memory a process may gain over the run: caches bounded by design (digest tables, parsed configs) fill
# up, hostile objects must not add more. Far below what one unbounded cpu list (4·10⁹ ints) or ring would take.
RSS_GROWTH_BOUND = 256 * 2**20
MAX_POD_RESOURCE_NAMES = 64  # common/api/poddigest.py, restated
MAX_CPU_ID = 8191  # common/cpulist.py, restated

Obj = dict[str, Any]


# --------------------------------------------------------------------------- the oracle
_QUANTITY = re.compile(
    r"(?P<sign>[+-])?(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:(?P<bin>[KMGTPE]i)|[eE](?P<exp>[+-]?[0-9]+)|(?P<dec>[numkMGTPE]))?"
)
_DEC = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BIN = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


def usable_quantity(value: str | int, milli: bool) -> bool:
    """Non-negative and within ±2^53 in Koordinator's unit (milli for cpu), rounded up to a nano then a unit."""
    if isinstance(value, int):
        exact = Fraction(value)
    else:
        m = _QUANTITY.fullmatch(value)
        assert m is not None and (m["int"] or m["frac"]), value
        digits = Fraction(int((m["int"] or "") + (m["frac"] or "") or "0"), 10 ** len(m["frac"] or ""))
        if digits == 0:
            return True
        if m["exp"] is not None:
            exp = int(m["exp"])
            if abs(exp) > 400:  # too far to compute: huge or a speck (which rounds up to 1n)
                return m["sign"] != "-" and exp < 0 and exp >= -(2**31)
            exact = digits * Fraction(10) ** exp
        elif m["bin"] is not None:
            exact = digits * 2 ** _BIN[m["bin"]]
        else:
            exact = digits * Fraction(10) ** _DEC[m["dec"] or ""]
        if m["sign"] == "-":
            exact = -exact
    if exact < 0:
        return False
    nanos = math.ceil(exact * 10**9)
    units = math.ceil(Fraction(nanos, 10**6 if milli else 10**9))
    return units <= MAX_UNITS


def usable_resources(resources: Any) -> bool:
    if not isinstance(resources, dict):
        return True  # absent or null
    return all(usable_quantity(v, k == "cpu") for k, v in resources.items() if v is not None)


# --------------------------------------------------------------------------- strategies
_EXTREMES = [
    "1e16", "9223372036854775807m", "8Ei", "9007199254740992m", "9007199254740993m", "9007199254740992",
    "9007199254740993", "8Pi", "1e-2147483648", "0e99999999999", "0.000000000001", "1E18", "999999999999999999999E",
    "-0", "+1", ".5", "5.", "1e308", "1e309", "123456789012345678901234567890n",
]  # fmt: skip

digits = st.text(alphabet="0123456789", min_size=0, max_size=25)
suffixes = st.sampled_from(["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"])
exponents = st.one_of(st.integers(-40, 40), st.sampled_from([-2147483648, 2147483647, 308, -324]))


@st.composite
def quantity_text(draw: st.DrawFn) -> str:
    whole = draw(digits)
    frac = draw(st.one_of(st.none(), digits))
    if not whole and not frac:
        whole = "1"
    number = whole + ("." + frac if frac is not None else "")
    tail = draw(suffixes) if draw(st.booleans()) else draw(st.sampled_from(["e", "E"])) + str(draw(exponents))
    return draw(st.sampled_from(["", "", "", "+", "-"])) + number + tail


quantities = st.one_of(
    st.sampled_from(_EXTREMES),
    quantity_text(),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from(["100m", "1", "2Gi", "500Mi", "0"]),  # ordinary values
)


def resource_map() -> st.SearchStrategy[Any]:
    resources = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "pods"]), quantities, max_size=3)
    return st.one_of(st.none(), st.fixed_dictionaries({"resources": st.one_of(st.none(), resources)}))


times = st.one_of(
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31), timezones=st.just(UTC)),
    st.sampled_from([timedelta(0), timedelta(seconds=-30), timedelta(seconds=59), timedelta(seconds=61),
                     timedelta(days=365), timedelta(days=-365)]).map(lambda d: datetime.now(UTC) + d),
)  # fmt: skip


def rfc3339(moment: datetime) -> str:
    fraction = f".{moment.microsecond:06d}" if moment.microsecond else ""
    return f"{moment.year:04d}-" + moment.strftime("%m-%dT%H:%M:%S") + fraction + "Z"  # %Y does not pad year 999


durations = st.sampled_from(["5m0s", "10m", "30m0s", "1ns", "2562047h47m16.854775807s", "2562048h", "0s", "-5m"])


@st.composite
def node_metric_status(draw: st.DrawFn) -> tuple[Obj, bool]:
    """A NodeMetric status and whether it is usable (every quantity within the range rule, every duration valid)."""
    node_usage = draw(resource_map())
    system_usage = draw(resource_map())
    aggregated = draw(st.one_of(st.none(), st.lists(st.fixed_dictionaries({
        "duration": st.one_of(st.none(), durations),
        "usage": st.dictionaries(st.sampled_from(["avg", "p50", "p95", "p99"]), resource_map(), max_size=2),
    }), max_size=3)))  # fmt: skip
    pods_count = draw(st.one_of(st.integers(0, 3), st.sampled_from([0, 2000, 6000])))
    pod_usage = draw(resource_map())
    pods = [{"namespace": "fuzz", "name": f"p{i}", "podUsage": pod_usage, "priority": "koord-prod"}
            for i in range(pods_count)]  # fmt: skip
    status: Obj = {
        "updateTime": rfc3339(draw(times)),
        "nodeMetric": {"nodeUsage": node_usage, "systemUsage": system_usage, "aggregatedNodeUsages": aggregated,
                       "unknownField": draw(st.one_of(st.none(), st.integers()))},
        "podsMetric": pods if draw(st.booleans()) or pods_count else None,
    }  # fmt: skip
    if draw(st.booleans()):
        del status["updateTime"]
    maps = [node_usage, system_usage, pod_usage if pods_count else None]
    for entry in aggregated or []:
        maps += list(entry["usage"].values())
    usable = all(usable_resources((m or {}).get("resources")) for m in maps)
    usable &= all(entry["duration"] not in ("2562048h",) for entry in aggregated or [])
    return status, usable


@st.composite
def pod_group_spec(draw: st.DrawFn) -> tuple[Obj, bool]:
    resources = draw(st.one_of(st.none(), st.dictionaries(st.sampled_from(["cpu", "memory"]), quantities, max_size=2)))
    spec: Obj = {
        "minMember": draw(st.one_of(st.none(), st.integers(1, 2**31 - 1))),
        "minResources": resources,
        "scheduleTimeoutSeconds": draw(st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1))),
    }
    usable = usable_resources(resources) and (spec["scheduleTimeoutSeconds"] is None or spec["scheduleTimeoutSeconds"] >= 0)
    return spec, usable


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.text(max_size=8))
json_values = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                              st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                           max_leaves=12)  # fmt: skip


@st.composite
def config_value(draw: st.DrawFn) -> tuple[str, str]:
    key = draw(st.sampled_from(["colocation-config", "resource-threshold-config", "resource-qos-config",
                                "cpu-burst-config", "system-config", "host-application-config"]))  # fmt: skip
    kind = draw(st.sampled_from(["json", "deep", "bigint", "fields"]))
    if kind == "deep":
        depth = draw(st.integers(100, 5000))
        return key, "[" * depth + "]" * depth
    if kind == "bigint":
        return key, '{"enable": true, "cpuReclaimThresholdPercent": ' + "9" * draw(st.integers(20, 6000)) + "}"
    if kind == "fields":
        number = st.one_of(st.integers(-(2**64), 2**64), st.floats(allow_nan=False, allow_infinity=False))
        fields = st.dictionaries(st.sampled_from([
            "enable", "cpuReclaimThresholdPercent", "degradeTimeMinutes", "updateTimeThresholdSeconds",
            "resourceDiffThreshold", "metricReportIntervalSeconds", "metricAggregateDurationSeconds",
        ]), st.one_of(number, st.booleans(), st.none()), max_size=4)  # fmt: skip
        doc = draw(st.one_of(fields, st.fixed_dictionaries({"clusterStrategy": fields})))
        return key, json.dumps(doc)
    return key, json.dumps(draw(json_values))


nodeslo_spec = st.fixed_dictionaries({
    "resourceUsedThresholdWithBE": st.one_of(st.none(), st.fixed_dictionaries({
        "enable": st.one_of(st.none(), st.booleans()),
        "cpuSuppressThresholdPercent": st.one_of(st.none(), st.integers(0, 100)),
        "memoryEvictThresholdPercent": st.one_of(st.none(), st.integers(0, 100)),
    })),
    "systemStrategy": st.one_of(st.none(), st.fixed_dictionaries({
        "minFreeKbytesFactor": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    })),
    "extensions": st.one_of(st.none(), st.dictionaries(st.text(max_size=6), json_values, max_size=2)),
})  # fmt: skip

@st.composite
def hostile_pod(draw: st.DrawFn) -> tuple[Obj, bool]:
    """A pod bound to HOSTILE_POD_NODE with large or unusable parts, and whether it is wholly usable."""
    cpus = draw(st.one_of(st.integers(1, MAX_CPU_ID + 1).map(lambda n: ",".join(map(str, range(n)))),
                          st.sampled_from(["0-4294967295", f"0-{MAX_CPU_ID}", f"{MAX_CPU_ID + 1}", "x", ""])))  # fmt: skip
    memory_limit = draw(st.sampled_from(["9Pi", "8Ei", "1Gi"]))
    memory_request = draw(st.sampled_from(["1Mi", "1Mi", "9Pi", "8Ei"]))  # past the range rule: the node is full
    names = draw(st.integers(0, MAX_POD_RESOURCE_NAMES + 16))
    blob = draw(st.sampled_from([0, 1, 50_000, 200_000]))
    limits = {"memory": memory_limit, **{f"example.com/r{i}": "1" for i in range(names)}}
    requests = {"cpu": "1m", "memory": memory_request}
    order = ["1Mi", "1Gi", "9Pi", "8Ei"]
    if order.index(memory_request) > order.index(memory_limit):
        limits["memory"] = memory_request  # the API server refuses a request above its limit
    annotations = {"scheduling.koordinator.sh/resource-status": json.dumps({"cpuset": cpus}), "loadline.test/blob": "x" * blob}
    body = pod("hostile", "fuzz", annotations=annotations)
    body["spec"]["nodeName"] = HOSTILE_POD_NODE
    body["spec"]["containers"][0]["resources"] = {"requests": requests, "limits": limits}
    valid_cpus = not cpus or all(
        part.isdigit() and int(part) <= MAX_CPU_ID for part in cpus.replace("-", ",").split(",")
    )
    usable = valid_cpus and limits["memory"] == "1Gi" and memory_request == "1Mi" and len(limits) + 1 <= MAX_POD_RESOURCE_NAMES
    return body, usable


examples = st.tuples(
    st.sampled_from(FUZZ_NODES), node_metric_status(), st.one_of(st.none(), pod_group_spec()),
    st.one_of(st.none(), config_value()), st.one_of(st.none(), nodeslo_spec), st.one_of(st.none(), hostile_pod()),
)  # fmt: skip


# --------------------------------------------------------------------------- processes
@dataclass
class Daemon:
    component: Component
    port: int

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as response:
            text: str = response.read().decode()
            return text


def rss(daemon: Daemon | LoadlineScheduler) -> int:
    proc = daemon.component.proc
    assert proc is not None
    return int(psutil.Process(proc.pid).memory_info().rss)


def metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def start_manager(plane: ControlPlane) -> Daemon:
    port = free_port()
    component = Component("manager", [
        sys.executable, "-m", "manager", f"--kubeconfig={plane.kubeconfig}", f"--namespace={SYSTEM_NS}",
        f"--config-map={CONFIG_MAP}", "--bind-address=127.0.0.1", f"--port={port}",
    ], plane.root / "logs" / "manager.log", env={**os.environ, "POD_NAME": "fuzz", "PYTHONPATH": str(REPO_ROOT)})  # fmt: skip
    component.start()
    plane.extra.append(component)
    wait_until("manager /healthz", lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), 60, alive=[component])
    return Daemon(component, port)


def start_descheduler(plane: ControlPlane, root: Path) -> Daemon:
    config = root / "descheduler.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "descheduler/v1alpha2", "kind": "LowNodeLoadArgs", "deschedulingInterval": "1s",
        "lowThresholds": {"cpu": 45, "memory": 55}, "highThresholds": {"cpu": 75, "memory": 80},
        "dryRun": True,
    }))  # fmt: skip
    port = free_port()
    component = Component("descheduler", [
        sys.executable, "-m", "common", "descheduler", "--config", str(config), "--kubeconfig", str(plane.kubeconfig),
        "--bind-address", "127.0.0.1", "--port", str(port), "--lease-namespace", SYSTEM_NS,
    ], plane.root / "logs" / "descheduler.log")  # fmt: skip
    component.start()
    plane.extra.append(component)
    wait_until("descheduler /readyz", lambda: http_ok(f"http://127.0.0.1:{port}/readyz"), 90, alive=[component])
    return Daemon(component, port)


# --------------------------------------------------------------------------- the test
@dataclass
class Tally:
    written: Counter[str] = field(default_factory=Counter)  # kind -> objects the API server accepted
    refused: Counter[str] = field(default_factory=Counter)  # kind -> objects the API server refused (4xx)
    malformed: Counter[str] = field(default_factory=Counter)  # kind -> accepted versions the oracle calls malformed


def put_node_metric_status(api: Api, node: str, status: Obj) -> int:
    """Replace the NodeMetric's status (again on a conflict: the manager writes its spec); the new resourceVersion."""
    for _ in range(10):
        current = api.get(f"{NM_PATH}/{node}")
        current["status"] = status
        try:
            return int(api.replace(f"{NM_PATH}/{node}/status", current)["metadata"]["resourceVersion"])
        except ApiError as exc:
            if exc.status != 409:
                raise
    raise AssertionError(f"NodeMetric {node}: ten conflicts in a row")


class VersionLog:
    """Every version of the fuzzed NodeMetrics, from a watch: the manager writes their spec too (a new version
    that carries the status last written), so the versions the scheduler sees are counted here, not guessed."""

    def __init__(self, api: Api, since: int) -> None:
        self.versions: list[tuple[str, int]] = []  # (node, resourceVersion) in watch order
        self._api = api
        self._since = since
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        # The API server ends a watch after timeoutSeconds (and `make fuzz` runs for longer than that): watch again
        # from the last version seen, bookmarks included so a quiet spell does not leave that version compacted.
        while True:
            url = (f"{self._api.server}{NM_PATH}?watch=1&resourceVersion={self._since}"
                   "&allowWatchBookmarks=true&timeoutSeconds=300")  # fmt: skip
            request = urllib.request.Request(url, headers={"Authorization": f"Bearer {self._api.token}"})
            try:
                response = urllib.request.urlopen(request, timeout=330, context=self._api.context)
            except OSError:
                return  # the control plane has stopped
            with contextlib.suppress(OSError, ValueError):
                for line in response:
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        return  # e.g. 410 Gone: the versions after it are unknown, so the test's wait fails loudly
                    meta = event["object"]["metadata"]
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self.versions.append((meta["name"], int(meta["resourceVersion"])))
                    self._since = int(meta["resourceVersion"])

    def seen(self, node: str, version: int) -> bool:
        return any(n == node and v >= version for n, v in list(self.versions))

    def freeze(self) -> list[tuple[str, int]]:
        """The versions so far. (The reader thread is left to end with the watch: closing the response under a
        blocked read would deadlock on its buffer lock; the watch ends when the control plane stops.)"""
        return list(self.versions)


@pytest.fixture
def plane(fresh_control_plane: ControlPlane) -> Iterator[ControlPlane]:
    plane = fresh_control_plane
    plane.start_kwok()
    # The pool: the fuzzed nodes, the one without a NodeMetric and a healthy one (the manager gives every node a
    # NodeMetric, so "without" is one whose agent never filled it in); the other healthy node is for other pods.
    pool = (*FUZZ_NODES, BARE_NODE, HEALTHY_NODES[0])
    nodes = [fake_node(n, cpu="16", memory="64Gi", labels={POOL: "pool"}) for n in pool]
    nodes += [fake_node(n, cpu="16", memory="64Gi", labels={POOL: "healthy"}) for n in HEALTHY_NODES[1:]]
    nodes += [fake_node(HOSTILE_POD_NODE, cpu="16", memory="64Gi", labels={POOL: "hostile"})]
    plane.apply(nodes)
    names = [n["metadata"]["name"] for n in nodes]
    plane.kubectl("wait", "--for=condition=Ready", *(f"node/{n}" for n in names), "--timeout=120s", timeout=130)
    plane.kubectl("create", "namespace", "fuzz")
    plane.kubectl("create", "namespace", SYSTEM_NS)
    yield plane


def test_hostile_objects_are_survived_counted_and_never_attract_pods(plane: ControlPlane, tmp_path: Path) -> None:
    api = Api(plane)
    now = datetime.now(UTC)
    fresh = {"updateTime": rfc3339(now), "nodeMetric": {"nodeUsage": {"resources": {"cpu": "1", "memory": "4Gi"}}}}
    for node in (*FUZZ_NODES, *HEALTHY_NODES):
        api.create(NM_PATH, {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                             "metadata": {"name": node}})  # fmt: skip
        put_node_metric_status(api, node, fresh)
    tally = Tally()
    counter = iter(range(10**9))
    # (resourceVersion, usable) of every status written, per node: a version carries the last status before it
    written: dict[str, list[tuple[int, bool]]] = {n: [(0, True)] for n in FUZZ_NODES}
    watch = VersionLog(api, int(api.get(NM_PATH)["metadata"]["resourceVersion"]))
    with running_scheduler(plane) as scheduler:
        manager = start_manager(plane)
        descheduler = start_descheduler(plane, tmp_path)
        daemons: dict[str, Daemon | LoadlineScheduler] = {
            "scheduler": scheduler, "manager": manager, "descheduler": descheduler,
        }  # fmt: skip
        base = scheduler.metrics()
        rss_before = {name: rss(daemon) for name, daemon in daemons.items()}
        started = time.monotonic()

        @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(example=examples)
        def write(example: tuple[str, tuple[Obj, bool], tuple[Obj, bool] | None, tuple[str, str] | None, Obj | None,
                                 tuple[Obj, bool] | None]) -> None:  # fmt: skip
            node, (status, usable), group, config, slo, hostile = example
            try:
                written[node].append((put_node_metric_status(api, node, status), usable))
                tally.written["NodeMetric"] += 1
            except ApiError as exc:
                assert 400 <= exc.status < 500, exc
                tally.refused["NodeMetric"] += 1
            if group is not None:
                spec, group_usable = group
                name = f"g{next(counter)}"
                body = {"apiVersion": f"{PG_GROUP}/v1alpha1", "kind": "PodGroup",
                        "metadata": {"name": name, "namespace": "fuzz"}, "spec": spec}  # fmt: skip
                try:
                    api.create(PG_PATH, body)
                    tally.written["PodGroup"] += 1
                    tally.malformed["PodGroup"] += 0 if group_usable else 1
                except ApiError as exc:
                    assert 400 <= exc.status < 500, exc
                    tally.refused["PodGroup"] += 1
            if config is not None:
                key, text = config
                cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG_MAP, "namespace": SYSTEM_NS},
                      "data": {key: text}}  # fmt: skip
                try:
                    api.replace(f"/api/v1/namespaces/{SYSTEM_NS}/configmaps/{CONFIG_MAP}", cm)
                except ApiError as exc:
                    if exc.status != 404:
                        raise
                    api.create(f"/api/v1/namespaces/{SYSTEM_NS}/configmaps", cm)
                tally.written["ConfigMap"] += 1
            if slo is not None:
                body = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": node},
                        "spec": slo}  # fmt: skip
                for _ in range(10):  # the manager writes the NodeSLO too: again on a conflict
                    try:
                        try:
                            current = api.get(f"{SLO_PATH}/{node}")
                            body["metadata"] = {"name": node, "resourceVersion": current["metadata"]["resourceVersion"]}
                            api.replace(f"{SLO_PATH}/{node}", body)
                        except ApiError as exc:
                            if exc.status != 404:
                                raise
                            api.create(SLO_PATH, body)
                        tally.written["NodeSLO"] += 1
                        break
                    except ApiError as exc:
                        assert 400 <= exc.status < 500, exc
                        if exc.status != 409:
                            tally.refused["NodeSLO"] += 1
                            break
            if hostile is not None:
                body, pod_usable = hostile
                body["metadata"]["name"] = f"hostile-{next(counter)}"
                try:
                    create_pods(api, [body])
                    tally.written["Pod"] += 1
                    tally.malformed["Pod"] += 0 if pod_usable else 1
                except ApiError as exc:
                    assert 400 <= exc.status < 500, exc
                    tally.refused["Pod"] += 1

        write()
        fuzz_seconds = time.monotonic() - started
        for node in FUZZ_NODES:
            last = written[node][-1][0]

            def delivered(node: str = node, last: int = last) -> bool:
                return watch.seen(node, last)

            wait_for(f"the watch to deliver {node}'s last version", delivered, timeout=30)
        time.sleep(1)  # a spec write of the manager's after the last status write
        for node, version in watch.freeze():
            if node in written:
                carried = max((w for w in written[node] if w[0] <= version), key=lambda w: w[0])
                tally.malformed["NodeMetric"] += 0 if carried[1] else 1
        print(f"\n{EXAMPLES} examples in {fuzz_seconds:.0f}s: written {dict(tally.written)}, "
              f"refused by the API server {dict(tally.refused)}, malformed by the oracle {dict(tally.malformed)}")

        # Every malformed version reached the scheduler and was counted, exactly once.
        def counted(kind: str) -> float:
            return metric(scheduler.metrics(), "loadline_malformed_objects_total", kind=kind) - metric(
                base, "loadline_malformed_objects_total", kind=kind)

        for kind in ("NodeMetric", "PodGroup"):
            wait_for(f"{tally.malformed[kind]} malformed {kind} versions counted",
                     lambda kind=kind: counted(kind) >= tally.malformed[kind], timeout=60)  # type: ignore[misc]
            time.sleep(1)
            assert counted(kind) == tally.malformed[kind], f"{kind}: counted {counted(kind)}, oracle {tally.malformed[kind]}"
        # Every hostile pod is counted (at least once: kwok's status updates are new versions, each reported).
        wait_for(f"{tally.malformed['Pod']} hostile pods counted",
                 lambda: counted("Pod") >= tally.malformed["Pod"], timeout=60)  # fmt: skip

        # A last unusable NodeMetric on every fuzz node; then pods for the pool and for the healthy nodes.
        for node in FUZZ_NODES:
            put_node_metric_status(api, node, {**fresh, "updateTime": rfc3339(datetime.now(UTC)),
                                               "nodeMetric": {"nodeUsage": {"resources": {"cpu": "1e16"}}}})  # fmt: skip
        for node in HEALTHY_NODES:
            put_node_metric_status(api, node, {**fresh, "updateTime": rfc3339(datetime.now(UTC))})
        time.sleep(2)
        pool = [pod(f"pool-{i}", "fuzz", cpu="500m", memory="512Mi", node_selector={POOL: "pool"}) for i in range(12)]
        healthy = [pod(f"healthy-{i}", "fuzz", cpu="500m", memory="512Mi", node_selector={POOL: "healthy"})
                   for i in range(6)]  # fmt: skip
        create_pods(api, pool + healthy)
        wait_for("every pod bound", lambda: all(placements(api, "fuzz").values()), timeout=90)
        where = Counter(n for p, n in placements(api, "fuzz").items() if p.startswith("pool-"))
        print(f"pool placements: {dict(where)}")
        for node in FUZZ_NODES:
            assert where[node] <= where[BARE_NODE] + 1, f"{node} (unusable NodeMetric) got {where[node]} pods, " \
                                                        f"the node without a NodeMetric {where[BARE_NODE]}"

        # The manager refuses an unusable config, whatever is wrong with it.
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG_MAP, "namespace": SYSTEM_NS},
              "data": {"colocation-config": "[" * 1000 + "]" * 1000}}  # fmt: skip
        api.replace(f"/api/v1/namespaces/{SYSTEM_NS}/configmaps/{CONFIG_MAP}", cm)
        wait_for("config_valid 0", lambda: metric(manager.metrics(), "loadline_manager_config_valid") == 0, timeout=30)

        growth = {name: rss(daemon) - rss_before[name] for name, daemon in daemons.items()}
        print(f"RSS growth (MiB): { {name: round(g / 2**20, 1) for name, g in growth.items()} }")
        for name, grown in growth.items():
            assert grown <= RSS_GROWTH_BOUND, f"{name} grew by {grown / 2**20:.0f} MiB"
        for name, daemon in daemons.items():
            assert daemon.component.alive(), f"{name} exited:\n{daemon.component.log_tail()}"
            assert metric(daemon.metrics(), "loadline_kube_handler_errors_total") == 0, f"{name}: a handler raised"
            log = daemon.component.log_path.read_text(errors="replace")
            assert "handler failed" not in log and "Traceback" not in log, f"{name}:\n{log[-3000:]}"
