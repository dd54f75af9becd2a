"""Objects in the cluster the scheduler cannot read: logged once per object version, counted, skipped.

A NodeMetric written by a buggy agent, a PodGroup with a negative minResources or a pod
whose affinity does not parse must not stop scheduling for everyone else, nor flood
the log on every watch event or re-list of the same version.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from common.logging import ctx
from scheduler_plugin.server.metrics import MALFORMED_OBJECTS

log = logging.getLogger("loadline.scheduler.objects")


def _version(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""


class MalformedObjects:
    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], str] = {}  # (kind, key) -> resourceVersion last reported

    def report(self, kind: str, key: str, obj: Mapping[str, Any], error: Exception) -> None:
        version = _version(obj)
        if self._seen.get((kind, key)) == version:
            return  # this version was logged and counted already (a re-list delivers it again)
        self._seen[(kind, key)] = version
        MALFORMED_OBJECTS.labels(kind).inc()
        log.warning(
            "skipping malformed %s %s: %s", kind, key, error, extra=ctx(kind=kind, object=key, resourceVersion=version)
        )

    def clear(self, kind: str, key: str) -> None:
        """The object is readable again (fixed, or deleted)."""
        if self._seen.pop((kind, key), None) is not None:
            log.info("%s %s is readable again", kind, key)

    def current(self) -> list[tuple[str, str]]:
        """(kind, key) of every object whose latest version could not be read."""
        return sorted(self._seen)
