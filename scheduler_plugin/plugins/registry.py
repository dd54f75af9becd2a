"""The one table of in-tree plugins (name → factory and args model) and the default profile.

Default profile (multiPoint, order = Filter/PreFilter order, kube-scheduler's where it has the
plugin: a node is reported under the first Filter that rejects it): SchedulingGates, PodFieldGuard
(refuses pods that set fields Loadline does not implement), Coscheduling (also the QueueSort, so
gangs stay together), NodeUnschedulable, NodeName, TaintToleration (weight 3), NodeAffinity (2),
NodePorts, NodeResourcesFit (1), VolumeRestrictions, NodeVolumeLimits, VolumeBinding (scores only
with its `shape`), VolumeZone, PodTopologySpread (2), InterPodAffinity (2), LoadAwareScheduling (1),
DefaultPreemption (PostFilter), NodeResourcesBalancedAllocation (1), ImageLocality (1),
DefaultBinder. NetworkTopology and PrioritySort are registered but opt-in.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scheduler_plugin.framework.clock import Clock
from scheduler_plugin.framework.config import KubeSchedulerConfiguration, PluginRef, Plugins, PluginSet
from scheduler_plugin.framework.interfaces import Binder, ObjectAPI
from scheduler_plugin.framework.profiles import build_frameworks, load_scheduler_config
from scheduler_plugin.framework.registry import PluginSpec, Registry
from scheduler_plugin.framework.runtime import Framework
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins import (
    coscheduling,
    defaultbinder,
    defaultpreemption,
    imagelocality,
    interpodaffinity,
    loadaware,
    networktopology,
    nodeaffinity,
    nodename,
    nodeports,
    noderesources,
    nodeunschedulable,
    nodevolumelimits,
    podfieldguard,
    podtopologyspread,
    queuesort,
    schedulinggates,
    tainttoleration,
    volumebinding,
    volumerestrictions,
    volumezone,
)
from scheduler_plugin.plugins.noderesources import balanced_allocation

IN_TREE_REGISTRY = Registry(
    {
        queuesort.NAME: PluginSpec(queuesort.PrioritySort.new),
        schedulinggates.NAME: PluginSpec(schedulinggates.SchedulingGates.new),
        nodeunschedulable.NAME: PluginSpec(nodeunschedulable.NodeUnschedulable.new),
        nodename.NAME: PluginSpec(nodename.NodeName.new),
        tainttoleration.NAME: PluginSpec(tainttoleration.TaintToleration.new),
        nodeaffinity.NAME: PluginSpec(nodeaffinity.NodeAffinity.new),
        noderesources.NAME: PluginSpec(noderesources.NodeResourcesFit.new, noderesources.NodeResourcesFitArgs),
        nodeports.NAME: PluginSpec(nodeports.NodePorts.new),
        balanced_allocation.NAME: PluginSpec(balanced_allocation.NodeResourcesBalancedAllocation.new,
                                             balanced_allocation.NodeResourcesBalancedAllocationArgs),
        imagelocality.NAME: PluginSpec(imagelocality.ImageLocality.new),
        podfieldguard.NAME: PluginSpec(podfieldguard.PodFieldGuard.new),
        podtopologyspread.NAME: PluginSpec(podtopologyspread.PodTopologySpread.new,
                                           podtopologyspread.PodTopologySpreadArgs),
        interpodaffinity.NAME: PluginSpec(interpodaffinity.InterPodAffinity.new,
                                          interpodaffinity.InterPodAffinityArgs),
        loadaware.NAME: PluginSpec(loadaware.LoadAwareScheduling.new, loadaware.LoadAwareSchedulingArgs),
        coscheduling.NAME: PluginSpec(coscheduling.Coscheduling.new, coscheduling.CoschedulingArgs),
        networktopology.NAME: PluginSpec(networktopology.NetworkTopology.new, networktopology.NetworkTopologyArgs),
        defaultbinder.NAME: PluginSpec(defaultbinder.DefaultBinder.new),
        defaultpreemption.NAME: PluginSpec(defaultpreemption.DefaultPreemption.new,
                                           defaultpreemption.DefaultPreemptionArgs),
        volumerestrictions.NAME: PluginSpec(volumerestrictions.VolumeRestrictions.new),
        nodevolumelimits.NAME: PluginSpec(nodevolumelimits.NodeVolumeLimits.new),
        volumebinding.NAME: PluginSpec(volumebinding.VolumeBinding.new, volumebinding.VolumeBindingArgs),
        volumezone.NAME: PluginSpec(volumezone.VolumeZone.new),
    }
)

DEFAULT_PLUGINS = Plugins(
    multi_point=PluginSet(
        enabled=[
            PluginRef(name=schedulinggates.NAME),
            PluginRef(name=podfieldguard.NAME),
            PluginRef(name=coscheduling.NAME),
            PluginRef(name=nodeunschedulable.NAME),
            PluginRef(name=nodename.NAME),
            PluginRef(name=tainttoleration.NAME, weight=3),
            PluginRef(name=nodeaffinity.NAME, weight=2),
            PluginRef(name=nodeports.NAME),
            PluginRef(name=noderesources.NAME, weight=1),
            PluginRef(name=volumerestrictions.NAME),
            PluginRef(name=nodevolumelimits.NAME),
            PluginRef(name=volumebinding.NAME),
            PluginRef(name=volumezone.NAME),
            PluginRef(name=podtopologyspread.NAME, weight=2),
            PluginRef(name=interpodaffinity.NAME, weight=2),
            PluginRef(name=loadaware.NAME, weight=1),
            PluginRef(name=defaultpreemption.NAME),
            PluginRef(name=balanced_allocation.NAME, weight=1),
            PluginRef(name=imagelocality.NAME, weight=1),
            PluginRef(name=defaultbinder.NAME),
        ]
    )
)


def frameworks_from_config(
    source: str | Path | Mapping[str, Any] | KubeSchedulerConfiguration | None = None,
    *,
    snapshot: Snapshot | None = None,
    clock: Clock | None = None,
    binder: Binder | None = None,
    registry: Registry = IN_TREE_REGISTRY,
    tie_break_seed: int | None = None,
    api: ObjectAPI | None = None,
) -> dict[str, Framework]:
    """Frameworks for every profile of a KubeSchedulerConfiguration (None: one default profile)."""
    if source is None:
        config = KubeSchedulerConfiguration()
    elif isinstance(source, KubeSchedulerConfiguration):
        config = source
    else:
        config = load_scheduler_config(source)
    return build_frameworks(config, registry, DEFAULT_PLUGINS, snapshot=snapshot, clock=clock, binder=binder,
                            tie_break_seed=tie_break_seed, api=api)
