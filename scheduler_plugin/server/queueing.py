"""Which cluster events can help a pod that was rejected, by the plugins that rejected it.

kube-scheduler lets each plugin register the events that may make its rejections go
away (EnqueueExtensions); a pod in the unschedulable pool moves only on such events.
Without this every NodeMetric report (one per node per minute) would send every
unschedulable pod round again. Plugins not in the table, and pods whose attempt failed
without naming a plugin, move on every event.
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler_plugin.framework.interfaces import QueuedPodInfo

NODE_ADD = "NodeAdd"
NODE_UPDATE = "NodeUpdate"  # allocatable, labels, annotations, taints or unschedulable changed
ASSIGNED_POD_DELETE = "AssignedPodDelete"  # also: a pod finished, or a reservation was released
NODE_METRIC = "NodeMetricChange"
POD_GROUP = "PodGroupChange"
FLUSH = "UnschedulableTimeout"

_NODE = frozenset({NODE_ADD, NODE_UPDATE})
_RESOURCES = _NODE | {ASSIGNED_POD_DELETE}

INTERESTS: dict[str, frozenset[str]] = {
    "NodeUnschedulable": _NODE,
    "NodeName": frozenset({NODE_ADD}),
    "TaintToleration": _NODE,
    "NodeAffinity": _NODE,
    "NodeResourcesFit": _RESOURCES,
    "LoadAwareScheduling": _RESOURCES | {NODE_METRIC},
    "Coscheduling": _RESOURCES | {POD_GROUP},
    "NetworkTopology": _RESOURCES,
}


def helps(event: str) -> Callable[[QueuedPodInfo], bool]:
    def predicate(info: QueuedPodInfo) -> bool:
        plugins = info.unschedulable_plugins
        if not plugins:
            return True
        return any(event in INTERESTS.get(plugin, frozenset({event})) for plugin in plugins)

    return predicate
