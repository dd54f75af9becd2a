"""The JSON behind `GET /explain/<namespace>/<pod>` and `loadline explain`.

For the pod's last attempt on this replica: per node either the plugin that rejected it
and why, or its score per plugin (raw, normalised, weight) and the weighted total, and
which node was chosen; plus where the pod is now (queue, Permit, binding, bound) and,
for a pod in a gang, the gang's state.
"""

from __future__ import annotations

from typing import Any

from common.api.wire import format_time
from scheduler_plugin.framework.explain import explain
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.plugins.coscheduling.gangs import member_keys
from scheduler_plugin.plugins.coscheduling.podgroups import PodGroups
from scheduler_plugin.plugins.storage import PersistentVolumeClaims, PersistentVolumes, StorageClasses
from scheduler_plugin.plugins.volumebinding.plugin import STATE as VOLUME_BINDING
from scheduler_plugin.plugins.volumebinding.plugin import VolumeBindingState
from scheduler_plugin.server.attempts import PreemptionRecord
from scheduler_plugin.server.scheduler import Scheduler


def _state(scheduler: Scheduler, pod: PodInfo) -> str:
    key = pod.key
    flight = scheduler.in_flight.get(key)
    if flight is not None:
        waiting = flight.result.waiting
        return "waiting-on-permit" if waiting is not None and not waiting.done else "binding"
    record = scheduler.snapshot.records.get(key)
    if record is not None:
        return "assumed" if record.assumed else "bound"
    if pod.node_name:
        return "bound"
    if pod.is_terminated:
        return "terminated"
    if pod.scheduler_name not in scheduler.frameworks:
        return "not-ours"
    where = scheduler.queue.where(key)
    return f"queued:{where}" if where else "not-queued"


def _gang(scheduler: Scheduler, pod: PodInfo) -> dict[str, Any] | None:
    ref = pod.gang
    if ref is None:
        return {"error": pod.gang_error} if pod.gang_error else None
    snap = scheduler.snapshot
    members = member_keys(snap, ref.key)
    group = snap.store(PodGroups).get(ref.key)
    minimum = (group.min_member if group is not None else None) if ref.uses_crd else (ref.min_available or 1)
    waiting = sorted(
        w.pod.key
        for f in scheduler.frameworks.values()
        for w in f.waiting_pods
        if w.pod.gang is not None and w.pod.gang.key == ref.key
    )
    bound = sorted(k for k in members if k in snap.records and not snap.records[k].assumed)
    assumed = sorted(k for k in members if k in snap.records and snap.records[k].assumed and k not in waiting)
    pending = sorted(k for k in members if k not in snap.records)
    return {
        "name": ref.key,
        "source": ref.source.value,
        "podGroupFound": (group is not None) if ref.uses_crd else None,
        "minMember": minimum,
        "members": len(members),
        "bound": bound,
        "waitingOnPermit": waiting,
        "assumed": assumed,
        "pending": pending,
    }


def _volumes(scheduler: Scheduler, pod: PodInfo) -> list[dict[str, Any]]:
    """The pod's claims as the volume plugins see them, and what VolumeBinding is binding for it right now."""
    snap = scheduler.snapshot
    claims, pvs, classes = snap.store(PersistentVolumeClaims), snap.store(PersistentVolumes), snap.store(StorageClasses)
    flight = scheduler.in_flight.get(pod.key)
    state = flight.result.state if flight is not None else None
    binding = state.get(VOLUME_BINDING, VolumeBindingState) if state is not None else None
    reserved = binding.reserved if binding is not None else None
    out = []
    for volume in pod.volumes:
        if not volume.claim:
            continue
        key = f"{pod.namespace}/{volume.claim}"
        claim = claims.get(key)
        item: dict[str, Any] = {"volume": volume.name, "claim": volume.claim, "ephemeral": volume.ephemeral}
        if claim is None:
            item["problem"] = claims.unreadable(key) or "not found"
            out.append(item)
            continue
        storage_class = classes.get(claim.storage_class) if claim.storage_class else None
        item.update({
            "phase": claim.phase or None,
            "storageClass": claim.storage_class or None,
            "bindingMode": storage_class.binding_mode if storage_class is not None else None,
            "volumeName": claim.volume_name or None,
            "selectedNode": claim.selected_node,
        })  # fmt: skip
        pv = pvs.get(claim.volume_name) if claim.volume_name else None
        if pv is not None and pv.node_affinity is not None and pv.node_affinity.problem:
            item["problem"] = f"PV {pv.name}: {pv.node_affinity.problem} (that node affinity term matches no node)"
        if reserved is not None:
            taking = [pv.name for c, pv in reserved.static if c.key == key]
            if taking:
                item["binding"] = f"PreBind: {taking[0]} pre-bound to the claim, waiting for the PV controller"
            elif any(c.key == key for c in reserved.provisions):
                item["binding"] = f"PreBind: provisioning on {reserved.node}, waiting for the provisioner"
        out.append(item)
    return out


