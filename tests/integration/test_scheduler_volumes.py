"""The volume plugins decide as the real kube-scheduler does (issue 28): same objects, both schedulers.

Every case is built twice on the session's API server, once per scheduler ("kube": the real kube-scheduler
v1.36 with a profile of its own, "ours": `loadline scheduler`), each copy with its own kwok nodes, namespace,
PVs, StorageClasses and CSI objects (names prefixed per copy), so neither scheduler's bindings touch the
other's objects. kube-controller-manager runs its PV binder and ephemeral volume controllers, so claims get
bound as in a cluster. All cases run at once; then, per case, the two outcomes must be the same: bound to the
same (logical) node, marked for provisioning on the same node, or unschedulable with the same FailedScheduling
reasons and per-reason node counts (the nodes of other cases and tests only add a "didn't match Pod's node
affinity/selector" count, which is left out, as is the preemption part of the message).
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests import objects
from tests.harness.controlplane import ControlPlane, fake_node
from tests.integration.scheduler_support import SCHEDULER_NAME, Api, ApiError, running_scheduler, scheduler_config
from tests.storage_objects import (
    HOSTNAME,
    claim,
    csi_driver,
    csi_node,
    node_affinity,
    persistent_volume,
    storage_capacity,
    storage_class,
    with_claims,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

Obj = dict[str, Any]
KUBE_PROFILE = "kube-volumes"
SIDES = {"kube": KUBE_PROFILE, "ours": SCHEDULER_NAME}
ZONE = "topology.kubernetes.io/zone"
DECIDE_SECONDS = 90
STABLE_SECONDS = 5


@dataclass
class Side:
    """One copy of a case: its name prefix for cluster-scoped objects and its namespace."""

    side: str
    case: str
    run: str

    @property
    def prefix(self) -> str:
        return f"{self.side}-{self.case}-{self.run}"

    @property
    def namespace(self) -> str:
        return self.prefix

    def n(self, name: str) -> str:
        """A cluster-scoped object's name in this copy."""
        return f"{self.prefix}-{name}"

    def pod(self, name: str = "p", **spec: Any) -> Obj:
        return objects.for_api_server(objects.pod(
            name, "10m", None, namespace=self.namespace, image="fake", scheduler_name=SIDES[self.side],
            node_selector={"loadline.test/copy": self.prefix}, **spec))  # fmt: skip

    def node_labels(self, labels: dict[str, str]) -> dict[str, str]:
        return {"loadline.test/copy": self.prefix, **labels}


@dataclass
class Case:
    name: str
    nodes: dict[str, dict[str, str]]  # logical node -> labels
    objects: Callable[[Side], list[Obj]]  # created before the pod (nodes' names via side.n)
    pod: Callable[[Side], Obj]
    existing: Callable[[Side], list[Obj]] = field(default=lambda s: [])  # pods already on a node (nodeName set)


def local_class(s: Side, name: str = "local", **kw: Any) -> Obj:
    return storage_class(s.n(name), **kw)


def bound_pv(s: Side, pv: str, claim_name: str, *, cls: str, **kw: Any) -> list[Obj]:
    """A PV pre-bound to a claim (the PV controller binds them) and the claim."""
    return [persistent_volume(s.n(pv), storage_class=s.n(cls), claim_ref=(s.namespace, claim_name, ""), **kw),
            claim(claim_name, s.namespace, storage_class=s.n(cls), volume_name=s.n(pv))]  # fmt: skip


def pod_with(*claims: str, **kw: Any) -> Callable[[Side], Obj]:
    return lambda s: with_claims(s.pod(), *claims, **kw)


def csi_pv(s: Side, pv: str, claim_name: str, handle: str, driver: str) -> list[Obj]:
    return bound_pv(s, pv, claim_name, cls="csi", csi=(driver, handle))


def malformed_affinity() -> Obj:
    affinity = node_affinity({})
    affinity["required"]["nodeSelectorTerms"] = [
        {"matchExpressions": [{"key": "rank", "operator": "Gt", "values": ["high"]}]}]  # fmt: skip
    return affinity


def ephemeral_pod(s: Side) -> Obj:
    template = {"spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": s.n("local"),
                         "resources": {"requests": {"storage": "1Gi"}}}}  # fmt: skip
    return s.pod(volumes=[{"name": "scratch", "ephemeral": {"volumeClaimTemplate": template}}])


