"""The differential test's volumes dimension keeps its cases apart and makes objects the API server accepts
(tests/integration/differential_volumes.py); the integration test itself compares the two schedulers."""

from __future__ import annotations

from tests.integration.differential_cases import DIMENSIONS, Copy, generate, render_pod, storage_labels
from tests.integration.differential_volumes import (
    HOSTNAME,
    RWOP,
    awaited_claims,
    ephemeral_claims,
    gated,
    render_storage,
)

CASES = generate(5, 1000, DIMENSIONS)
COPIES = (Copy("k", "diff-k", "default-scheduler", 3), Copy("l", "diff-l", "loadline-scheduler", 3))


def test_the_generator_is_deterministic_and_some_cases_have_storage() -> None:
    again = generate(5, 1000, DIMENSIONS)
    assert [c.describe() for c in again] == [c.describe() for c in CASES]
    with_storage = [c for c in CASES if c.storage is not None]
    assert 200 < len(with_storage) < 400
    kinds = {v.kind for c in with_storage for p in [*c.existing, c.incoming] for v in p.volumes}
    assert kinds == {"claim", "ephemeral", "gce-pd", "aws-ebs", "iscsi", "rbd"}
    states = {claim.state for c in with_storage for claim in c.storage.claims}  # type: ignore[union-attr]
    assert states == {"bound", "pending", "lost", "deleting"}
    assert not generate(5, 50, tuple(d for d in DIMENSIONS if d != "volumes"))[0].storage


def test_storage_objects_belong_to_their_case_and_copy() -> None:
    """Every cluster-scoped object is named for its batch, case and copy, and a PV's node affinity names only the
    nodes of its own case's copy: no case (or copy) can take another's volume."""
    for case in CASES:
        for copy in COPIES:
            prefix = f"b{copy.batch}-c{case.index}-{copy.tag}-"
            nodes = {copy.node_name(case.index, i) for i in range(len(case.nodes))}
            for path, obj in render_storage(case, copy, labels=storage_labels(case, copy)):
                meta = obj["metadata"]
                assert storage_labels(case, copy).items() <= meta["labels"].items()
                if obj["kind"] == "CSINode":
                    assert meta["name"] in nodes
                elif "/namespaces/" in path:
                    assert f"/namespaces/{copy.namespace}/" in path
                else:
                    assert meta["name"].startswith(prefix), meta["name"]
                spec = obj.get("spec") or {}
                for term in ((spec.get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms", []):
                    for expression in term["matchExpressions"]:
                        if expression["key"] == HOSTNAME:
                            assert set(expression["values"]) <= nodes
                if obj["kind"] in ("PersistentVolume", "PersistentVolumeClaim"):
                    modes = spec["accessModes"]
                    assert RWOP not in modes or modes == [RWOP], "the API server takes ReadWriteOncePod alone"
                if obj["kind"] == "PersistentVolume" and "local" in spec:
                    assert "nodeAffinity" in spec, "a local PV must say where it is"
                if obj["kind"] == "StorageClass" or obj["kind"] == "CSIStorageCapacity":
                    name = obj.get("storageClassName") or meta["name"]
                    assert name.startswith(prefix)


def test_bound_pairs_fit_so_the_pv_controller_binds_them() -> None:
    for case in CASES:
        if case.storage is None:
            continue
        pvs = {pv.name: pv for pv in case.storage.pvs}
        for claim in case.storage.claims:
            if claim.state != "bound":
                continue
            pv = pvs[claim.volume]
            assert pv.claim == claim.name and pv.gib >= claim.gib and set(claim.modes) <= set(pv.modes)
            assert pv.block == claim.block and pv.storage_class == (claim.storage_class or "")
        assert set(awaited_claims(case, COPIES[0]).values()) <= {"Bound", "Lost"}


def test_ephemeral_claims_are_the_pods_own_unless_foreign() -> None:
    seen = set()
    for case in CASES:
        pod = case.incoming
        if not any(v.kind == "ephemeral" for v in pod.volumes):
            continue
        copy = COPIES[1]
        rendered = render_pod(case, pod, copy)
        assert ("schedulingGates" in rendered["spec"]) == gated(pod)
        made = {**rendered, "metadata": {**rendered["metadata"], "uid": "u-1"}}
        for _, claim in ephemeral_claims(case, pod, copy, made, labels=storage_labels(case, copy)):
            owners = claim["metadata"].get("ownerReferences") or []
            seen.add("owned" if owners else "foreign")
            assert all(o["uid"] == "u-1" and o["controller"] for o in owners)
            assert claim["metadata"]["name"].startswith(f"{rendered['metadata']['name']}-v")
    assert seen == {"owned", "foreign"}
