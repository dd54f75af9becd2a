"""KubeSchedulerConfiguration profiles: parsing, default merging, multiPoint expansion, errors naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.config import ConfigError
from scheduler_plugin.framework.config import PluginRef, Plugins, PluginSet
from scheduler_plugin.framework.profiles import load_scheduler_config, merge_plugin_set
from scheduler_plugin.framework.runtime import Framework
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.loadaware import LoadAwareScheduling
from scheduler_plugin.plugins.registry import IN_TREE_REGISTRY, frameworks_from_config

HEADER = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"


def build(yaml_text: str) -> dict[str, object]:
    return dict(frameworks_from_config(HEADER + yaml_text, snapshot=Snapshot()))


def names(plugins: list[object]) -> list[str]:
    return [p.name for p in plugins]  # type: ignore[attr-defined]


def test_default_profile() -> None:
    fw = frameworks_from_config(None, snapshot=Snapshot())["loadline-scheduler"]
    assert fw.queue_sort_plugin is not None and fw.queue_sort_plugin.name == "Coscheduling"
    assert names(fw.pre_enqueue_plugins) == ["SchedulingGates"]
    volumes = ["VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding", "VolumeZone"]  # kube-scheduler's order
    assert names(fw.pre_filter_plugins) == [
        "PodFieldGuard", "Coscheduling", "NodeAffinity", "NodePorts", "NodeResourcesFit", *volumes,
        "PodTopologySpread", "InterPodAffinity", "LoadAwareScheduling",
    ]
    # kube-scheduler's Filter order where it has the plugin: a node is reported under the first that rejects it.
    assert names(fw.filter_plugins) == [
        "NodeUnschedulable", "NodeName", "TaintToleration", "NodeAffinity", "NodePorts", "NodeResourcesFit",
        *volumes, "PodTopologySpread", "InterPodAffinity", "LoadAwareScheduling",
    ]
    assert [(p.name, w) for p, w, _ in fw.score_plugins] == [
        ("TaintToleration", 3), ("NodeAffinity", 2), ("NodeResourcesFit", 1), ("VolumeBinding", 1),
        ("PodTopologySpread", 2), ("InterPodAffinity", 2), ("LoadAwareScheduling", 1),
        ("NodeResourcesBalancedAllocation", 1), ("ImageLocality", 1),
    ]
    assert [n for n in names(fw.pre_score_plugins) if n in ("NodeAffinity", "NodeResourcesBalancedAllocation",
                                                             "ImageLocality")] == [
        "NodeAffinity", "NodeResourcesBalancedAllocation", "ImageLocality"]
    assert names(fw.reserve_plugins) == ["Coscheduling", "VolumeBinding"]
    assert names(fw.pre_bind_plugins) == ["VolumeBinding"]
    assert names(fw.post_filter_plugins) == ["Coscheduling", "DefaultPreemption"]
    assert names(fw.permit_plugins) == ["Coscheduling"]
    assert names(fw.bind_plugins) == ["DefaultBinder"]


def test_yaml_file_with_args_weights_and_disabled(tmp_path: Path) -> None:
    path = tmp_path / "scheduler.yaml"
    path.write_text(HEADER + """
percentageOfNodesToScore: 40
profiles:
- schedulerName: hot
  plugins:
    score:
      enabled:
      - name: LoadAwareScheduling
        weight: 5
      disabled:
      - name: NodeAffinity
  pluginConfig:
  - name: LoadAwareScheduling
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: LoadAwareSchedulingArgs
      usageThresholds: {cpu: 70}
      filterExpiredNodeMetrics: false
      aggregated:
        usageThresholds: {cpu: 60}
        usageAggregationType: p95
        usageAggregatedDuration: 5m
- schedulerName: cold
""")
    frameworks = frameworks_from_config(load_scheduler_config(path), snapshot=Snapshot())
    hot, cold = frameworks["hot"], frameworks["cold"]
    assert hot.percentage_of_nodes_to_score == 40
    # The explicitly listed LoadAware keeps its place first with its own weight; NodeAffinity leaves Score only.
    assert [(p.name, w) for p, w, _ in hot.score_plugins] == [
        ("LoadAwareScheduling", 5), ("TaintToleration", 3), ("NodeResourcesFit", 1), ("VolumeBinding", 1),
        ("PodTopologySpread", 2), ("InterPodAffinity", 2), ("NodeResourcesBalancedAllocation", 1),
        ("ImageLocality", 1),
    ]
    assert "NodeAffinity" in names(hot.filter_plugins)
    plugin = hot.plugins["LoadAwareScheduling"]
    assert isinstance(plugin, LoadAwareScheduling)
    assert plugin.args.usage_thresholds == {"cpu": 70}
    assert plugin.args.filter_expired_node_metrics is False
    assert plugin.args.aggregated is not None and plugin.args.aggregated.usage_aggregated_duration is not None
    assert plugin.args.aggregated.usage_aggregated_duration.seconds == 300
    assert ("LoadAwareScheduling", 1) in [(p.name, w) for p, w, _ in cold.score_plugins]


def test_multipoint_plugin_added_and_disabled_per_point() -> None:
    frameworks = build("""
profiles:
- plugins:
    multiPoint:
      enabled:
      - name: NetworkTopology
    reserve:
      disabled:
      - name: NetworkTopology
""")
    fw = next(iter(frameworks.values()))
    assert names(fw.filter_plugins)[-1] == "NetworkTopology"  # multiPoint additions come after the defaults
    assert "NetworkTopology" in names(fw.pre_filter_plugins)
    assert "NetworkTopology" not in names(fw.reserve_plugins)


def test_disable_star_and_replace_queue_sort() -> None:
    frameworks = build("""
