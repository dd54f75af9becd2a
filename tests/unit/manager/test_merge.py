"""Merge semantics (MergeCfg), first-match node selection and the node's own overrides (koordinator pkg/util/sloconfig)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from manager.nodeslo.config import SLOControllerConfig, parse_slo_controller_config
from manager.nodeslo.merge import merge_cfg, omit_empty, ratio_label_percent
from manager.nodeslo.render import colocation_for_node, first_match, render_node_slo_spec
from manager.nodeslo.schema import LabelSelector


def config(**keys: Any) -> SLOControllerConfig:
    result = parse_slo_controller_config({k.replace("_", "-"): json.dumps(v) for k, v in keys.items()})
    assert isinstance(result, SLOControllerConfig), result
    return result


# --- MergeCfg on JSON ----------------------------------------------------------------------
def test_overlay_wins_nested_objects_merge_lists_replace() -> None:
    base: dict[str, Any] = {"a": {"x": 1, "y": 2}, "l": [1, 2, 3], "keep": True}
    overlay: dict[str, Any] = {"a": {"y": 3, "z": {"deep": 1}}, "l": [9], "new": 0}
    merged = merge_cfg(base, overlay)
    assert merged == {"a": {"x": 1, "y": 3, "z": {"deep": 1}}, "l": [9], "keep": True, "new": 0}
    assert base == {"a": {"x": 1, "y": 2}, "l": [1, 2, 3], "keep": True}  # inputs untouched
    merged["a"]["z"]["deep"] = 2
    assert overlay["a"]["z"]["deep"] == 1  # and not aliased


def test_null_overlay_fields_do_not_override() -> None:
    assert merge_cfg({"a": 1, "b": {"c": 2}}, {"a": None, "b": None}) == {"a": 1, "b": {"c": 2}}


def test_go_maps_add_keys_and_replace_values_whole() -> None:
    base = {"extensions": {"k1": {"a": 1, "b": 1}, "k2": 2}}
    merged = merge_cfg(base, {"extensions": {"k1": {"b": 5}, "k3": 3}})
    assert merged == {"extensions": {"k1": {"b": 5}, "k2": 2, "k3": 3}}


def test_omit_empty_drops_what_go_omitempty_drops() -> None:
    value: dict[str, Any] = {
        "a": None,
        "b": "",
        "c": [],
        "d": 0,
        "e": False,
        "extensions": {},
        "struct": {},
        "f": {"g": ""},
    }
    assert omit_empty(value) == {"d": 0, "e": False, "struct": {}, "f": {}}


def test_nested_qos_strategy_merges_field_by_field() -> None:
    cfg = config(
        resource_qos_config={"clusterStrategy": {"beClass": {"memoryQOS": {"enable": True, "wmarkRatio": 90}}}}
    )
    be = cfg.resource_qos.cluster["beClass"]
    assert be["memoryQOS"]["enable"] is True
    assert be["memoryQOS"]["wmarkRatio"] == 90
    assert be["memoryQOS"]["wmarkMinAdj"] == 50  # default kept
    assert be["cpuQOS"] == {"enable": False, "groupIdentity": -1}  # sibling default kept


def test_node_entry_merges_onto_merged_cluster_strategy() -> None:
    cfg = config(
        resource_threshold_config={
            "clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 50},
            "nodeStrategies": [{"name": "big", "nodeSelector": {"matchLabels": {"pool": "big"}}, "memoryEvictThresholdPercent": 80}],
        }
    )  # fmt: skip
    node = cfg.resource_threshold.nodes[0].merged
    assert node["enable"] is True  # from clusterStrategy
    assert node["cpuSuppressThresholdPercent"] == 50  # from clusterStrategy
    assert node["memoryEvictThresholdPercent"] == 80  # from the entry
    assert node["cpuSuppressPolicy"] == "cpuset"  # from the defaults
    assert "name" not in node and "nodeSelector" not in node


def test_lists_replace_in_node_configs() -> None:
    cfg = config(
        colocation_config={"nodeConfigs": [{"nodeSelector": {}, "metricAggregatePolicy": {"durations": ["1m"]}}]}
    )
    assert cfg.colocation.nodes[0].merged["metricAggregatePolicy"] == {"durations": ["1m0s"]}
    assert cfg.colocation.cluster["metricAggregatePolicy"] == {"durations": ["5m0s", "10m0s", "30m0s"]}


# --- node selection ------------------------------------------------------------------------
def selector(doc: dict[str, Any]) -> Any:
    return LabelSelector.model_validate(doc).compile()


def test_first_matching_entry_wins_and_missing_selector_matches_nothing() -> None:
    entries = (None, selector({"matchLabels": {"pool": "a"}}), selector({}))
    assert first_match(entries, {"pool": "a"}) == 1
    assert first_match(entries, {"pool": "b"}) == 2
    assert first_match(entries[:2], {"pool": "b"}) == -1


def test_first_match_applies_per_configmap_key() -> None:
    cfg = config(
        resource_threshold_config={
            "nodeStrategies": [
                {"nodeSelector": {"matchLabels": {"pool": "a"}}, "cpuSuppressThresholdPercent": 40},
                {"nodeSelector": {"matchLabels": {"pool": "a", "zone": "z1"}}, "cpuSuppressThresholdPercent": 30},
                {"nodeSelector": {}, "cpuSuppressThresholdPercent": 20},
            ]
        },
        cpu_burst_config={"nodeStrategies": [{"nodeSelector": {"matchLabels": {"zone": "z1"}}, "policy": "auto"}]},
    )
    spec = render_node_slo_spec(cfg, {"pool": "a", "zone": "z1"})
    assert spec["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 40  # first, not most specific
    assert spec["cpuBurstStrategy"]["policy"] == "auto"
    other = render_node_slo_spec(cfg, {"pool": "b"})
    assert other["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 20
    assert other["cpuBurstStrategy"]["policy"] == "none"


# --- node annotation and labels (colocation only) --------------------------------------------
COLOCATION = {
    "enable": True,
    "nodeConfigs": [
        {"name": "gpu", "nodeSelector": {"matchLabels": {"gpu": "true"}}, "cpuReclaimThresholdPercent": 55}
    ],
}
ANNOTATION = "node.koordinator.sh/colocation-strategy"


def test_annotation_merges_after_node_configs() -> None:
    cfg = config(colocation_config=COLOCATION)
    plain = colocation_for_node(cfg, {"gpu": "true"})
    assert plain.strategy["cpuReclaimThresholdPercent"] == 55
    assert plain.source == "nodeConfigs[0] gpu"
    assert not plain.overridden_by_node
    annotated = colocation_for_node(
        cfg,
        {"gpu": "true"},
        {ANNOTATION: json.dumps({"cpuReclaimThresholdPercent": 70, "batchCPUThresholdPercent": 80})},
    )
    assert annotated.strategy["cpuReclaimThresholdPercent"] == 70
    assert annotated.strategy["batchCPUThresholdPercent"] == 80
    assert annotated.strategy["enable"] is True
    assert annotated.overridden_by_node


def test_ratio_labels_override_the_annotation() -> None:
    cfg = config(colocation_config=COLOCATION)
    node = colocation_for_node(
        cfg,
        {
            "node.koordinator.sh/cpu-reclaim-ratio": "0.5",
            "node.koordinator.sh/memory-reclaim-ratio": "0.29",
            "node.koordinator.sh/mid-static-cpu-reserved-ratio": "0.1",
        },
        {ANNOTATION: json.dumps({"cpuReclaimThresholdPercent": 70, "memoryReclaimThresholdPercent": 75})},
    )
    assert node.strategy["cpuReclaimThresholdPercent"] == 50
    assert node.strategy["memoryReclaimThresholdPercent"] == 28  # int(0.29 * 100) = 28 in float64, as in Go
    assert node.strategy["midStaticCPUReservedPercent"] == 10


@pytest.mark.parametrize(("text", "percent"), [("0.6", 60), ("1.2", 120), ("-0.1", None), ("abc", None), ("nan", None)])
def test_ratio_label_parsing(text: str, percent: int | None) -> None:
    assert ratio_label_percent(text) == percent


def test_unusable_annotation_is_ignored_with_a_warning() -> None:
    cfg = config(colocation_config=COLOCATION)
    broken = colocation_for_node(cfg, {}, {ANNOTATION: "{oops"})
    assert broken.strategy == cfg.colocation.cluster
    assert broken.warnings and "ignored" in broken.warnings[0]
    out_of_range = colocation_for_node(cfg, {}, {ANNOTATION: json.dumps({"resourceDiffThreshold": 5})})
    assert out_of_range.strategy["resourceDiffThreshold"] == 0.1
    assert "resourceDiffThreshold" in out_of_range.warnings[0]


def test_node_overrides_do_not_leak_into_other_nodes() -> None:
    cfg = config(colocation_config=COLOCATION)
    colocation_for_node(cfg, {"node.koordinator.sh/cpu-reclaim-ratio": "0.9"})
    assert colocation_for_node(cfg, {}).strategy["cpuReclaimThresholdPercent"] == 60
    assert cfg.colocation.cluster["cpuReclaimThresholdPercent"] == 60


def test_a_node_annotation_cannot_make_the_agents_keep_unbounded_windows() -> None:
    # Issue 29: what the agents obey is checked for them, also when a node's own annotation overrides the config.
    cfg = config(colocation_config=COLOCATION)
    node = colocation_for_node(cfg, {}, {ANNOTATION: json.dumps({"metricAggregatePolicy": {"durations": ["168h"]}})})
    assert node.strategy["metricAggregatePolicy"] == cfg.colocation.cluster["metricAggregatePolicy"]
    assert "metricAggregatePolicy.durations[0]" in node.warnings[0]


def test_the_annotation_memo_is_bounded() -> None:
    # Keyed by the text nodes write: distinct texts must not grow the config's memo without end.
    from manager.nodeslo.render import MAX_ANNOTATION_MEMO

    cfg = config(colocation_config=COLOCATION)
    for i in range(MAX_ANNOTATION_MEMO + 10):
        colocation_for_node(cfg, {}, {ANNOTATION: json.dumps({"cpuReclaimThresholdPercent": 50, "x": i})})
    assert len(cfg.memo["colocation-annotations"]) <= MAX_ANNOTATION_MEMO
