"""Loadline against the real kube-scheduler on the same generated clusters (issue 26).

Each case of `differential_cases` is made twice on one real API server, a copy for
kube-scheduler (default-scheduler, its default profile) and one for `loadline scheduler` (its
default profile), in batches; both schedulers run side by side and decide every new pod. They
must agree case by case:

* schedulable or not at the first attempt;
* where not, on kube-scheduler's message ("0/N nodes are available: <count> <reason>, ...
  preemption: ..."), the first FailedScheduling note of each, exactly: N, every reason, every count;
* where a pod preempts (every pod of a case has its own priority, so the best candidate is
  unique), on the nominated node and the victims;
* where Loadline found a single best-scored node (`tiedNodes` 1 in its explain), on the node;
* where a first attempt failed in PreBind on a node it names (a free in-tree PV matched by its own node affinity,
  then by its CSI translation's: both schedulers do so) and the other scheduler chose another node, on the node
  where Loadline's best was unique (its explain keeps the failed attempt's `tiedNodes`), as for a placement;
* with volumes: bound, or waiting in PreBind for its claims to be provisioned on a node (the
  claims' `volume.kubernetes.io/selected-node`; no provisioner answers here), on which.

What differs on purpose is taken out first (docs/scheduling-differences.md): kube-scheduler's DRA
PostFilter's "no new claims to deallocate, " and, after a PreFilter rejection, its "not found"
(Loadline then says preemption cannot help), kube-scheduler's nomination of a pod whose PreBind
has work to do, Loadline's account of a successful preemption; and the copies' names.

Keeping the cases apart costs nothing in the messages (see differential_cases). A batch's storage
comes first; kube-controller-manager's PV controller binds its pre-bound claims (and calls those
whose PV is gone Lost) before the pods come, as it binds what the schedulers choose later. New
pods whose ephemeral volumes' claims are theirs are made behind a scheduling gate, and their
claims (which need the pod's uid) right after. A batch waits, before its new pods exist (or their
gates are lifted), until both schedulers have seen all of its nodes and pods: a sentinel pod per
scheduler, pinned to a node created last, must be bound. Between batches every object of the last
one is deleted, PVs and the other cluster-scoped storage objects included.

Knobs: LOADLINE_DIFF_CASES (default 300; `make fuzz` runs thousands), LOADLINE_DIFF_SEED (an
integer, or "random"; printed), LOADLINE_DIFF_BATCH (cases per batch), LOADLINE_DIFF_DIMENSIONS
(comma-separated subset of differential_cases.DIMENSIONS; default: all Loadline implements),
LOADLINE_DIFF_SKIP (run the cases after the first n of the seed's: to replay one batch of a long
run). The time limit grows with the number of cases.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import random
import re
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest

from scheduler_plugin.plugins.registry import IN_TREE_REGISTRY
from tests.harness.controlplane import ControlPlane
from tests.integration.differential_cases import (
    BATCH_LABEL,
    CLASSES,
    HOSTNAME,
    ROLE_LABEL,
    Case,
    Copy,
    available_dimensions,
    generate,
    pod_name,
    render_node,
    render_pod,
    storage_labels,
)
from tests.integration.differential_volumes import (
    CSI_DRIVERS,
    awaited_claims,
    deleting_claims,
    ephemeral_claims,
    gated,
    render_storage,
)
from tests.integration.scheduler_support import SCHEDULER_NAME, LoadlineScheduler, running_scheduler, scheduler_config

CASE_SECONDS = 1.0  # the test's time limit grows with LOADLINE_DIFF_CASES (a batch of 100 takes 20-60 s here)
pytestmark = [pytest.mark.integration,
              pytest.mark.timeout(300 + CASE_SECONDS * int(os.environ.get("LOADLINE_DIFF_CASES", "300")))]

Obj = dict[str, Any]
KUBE = "default-scheduler"
WORKERS = 6  # parallel API requests while a batch is created (the API server does the work; 2 cores)
DECIDE_TIMEOUT = 90.0  # seconds for both schedulers to decide every new pod of a batch
SETTLE_SECONDS = 1.5  # nominations and evictions unchanged this long: preemption has played out
# kube-scheduler's DynamicResources PostFilter (DRA, on by default) words every failed preemption with this
# first; Loadline runs no DRA (it refuses pods with resource claims): docs/scheduling-differences.md.
DRA_POSTFILTER = "no new claims to deallocate, "
# After a successful preemption kube-scheduler's note ends with the filters' reasons; Loadline's goes on to say
# whom it evicts where (scheduler_plugin/plugins/defaultpreemption/plugin.py, docs/scheduling-differences.md).
LOADLINE_NOMINATION = re.compile(r" preemption: nominated node \S+, evicting .*$")
SELECTED_NODE = "volume.kubernetes.io/selected-node"
KUBE_PREFILTER_TAIL = ". not found"
LOADLINE_NO_PREEMPTION = re.compile(
    r" preemption: (0/\d+ nodes are available: \d+ Preemption is not helpful for scheduling\.|"
    r"not eligible due to preemptionPolicy=Never\.)$")
UNDECIDED = "(undecided)"
# A PreBind failure that names the node it happened on (both schedulers' VolumeBinding: "binding volumes: pv ... node
# affinity doesn't match node ..."), in a note made neutral (`_neutral`)
PREBIND_ON_NODE = re.compile(r'^running PreBind plugin "[^"]+": .* node "b\d+-c\d+-<copy>-(\d+)"')
SHOWN = 20  # disagreements printed in full (as their batch ends)
CLAIMS_TIMEOUT = 60.0  # seconds for the PV controller to bind (or lose) a batch's claims


# --------------------------------------------------------------------------- a keep-alive client per thread
class Client:
    """JSON over one keep-alive HTTPS connection per thread (urllib would handshake TLS per request)."""

    def __init__(self, plane: ControlPlane) -> None:
        url = urllib.parse.urlsplit(plane.server)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 443
        self.token = plane.token
        self.context = ssl.create_default_context(cafile=str(plane.pki.ca_cert))
        self.local = threading.local()

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Obj]:
        for attempt in range(3):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPSConnection(self.host, self.port, context=self.context,
                                                                     timeout=60)
            try:
                data = None if body is None else json.dumps(body).encode()
                headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
                if data is not None:
                    headers["Content-Type"] = "application/merge-patch+json" if method == "PATCH" else "application/json"
                conn.request(method, path, body=data, headers=headers)
                response = conn.getresponse()
                text = response.read()
                return response.status, (json.loads(text) if text else {})
            except (http.client.HTTPException, OSError):
                conn.close()
                self.local.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def ok(self, method: str, path: str, body: Any = None) -> Obj:
        status, obj = self.request(method, path, body)
        if status >= 300:
            raise AssertionError(f"{method} {path}: {status} {obj}")
        return obj

    def create_all(self, items: Sequence[tuple[str, Obj]]) -> list[Obj]:
        return self.all("POST", items)

    def all(self, method: str, items: Sequence[tuple[str, Obj | None]]) -> list[Obj]:
        """The same request on many objects, WORKERS at a time; their answers in order."""
        with ThreadPoolExecutor(WORKERS) as pool:
            return list(pool.map(lambda item: self.ok(method, item[0], item[1]), items))


# --------------------------------------------------------------------------- what each scheduler did
@dataclass
class Outcome:
    node: int | None = None  # index of the case's node the new pod is bound to (by now)
    message: str | None = None  # the note of its first FailedScheduling event; None: placed at the first attempt
    nominated: int | None = None  # where preemption made room (the victims' Preempted events, else the status)
    victims: list[str] = field(default_factory=list)
    tied: int | None = None  # Loadline only: nodes sharing the best total at the first attempt
    provisioning: bool = False  # `node` is where its claims are to be provisioned (PreBind waits for that)

    def brief(self) -> str:
        return (f"node={self.node} nominated={self.nominated} victims={self.victims} tied={self.tied}"
                f"{' provisioning' if self.provisioning else ''}\n"
                f"      message={self.message}")


@dataclass
class Tally:
    cases: int = 0
    bound: int = 0
    unschedulable: int = 0
    preempted: int = 0
    placement_checked: int = 0
    prebind_elsewhere: int = 0  # one failed in PreBind on a node tied with the other's choice
    with_storage: int = 0  # cases with storage (the volumes dimension)
    storage_outcomes: dict[str, int] = field(default_factory=dict)  # of those: bound, provisioning, ... -> count
    disagreements: list[str] = field(default_factory=list)


def _node_index(name: str) -> int | None:
    return int(name.rsplit("-", 1)[1]) if name else None


def _first_events(client: Client, namespace: str, reason: str) -> dict[str, str]:
    """pod name -> the note of its earliest event of `reason`."""
    selector = urllib.parse.quote(f"reason={reason}")
    events = client.ok("GET", f"/api/v1/namespaces/{namespace}/events?fieldSelector={selector}")["items"]
    first: dict[str, tuple[str, str]] = {}
    for event in events:
        name = event["involvedObject"]["name"]
        when = event.get("eventTime") or event.get("firstTimestamp") or event["metadata"]["creationTimestamp"]
        if name not in first or when < first[name][0]:
            first[name] = (when, event.get("message") or "")
    return {name: note for name, (_, note) in first.items()}


def _claims_of(pod: Obj) -> list[str]:
    """The claims a pod's volumes use (a generic ephemeral volume's is `<pod>-<volume>`)."""
    out = []
    for volume in pod["spec"].get("volumes") or []:
        if "persistentVolumeClaim" in volume:
            out.append(volume["persistentVolumeClaim"]["claimName"])
        elif "ephemeral" in volume:
            out.append(f"{pod['metadata']['name']}-{volume['name']}")
    return out


def _provisioning_on(pod: Obj, claims: Obj) -> str | None:
    """The node a scheduler chose for a pod whose claims are to be provisioned there: the claims'
    `volume.kubernetes.io/selected-node` (the pod waits in PreBind until a provisioner answers; none does here)."""
    for name in _claims_of(pod):
        selected = ((claims.get(name) or {}).get("metadata", {}).get("annotations") or {}).get(SELECTED_NODE)
        if selected:
            return str(selected)
    return None


def _decided(pod: Obj, claims: Obj) -> bool:
    if pod["spec"].get("nodeName") or _provisioning_on(pod, claims):
        return True
    # Unschedulable, or failed after a node was chosen (e.g. in PreBind): SchedulerError, retried with backoff
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
               and c.get("reason") in ("Unschedulable", "SchedulerError")
               for c in pod.get("status", {}).get("conditions") or [])


def _pods(client: Client, namespace: str, batch: int, role: str) -> list[Obj]:
    selector = urllib.parse.quote(f"{BATCH_LABEL}={batch},{ROLE_LABEL}={role}")
    return list(client.ok("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")["items"])


def _claims(client: Client, namespace: str, batch: int) -> list[Obj]:
    selector = urllib.parse.quote(f"{BATCH_LABEL}={batch}")
    return list(client.ok("GET", f"/api/v1/namespaces/{namespace}/persistentvolumeclaims?labelSelector={selector}")
                ["items"])


def _state(client: Client, copies: Sequence[Copy], batch: int) -> Obj:
    """Everything the comparison reads, per copy tag: incoming pods, existing pods and claims by name."""
    return {copy.tag: {"incoming": {p["metadata"]["name"]: p for p in _pods(client, copy.namespace, batch, "incoming")},
                       "existing": {p["metadata"]["name"]: p for p in _pods(client, copy.namespace, batch, "existing")},
                       "claims": {c["metadata"]["name"]: c for c in _claims(client, copy.namespace, batch)}}
            for copy in copies}


def _fingerprint(state: Obj) -> Any:
    return {tag: ({n: (p["spec"].get("nodeName"), p.get("status", {}).get("nominatedNodeName"),
                       _decided(p, s["claims"])) for n, p in s["incoming"].items()},
                  sorted(n for n, p in s["existing"].items() if p["metadata"].get("deletionTimestamp")))
            for tag, s in state.items()}


def _wait_for_decisions(client: Client, copies: Sequence[Copy], batch: int, expected: int) -> Obj:
    deadline = time.monotonic() + DECIDE_TIMEOUT
    state = _state(client, copies, batch)
    while time.monotonic() < deadline:
        undecided = sum(not _decided(p, s["claims"]) for s in state.values() for p in s["incoming"].values())
        if undecided == 0 and all(len(s["incoming"]) == expected for s in state.values()):
            break
        time.sleep(0.5)
        state = _state(client, copies, batch)
    # Preemption goes on after the decision (nomination, evictions): wait until nothing moves.
    stable_since = time.monotonic()
    last = _fingerprint(state)
    while time.monotonic() < deadline and time.monotonic() - stable_since < SETTLE_SECONDS:
        time.sleep(0.5)
        state = _state(client, copies, batch)
        current = _fingerprint(state)
        if current != last:
            last, stable_since = current, time.monotonic()
    return state


def _outcomes(client: Client, scheduler: LoadlineScheduler, cases: Sequence[Case], copies: Sequence[Copy],
              state: Obj) -> dict[str, dict[int, Outcome]]:
    out: dict[str, dict[int, Outcome]] = {}
    for copy in copies:
        notes: dict[str, str] = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # events are written after the condition
            notes = _first_events(client, copy.namespace, "FailedScheduling")
            missing = [n for n, p in state[copy.tag]["incoming"].items()
                       if not p["spec"].get("nodeName") and not _provisioning_on(p, state[copy.tag]["claims"])
                       and n not in notes]
            if not missing:
                break
            time.sleep(0.5)
        # Where preemption made room: the node its victims' Preempted events name ("... on node <name>"), as
        # the preemptor's nominatedNodeName is gone once it is bound.
        victims_now = {n for n, p in state[copy.tag]["existing"].items() if p["metadata"].get("deletionTimestamp")}
        preempted = _first_events(client, copy.namespace, "Preempted")
        while time.monotonic() < deadline and not victims_now <= preempted.keys():
            time.sleep(0.5)
            preempted = _first_events(client, copy.namespace, "Preempted")
        per_case: dict[int, Outcome] = {}
        for case in cases:
            name = pod_name(case, case.incoming, copy)
            pod = state[copy.tag]["incoming"].get(name)
            outcome = Outcome()
            if pod is None or not _decided(pod, state[copy.tag]["claims"]):
                outcome.message = UNDECIDED
            else:
                provisioning = None if pod["spec"].get("nodeName") else _provisioning_on(pod, state[copy.tag]["claims"])
                outcome.provisioning = provisioning is not None
                outcome.node = _node_index(pod["spec"].get("nodeName") or provisioning or "")
                outcome.nominated = _node_index(pod.get("status", {}).get("nominatedNodeName") or "")
                outcome.message = _neutral(notes.get(name), copy)
                if outcome.message is not None and copy.scheduler == KUBE:
                    outcome.message = outcome.message.replace(f". {DRA_POSTFILTER}", ". ", 1)
                elif outcome.message is not None:
                    outcome.message = LOADLINE_NOMINATION.sub("", outcome.message)
            victims = []
            made_room_on = set()
            for existing in case.existing:
                victim = pod_name(case, existing, copy)
                obj = state[copy.tag]["existing"].get(victim)
                if obj is None or obj["metadata"].get("deletionTimestamp"):
                    victims.append(existing.name)
                if victim in preempted:
                    made_room_on.add(preempted[victim].rsplit(" ", 1)[-1])
            outcome.victims = sorted(victims)
            if made_room_on:
                outcome.nominated = _node_index(made_room_on.pop()) if len(made_room_on) == 1 else -1
            elif copy.scheduler == KUBE and outcome.nominated is not None and outcome.nominated == outcome.node:
                # kube-scheduler's NominatedNodeNameForExpectation (beta, on): a pod whose PreBind has work to do (its
                # volumes) is nominated to its node first; Loadline does not (docs/scheduling-differences.md).
                outcome.nominated = None
            if copy.scheduler == SCHEDULER_NAME and (outcome.node is not None or _prebind_node(outcome) is not None):
                outcome.tied = _first_tied(scheduler, copy.namespace, name)
            per_case[case.index] = outcome
        out[copy.tag] = per_case
    return out


def _first_tied(scheduler: LoadlineScheduler, namespace: str, name: str) -> int | None:
    """How many nodes shared Loadline's best total at the pod's first attempt (its explain keeps the last attempt and,
    in brief, the last one whose binding failed); None if neither is the first."""
    status, doc = scheduler.get_json(f"/explain/{namespace}/{name}")
    if status != 200:
        return None
    for attempt in (doc.get("attempt"), doc.get("lastBindFailure")):
        if attempt and attempt.get("attempts") == 1:
            return attempt.get("tiedNodes")
    return None


def _prebind_node(outcome: Outcome) -> int | None:
    """The node a first attempt chose and then failed on in PreBind, where its note names it."""
    match = PREBIND_ON_NODE.match(outcome.message or "")
    return int(match.group(1)) if match else None


def _neutral(message: str | None, copy: Copy) -> str | None:
    """A note without what differs between the copies: the namespace, and the copy's tag in the names of its
    nodes, PVs and other cluster-scoped objects ("b0-c7-k-pv1")."""
    if message is None:
        return None
    message = message.replace(f"{copy.namespace}/", "<namespace>/")
    return re.sub(rf"\b(b{copy.batch}-c\d+)-{copy.tag}-", r"\1-<copy>-", message)


def _reasons(message: str | None) -> Obj:
    """The message taken apart (for the report): N, reason -> count, and the same for preemption."""
    if not message:
        return {}
    head, _, post = message.partition(" preemption: ")
    parts: Obj = {}
    for label, text in (("filter", head), ("preemption", post)):
        match = re.match(r"0/(\d+) nodes are available: (.*)", text)
        if match:
            parts[label] = {"nodes": int(match.group(1)),
                            "reasons": dict((r, int(n)) for n, r in re.findall(r"(\d+) ([^,]+?)(?=, \d+ |\.$|$)",
                                                                                  match.group(2)))}
    return parts


def _without_prefilter_postfilter(kube: str | None, ours: str | None) -> tuple[str | None, str | None]:
    """After a PreFilter rejection kube-scheduler v1.36's DynamicResources PostFilter fails ("not found": the state
    its PreFilter never wrote), so no preemption is tried and the note ends "... . not found"; Loadline's PostFilter
    runs and says preemption cannot help. Both are taken out, the latter only when it says so
    (docs/scheduling-differences.md)."""
    if kube is None or ours is None or not kube.endswith(KUBE_PREFILTER_TAIL):
        return kube, ours
    return kube[: -len(KUBE_PREFILTER_TAIL)] + ".", LOADLINE_NO_PREEMPTION.sub("", ours)


def _compare(case: Case, kube: Outcome, ours: Outcome, tally: Tally) -> None:
    """The first attempt's verdict and message, the preemption, and the node where Loadline's best was unique.
    What happens after a preemption depends on when each retries while the victims terminate (here they never
    finish: no kubelet), so a preemptor bound by one and still waiting in the other agrees if both made room
    on the same node by the same victims."""
    tally.cases += 1
    problems = []
    kube_message, our_message = _without_prefilter_postfilter(kube.message, ours.message)
    # The node each chose at the first attempt, where one of them failed in PreBind there: which node fails PreBind
    # is a matter of the node chosen, so on different nodes this is a placement, checked where Loadline's best was
    # unique.
    kube_chose = _prebind_node(kube) if kube.message is not None else kube.node
    our_choice = _prebind_node(ours) if ours.message is not None else ours.node
    chose_apart = (kube_chose is not None and our_choice is not None and kube_chose != our_choice
                   and (_prebind_node(kube) is not None or _prebind_node(ours) is not None))
    if UNDECIDED in (kube.message, ours.message):
        problems.append(f"undecided after {DECIDE_TIMEOUT:.0f}s")
    elif chose_apart:
        if ours.tied == 1:
            problems.append("node (Loadline's best total was unique; one of them failed in PreBind)")
        elif ours.tied is None:
            problems.append("node (one of them failed in PreBind; Loadline's first attempt is not in its explain)")
        else:
            tally.prebind_elsewhere += 1
    elif (kube.message is None) != (ours.message is None):
        problems.append("schedulable or not (first attempt)")
    elif kube_message != our_message:
        problems.append(f"message: kube {_reasons(kube.message)} vs loadline {_reasons(ours.message)}")
    if (kube.nominated, kube.victims) != (ours.nominated, ours.victims):
        problems.append("preemption (nominated node, victims)")
    if kube.provisioning != ours.provisioning and kube.node == ours.node:  # (on tied nodes one may bind, one provision)
        problems.append("bound or waiting for provisioning")
    preempted = bool(kube.victims or ours.victims)
    if kube.message is None and ours.message is None and not preempted:
        if kube.node is None or ours.node is None:
            problems.append("bound at the first attempt, then not")
        elif ours.tied == 1:
            tally.placement_checked += 1
            if kube.node != ours.node:
                problems.append("node (Loadline's best total was unique)")
    if preempted:
        kind = "preemption"
        tally.preempted += 1
    elif kube.message is None:
        kind = "provisioning" if kube.provisioning else "bound"
        tally.bound += 1
    else:
        kind = "unschedulable"
        tally.unschedulable += 1
    if case.storage is not None:
        tally.with_storage += 1
        tally.storage_outcomes[kind] = tally.storage_outcomes.get(kind, 0) + 1
    if problems:
        tally.disagreements.append(
            f"{'; '.join(problems)}\n  kube-scheduler: {kube.brief()}\n  loadline:       {ours.brief()}\n"
            f"{case.describe()}")


# --------------------------------------------------------------------------- batches
def _run_batch(client: Client, scheduler: LoadlineScheduler, cases: Sequence[Case], batch: int, tally: Tally) -> None:
    copies = [Copy("k", "diff-k", KUBE, batch), Copy("l", "diff-l", SCHEDULER_NAME, batch)]
    marks = [("start", time.monotonic())]
    # Storage first (classes, capacities, PVs, claims, CSINodes, attachments), and a new pod's ephemeral volume
    # claims that are not its own; claims to be "being deleted" are deleted now (a finalizer holds them).
    storage = [item for case in cases for copy in copies
               for item in render_storage(case, copy, labels=storage_labels(case, copy))]
    # PVs before claims: a pre-bound claim the PV controller sees before its PV waits for its periodic resync (15 s)
    client.create_all([item for item in storage if item[1]["kind"] != "PersistentVolumeClaim"])
    client.create_all([item for item in storage if item[1]["kind"] == "PersistentVolumeClaim"])
    client.create_all([item for case in cases if not gated(case.incoming) for copy in copies
                       for item in ephemeral_claims(case, case.incoming, copy, render_pod(case, case.incoming, copy),
                                                    labels=storage_labels(case, copy))])
    client.all("DELETE", [(path, None) for case in cases for copy in copies for path in deleting_claims(case, copy)])
    marks.append(("storage", time.monotonic()))
    nodes = [("/api/v1/nodes", render_node(case, i, copy)) for case in cases for copy in copies
             for i in range(len(case.nodes))]
    client.create_all(nodes)
    marks.append(("nodes", time.monotonic()))
    existing = [(f"/api/v1/namespaces/{copy.namespace}/pods", render_pod(case, pod, copy))
                for case in cases for copy in copies for pod in case.existing]
    client.create_all(existing)
    marks.append(("existing", time.monotonic()))
    # New pods whose ephemeral volumes' claims must be theirs (controlled by them: their uid) are made now behind a
    # scheduling gate, and their claims; the gate is lifted when the other new pods come.
    held = [(case, copy) for case in cases if gated(case.incoming) for copy in copies]
    made = client.create_all([(f"/api/v1/namespaces/{copy.namespace}/pods", render_pod(case, case.incoming, copy))
                              for case, copy in held])
    client.create_all([item for (case, copy), pod in zip(held, made, strict=True)
                       for item in ephemeral_claims(case, case.incoming, copy, pod, labels=storage_labels(case, copy))])
    _wait_for_claims(client, cases, copies)
    marks.append(("claims", time.monotonic()))
    # The barrier: a node created after all others, a pod per scheduler pinned to it, created after all pods.
    sentinel = f"b{batch}-sentinel"
    client.ok("POST", "/api/v1/nodes", {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": sentinel, "labels": {HOSTNAME: sentinel, BATCH_LABEL: str(batch)}},
        "status": {"allocatable": {"cpu": "4", "memory": "4Gi", "pods": "10"},
                   "capacity": {"cpu": "4", "memory": "4Gi", "pods": "10"}}})
    for copy in copies:
        client.ok("POST", f"/api/v1/namespaces/{copy.namespace}/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"b{batch}-sentinel", "labels": {BATCH_LABEL: str(batch), ROLE_LABEL: "sentinel"}},
            "spec": {"schedulerName": copy.scheduler, "nodeSelector": {HOSTNAME: sentinel},
                     "containers": [{"name": "c", "image": "sentinel:1"}]}})
    deadline = time.monotonic() + 60
    while not all(p["spec"].get("nodeName") for copy in copies for p in _pods(client, copy.namespace, batch, "sentinel")):
        assert time.monotonic() < deadline, f"batch {batch}: the sentinel pods were not bound within 60s"
        time.sleep(0.2)
    marks.append(("barrier", time.monotonic()))
    incoming = [(f"/api/v1/namespaces/{copy.namespace}/pods", render_pod(case, case.incoming, copy))
                for case in cases if not gated(case.incoming) for copy in copies]
    client.create_all(incoming)
    client.all("PATCH", [(f"/api/v1/namespaces/{copy.namespace}/pods/{pod_name(case, case.incoming, copy)}",
                          {"spec": {"schedulingGates": None}}) for case, copy in held])
    marks.append(("incoming", time.monotonic()))
    state = _wait_for_decisions(client, copies, batch, len(cases))
    marks.append(("decided", time.monotonic()))
    outcomes = _outcomes(client, scheduler, cases, copies, state)
    marks.append(("read", time.monotonic()))
    for case in cases:
        _compare(case, outcomes["k"][case.index], outcomes["l"][case.index], tally)
    _delete_batch(client, cases, copies, batch)
    marks.append(("deleted", time.monotonic()))
    print("[differential]   " + ", ".join(f"{name} {t - prev:.1f}s" for (_, prev), (name, t) in itertools.pairwise(marks)))


def _wait_for_claims(client: Client, cases: Sequence[Case], copies: Sequence[Copy]) -> None:
    """Until kube-controller-manager's PV controller has bound every pre-bound claim to its PV and called the
    claims whose PV is gone Lost: the schedulers must not see them half-way."""
    awaited = {copy.tag: {name: phase for case in cases for name, phase in awaited_claims(case, copy).items()}
               for copy in copies}
    deadline = time.monotonic() + CLAIMS_TIMEOUT
    while True:
        behind = []
        for copy in copies:
            if awaited[copy.tag]:
                phases = {c["metadata"]["name"]: c.get("status", {}).get("phase")
                          for c in _claims(client, copy.namespace, copy.batch)}
                behind += [f"{copy.namespace}/{n}: {phases.get(n)}, not {p}" for n, p in awaited[copy.tag].items()
                           if phases.get(n) != p]
        if not behind:
            return
        assert time.monotonic() < deadline, f"the PV controller did not get to {behind[:10]} ({len(behind)})"
        time.sleep(0.3)


STORAGE_KINDS = ("/api/v1/persistentvolumes", "/apis/storage.k8s.io/v1/storageclasses",
                 "/apis/storage.k8s.io/v1/csinodes", "/apis/storage.k8s.io/v1/volumeattachments")


def _delete_batch(client: Client, cases: Sequence[Case], copies: Sequence[Copy], batch: int) -> None:
    """The new pods first (so that no scheduler retries them on every later deletion), the others, then claims, the
    cluster-scoped storage and the nodes. Object by object, WORKERS at a time: a collection DELETE is one object
    after the other on the server."""
    for role in ("incoming", "existing", "sentinel"):
        selector = urllib.parse.quote(f"{BATCH_LABEL}={batch},{ROLE_LABEL}={role}")
        _delete_listed(client, [f"/api/v1/namespaces/{copy.namespace}/pods" for copy in copies], selector)
    client.all("PATCH", [(path, {"metadata": {"finalizers": None}})
                         for case in cases for copy in copies for path in deleting_claims(case, copy)])
    selector = urllib.parse.quote(f"{BATCH_LABEL}={batch}")
    _delete_listed(client, [f"{prefix}/namespaces/{copy.namespace}/{kind}" for copy in copies
                            for prefix, kind in (("/api/v1", "persistentvolumeclaims"),
                                                 ("/apis/storage.k8s.io/v1", "csistoragecapacities"))], selector)
    _delete_listed(client, STORAGE_KINDS, selector)
    _delete_listed(client, ["/api/v1/nodes"], selector)


def _delete_listed(client: Client, collections: Sequence[str], selector: str) -> None:
    now = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    paths = [f"{collection}/{item['metadata']['name']}" for collection in collections
             for item in client.ok("GET", f"{collection}?labelSelector={selector}")["items"]]
    with ThreadPoolExecutor(WORKERS) as pool:
        for status, obj in pool.map(lambda path: client.request("DELETE", path, now), paths):
            if status >= 300 and status != 404:
                raise AssertionError(f"DELETE: {status} {obj}")


def _wait_for_storage_gone(client: Client) -> list[str]:
    """The PVs and claims of any batch still there after 60 s (a claim "being deleted" that kept its finalizer)."""
    selector = urllib.parse.quote(BATCH_LABEL)
    deadline = time.monotonic() + 60
    while True:
        left = [f"{path.rsplit('/', 1)[1]} {o['metadata']['name']}"
                for path in ("/api/v1/persistentvolumes", "/api/v1/persistentvolumeclaims")
                for o in client.ok("GET", f"{path}?labelSelector={selector}")["items"]]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


# --------------------------------------------------------------------------- fixtures and the test
@pytest.fixture(scope="module")
def diff_plane() -> Iterator[ControlPlane]:
    """A control plane of this module's own: the messages count every node, so no other test's may come or go."""
    # Without StorageObjectInUseProtection's finalizers a batch's claims and PVs go at once when deleted (with them,
    # two more controllers and four more writes per pair would do it); what the schedulers decide is the same.
    plane = ControlPlane.start(disable_admission=("StorageObjectInUseProtection",))
    try:
        client = Client(plane)
        classes = [("/apis/scheduling.k8s.io/v1/priorityclasses",
                    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                     "metadata": {"name": f"diff-{value}{suffix}"}, "value": value,
                     **({"preemptionPolicy": "Never"} if suffix else {})})
                   for value in CLASSES for suffix in ("", "-never")]
        client.create_all(classes)
        client.create_all([("/apis/storage.k8s.io/v1/csidrivers", driver) for driver in CSI_DRIVERS])
        for tag in ("k", "l"):
            client.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": f"diff-{tag}"}})
        # Claims get bound as in a cluster: the schedulers choose, the PV controller binds (at its client's default
        # 20 requests/s binding a batch's claims would take most of a minute). No ephemeral volume controller: the
        # test makes those claims.
        plane.start_controller_manager(("persistentvolume-binder-controller",),
                                       extra_args=("--kube-api-qps=1000", "--kube-api-burst=1000"))
        yield plane
    finally:
        plane.stop()


def _settings() -> tuple[int, int, int, int, tuple[str, ...]]:
    cases = int(os.environ.get("LOADLINE_DIFF_CASES", "300"))
    skip = int(os.environ.get("LOADLINE_DIFF_SKIP", "0"))
    seed_text = os.environ.get("LOADLINE_DIFF_SEED", "26")
    seed = random.SystemRandom().randrange(2**31) if seed_text == "random" else int(seed_text)
    batch = int(os.environ.get("LOADLINE_DIFF_BATCH", "100"))
    wanted = os.environ.get("LOADLINE_DIFF_DIMENSIONS")
    dimensions = tuple(d for d in wanted.split(",") if d) if wanted else available_dimensions(IN_TREE_REGISTRY)
    return cases, skip, seed, batch, dimensions


def test_loadline_decides_like_kube_scheduler(diff_plane: ControlPlane) -> None:
    count, skip, seed, batch_size, dimensions = _settings()
    print(f"\n[differential] {count} cases{f' after the first {skip}' if skip else ''}, seed {seed}, batches of "
          f"{batch_size}, dimensions {','.join(dimensions)}")
    cases = generate(seed, skip + count, dimensions)[skip:]
    client = Client(diff_plane)
    kube = diff_plane.start_kube_scheduler([{"schedulerName": KUBE}], name="kube-scheduler-diff")
    tally = Tally()
    started = time.monotonic()
    try:
        with running_scheduler(diff_plane, scheduler_config()) as scheduler:
            for b, first in enumerate(range(0, len(cases), batch_size)):
                chunk = cases[first:first + batch_size]
                batch_started = time.monotonic()
                before = len(tally.disagreements)
                _run_batch(client, scheduler, chunk, b, tally)
                print(f"[differential] batch {b}: {len(chunk)} cases in {time.monotonic() - batch_started:.1f}s, "
                      f"{len(tally.disagreements)} disagreements so far")
                for text in tally.disagreements[before:][:max(0, SHOWN - before)]:
                    print("[differential] DISAGREEMENT " + text)
    except BaseException:
        print(diff_plane.log_report(60))
        raise
    finally:
        diff_plane.stop_component(kube)
    elapsed = time.monotonic() - started
    print(f"[differential] {tally.cases} cases in {elapsed:.0f}s: both bound {tally.bound} (same node checked where "
          f"Loadline's best was unique: {tally.placement_checked}), both unschedulable {tally.unschedulable}, "
          f"PreBind failed for one on a node tied with the other's {tally.prebind_elsewhere}, "
          f"preemption {tally.preempted}; {len(tally.disagreements)} disagreements")
    if tally.with_storage:
        print(f"[differential] of them with storage: {tally.with_storage} ("
              + ", ".join(f"{kind} {n}" for kind, n in sorted(tally.storage_outcomes.items())) + ")")
    left = _wait_for_storage_gone(client)
    assert not left, f"storage of the batches left behind: {left[:10]} ({len(left)})"
    assert tally.cases == count
    assert tally.bound and tally.unschedulable, "the cases exercise both outcomes"
    if "volumes" in dimensions and count >= 100:
        assert {"bound", "unschedulable"} <= tally.storage_outcomes.keys(), "the cases with storage exercise both"
    assert not tally.disagreements, f"{len(tally.disagreements)} of {count} cases disagree (seed {seed}); see above"
