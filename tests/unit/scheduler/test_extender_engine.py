"""The extender's decisions: the profile's Filter/Score plugins over the requested nodes.

Nodes have 4 cpu / 8Gi. An incoming `pod(cpu="1", memory="1Gi")` is estimated by LoadAware at
850m cpu and round(1Gi × 0.7) = 751619277 bytes (see test_loadaware_plugin).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from common.config import ConfigError
from scheduler_plugin.extender.engine import ExtenderEngine, InvalidPod, PluginError
from scheduler_plugin.extender.profiles import extender_frameworks
from scheduler_plugin.extender.wire import ExtenderArgs, parse_args
from scheduler_plugin.framework.clock import FakeClock
from scheduler_plugin.framework.filterresult import FilterResult
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.loadaware import NAME as LOADAWARE
from scheduler_plugin.plugins.loadaware.nodeload import NodeLoads
from tests.objects import T0, node, node_metric, pod

NOW = T0 + 10
Obj = dict[str, Any]
HOT_REASON = "node(s) cpu usage exceed threshold"


def cluster() -> tuple[list[Obj], list[Obj]]:
    nodes = [node("hot"), node("warm"), node("cold"), node("bare")]
    metrics = [
        node_metric("hot", cpu="2000m", memory="1Gi"),  # 2000 + 850 = 71.25 % > 65 %
        node_metric("warm", cpu="1000m", memory="2Gi"),
        node_metric("cold", cpu="200m", memory="1Gi"),
    ]
    return nodes, metrics


def engine(config: str | None = None, *, nodes: list[Obj] | None = None, **options: Any) -> ExtenderEngine:
    default_nodes, metrics = cluster()
    snap = Snapshot.from_objects(nodes=default_nodes if nodes is None else nodes, stores={NodeLoads: metrics})
    frameworks = extender_frameworks(config, snapshot=snap, clock=FakeClock(NOW))
    return ExtenderEngine(frameworks, snap, default_profile=next(iter(frameworks)), **options)


def names_request(p: Obj, names: list[str]) -> ExtenderArgs:
    return parse_args(json.dumps({"Pod": p, "Nodes": None, "NodeNames": names}))


def nodes_request(p: Obj, nodes: list[Obj]) -> ExtenderArgs:
    return parse_args(json.dumps({"Pod": p, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}))


# --------------------------------------------------------------------------- filter
def test_cache_mode_filter_drops_the_hot_node_with_loadawares_reason() -> None:
    result = engine().filter(names_request(pod("p"), ["hot", "warm", "cold", "bare"]))
    assert result == {
        "Nodes": None,
        "NodeNames": ["warm", "cold", "bare"],  # bare has no NodeMetric: LoadAware lets it pass
        "FailedNodes": {"hot": HOT_REASON},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }


def test_nodes_unknown_to_the_cache_pass_unchecked() -> None:
    result = engine().filter(names_request(pod("p"), ["ghost", "hot", "cold"]))
    assert result["NodeNames"] == ["ghost", "cold"]
    assert result["FailedNodes"] == {"hot": HOT_REASON}


def test_full_node_mode_echoes_the_request_nodes_and_never_adds_them_to_the_cache() -> None:
    # Issue 29: the extender trusts nothing it is sent. A Node our watch does not know passes unchecked (as in
    # cache mode) and is echoed back, but never enters the shared snapshot every other request is judged on.
    ext = engine(nodes=[])
    sent = [node("hot", labels={"from": "request"}), node("cold", labels={"from": "request"})]
    result = ext.filter(nodes_request(pod("p"), sent))
    assert result["Nodes"] == {"metadata": {}, "items": sent}
    assert result["NodeNames"] == ["hot", "cold"] and result["FailedNodes"] == {}
    assert ext.snapshot.num_nodes == 0 and ext.snapshot.node_by_name("cold") is None


def test_full_node_mode_request_node_never_overwrites_the_watched_one() -> None:
    # A request claims "hot" is a 64-cpu node with new labels; the watched copy (4 cpu, LoadAware-hot) decides.
    ext = engine()
    forged = node("hot", cpu="64", labels={"forged": "yes"})
    forged["metadata"]["resourceVersion"] = "99"
    result = ext.filter(nodes_request(pod("p"), [forged]))
    assert result["FailedNodes"] == {"hot": HOT_REASON}
    info = ext.snapshot.node_by_name("hot")
    assert info is not None and "forged" not in info.labels


def test_full_node_mode_unparsable_request_node_keeps_the_cached_copy() -> None:
    ext = engine()
    broken = node("cold", taints=[{"key": "k", "effect": "Sometimes"}])
    broken["metadata"]["resourceVersion"] = "99"
    result = ext.filter(nodes_request(pod("p"), [broken]))
    assert result["NodeNames"] == ["cold"]
    assert result["Nodes"] == {"metadata": {}, "items": [broken]}


def test_daemonset_pods_pass_everywhere() -> None:
    result = engine().filter(names_request(pod("ds", owner=("DaemonSet", "o")), ["hot", "cold"]))
    assert result["NodeNames"] == ["hot", "cold"]


def test_thresholds_come_from_plugin_config() -> None:
    config = """
