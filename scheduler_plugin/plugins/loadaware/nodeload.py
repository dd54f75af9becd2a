"""NodeLoads: the NodeMetric digests LoadAware reads, by node name (Koordinator LoadAware's
NodeMetric lister), kept as the snapshot's store for the NodeMetric resource LoadAware watches."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.api.nodemetric_digest import NodeMetricDigest, digest_node_metric
from common.kube.reflector import object_key
from scheduler_plugin.framework.snapshot import Snapshot


class NodeLoads:
    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self._by_node: dict[str, NodeMetricDigest] = {}

    def __len__(self) -> int:
        return len(self._by_node)

    def get(self, node_name: str) -> NodeMetricDigest | None:
        return self._by_node.get(node_name)

    def upsert(self, obj: Mapping[str, Any]) -> None:
        """Raises MalformedObjectError. The node then has a NodeMetric with nothing usable in it (no status, no
        updateTime), never an older version: its load is unknown, so LoadAware treats it as expired, as it
        treats a NodeMetric its agent never filled in (filtered unless enableScheduleWhenNodeMetricsExpired,
        never scored) — a node whose agent writes garbage must not look idle and attract every new pod."""
        load = digest_node_metric(obj)
        if load.node_name:
            self._by_node[load.node_name] = load  # with a problem it carries nothing but the node's name
            self._snapshot.touch_node(load.node_name)
        if load.problem is not None:
            raise load.problem

    def remove(self, obj: Mapping[str, Any]) -> None:
        name = object_key(obj)
        if self._by_node.pop(name, None) is not None:
            self._snapshot.touch_node(name)
