"""Per-node views of a parsed SLOControllerConfig: the NodeSLO spec, the NodeMetric collect
policy and the node's colocation strategy (koordinator
pkg/slo-controller/nodeslo/resource_strategy.go, pkg/util/sloconfig/nodeslo_config.go).

All per-node work is a first-match over compiled selectors plus a memo lookup: nodes that
select the same entries share one rendered spec, so a pass over 5,000 nodes renders only a
handful of distinct specs. Callers always receive their own copy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar, cast

from common.api.constants import ANNOTATION_COLOCATION_STRATEGY
from common.api.scheduling import LabelSelector
from manager.noderesource.mid import MidStrategy, mid_strategy_from_colocation
from manager.noderesource.model import BatchStrategy
from manager.noderesource.strategy import batch_strategy_from_colocation
from manager.nodeslo.config import (
    DEFAULT_COLOCATION_STRATEGY,
    ConfigError,
    SLOControllerConfig,
    parse_colocation_annotation,
)
from manager.nodeslo.merge import (
    JSONDict,
    apply_node_colocation_overrides,
    clone_json,
    has_node_colocation_overrides,
)

_NO_LABELS: Final[Mapping[str, str]] = {}


# --- colocation strategy per node ----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class NodeColocation:
    """The colocation strategy in force for one node (wire form; treat as read-only)."""

    strategy: JSONDict
    source: str  # "cluster" or "nodeConfigs[i] <name>"
    overridden_by_node: bool  # the node's annotation or ratio labels changed something
    warnings: tuple[str, ...] = ()
    cache_key: Any = None  # equal keys mean equal strategies (None: node-specific, not cached)

    @property
    def enabled(self) -> bool:
        return bool(self.strategy.get("enable"))


# Distinct colocation-strategy annotation texts remembered per config: nodes of a cluster share a few; each node may
# write any text (the API server bounds one node's annotations to 256 KiB), so the memo is bounded, not per version.
MAX_ANNOTATION_MEMO: Final = 1024


def colocation_for_node(
    config: SLOControllerConfig,
    labels: Mapping[str, str] | None,
    annotations: Mapping[str, str] | None = None,
) -> NodeColocation:
    """First matching nodeConfigs entry (else the cluster strategy), then the node annotation
    `node.koordinator.sh/colocation-strategy`, then the `*-ratio` labels."""
    labels = labels or _NO_LABELS
    annotations = annotations or _NO_LABELS
    scoped = config.colocation
    index = first_match(scoped.selectors, labels)
    base = scoped.entry_for(index)
    source = "cluster" if index < 0 else f"nodeConfigs[{index}] {scoped.nodes[index].name}".rstrip()
    if not has_node_colocation_overrides(labels, annotations):
        return NodeColocation(base, source, overridden_by_node=False, cache_key=("colocation", index))

    warnings: list[str] = []
    overlay: JSONDict | None = None
    text = annotations.get(ANNOTATION_COLOCATION_STRATEGY)
    if text is not None:
        parsed_by_text = config.memo.setdefault("colocation-annotations", {})
        parsed = parsed_by_text.get(text)
        if parsed is None:
            if len(parsed_by_text) >= MAX_ANNOTATION_MEMO:
                parsed_by_text.clear()  # keyed by what nodes write: starts over rather than grows
            parsed = parsed_by_text[text] = parse_colocation_annotation(text)
        if isinstance(parsed, ConfigError):
            warnings.append(f"ignored: {parsed}")
        else:
            overlay = parsed
    strategy = apply_node_colocation_overrides(base, labels, overlay)
    return NodeColocation(strategy, source, overridden_by_node=strategy != base, warnings=tuple(warnings))


_View = TypeVar("_View")


def _strategy_for_node(
    config: SLOControllerConfig, colocation: NodeColocation, view: str, build: Callable[[Mapping[str, Any]], _View]
) -> _View:
    """`build(colocation.strategy)`, shared (in config.memo, under `view`) between nodes that share the strategy."""
    if colocation.cache_key is None:
        return build(colocation.strategy)
    memo_key = (view, colocation.cache_key)
    if memo_key not in config.memo:
        config.memo[memo_key] = build(colocation.strategy)
    return cast(_View, config.memo[memo_key])


def batch_strategy_for_node(config: SLOControllerConfig, colocation: NodeColocation) -> BatchStrategy:
    """The batch view of a node's colocation strategy."""
    return _strategy_for_node(config, colocation, "batch", batch_strategy_from_colocation)


