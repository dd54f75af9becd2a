"""Create/update/delete of the per-node objects the manager owns: NodeMetric (spec) and NodeSLO.

Both are cluster-scoped and named after their node. The manager owns the NodeMetric `spec`
(the agent owns its `status`) and the whole NodeSLO `spec`. An update is a PUT of the object
as last seen with the spec replaced: its resourceVersion makes a concurrent change a 409,
and the status subresource means the PUT cannot clobber the agent's status.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from common.api.constants import NODEMETRIC_PLURAL, NODESLO_PLURAL, SLO_API_VERSION, SLO_GROUP, SLO_VERSION
from common.kube.http import JSON, KubeError, KubeHTTP, resource_path
from common.logging import ctx
from manager import metrics
from manager.nodeslo.merge import canonical_json

log = logging.getLogger("loadline.manager.objects")


@dataclass(frozen=True, slots=True)
class OwnedKind:
    kind: str
    plural: str

    @property
    def collection(self) -> str:
        return resource_path(SLO_GROUP, SLO_VERSION, self.plural)

    def path(self, name: str) -> str:
        return resource_path(SLO_GROUP, SLO_VERSION, self.plural, name=name)


NODE_METRIC: Final = OwnedKind("NodeMetric", NODEMETRIC_PLURAL)
NODE_SLO: Final = OwnedKind("NodeSLO", NODESLO_PLURAL)


def _spec_part(obj: Mapping[str, Any] | None, kind: OwnedKind) -> Any:
    spec = (obj or {}).get("spec") or {}
    return spec.get("metricCollectPolicy") if kind is NODE_METRIC else spec


def _spec_body(kind: OwnedKind, desired: Any) -> JSON:
    return {"metricCollectPolicy": desired} if kind is NODE_METRIC else dict(desired)


class SpecWriter:
    """Brings one owned object per node to a desired spec, writing only on a real difference.

    The API server may normalise what we send (defaulting, pruning, number forms). To never
    loop on such a difference, the writer remembers what the server stored for each desired
    spec it wrote and treats that stored form as in sync.
    """

    def __init__(self, http: KubeHTTP, kind: OwnedKind) -> None:
        self.http = http
        self.kind = kind
        for action in ("create", "update", "delete"):  # 0 from the start: panels show 0 rather than no data
            metrics.API_ERRORS.labels(kind.kind, action)
        self._stored_as: dict[str, tuple[str, str]] = {}  # name -> (desired canonical, stored canonical)
        # name -> (resourceVersion, canonical spec): a resync compares thousands of unchanged objects
        self._current: dict[str, tuple[str, str]] = {}

    def _canonical_current(self, name: str, current: Mapping[str, Any]) -> str:
        version = str((current.get("metadata") or {}).get("resourceVersion") or "")
        cached = self._current.get(name)
        if cached is not None and version and cached[0] == version:
            return cached[1]
        text = canonical_json(_spec_part(current, self.kind))
        self._current[name] = (version, text)
        return text

    def in_sync(self, name: str, current: Mapping[str, Any] | None, desired: Any, want: str | None = None) -> bool:
        """`want` is canonical_json(desired) when the caller has it already."""
        if current is None:
            return False
        want = want if want is not None else canonical_json(desired)
        have = self._canonical_current(name, current)
        if have == want:
            return True
        remembered = self._stored_as.get(name)
        return remembered is not None and remembered == (want, have)

    async def ensure(
        self, name: str, current: Mapping[str, Any] | None, desired: Any, want: str | None = None
    ) -> JSON | None:
        """Create or update the object; returns what the server stored, None when nothing was written."""
        if self.in_sync(name, current, desired, want):
            return None
        if current is None:
            body: JSON = {
                "apiVersion": SLO_API_VERSION,
                "kind": self.kind.kind,
                "metadata": {"name": name},
                "spec": _spec_body(self.kind, desired),
            }
            stored = await self._write("create", self.http.create(self.kind.collection, body))
        else:
            body = {k: v for k, v in current.items() if k != "status"}
            body.setdefault("apiVersion", SLO_API_VERSION)
            body.setdefault("kind", self.kind.kind)
            if self.kind is NODE_SLO:
                body["spec"] = _spec_body(self.kind, desired)  # the whole NodeSLO spec is ours
            else:  # only the collect policy of the NodeMetric spec is
                body["spec"] = {**(current.get("spec") or {}), **_spec_body(self.kind, desired)}
            stored = await self._write("update", self.http.replace(self.kind.path(name), body))
        self._stored_as[name] = (canonical_json(desired), canonical_json(_spec_part(stored, self.kind)))
        log.info("%s %s written", self.kind.kind, name, extra=ctx(action="create" if current is None else "update"))
        return stored

    async def delete(self, name: str) -> bool:
        """Delete the object; True if it was deleted now, False if it was already gone."""
        self.forget(name)
        try:
            await self._write("delete", self.http.delete(self.kind.path(name)))
        except KubeError as exc:
            if exc.is_not_found:
                return False
            raise
        log.info("%s %s deleted: its node is gone", self.kind.kind, name)
        return True

    def forget(self, name: str) -> None:
        self._stored_as.pop(name, None)
        self._current.pop(name, None)

    async def _write(self, action: str, call: Awaitable[JSON]) -> JSON:
        try:
            result = await call
        except KubeError as exc:
            if not (action == "delete" and exc.is_not_found):
                metrics.API_ERRORS.labels(self.kind.kind, action).inc()
            raise
        metrics.OBJECT_WRITES.labels(self.kind.kind, action).inc()
        return result