CASES = [
    Case("bound-local", {"n1": {}, "n2": {}},
         lambda s: [local_class(s), *bound_pv(s, "pv", "data", cls="local", hostname=s.n("n2"))], pod_with("data")),
    Case("wffc-static", {"n1": {}, "n2": {}},
         lambda s: [local_class(s), persistent_volume(s.n("pv"), "2Gi", storage_class=s.n("local"), hostname=s.n("n2")),
                    claim("data", s.namespace, storage_class=s.n("local"))], pod_with("data")),
    Case("wffc-none", {"n1": {}, "n2": {}},
         lambda s: [local_class(s), claim("data", s.namespace, storage_class=s.n("local"))], pod_with("data")),
    Case("wffc-too-small", {"n1": {}, "n2": {}},
         lambda s: [local_class(s), persistent_volume(s.n("pv"), "1Gi", storage_class=s.n("local"), hostname=s.n("n1")),
                    claim("data", s.namespace, storage_class=s.n("local"), request="5Gi")], pod_with("data")),
    Case("bound-and-unbound", {"n1": {}, "n2": {}},
         lambda s: [local_class(s), *bound_pv(s, "pv-a", "a", cls="local", hostname=s.n("n1")),
                    persistent_volume(s.n("pv-b"), storage_class=s.n("local"), hostname=s.n("n2")),
                    claim("b", s.namespace, storage_class=s.n("local"))], pod_with("a", "b")),
    Case("immediate-unbound", {"n1": {}},
         lambda s: [local_class(s, "now", mode="Immediate"), claim("data", s.namespace, storage_class=s.n("now"))],
         pod_with("data")),
    Case("missing-claim", {"n1": {}}, lambda s: [], pod_with("data")),
    Case("ephemeral", {"n1": {}, "n2": {}},
         lambda s: [local_class(s), persistent_volume(s.n("pv"), storage_class=s.n("local"), hostname=s.n("n2"))],
         ephemeral_pod),
    Case("malformed-pv-affinity", {"n1": {}, "n2": {}},
         lambda s: [local_class(s), *bound_pv(s, "pv", "data", cls="local", affinity=malformed_affinity())],
         pod_with("data")),
    Case("provision-topology", {"n1": {ZONE: "z1"}, "n2": {ZONE: "z2"}},
         lambda s: [storage_class(s.n("fast"), provisioner="example.com/none", allowed_topologies={ZONE: ["z2"]}),
                    claim("data", s.namespace, storage_class=s.n("fast"))], pod_with("data")),
    Case("provision-capacity", {"n1": {ZONE: "z1"}, "n2": {ZONE: "z2"}},
         lambda s: [storage_class(s.n("cap"), provisioner=s.n("csi.example.com")),
                    csi_driver(s.n("csi.example.com"), storage_capacity=True),
                    storage_capacity("z1", s.n("cap"), "1Gi", namespace=s.namespace, node_labels={ZONE: "z1"}),
                    storage_capacity("z2", s.n("cap"), "100Gi", namespace=s.namespace, node_labels={ZONE: "z2"}),
                    claim("data", s.namespace, storage_class=s.n("cap"), request="10Gi")], pod_with("data")),
    Case("no-free-storage", {"n1": {ZONE: "z1"}, "n2": {ZONE: "z2"}},
         lambda s: [storage_class(s.n("cap"), provisioner=s.n("csi.example.com")),
                    csi_driver(s.n("csi.example.com"), storage_capacity=True),
                    storage_capacity("z1", s.n("cap"), "1Gi", namespace=s.namespace, node_labels={ZONE: "z1"}),
                    claim("data", s.namespace, storage_class=s.n("cap"), request="10Gi")], pod_with("data")),
    Case("zone-match", {"n1": {ZONE: "z1"}, "n2": {ZONE: "z2"}},
         lambda s: [local_class(s), *bound_pv(s, "pv", "data", cls="local", labels={ZONE: "z2"})], pod_with("data")),
    Case("zone-none", {"n1": {ZONE: "z1"}, "n2": {ZONE: "z3"}},
         lambda s: [local_class(s), *bound_pv(s, "pv", "data", cls="local", labels={ZONE: "z2"})], pod_with("data")),
    Case("read-write-once-pod", {"n1": {}, "n2": {}},
         lambda s: [local_class(s), persistent_volume(s.n("pv"), storage_class=s.n("local"),
                                                      access_modes=["ReadWriteOncePod"],
                                                      claim_ref=(s.namespace, "data", "")),
                    claim("data", s.namespace, storage_class=s.n("local"), access_modes=["ReadWriteOncePod"],
                          volume_name=s.n("pv"))],
         pod_with("data"), existing=lambda s: [with_claims(s.pod("user", nodeName=s.n("n1")), "data")]),
    Case("disk-conflict", {"n1": {}},
         lambda s: [],
         pod_with(inline=[{"name": "disk", "iscsi": {"targetPortal": "10.0.0.1:3260", "iqn": "iqn.2026-01.test:d",
                                                      "lun": 0}}]),
         existing=lambda s: [with_claims(s.pod("user", nodeName=s.n("n1")), inline=[
             {"name": "disk", "iscsi": {"targetPortal": "10.0.0.1:3260", "iqn": "iqn.2026-01.test:d", "lun": 0}}])]),
    Case("volume-limits", {"n1": {}, "n2": {}},
         lambda s: [*csi_pv(s, "pv-1", "one", "h1", s.n("csi.example.com")),
                    *csi_pv(s, "pv-2", "two", "h2", s.n("csi.example.com")),
                    csi_node(s.n("n1"), {s.n("csi.example.com"): 1}), csi_node(s.n("n2"), {s.n("csi.example.com"): 1})],
         pod_with("two"), existing=lambda s: [with_claims(s.pod("user", nodeName=s.n("n1")), "one")]),
    Case("volume-limits-full", {"n1": {}},
         lambda s: [*csi_pv(s, "pv-1", "one", "h1", s.n("csi.example.com")),
                    *csi_pv(s, "pv-2", "two", "h2", s.n("csi.example.com")),
                    csi_node(s.n("n1"), {s.n("csi.example.com"): 1})],
         pod_with("two"), existing=lambda s: [with_claims(s.pod("user", nodeName=s.n("n1")), "one")]),
]  # fmt: skip


