"""Objects in the cluster a component cannot read: logged once per object version, counted, skipped.

A NodeMetric written by a buggy agent, a PodGroup with a negative minResources or a pod
whose affinity does not parse must not stop the scheduler, the descheduler or the manager
for everyone else, nor flood the log on every watch event or re-list of the same version.
Every component counts them the same way: `loadline_malformed_objects_total{kind,reason}`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import Counter

from common.api.malformed import MalformedObjectError, MalformedReason
from common.logging import ctx

MALFORMED_OBJECTS = Counter(
    "loadline_malformed_objects_total",
    "Object versions in the cluster that could not be read and were skipped, by kind and reason",
    ["kind", "reason"],
)

log = logging.getLogger("loadline.objects")


def _version(obj: Mapping[str, Any] | None) -> str:
    meta = obj.get("metadata") if obj is not None else None
    return str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""


def reason_of(error: Exception) -> MalformedReason:
    return error.reason if isinstance(error, MalformedObjectError) else MalformedReason.INVALID_VALUE


class MalformedObjects:
    def __init__(self, kinds: Iterable[str] = ()) -> None:
        """`kinds`: what the component reads; their series exist at 0 from start, so a dashboard shows 0 (not
        "No data") and `increase()` sees the first malformed object."""
        self._seen: dict[tuple[str, str], str] = {}  # (kind, key) -> resourceVersion last reported
        for kind in kinds:
            for reason in MalformedReason:
                MALFORMED_OBJECTS.labels(kind, reason.value)

    def report(
        self, kind: str, key: str, obj: Mapping[str, Any] | None, error: Exception, *, part: bool = False
    ) -> bool:
        """Log and count this version of the object, once; True when it was new. `part`: only a part of the object
        is unusable (held at its safe value); the rest is used."""
        version = _version(obj)
        if self._seen.get((kind, key)) == version:
            return False  # this version was logged and counted already (a re-list delivers it again)
        self._seen[(kind, key)] = version
        MALFORMED_OBJECTS.labels(kind, reason_of(error).value).inc()
        message = "malformed part of %s %s, the rest is used: %s" if part else "skipping malformed %s %s: %s"
        log.warning(message, kind, key, error, extra=ctx(kind=kind, object=key, resourceVersion=version))
        return True

    def account(
        self,
        kind: str,
        key: str,
        obj: Mapping[str, Any] | None,
        problem: Exception | None,
        part_problem: Exception | None = None,
    ) -> None:
        """Report this object version's problem (the object is unusable), else its part problem (a part is held at
        its safe value, the rest used: a digest's `part_problem`), else clear it."""
        if problem is not None:
            self.report(kind, key, obj, problem)
        elif part_problem is not None:
            self.report(kind, key, obj, part_problem, part=True)
        else:
            self.clear(kind, key)

    def clear(self, kind: str, key: str) -> None:
        """The object is readable again (fixed, or deleted)."""
        if self._seen.pop((kind, key), None) is not None:
            log.info("%s %s is readable again", kind, key)

    def current(self) -> list[tuple[str, str]]:
        """(kind, key) of every object whose latest version could not be read."""
        return sorted(self._seen)