profiles:
- schedulerName: ext
  pluginConfig:
  - name: LoadAwareScheduling
    args: {usageThresholds: {cpu: 20}}
"""
    # warm: 1000 + 850 = 46 % > 20 %; cold: 200 + 850 = 26 % > 20 %
    result = engine(config).filter(names_request(pod("p"), ["hot", "warm", "cold"]))
    assert result["NodeNames"] == []
    assert set(result["FailedNodes"]) == {"hot", "warm", "cold"}


def test_more_filter_plugins_and_unresolvable_reasons() -> None:
    config = """
profiles:
- schedulerName: ext
  plugins:
    multiPoint:
      enabled: [{name: NodeResourcesFit}, {name: NodeAffinity}]
"""
    nodes, _ = cluster()
    nodes[2]["metadata"]["labels"] = {"disk": "ssd"}  # cold
    nodes[1]["metadata"]["labels"] = {"disk": "ssd"}  # warm
    nodes[1]["status"]["allocatable"]["pods"] = nodes[1]["status"]["capacity"]["pods"] = "0"
    ext = engine(config, nodes=nodes)
    result = ext.filter(names_request(pod("p", node_selector={"disk": "ssd"}), ["hot", "warm", "cold", "bare"]))
    # Plugins run in profile order (the default LoadAware first), each over the previous survivors,
    # so a node carries the reasons of the first plugin that rejected it.
    assert result["NodeNames"] == ["cold"]
    assert result["FailedAndUnresolvableNodes"] == {"bare": "node(s) didn't match Pod's node affinity/selector"}
    assert result["FailedNodes"] == {"hot": HOT_REASON, "warm": "Too many pods"}


def test_prefilter_narrowing_rejects_the_rest_as_unresolvable() -> None:
    config = """
profiles:
- schedulerName: ext
  plugins:
    multiPoint:
      enabled: [{name: NodeAffinity}]
"""
    pinned = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["warm"]}]}]}}}
    result = engine(config).filter(names_request(pod("p", affinity=pinned), ["warm", "cold"]))
    assert result["NodeNames"] == ["warm"]
    assert result["FailedAndUnresolvableNodes"] == {"cold": "node(s) didn't satisfy plugin(s) [NodeAffinity]"}


def test_the_pods_scheduler_name_selects_the_profile() -> None:
    config = """
profiles:
- schedulerName: lenient
  pluginConfig: [{name: LoadAwareScheduling, args: {usageThresholds: {cpu: 90}}}]
- schedulerName: strict
  pluginConfig: [{name: LoadAwareScheduling, args: {usageThresholds: {cpu: 30}}}]
"""
    ext = engine(config)
    strict = pod("p")
    strict["spec"]["schedulerName"] = "strict"
    other = pod("q")
    other["spec"]["schedulerName"] = "default-scheduler"  # no such profile: the first one
    assert ext.filter(names_request(strict, ["hot", "warm", "cold"]))["NodeNames"] == ["cold"]
    assert ext.filter(names_request(other, ["hot", "warm", "cold"]))["NodeNames"] == ["hot", "warm", "cold"]


def test_an_unparsable_pod_is_a_bad_request() -> None:
    with pytest.raises(InvalidPod, match=r"Pod: .*cpu"):
        engine().filter(names_request(pod("p", cpu="lots"), ["cold"]))


class Broken:
    name = "Broken"

    def filter(self, *_args: Any) -> FilterResult:
        raise RuntimeError("boom")

    def score(self, *_args: Any) -> np.ndarray[Any, Any]:
        raise RuntimeError("boom")


def test_a_failing_filter_plugin_answers_with_error() -> None:
    ext = engine()
    framework = next(iter(ext.frameworks.values()))
    framework.filter_plugins.append(Broken())
    result = ext.filter(names_request(pod("p"), ["warm", "cold"]))
    assert result["Error"] == 'running "Broken" filter plugin: boom'
    assert result["NodeNames"] is None and result["Nodes"] is None


def test_an_error_status_from_a_filter_plugin_answers_with_error() -> None:
    class Erroring:
        name = "Erroring"

        def filter(self, *_args: Any) -> FilterResult:
            return FilterResult.error("metrics backend down")

    ext = engine()
    next(iter(ext.frameworks.values())).filter_plugins.append(Erroring())
    result = ext.filter(names_request(pod("p"), ["cold"]))
    assert result["Error"] == 'running "Erroring" filter plugin: metrics backend down'


# --------------------------------------------------------------------------- prioritize
def test_prioritize_scales_loadaware_scores_to_0_10() -> None:
    # LoadAware: warm cpu (4000 − 1850)·100/4000 = 53, memory 66 → 59
    #            cold cpu (4000 − 1050)·100/4000 = 73, memory (8Gi − 1Gi − 751619277)·100/8Gi = 78 → 75
    #            bare has no NodeMetric (0); ghost is not in the cache (0, not scored)
    request = names_request(pod("p"), ["warm", "cold", "bare", "ghost"])
    # relative (default): min–max over the scored nodes 0..75: warm 59·10/75 = 7.9 → 7
    assert engine().prioritize(request) == {"warm": 7, "cold": 10, "bare": 0, "ghost": 0}
    # absolute: out of 100: 5.9 → 5, 7.5 → 7
    assert engine(score_scaling="absolute").prioritize(request) == {"warm": 5, "cold": 7, "bare": 0, "ghost": 0}


def test_prioritize_weights_several_plugins_like_kube_scheduler() -> None:
    config = """