profiles:
- plugins:
    queueSort:
      enabled: [{name: PrioritySort}]
      disabled: [{name: "*"}]
    filter:
      enabled: [{name: NodeResourcesFit}]
      disabled: [{name: "*"}]
""")
    fw = next(iter(frameworks.values()))
    assert fw.queue_sort_plugin is not None and fw.queue_sort_plugin.name == "PrioritySort"
    assert names(fw.filter_plugins) == ["NodeResourcesFit"]


def test_merge_plugin_set_keeps_default_position_for_overrides() -> None:
    default = PluginSet(enabled=[PluginRef(name="A"), PluginRef(name="B", weight=1), PluginRef(name="C")])
    custom = PluginSet(enabled=[PluginRef(name="D"), PluginRef(name="B", weight=7)], disabled=[PluginRef(name="C")])
    merged = merge_plugin_set(default, custom)
    assert [(p.name, p.weight) for p in merged.enabled] == [("A", None), ("B", 7), ("D", None)]


@pytest.mark.parametrize(("body", "field"), [
    ("profiles:\n- schedulerName: x\n  plugins:\n    filter:\n      enabled:\n      - name: NodeAffinity\n      - name: NoSuchPlugin\n",
     "profiles[0].plugins.filter.enabled[1].name"),
    ("profiles:\n- plugins:\n    score:\n      enabled:\n      - {name: NodeAffinity, weight: -1}\n",
     "profiles[0].plugins.score.enabled[0].weight"),
    ("profiles:\n- plugins:\n    filter:\n      enabled:\n      - {name: NodeAffinity, weight: 3}\n",
     "profiles[0].plugins.filter.enabled[0].weight"),
    ("profiles:\n- pluginConfig:\n  - name: LoadAwareScheduling\n    args:\n      usageThresholds: {cpu: 120}\n",
     "profiles[0].pluginConfig[0].args.usageThresholds"),
    ("profiles:\n- pluginConfig:\n  - name: LoadAwareScheduling\n    args:\n      nodeMetricExpirationSeconds: 0\n",
     "profiles[0].pluginConfig[0].args.nodeMetricExpirationSeconds"),
    ("profiles:\n- pluginConfig:\n  - name: Coscheduling\n    args:\n      permitWaitingTimeSecond: 5\n",
     "profiles[0].pluginConfig[0].args.permitWaitingTimeSecond"),
    ("profiles:\n- {schedulerName: a}\n- schedulerName: b\n  pluginConfig:\n  - name: Nope\n",
     "profiles[1].pluginConfig[0].name"),
    ("profiles:\n- pluginConfig:\n  - name: NodeName\n    args: {x: 1}\n", "profiles[0].pluginConfig[0].args"),
    ("profiles:\n- schedulerName: a\n- schedulerName: a\n", "profiles[1].schedulerName"),
    ("profiles:\n- plugins:\n    queueSort:\n      enabled: [{name: PrioritySort}]\n", "profiles[0].plugins.queueSort"),
    ("profiles:\n- plugins:\n    bind:\n      disabled: [{name: '*'}]\n    multiPoint:\n      disabled: [{name: DefaultBinder}]\n",
     "profiles[0].plugins.bind"),
    ("profiles:\n- plugins:\n    filter:\n      enabled: [{name: DefaultBinder}]\n", "profiles[0].plugins.filter.enabled[0].name"),
    ("profiles:\n- schedulerName: a\n- schedulerName: b\n  plugins:\n    queueSort:\n      enabled: [{name: PrioritySort}]\n"
     "      disabled: [{name: '*'}]\n", "profiles[1].plugins.queueSort"),
    ("profiles:\n- schedulerName: a\n  plugins:\n    filtre: {}\n", "profiles[0].plugins.filtre"),
    ("percentageOfNodesToScore: 101\n", "percentageOfNodesToScore"),
    ("profiles: []\n", "profiles"),
])
def test_errors_name_the_field(body: str, field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build(body)
    assert f"{field}:" in str(caught.value)


def test_wrong_api_version_is_named() -> None:
    with pytest.raises(ConfigError, match=r"apiVersion: Input should be 'kubescheduler.config.k8s.io/v1'"):
        load_scheduler_config("apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n")


def test_loadaware_weight_without_scaling_factor_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"profiles\[0\]\.pluginConfig\[0\]\.args.*need an estimatedScalingFactors"):
        build("profiles:\n- pluginConfig:\n  - name: LoadAwareScheduling\n    args:\n"
              "      resourceWeights: {nvidia.com/gpu: 1}\n")


def test_plugins_model_defaults_are_empty() -> None:
    assert Plugins().filter.enabled == []


@pytest.mark.parametrize("name", sorted(n for n, spec in IN_TREE_REGISTRY.items() if spec.args_model is not None))
def test_a_factory_given_args_of_another_type_names_the_plugin(name: str) -> None:
    spec = IN_TREE_REGISTRY[name]
    assert spec.args_model is not None
    other = next(s.args_model for s in IN_TREE_REGISTRY.values() if s.args_model not in (None, spec.args_model))
    assert other is not None
    with pytest.raises(TypeError, match=f"plugin {name} takes {spec.args_model.__name__} args, got {other.__name__}"):
        spec.factory(other(), Framework("t", snapshot=Snapshot()))
    assert spec.factory(None, Framework("t", snapshot=Snapshot())).name == name  # no args: the defaults
