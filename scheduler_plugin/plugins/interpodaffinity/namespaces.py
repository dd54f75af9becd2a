"""Namespaces: the labels of every namespace, for pod affinity terms with a namespaceSelector.

kube-scheduler's InterPodAffinity reads them through its namespace lister: an incoming pod's terms have
their namespaceSelector turned into the namespaces it selects (mergeAffinityTermNamespacesIfNotEmpty), and
an existing pod's terms are matched against the incoming pod's namespace labels
(GetNamespaceLabelsSnapshot; an unknown namespace has no labels).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from common.api.malformed import MalformedObjectError
from common.api.scheduling import string_map
from scheduler_plugin.framework.events import NAMESPACE_CHANGE
from scheduler_plugin.framework.interfaces import WatchedResource
from scheduler_plugin.framework.snapshot import Snapshot

EMPTY: Mapping[str, str] = {}


class Namespaces:
    """Namespace name -> labels; `generation` changes with every change (for what is derived from them)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._labels: dict[str, dict[str, str]] = {}
        self.generation = 0

    def __len__(self) -> int:
        return len(self._labels)

    def labels(self, name: str) -> Mapping[str, str]:
        return self._labels.get(name, EMPTY)

    def items(self) -> Iterator[tuple[str, Mapping[str, str]]]:
        return iter(self._labels.items())

    def upsert(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if not isinstance(name, str) or not name:
            raise MalformedObjectError("namespace metadata.name: required")
        labels = string_map(meta.get("labels"), "metadata.labels")
        if self._labels.get(name) != labels:
            self._labels[name] = labels
            self.generation += 1

    def remove(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        if isinstance(meta, Mapping) and self._labels.pop(str(meta.get("name") or ""), None) is not None:
            self.generation += 1


NAMESPACES = WatchedResource("Namespace", "", "v1", "namespaces", NAMESPACE_CHANGE, Namespaces)
