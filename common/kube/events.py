"""Kubernetes Events (events.k8s.io/v1) for the objects our controllers act on."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from prometheus_client import Counter

from common.api.wire import format_time
from common.kube.http import KubeError, KubeHTTP

log = logging.getLogger("loadline.events")
EVENT_WRITE_ERRORS = Counter("loadline_event_write_errors_total", "Events the API server refused or never got")

NOTE_LIMIT = 1024  # events.k8s.io/v1 rejects longer notes


def object_reference(obj: Mapping[str, Any]) -> dict[str, str]:
    meta = obj.get("metadata") or {}
    ref = {
        "apiVersion": str(obj.get("apiVersion", "v1")),
        "kind": str(obj.get("kind", "Pod")),
        "name": str(meta.get("name")),
    }
    if meta.get("namespace"):
        ref["namespace"] = str(meta["namespace"])
    if meta.get("uid"):
        ref["uid"] = str(meta["uid"])
    return ref


class EventRecorder:
    def __init__(self, http: KubeHTTP, controller: str, instance: str) -> None:
        self.http = http
        self.controller = controller
        self.instance = instance

    def build(
        self,
        regarding: Mapping[str, Any],
        *,
        reason: str,
        action: str,
        note: str,
        type: Literal["Normal", "Warning"] = "Normal",
    ) -> dict[str, Any]:
        ref = object_reference(regarding)
        namespace = ref.get("namespace", "default")
        if len(note) > NOTE_LIMIT:
            note = note[: NOTE_LIMIT - 4] + " ..."
        return {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": f"{ref['name']}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "eventTime": format_time(datetime.now(UTC), micro=True),
            "reportingController": self.controller,
            "reportingInstance": self.instance,
            "action": action,
            "reason": reason,
            "note": note,
            "type": type,
            "regarding": ref,
        }

    async def record(
        self,
        regarding: Mapping[str, Any],
        *,
        reason: str,
        action: str,
        note: str,
        type: Literal["Normal", "Warning"] = "Normal",
    ) -> bool:
        """Best effort: an event that cannot be written is logged and counted, never raised."""
        event = self.build(regarding, reason=reason, action=action, note=note, type=type)
        namespace = event["metadata"]["namespace"]
        try:
            await self.http.create(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events", event)
        except KubeError as exc:
            EVENT_WRITE_ERRORS.inc()
            log.warning("could not record event %s on %s: %s", reason, event["regarding"]["name"], exc)
            return False
        return True
