"""The Eviction API (`policy/v1`, `pods/<name>/eviction`): how the descheduler and the scheduler's preemption
remove a pod, so the API server enforces its PodDisruptionBudgets.

Answers and what they mean:
- 201: evicted; the pod gets its deletionTimestamp.
- 429: "not now" (a PodDisruptionBudget allows no disruption, or the budget is still being processed).
- 404, or 409 on the UID precondition: the pod is already gone (or replaced by a namesake).
- no answer (status 0): the API server is unreachable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from common.kube.http import KubeError

EVICTED = "evicted"
DRY_RUN = "dry_run"
REFUSED = "refused"
GONE = "gone"
FAILED = "failed"

REASON_PDB = "disruption budget"
REASON_TOO_MANY = "too many requests"
REASON_NOT_FOUND = "not found"
REASON_REPLACED = "pod replaced"
REASON_UNREACHABLE = "unreachable"


class Creator(Protocol):
    async def create(self, path: str, body: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    result: str  # EVICTED | DRY_RUN | REFUSED | GONE | FAILED
    reason: str
    message: str = ""

    @property
    def unreachable(self) -> bool:
        return self.result == FAILED and self.reason == REASON_UNREACHABLE


def eviction_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}/eviction"


def eviction_body(pod: Mapping[str, Any]) -> dict[str, Any]:
    meta = pod.get("metadata") or {}
    body: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
    }
    if meta.get("uid"):
        # Evict exactly the pod that was chosen, never a namesake a StatefulSet created since.
        body["deleteOptions"] = {"preconditions": {"uid": meta["uid"]}}
    return body


def classify_error(exc: KubeError) -> Outcome:
    message = exc.message
    if exc.status == 429:
        return Outcome(REFUSED, REASON_PDB if "disruption budget" in message.lower() else REASON_TOO_MANY, message)
    if exc.status == 404:
        return Outcome(GONE, REASON_NOT_FOUND, message)
    if exc.status == 409:
        return Outcome(GONE, REASON_REPLACED, message)
    if exc.status == 0:
        return Outcome(FAILED, REASON_UNREACHABLE, message)
    return Outcome(FAILED, f"http {exc.status}", message)


async def evict(http: Creator, pod: Mapping[str, Any], *, reason: str) -> Outcome:
    """Ask the API server to evict ``pod`` (as a watch delivered it); ``reason`` labels a success."""
    meta = pod.get("metadata") or {}
    try:
        await http.create(eviction_path(str(meta.get("namespace", "")), str(meta.get("name", ""))), eviction_body(pod))
    except KubeError as exc:
        return classify_error(exc)
    return Outcome(EVICTED, reason)
