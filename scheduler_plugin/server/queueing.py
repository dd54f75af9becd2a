"""Which cluster events can help a pod that was rejected, by the plugins that rejected it.

kube-scheduler lets each plugin register the events that may make its rejections go
away (EnqueueExtensions); a pod in the unschedulable pool moves only on such events.
Without this every NodeMetric report (one per node per minute) would send every
unschedulable pod round again. The interests come from the plugins themselves
(`events_to_register`), so a plugin added out of tree needs no edit here; a plugin that
declares none, and a pod whose attempt failed without naming a plugin, move on every event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from scheduler_plugin.framework.interfaces import EnqueueExtensions, Plugin, QueuedPodInfo

FLUSH = "UnschedulableTimeout"  # not a cluster event: the pool's timeout moved the pod


class EventInterests:
    """Plugin name → the events that can undo its rejections, over all profiles' plugins."""

    def __init__(self, plugins: Iterable[Plugin]) -> None:
        self.by_plugin: dict[str, frozenset[str]] = {}
        for plugin in plugins:
            if isinstance(plugin, EnqueueExtensions):
                events = plugin.events_to_register()
                self.by_plugin[plugin.name] = self.by_plugin.get(plugin.name, frozenset()) | events

    def helps(self, event: str) -> Callable[[QueuedPodInfo], bool]:
        by_plugin = self.by_plugin

        def predicate(info: QueuedPodInfo) -> bool:
            plugins = info.unschedulable_plugins
            if not plugins:
                return True
            return any(event in by_plugin.get(plugin, (event,)) for plugin in plugins)

        return predicate