profiles:
- schedulerName: ext
  plugins:
    multiPoint:
      enabled: [{name: NodeResourcesFit, weight: 3}]
"""
    ext = engine(config, score_scaling="absolute")
    framework = next(iter(ext.frameworks.values()))
    rows = np.asarray([ext.snapshot.node_by_name(n).index for n in ("warm", "cold")], dtype=np.intp)  # type: ignore[union-attr]
    totals, max_total = ext.weighted_scores(framework, PodInfo.from_dict(pod("p")), rows)
    # NodeResourcesFit LeastAllocated on empty 4-cpu/8Gi nodes: cpu 75, memory 87 → 81, × 3 = 243
    assert max_total == 400
    assert totals.tolist() == [59 + 243, 75 + 243]
    request = names_request(pod("p"), ["warm", "cold"])
    assert ext.prioritize(request) == {"warm": 7, "cold": 7}  # 302/400 → 7, 318/400 → 7
    assert engine(config).prioritize(request) == {"warm": 0, "cold": 10}


def test_prioritize_with_a_failing_score_plugin_raises() -> None:
    ext = engine()
    framework = next(iter(ext.frameworks.values()))
    framework.score_plugins.append((Broken(), 1, None))
    with pytest.raises(PluginError, match='running Score plugins: plugin "Broken" failed with: boom'):
        ext.prioritize(names_request(pod("p"), ["warm", "cold"]))


def test_prioritize_full_node_mode() -> None:
    ext = engine(score_scaling="absolute")
    scores = ext.prioritize(nodes_request(pod("p"), [node("warm"), node("cold"), node("ghost")]))
    assert scores == {"warm": 5, "cold": 7, "ghost": 0}  # judged on the watched copies; unknown scores 0
    assert ext.snapshot.node_by_name("ghost") is None


def test_assigned_pods_count_in_the_assign_cache() -> None:
    # A pod bound to cold after its NodeMetric (no usage reported for it) adds its estimate:
    # cold: 200 + 850 (bound pod) + 850 = 47.5 % → cpu score (4000 − 1900)·100/4000 = 52.
    ext = engine(score_scaling="absolute")
    ext.snapshot.upsert_pod(pod("bound", node_name="cold", scheduled_at=NOW - 1))
    result = ext.filter(names_request(pod("p"), ["cold"]))
    assert result["NodeNames"] == ["cold"]
    scores = ext.prioritize(names_request(pod("p"), ["warm", "cold"]))
    assert scores["cold"] == 6  # (52 + 70) / 2 = 61 → 6; 7 without the bound pod


# --------------------------------------------------------------------------- profiles
@pytest.mark.parametrize("plugin", ["Coscheduling", "NetworkTopology"])
def test_gang_and_topology_plugins_are_refused(plugin: str) -> None:
    config = f"""
profiles:
- schedulerName: ext
  plugins:
    multiPoint:
      enabled: [{{name: NodeResourcesFit}}, {{name: {plugin}}}]
"""
    with pytest.raises(ConfigError, match=rf"profiles\[0\]\.plugins\.multiPoint\.enabled\[1\]\.name: {plugin} cannot "
                       "run in the extender.*loadline scheduler"):
        extender_frameworks(config)


def test_a_profile_with_nothing_to_do_is_refused() -> None:
    config = f"""
profiles:
- schedulerName: ext
  plugins:
    multiPoint:
      disabled: [{{name: {LOADAWARE}}}]
"""
    with pytest.raises(ConfigError, match="no Filter or Score plugin"):
        extender_frameworks(config)


def test_bad_plugin_args_name_the_field() -> None:
    config = """
profiles:
- pluginConfig: [{name: LoadAwareScheduling, args: {usageThresholds: {cpu: 150}}}]
"""
    with pytest.raises(ConfigError, match=r"profiles\[0\]\.pluginConfig\[0\]\.args\.usageThresholds"):
        extender_frameworks(config)


def test_default_profile_runs_loadaware_only() -> None:
    frameworks = extender_frameworks(None)
    framework = next(iter(frameworks.values()))
    assert [p.name for p in framework.filter_plugins] == [LOADAWARE]
    assert [(p.name, w) for p, w, _ in framework.score_plugins] == [(LOADAWARE, 1)]
    # LoadAware's PreFilter only carries the AddPod/RemovePod extensions (the preempt verb's simulation).
    assert [p.name for p in framework.pre_filter_plugins] == [LOADAWARE]
