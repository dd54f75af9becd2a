"""The extender's plugin set, read from the same KubeSchedulerConfiguration shape as the scheduler's.

Defaults differ from the full scheduler's: kube-scheduler already runs NodeResourcesFit,
NodeAffinity, TaintToleration and friends itself, so the extender's default profile enables
only LoadAwareScheduling (Filter + Score, weight 1). Any registered Filter/Score plugin can be
added (`multiPoint` or per point) and configured with `pluginConfig`, exactly as for
`loadline scheduler`. The framework insists on one QueueSort and one Bind plugin per profile;
the defaults include PrioritySort and DefaultBinder for that, and the extender never calls them.

Coscheduling and NetworkTopology are refused: they decide for a whole gang across Permit and
PreFilter, which an extender (consulted pod by pod, with no Permit) cannot do. So is VolumeBinding:
it binds claims in Reserve and PreBind, which an extender never sees (kube-scheduler runs its own).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from common.config import ConfigError
from scheduler_plugin.framework.clock import Clock
from scheduler_plugin.framework.config import POINT_FIELDS, KubeSchedulerConfiguration, PluginRef, Plugins, PluginSet
from scheduler_plugin.framework.profiles import build_frameworks, load_scheduler_config
from scheduler_plugin.framework.runtime import Framework
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins import coscheduling, defaultbinder, loadaware, networktopology, queuesort, volumebinding
from scheduler_plugin.plugins.registry import IN_TREE_REGISTRY

EXTENDER_DEFAULT_PLUGINS = Plugins(
    queue_sort=PluginSet(enabled=[PluginRef(name=queuesort.NAME)]),
    bind=PluginSet(enabled=[PluginRef(name=defaultbinder.NAME)]),
    multi_point=PluginSet(enabled=[PluginRef(name=loadaware.NAME, weight=1)]),
)

NEEDS_FULL_SCHEDULER = {
    coscheduling.NAME: "gang scheduling needs Permit",
    networktopology.NAME: "topology placement decides for a whole gang at once",
    volumebinding.NAME: "volume binding happens in Reserve and PreBind, which kube-scheduler runs itself",
}


def extender_frameworks(
    source: str | Path | Mapping[str, Any] | KubeSchedulerConfiguration | None = None,
    *,
    snapshot: Snapshot | None = None,
    clock: Clock | None = None,
) -> dict[str, Framework]:
    """One Framework per profile of the configuration (None: the default LoadAware-only profile).

    Raises ConfigError naming the field on any invalid setting."""
    if source is None:
        config = KubeSchedulerConfiguration()
    elif isinstance(source, KubeSchedulerConfiguration):
        config = source
    else:
        config = load_scheduler_config(source)
    _refuse_full_scheduler_plugins(config)
    frameworks = build_frameworks(config, IN_TREE_REGISTRY, EXTENDER_DEFAULT_PLUGINS, snapshot=snapshot, clock=clock)
    for p, framework in enumerate(frameworks.values()):
        if not framework.filter_plugins and not framework.score_plugins:
            raise ConfigError(
                f"invalid scheduler configuration: profiles[{p}].plugins: no Filter or Score plugin is enabled, "
                "so the extender would have nothing to do"
            )
    return frameworks


def _refuse_full_scheduler_plugins(config: KubeSchedulerConfiguration) -> None:
    for p, profile in enumerate(config.profiles):
        for point, attr in [*POINT_FIELDS.items(), ("multiPoint", "multi_point")]:
            plugin_set: PluginSet = getattr(profile.plugins, attr)
            for i, ref in enumerate(plugin_set.enabled):
                why = NEEDS_FULL_SCHEDULER.get(ref.name)
                if why is not None:
                    raise ConfigError(
                        f"invalid scheduler configuration: profiles[{p}].plugins.{point}.enabled[{i}].name: "
                        f"{ref.name} cannot run in the extender ({why}); use `loadline scheduler`"
                    )
