"""Which cluster events can help a pod that was rejected, by the plugins that rejected it.

kube-scheduler lets each plugin register the events that may make its rejections go
away (EnqueueExtensions); a pod in the unschedulable pool moves only on such events.
Without this every NodeMetric report (one per node per minute) would send every
unschedulable pod round again. The interests come from the plugins themselves
(`events_to_register`), so a plugin added out of tree needs no edit here; a plugin that
declares none, and a pod whose attempt failed without naming a plugin, move on every event.
An event about a pod (bound, relabelled, deleted) also asks the plugin's queueing hint, when it has one
(`QueueingHintPlugin`, kube-scheduler's QueueingHintFn): a pod kept apart by anti-affinity does not go round
again for every pod bound elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from scheduler_plugin.framework.interfaces import EnqueueExtensions, Plugin, QueuedPodInfo, QueueingHintPlugin
from scheduler_plugin.framework.podinfo import PodInfo

FLUSH = "UnschedulableTimeout"  # not a cluster event: the pool's timeout moved the pod


class EventInterests:
    """Plugin name → the events that can undo its rejections, over all profiles' plugins."""

    def __init__(self, plugins: Iterable[Plugin]) -> None:
        self.by_plugin: dict[str, frozenset[str]] = {}
        self.hints: dict[str, QueueingHintPlugin] = {}
        for plugin in plugins:
            if isinstance(plugin, EnqueueExtensions):
                events = plugin.events_to_register()
                self.by_plugin[plugin.name] = self.by_plugin.get(plugin.name, frozenset()) | events
            if isinstance(plugin, QueueingHintPlugin):
                self.hints.setdefault(plugin.name, plugin)

    def helps(self, event: str, changed: PodInfo | None = None, old: PodInfo | None = None
              ) -> Callable[[QueuedPodInfo], bool]:
        """Which parked pods the event may help; `changed`/`old`: the pod an event is about, for the hints."""
        by_plugin = self.by_plugin
        hints = self.hints if changed is not None or old is not None else {}

        def helped_by(plugin: str, info: QueuedPodInfo) -> bool:
            if event not in by_plugin.get(plugin, (event,)):
                return False
            hint = hints.get(plugin)
            return hint is None or hint.queueing_hint(event, info.pod, changed, old)

        def predicate(info: QueuedPodInfo) -> bool:
            plugins = info.unschedulable_plugins
            if not plugins:
                return True
            return any(helped_by(plugin, info) for plugin in plugins)

        return predicate
