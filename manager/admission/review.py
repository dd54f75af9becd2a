"""AdmissionReview (admission.k8s.io/v1) in and out, and the JSON Patch a mutation answers with.

The API server POSTs an AdmissionReview whose `request` holds the object; the answer echoes `request.uid` and says
`allowed`, with a `status` (code and message) when not, a base64 JSON Patch (RFC 6902) when the object changes,
and `warnings` that kubectl prints. A body that is not such a review is a `BadReview`: the server answers 400 and
the API server applies the webhook's failurePolicy.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

JSON = dict[str, Any]
API_VERSION = "admission.k8s.io/v1"
WARNING_LIMIT = 120  # characters per warning: the API server truncates longer ones


class BadReview(ValueError):
    """The body is not an AdmissionReview this webhook can answer."""


@dataclass(frozen=True, slots=True)
class Request:
    uid: str
    operation: str  # CREATE, UPDATE, DELETE, CONNECT
    resource: str  # e.g. "pods"
    sub_resource: str
    namespace: str
    name: str
    object: JSON | None
    old_object: JSON | None
    dry_run: bool


def _object(value: Any, what: str) -> JSON | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadReview(f"request.{what} is not an object")
    return value


def parse_review(body: bytes) -> Request:
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadReview(f"body is not JSON: {exc}") from None
    if not isinstance(review, dict):
        raise BadReview("body is not a JSON object")
    if review.get("kind") != "AdmissionReview" or review.get("apiVersion") != API_VERSION:
        raise BadReview(f"expected kind AdmissionReview, apiVersion {API_VERSION}; got kind "
                        f"{review.get('kind')!r}, apiVersion {review.get('apiVersion')!r}")  # fmt: skip
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReview("request is missing or not an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("request.uid is missing")
    resource = request.get("resource") or {}
    return Request(
        uid=uid,
        operation=str(request.get("operation") or ""),
        resource=str(resource.get("resource") or "") if isinstance(resource, dict) else "",
        sub_resource=str(request.get("subResource") or ""),
        namespace=str(request.get("namespace") or ""),
        name=str(request.get("name") or ""),
        object=_object(request.get("object"), "object"),
        old_object=_object(request.get("oldObject"), "oldObject"),
        dry_run=bool(request.get("dryRun")),
    )


def _string_map(value: Any) -> bool:
    return value is None or (isinstance(value, dict) and all(isinstance(v, str) for v in value.values()))


def pod_shape_problem(pod: JSON) -> str | None:
    """What makes `pod` no Pod the webhooks can read (the API server only sends decoded pods; anything else is a
    request of someone else), None when its shape is right."""
    meta, spec = pod.get("metadata"), pod.get("spec")
    if meta is not None and not isinstance(meta, dict):
        return "metadata is not an object"
    for key in ("labels", "annotations"):
        if not _string_map((meta or {}).get(key)):
            return f"metadata.{key} is not a map of strings"
    if spec is not None and not isinstance(spec, dict):
        return "spec is not an object"
    spec = spec or {}
    priority = spec.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        return "spec.priority is not an integer"
    if not isinstance(spec.get("overhead") or {}, dict):
        return "spec.overhead is not an object"
    if not _requirements(spec.get("resources")):  # PodLevelResources
        return "spec.resources is not an object of requests and limits"
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        if containers is None:
            continue
        if not isinstance(containers, list) or not all(isinstance(c, dict) for c in containers):
            return f"spec.{key} is not a list of objects"
        for c in containers:
            if not _requirements(c.get("resources")):
                return f"spec.{key}[].resources is not an object of requests and limits"
    return None


def _requirements(resources: Any) -> bool:
    """Absent, or a ResourceRequirements object whose requests and limits are objects."""
    return resources is None or (
        isinstance(resources, dict) and all(isinstance(resources.get(k) or {}, dict) for k in ("requests", "limits"))
    )


def _warnings(warnings: Sequence[str]) -> list[str]:
    return [w if len(w) <= WARNING_LIMIT else w[: WARNING_LIMIT - 3] + "..." for w in warnings]


def allowed(uid: str, patch: Sequence[JSON] | None = None, warnings: Sequence[str] = ()) -> bytes:
    response: JSON = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(list(patch))).decode()
    if warnings:
        response["warnings"] = _warnings(warnings)
    return orjson.dumps({"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response})


def denied(uid: str, message: str, code: int = 400, reason: str = "BadRequest") -> bytes:
    """Refused: `message` is what the user's client prints after `admission webhook "..." denied the request: `."""
    response = {"uid": uid, "allowed": False, "status": {"code": code, "reason": reason, "message": message}}
    return orjson.dumps({"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response})


# --- JSON Patch ---------------------------------------------------------------------------------------------
def _pointer(path: Sequence[str | int]) -> str:
    return "".join("/" + (p if isinstance(p, str) and "~" not in p and "/" not in p
                          else str(p).replace("~", "~0").replace("/", "~1")) for p in path)  # fmt: skip


def json_patch(before: Any, after: Any, path: tuple[str | int, ...] = ()) -> list[JSON]:
    """RFC 6902 operations that turn `before` into `after`: maps key by key, but a map none of whose entries is
    kept and whose changes take more than one operation (a container's requests whose cpu and memory became
    batch-cpu and batch-memory: four) is replaced whole; a list that changed length is replaced whole, one of the
    same length item by item; anything else replaced. Fewer operations are less for the API server to apply."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        ops = _map_patch(before, after, path)
        if len(ops) > 1 and path and not any(key in after and after[key] == value for key, value in before.items()):
            return [{"op": "replace", "path": _pointer(path), "value": after}]
        return ops
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [op for i, (b, a) in enumerate(zip(before, after, strict=True)) if b != a
                for op in json_patch(b, a, (*path, i))]  # fmt: skip
    if before == after and type(before) is type(after):
        return []
    return [{"op": "replace", "path": _pointer(path), "value": after}]


def _map_patch(before: Mapping[str, Any], after: Mapping[str, Any], path: tuple[str | int, ...]) -> list[JSON]:
    ops: list[JSON] = []
    for key in before:
        if key not in after:
            ops.append({"op": "remove", "path": _pointer((*path, key))})
    for key, value in after.items():
        if key not in before:
            ops.append({"op": "add", "path": _pointer((*path, key)), "value": value})
        elif before[key] != value:
            ops += json_patch(before[key], value, (*path, key))
    return ops
