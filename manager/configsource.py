"""The `slo-controller-config` ConfigMap as the manager sees it: the config in force.

A ConfigMap that fails to parse or validate is refused: the last good config stays in force,
every refused key/field is counted and flagged in metrics, logged once per ConfigMap version
and (by the leader) reported in a Warning event on the ConfigMap. A missing ConfigMap means
Koordinator's defaults.

A manager that starts while the ConfigMap is already broken has no last good config of its
own. It then does *not* fall back to the defaults (that would disable colocation everywhere
and strip every node's batch resources); it holds off reconciling until a valid ConfigMap
arrives, which keeps what the previous manager wrote in force.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from common.kube.events import EventRecorder
from common.logging import ctx
from manager import metrics
from manager.nodeslo.config import ConfigError, SLOControllerConfig, parse_slo_controller_config

log = logging.getLogger("loadline.manager.config")

REASON_REJECTED = "SLOConfigRejected"


@dataclass(frozen=True, slots=True)
class Rejection:
    digest: str  # of the refused ConfigMap data
    configmap: Mapping[str, Any]
    errors: tuple[ConfigError, ...]

    def note(self) -> str:
        listed = "; ".join(str(e) for e in self.errors)
        return f"refused, the last good config stays in force: {listed}"


def _digest(data: Mapping[str, str] | None) -> str:
    return hashlib.sha256(json.dumps(data or {}, sort_keys=True).encode()).hexdigest()[:16]


class SLOConfigSource:
    def __init__(self, namespace: str, name: str, on_change: Callable[[], None] | None = None) -> None:
        self.namespace = namespace
        self.name = name
        self.current: SLOControllerConfig | None = None
        self.rejection: Rejection | None = None
        self._digest: str | None = None  # of the data last seen (accepted or not)
        self._on_change = on_change
        self._flagged: set[tuple[str, str]] = set()
        self._evented: set[str] = set()  # rejection digests an event was written for

    @property
    def ready(self) -> bool:
        return self.current is not None

    # --- inputs ---------------------------------------------------------------------------
    def handle(self, kind: str, obj: Mapping[str, Any], _old: Mapping[str, Any] | None) -> None:
        """Reflector handler for the ConfigMap (the watch is scoped to its name)."""
        if kind == "DELETED":
            self.apply(None, None)
        else:
            self.apply(obj.get("data") or {}, obj)

    def missing(self) -> None:
        """The ConfigMap did not exist when the watch synced."""
        if self._digest is None:
            self.apply(None, None)

    def apply(self, data: Mapping[str, str] | None, configmap: Mapping[str, Any] | None) -> None:
        digest = _digest(data) if configmap is not None else "absent"
        if digest == self._digest:
            return  # e.g. a label edit: nothing we read changed
        self._digest = digest
        parsed = parse_slo_controller_config(data)
        if isinstance(parsed, list):
            self._reject(digest, parsed, configmap or {})
            return
        self._set_flags(())
        metrics.CONFIG_VALID.set(1)
        metrics.CONFIG_LAST_ACCEPTED.set(time.time())
        previous, self.current, self.rejection = self.current, parsed, None
        where = f"{self.namespace}/{self.name}" if configmap is not None else "absent: Koordinator's defaults"
        log.info("slo-controller-config accepted", extra=ctx(configmap=where, first=previous is None))
        if self._on_change is not None:
            self._on_change()

    def _reject(self, digest: str, errors: list[ConfigError], configmap: Mapping[str, Any]) -> None:
        self.rejection = Rejection(digest, configmap, tuple(errors))
        metrics.CONFIG_VALID.set(0)
        for error in errors:
            metrics.CONFIG_REJECTIONS.labels(error.key, error.field or "").inc()
        self._set_flags({(e.key, e.field or "") for e in errors})
        state = "keeping the last good config" if self.current is not None else "no good config yet: holding off"
        log.error(
            "slo-controller-config refused: %s",
            "; ".join(str(e) for e in errors),
            extra=ctx(configmap=f"{self.namespace}/{self.name}", action=state),
        )

    def _set_flags(self, flagged: set[tuple[str, str]] | tuple[()]) -> None:
        for key, field in self._flagged - set(flagged):
            metrics.CONFIG_REJECTED.labels(key, field).set(0)
        for key, field in flagged:
            metrics.CONFIG_REJECTED.labels(key, field).set(1)
        self._flagged = set(flagged)

    # --- events (leader only) ------------------------------------------------------------
    async def report(self, recorder: EventRecorder) -> None:
        """Write the Warning event for the current rejection, once per refused ConfigMap version."""
        rejection = self.rejection
        if rejection is None or rejection.digest in self._evented or not rejection.configmap:
            return
        regarding = {"apiVersion": "v1", "kind": "ConfigMap", **rejection.configmap}
        if await recorder.record(
            regarding, reason=REASON_REJECTED, action="Validate", note=rejection.note(), type="Warning"
        ):
            self._evented.add(rejection.digest)
