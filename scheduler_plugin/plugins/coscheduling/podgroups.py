"""PodGroups: the PodGroup digests Coscheduling and NetworkTopology read, by "namespace/name",
kept as the snapshot's store for the PodGroup resources they watch.

Both API groups (scheduler-plugins' and the older one Koordinator vendors) share one
namespace/name space: the object seen last wins, and deleting it falls back to the other
group's object of the same name, if any. A malformed object leaves the last readable version.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.api.podgroup import PodGroupDigest, digest_pod_group
from scheduler_plugin.framework.podinfo import pod_key
from scheduler_plugin.framework.snapshot import Snapshot


def pod_group_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return pod_key(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))


class PodGroups:
    def __init__(self, snapshot: Snapshot) -> None:
        self._current: dict[str, PodGroupDigest] = {}
        self._by_api_version: dict[str, dict[str, PodGroupDigest]] = {}

    def __len__(self) -> int:
        return len(self._current)

    def get(self, key: str) -> PodGroupDigest | None:
        return self._current.get(key)

    def upsert(self, obj: Mapping[str, Any]) -> None:
        """Raises MalformedObjectError (the last readable version, if any, stays)."""
        group = digest_pod_group(obj)
        self._by_api_version.setdefault(str(obj.get("apiVersion") or ""), {})[group.key] = group
        self._current[group.key] = group

    def remove(self, obj: Mapping[str, Any]) -> None:
        key = pod_group_key(obj)
        self._by_api_version.get(str(obj.get("apiVersion") or ""), {}).pop(key, None)
        fallback = next((groups[key] for groups in self._by_api_version.values() if key in groups), None)
        if fallback is None:
            self._current.pop(key, None)
        else:
            self._current[key] = fallback