def mid_strategy_for_node(config: SLOControllerConfig, colocation: NodeColocation) -> MidStrategy:
    """The mid-tier view of a node's colocation strategy (midCPUThresholdPercent, ...)."""
    return _strategy_for_node(config, colocation, "mid", mid_strategy_from_colocation)


# --- NodeMetric spec.metricCollectPolicy -----------------------------------------------------
def node_metric_collect_policy(colocation: NodeColocation | Mapping[str, Any]) -> JSONDict:
    """`spec.metricCollectPolicy` for the node's NodeMetric.

    Taken from the node's colocation strategy when colocation is enabled for it; otherwise
    Koordinator still writes the defaults (300 / 60 / [5m0s, 10m0s, 30m0s] / usageWithoutPageCache).
    """
    strategy = colocation.strategy if isinstance(colocation, NodeColocation) else colocation
    source = strategy if strategy.get("enable") else DEFAULT_COLOCATION_STRATEGY
    policy: JSONDict = {
        "aggregateDurationSeconds": source.get("metricAggregateDurationSeconds"),
        "reportIntervalSeconds": source.get("metricReportIntervalSeconds"),
        "nodeAggregatePolicy": clone_json(source.get("metricAggregatePolicy")),
        "nodeMemoryCollectPolicy": source.get("metricMemoryCollectPolicy"),
    }
    return {k: v for k, v in policy.items() if v is not None}


# --- NodeSLO spec ------------------------------------------------------------------------
def _host_applications_index(config: SLOControllerConfig, labels: Mapping[str, str]) -> int:
    for index, (selector, _apps) in enumerate(config.host_applications.nodes):
        if selector is not None and selector.matches(labels):
            return index
    return -1


def _build_spec(config: SLOControllerConfig, indexes: tuple[int, int, int, int, int]) -> JSONDict:
    threshold, qos, burst, system, host = indexes
    spec: JSONDict = {
        "resourceUsedThresholdWithBE": config.resource_threshold.entry_for(threshold),
        "resourceQOSStrategy": config.resource_qos.entry_for(qos),
        "cpuBurstStrategy": config.cpu_burst.entry_for(burst),
        "systemStrategy": config.system.entry_for(system),
    }
    apps = config.host_applications.nodes[host][1] if host >= 0 else config.host_applications.cluster
    if apps:
        spec["hostApplications"] = list(apps)
    result = clone_json(spec)
    assert isinstance(result, dict)
    return result


def render_node_slo_spec(config: SLOControllerConfig, labels: Mapping[str, str] | None) -> JSONDict:
    """The NodeSLO `spec` for a node with these labels, in Koordinator's field names.

    Each ConfigMap key is resolved on its own: the first nodeStrategies entry whose
    nodeSelector matches wins, else the cluster strategy (both already defaulted and merged).
    """
    labels = labels or _NO_LABELS
    indexes = (
        first_match(config.resource_threshold.selectors, labels),
        first_match(config.resource_qos.selectors, labels),
        first_match(config.cpu_burst.selectors, labels),
        first_match(config.system.selectors, labels),
        _host_applications_index(config, labels),
    )
    memo_key = ("spec", indexes)
    cached = config.memo.get(memo_key)
    if cached is None:
        cached = config.memo[memo_key] = _build_spec(config, indexes)
    result = clone_json(cached)
    assert isinstance(result, dict)
    return result


def first_match(selectors: tuple[LabelSelector | None, ...], labels: Mapping[str, str]) -> int:
    """Index of the first selector matching `labels`, or -1: the first match wins, as in Koordinator.
    A missing selector (None) matches no node."""
    for index, selector in enumerate(selectors):
        if selector is not None and selector.matches(labels):
            return index
    return -1