# --------------------------------------------------------------------------- running every case on both
Outcome = tuple[str, str]  # ("bound" | "provisioning", logical node) or ("unschedulable" | "error", message)


def path_of(obj: Obj) -> str:
    kind, meta = obj["kind"], obj["metadata"]
    plural = {"PersistentVolume": "persistentvolumes", "PersistentVolumeClaim": "persistentvolumeclaims",
              "Pod": "pods", "StorageClass": "storageclasses", "CSINode": "csinodes", "CSIDriver": "csidrivers",
              "CSIStorageCapacity": "csistoragecapacities", "Namespace": "namespaces"}[kind]  # fmt: skip
    group = "/api/v1" if obj["apiVersion"] == "v1" else f"/apis/{obj['apiVersion']}"
    namespace = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
    return f"{group}{namespace}/{plural}"


def for_api(obj: Obj) -> Obj:
    """A builder's object as one creates it (the API server sets uid and resourceVersion)."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("uid", "resourceVersion")}
    return {**obj, "metadata": meta}


def outcome(api: Api, s: Side, pod_name: str = "p") -> Outcome | None:
    try:
        pod = api.get(f"/api/v1/namespaces/{s.namespace}/pods/{pod_name}")
    except ApiError:
        return None
    logical = {s.n(name): name for name in ("n1", "n2", "n3")}
    if node := pod["spec"].get("nodeName"):
        return "bound", logical.get(node, node)
    for volume in pod["spec"].get("volumes") or []:
        name = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if name:
            with contextlib.suppress(ApiError):
                pvc = api.get(f"/api/v1/namespaces/{s.namespace}/persistentvolumeclaims/{name}")
                selected = pvc["metadata"].get("annotations", {}).get("volume.kubernetes.io/selected-node")
                if selected:
                    return "provisioning", logical.get(selected, selected)
    for cond in pod.get("status", {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("message"):
            kind = "unschedulable" if cond.get("reason") == "Unschedulable" else "error"
            return kind, normalize(cond["message"], s)
    return None


def normalize(message: str, s: Side) -> str:
    """The FailedScheduling reasons without the copy's prefix, the cluster's node count, the nodes of other
    copies (node affinity/selector) and what PostFilter added. (After a PreFilter rejection kube-scheduler
    v1.36 appends " not found": its DynamicResources PostFilter fails on the state its PreFilter never wrote.)"""
    main = re.sub(r"^0/\d+ nodes are available: ", "", message.replace(f"{s.prefix}-", ""))
    main = main.split(". ", 1)[0].rstrip(".")
    parts = [p for p in main.split(", ") if "didn't match Pod's node affinity/selector" not in p]
    return ", ".join(parts)


@pytest.fixture(scope="module")
def pv_controller(control_plane: ControlPlane) -> Iterator[None]:
    """kube-controller-manager with only the PV binder and the ephemeral volume controller (nothing else of it acts
    on the other tests' objects), for this module."""
    kcm = control_plane.start_controller_manager(("persistentvolume-binder-controller", "ephemeral-volume-controller"))
    try:
        yield
    finally:
        control_plane.stop_component(kcm)


@pytest.fixture(scope="module")
def decided(control_plane: ControlPlane, kwok: Any, pv_controller: None) -> Iterator[dict[str, dict[str, Outcome | None]]]:
    plane, api = control_plane, Api(control_plane)
    run = uuid.uuid4().hex[:4]
    sides = [(case, Side(side, case.name, run)) for case in CASES for side in SIDES]
    created: list[Obj] = []
    with contextlib.ExitStack() as stack:
        kube = plane.start_kube_scheduler([{"schedulerName": KUBE_PROFILE}], name=f"kube-scheduler-volumes-{run}")
        stack.callback(plane.stop_component, kube)
        stack.enter_context(running_scheduler(plane, scheduler_config()))
        stack.callback(_delete, api, created)
        nodes = [fake_node(s.n(n), labels=s.node_labels({HOSTNAME: s.n(n), **labels}))
                 for case, s in sides for n, labels in case.nodes.items()]  # fmt: skip
        plane.apply(nodes)
        created += nodes
        plane.kubectl("wait", "--for=condition=Ready", "node", *(n["metadata"]["name"] for n in nodes), "--timeout=90s",
                      timeout=100)  # fmt: skip
        for case, s in sides:
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": s.namespace}}
            api.create(path_of(namespace), namespace)
            created.append(namespace)
            for obj in [*case.objects(s), *case.existing(s)]:
                api.create(path_of(obj), for_api(obj))
                created.append(obj)
        prebound = [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in created
                    if o["kind"] == "PersistentVolumeClaim" and o["spec"].get("volumeName")]  # fmt: skip
        wait_bound(api, prebound)
        for case, s in sides:
            api.create(f"/api/v1/namespaces/{s.namespace}/pods", case.pod(s))
        yield collect(api, sides)


def wait_bound(api: Api, claims: list[tuple[str, str]], timeout: float = 60) -> None:
    """Until the PV controller bound every pre-bound claim (a scheduler seeing one half-bound would say so)."""
    deadline = time.monotonic() + timeout
    while claims:
        claims = [(ns, name) for ns, name in claims
                  if api.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}")["status"].get("phase") != "Bound"]
        assert time.monotonic() < deadline, f"the PV controller did not bind {claims}"
        time.sleep(0.5)


def collect(api: Api, sides: list[tuple[Case, Side]]) -> dict[str, dict[str, Outcome | None]]:
    """Each copy's outcome once both copies of every case agree and a rejection has held for a few seconds (a
    pod may be refused until a controller catches up, e.g. the ephemeral volume controller creating its claim),
    or at the deadline."""
    results: dict[str, dict[str, Outcome | None]] = {case.name: {} for case in CASES}
    since: dict[str, tuple[tuple[Outcome | None, ...], float]] = {}
    deadline = time.monotonic() + DECIDE_SECONDS
    while time.monotonic() < deadline:
        now = time.monotonic()
        for case, s in sides:
            results[case.name][s.side] = outcome(api, s)
        settled = True
        for name, by_side in results.items():
            seen = tuple(by_side.get(side) for side in SIDES)
            if seen != since.get(name, ((), 0.0))[0]:
                since[name] = (seen, now)
            kube, ours = seen
            final = kube is not None and kube == ours and (kube[0] in ("bound", "provisioning")
                                                           or now - since[name][1] >= STABLE_SECONDS)  # fmt: skip
            settled = settled and final
        if settled:
            break
        time.sleep(1)
    return results


def _delete(api: Api, created: list[Obj]) -> None:
    """Every pod of the copies first (a pending one would be another test's scheduler's work: the session's API
    server has no namespace controller to delete them with their namespace), then the cluster-scoped objects."""
    for obj in created:
        if obj["kind"] == "Namespace":
            for pod in api.pods(obj["metadata"]["name"]):
                api.delete_now(f"/api/v1/namespaces/{obj['metadata']['name']}/pods/{pod['metadata']['name']}")
    for obj in reversed(created):
        if obj["kind"] in ("Namespace", "PersistentVolume", "StorageClass", "CSINode", "CSIDriver", "Node"):
            api.delete_now(f"{path_of(obj) if obj['kind'] != 'Node' else '/api/v1/nodes'}/{obj['metadata']['name']}")


@pytest.mark.parametrize("case", [c.name for c in CASES])
def test_loadline_decides_as_kube_scheduler(decided: dict[str, dict[str, Outcome | None]], case: str) -> None:
    kube, ours = decided[case]["kube"], decided[case]["ours"]
    assert kube is not None, f"kube-scheduler did not decide {case} within {DECIDE_SECONDS}s"
    assert ours == kube, f"{case}: kube-scheduler {kube!r}, loadline {ours!r}"
    print(f"\n{case}: {json.dumps(kube)}")


def test_prebind_times_out_rolls_back_retries_and_binds_once_the_volume_is_provisioned(
    cluster: ControlPlane, kwok: Any, pv_controller: None, kwok_nodes: Callable[..., list[str]], namespace: str,
) -> None:
    """A claim of a class whose provisioner never answers: PreBind marks it for provisioning on the node, waits
    bindTimeoutSeconds, fails (the event says so), the pod is rolled back and retried with backoff; `loadline
    explain` says what PreBind waits for. Once a PV appears for the claim (the test plays the provisioner) the PV
    controller binds it and the next attempt binds the pod there."""
    api = Api(cluster)
    suite = f"prebind-{uuid.uuid4().hex[:6]}"
    side = Side("ours", suite, "x")
    (node_name,) = kwok_nodes(1, labels={"loadline.test/copy": side.prefix})
    slow = storage_class(f"{suite}-slow", provisioner="example.com/never")
    api.create(path_of(slow), for_api(slow))
    api.create(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims",
               for_api(claim("data", namespace, storage_class=slow["metadata"]["name"])))  # fmt: skip
    config = scheduler_config({"pluginConfig": [{"name": "VolumeBinding", "args": {"bindTimeoutSeconds": 3}}]},
                              podInitialBackoffSeconds=1, podMaxBackoffSeconds=2)
    pod = with_claims(side.pod(), "data")
    pod["metadata"]["namespace"] = namespace
    with running_scheduler(cluster, config) as scheduler:
        api.create(f"/api/v1/namespaces/{namespace}/pods", pod)
        claim_path = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/data"

        def explained() -> str:
            status, doc = scheduler.get_json(f"/explain/{namespace}/p")
            return " ".join(str(v.get("binding") or "") for v in doc.get("volumes") or []) if status == 200 else ""

        deadline = time.monotonic() + 30
        seen_waiting = ""
        while time.monotonic() < deadline and not seen_waiting:
            seen_waiting = explained()
            time.sleep(0.2)
        assert f"PreBind: provisioning on {node_name}, waiting for the provisioner" in seen_waiting
        selected = api.get(claim_path)["metadata"]["annotations"].get("volume.kubernetes.io/selected-node")
        assert selected == node_name

        def failed_prebind() -> bool:
            return any("binding volumes: timed out after 3s" in e.get("note", "") for e in api.events(namespace)
                       if e.get("reason") == "FailedScheduling")  # fmt: skip

        deadline = time.monotonic() + 30
        while not failed_prebind():
            assert time.monotonic() < deadline, f"no FailedScheduling event for the PreBind timeout: {api.events(namespace)}"
            time.sleep(0.5)
        assert not api.get(f"/api/v1/namespaces/{namespace}/pods/p")["spec"].get("nodeName")

        # The provisioner's answer: a PV for the claim on that node. The PV controller binds them.
        uid = api.get(claim_path)["metadata"]["uid"]
        pv = persistent_volume(f"{suite}-pv", storage_class=slow["metadata"]["name"], hostname=node_name,
                               claim_ref=(namespace, "data", uid))  # fmt: skip
        pv["metadata"]["annotations"] = {"pv.kubernetes.io/provisioned-by": "example.com/never"}
        api.create("/api/v1/persistentvolumes", for_api(pv))
        # (the PV controller binds a pre-bound PV when it syncs the claim: an update now, not its 15 s resync)
        api.merge_patch(claim_path, {"metadata": {"annotations": {"loadline.test/provisioned": "yes"}}})
        try:
            deadline = time.monotonic() + 60
            while not api.get(f"/api/v1/namespaces/{namespace}/pods/p")["spec"].get("nodeName"):
                assert time.monotonic() < deadline, "the pod was not bound after its volume was provisioned"
                time.sleep(0.5)
            assert api.get(f"/api/v1/namespaces/{namespace}/pods/p")["spec"]["nodeName"] == node_name
            assert api.get(claim_path)["spec"]["volumeName"] == pv["metadata"]["name"]
        finally:
            api.delete_now(f"/api/v1/namespaces/{namespace}/pods/p")
            api.delete_now(f"/api/v1/persistentvolumes/{pv['metadata']['name']}")
            api.delete_now(f"/apis/storage.k8s.io/v1/storageclasses/{slow['metadata']['name']}")