def explain_pod(scheduler: Scheduler, namespace: str, name: str, *, is_leader: bool) -> tuple[int, dict[str, Any]]:
    key = f"{namespace}/{name}"
    snap = scheduler.snapshot
    pod = snap.pods.get(key)
    if pod is None:
        return 404, {"pod": key, "error": f"pod {key} is not in the scheduler's cache (no such pod?)"}
    doc: dict[str, Any] = {
        "pod": key,
        "uid": str((pod.raw.get("metadata") or {}).get("uid") or ""),
        "schedulerName": pod.scheduler_name,
        "nodeName": pod.node_name or snap.node_of(key) or None,
        "state": _state(scheduler, pod),
        "leader": is_leader,
        "attempt": None,
        "nodes": [],
        "gang": _gang(scheduler, pod),
        "volumes": _volumes(scheduler, pod),
    }
    flight = scheduler.in_flight.get(key)
    if flight is not None and flight.result.waiting is not None and not flight.result.waiting.done:
        doc["waitingOnPlugins"] = flight.result.waiting.pending_plugins
    attempt = scheduler.attempts.get(key)
    if attempt is None:
        doc["note"] = (
            "no scheduling attempt recorded by this replica"
            + ("" if is_leader else " (it is a standby; ask the leader)")
        )
        return 200, doc
    result = attempt.result
    doc["attempt"] = {
        "at": format_time(attempt.at, micro=True),
        "profile": attempt.profile,
        "attempts": attempt.attempts,
        "outcome": attempt.outcome,
        "code": str(result.status.code),
        "message": attempt.message,
        "node": result.node_name,
        "evaluatedNodes": result.evaluated_nodes,
        "feasibleNodes": result.feasible_nodes,
        "tiedNodes": result.tied_nodes,
        "stale": attempt.uid != doc["uid"],
    }
    failure = attempt.bind_failure
    if failure is not None:
        doc["lastBindFailure"] = {"at": format_time(failure.at, micro=True), "attempts": failure.attempts,
                                  "node": failure.node_name, "tiedNodes": failure.tied_nodes,
                                  "message": failure.message}
    nodes = []
    for entry in explain(result, snap):
        item: dict[str, Any] = {"node": entry.node, "feasible": not entry.rejected_by}
        if entry.rejected_by:
            item["rejectedBy"] = entry.rejected_by
            item["reasons"] = entry.reasons
        else:
            item["scores"] = {
                plugin: {"raw": raw, "normalized": normalized, "weight": weight, "weighted": normalized * weight}
                for plugin, (raw, normalized, weight) in entry.scores.items()
            }
            item["total"] = entry.total
        item["chosen"] = entry.chosen
        nodes.append(item)
    doc["nodes"] = nodes
    if attempt.preemption is not None:
        doc["preemption"] = _preemption(attempt.preemption)
    return 200, doc


def _preemption(record: PreemptionRecord) -> dict[str, Any]:
    """Candidates considered (best first, as kube-scheduler ranks them), the victims of each and why."""
    decision = record.decision
    return {
        "potentialNodes": decision.potential_nodes,
        "simulatedNodes": decision.examined_nodes,
        "nominatedNode": decision.best.node_name,
        "rule": "fewest PDB violations, lowest highest-victim priority, smallest priority sum, fewest victims, "
                "latest start of the highest-priority victims",
        "candidates": [
            {"node": c.node_name, "victims": [v.key for v in c.victims], "pdbViolations": c.num_pdb_violations,
             "highestVictimPriority": c.summary.highest_priority, "victimCount": c.summary.count}
            for c in decision.candidates
        ],
        "executed": record.done,
        "evictedOn": record.node_name or None,
        "evicted": list(record.victims),
        "refusedOn": list(record.refused),
    }
