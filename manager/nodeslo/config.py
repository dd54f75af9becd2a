"""The `slo-controller-config` ConfigMap parsed, validated and pre-merged.

`parse_slo_controller_config(configmap.data)` returns either a ready `SLOControllerConfig`
or the list of everything wrong with it, each error naming the ConfigMap key and the field;
it never raises. The controller keeps serving the last good config on errors ("last good
config" as Koordinator does), and a missing ConfigMap or key means Koordinator's defaults.

Per key, as in Koordinator (pkg/util/sloconfig, pkg/slo-controller/nodeslo/resource_strategy.go):
1. cluster strategy = defaults ⊕ clusterStrategy (for colocation-config: the top-level fields);
2. every nodeStrategies/nodeConfigs entry = that merged cluster strategy ⊕ the entry;
the per-node choice (first matching nodeSelector) and the node overrides live in render.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import BaseModel, ValidationError

from common.api.scheduling import LabelSelector
from manager.nodeslo.merge import JSONDict, clone_json, merge_cfg, omit_empty
from manager.nodeslo.schema import (
    ColocationConfig,
    ColocationStrategy,
    CPUBurstConfig,
    HostApplicationConfig,
    NodeProfile,
    ResourceQOSConfig,
    ResourceThresholdConfig,
    ScopedConfigModel,
    SystemConfig,
)

# --- ConfigMap keys (apis/configuration/slo_controller_config.go) --------------------------
COLOCATION_CONFIG_KEY: Final = "colocation-config"
RESOURCE_THRESHOLD_CONFIG_KEY: Final = "resource-threshold-config"
RESOURCE_QOS_CONFIG_KEY: Final = "resource-qos-config"
CPU_BURST_CONFIG_KEY: Final = "cpu-burst-config"
SYSTEM_CONFIG_KEY: Final = "system-config"
HOST_APPLICATION_CONFIG_KEY: Final = "host-application-config"

# --- Koordinator's defaults, in wire form (pkg/util/sloconfig) ------------------------------
DEFAULT_COLOCATION_STRATEGY: Final[JSONDict] = {
    "enable": False,
    "metricAggregateDurationSeconds": 300,
    "metricReportIntervalSeconds": 60,
    "metricAggregatePolicy": {"durations": ["5m0s", "10m0s", "30m0s"]},
    "metricMemoryCollectPolicy": "usageWithoutPageCache",
    "cpuReclaimThresholdPercent": 60,
    "cpuCalculatePolicy": "usage",
    "memoryReclaimThresholdPercent": 65,
    "memoryCalculatePolicy": "usage",
    "degradeTimeMinutes": 15,
    "updateTimeThresholdSeconds": 300,
    "resourceDiffThreshold": 0.1,
    "midCPUThresholdPercent": 100,
    "midMemoryThresholdPercent": 100,
    "midUnallocatedPercent": 0,
    "midStaticCPUReservedPercent": 0,
    "midStaticMemoryReservedPercent": 0,
    # batchCPUThresholdPercent / batchMemoryThresholdPercent: unset (no cap)
}

DEFAULT_RESOURCE_THRESHOLD_STRATEGY: Final[JSONDict] = {
    "enable": False,
    "cpuSuppressThresholdPercent": 65,
    "cpuSuppressPolicy": "cpuset",
    "memoryEvictThresholdPercent": 70,
    "cpuEvictPolicy": "evictByRealLimit",
}


def _default_resource_qos(group_identity: int, cat_range_end: int, wmark_min_adj: int) -> JSONDict:
    return {
        "cpuQOS": {"enable": False, "groupIdentity": group_identity},
        "memoryQOS": {
            "enable": False,
            "minLimitPercent": 0,
            "lowLimitPercent": 0,
            "throttlingPercent": 0,
            "wmarkRatio": 95,
            "wmarkScalePermill": 20,
            "wmarkMinAdj": wmark_min_adj,
            "priorityEnable": 0,
            "priority": 0,
            "oomKillGroup": 0,
        },
        "resctrlQOS": {
            "enable": False,
            "catRangeStartPercent": 0,
            "catRangeEndPercent": cat_range_end,
            "mbaPercent": 100,
        },
    }


DEFAULT_RESOURCE_QOS_STRATEGY: Final[JSONDict] = {
    "lsrClass": _default_resource_qos(group_identity=2, cat_range_end=100, wmark_min_adj=-25),
    "lsClass": _default_resource_qos(group_identity=2, cat_range_end=100, wmark_min_adj=-25),
    "beClass": _default_resource_qos(group_identity=-1, cat_range_end=30, wmark_min_adj=50),
}

DEFAULT_CPU_BURST_STRATEGY: Final[JSONDict] = {
    "policy": "none",
    "cpuBurstPercent": 1000,
    "cfsQuotaBurstPercent": 300,
    "cfsQuotaBurstPeriodSeconds": -1,
    "sharePoolThresholdPercent": 50,
}

# Koordinator v1.8.0's sloconfig.DefaultSystemStrategy(): no kernel tuning unless system-config asks for it
# (minFreeKbytesFactor/watermarkScaleFactor/memcgReapBackGround stay unset, so koordlet leaves the sysctls alone).
DEFAULT_SYSTEM_STRATEGY: Final[JSONDict] = {"totalNetworkBandwidth": "0"}


# --- errors ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ConfigError:
    """One refused value: the ConfigMap key, the field path inside it (None: the whole value), why."""

    key: str
    field: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.key}: {self.field}" if self.field else self.key
        return f"{where}: {self.message}"


# Union branch tags pydantic puts into error locations; they are not field names.
_UNION_TAGS: Final = frozenset({"int", "str", "float", "bool", "list", "dict"})


def _field_path(loc: Sequence[int | str]) -> str | None:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in _UNION_TAGS or "[" in item:
            continue
        else:
            parts.append(("." if parts else "") + item)
    return "".join(parts) or None


def _validation_errors(key: str, exc: ValidationError) -> list[ConfigError]:
    errors = []
    for err in exc.errors(include_url=False):
        message = err["msg"].removeprefix("Value error, ")
        if "input" in err and not isinstance(err["input"], dict | list) and err["type"] != "missing":
            message = f"{message} (got {json.dumps(err['input'], default=str)})"
        errors.append(ConfigError(key, _field_path(err["loc"]), message))
    return errors


# --- pre-merged config -----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class NodeScopedEntry:
    """One nodeStrategies/nodeConfigs entry, already merged onto the cluster strategy."""

    name: str
    selector: LabelSelector | None  # None (no nodeSelector) matches no node
    merged: JSONDict


@dataclass(frozen=True, slots=True)
class ScopedStrategy:
    """A ConfigMap key resolved to its cluster strategy and its node entries, all in wire form."""

    key: str
    cluster: JSONDict
    nodes: tuple[NodeScopedEntry, ...] = ()
    selectors: tuple[LabelSelector | None, ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "selectors", tuple(entry.selector for entry in self.nodes))

    def entry_for(self, index: int) -> JSONDict:
        """The merged strategy of node entry `index`, or the cluster strategy for -1."""
        return self.nodes[index].merged if index >= 0 else self.cluster


@dataclass(frozen=True, slots=True)
class HostApplications:
    cluster: tuple[JSONDict, ...] = ()
    nodes: tuple[tuple[LabelSelector | None, tuple[JSONDict, ...]], ...] = ()


@dataclass(frozen=True)
class SLOControllerConfig:
    colocation: ScopedStrategy
    resource_threshold: ScopedStrategy
    resource_qos: ScopedStrategy
    cpu_burst: ScopedStrategy
    system: ScopedStrategy
    host_applications: HostApplications = HostApplications()
    # Per-config memo for render.py (rendered specs and derived views shared by many nodes).
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)


def default_slo_controller_config() -> SLOControllerConfig:
    """What Koordinator runs with when the ConfigMap does not exist."""
    return SLOControllerConfig(
        colocation=ScopedStrategy(COLOCATION_CONFIG_KEY, clone_json(DEFAULT_COLOCATION_STRATEGY)),
        resource_threshold=ScopedStrategy(
            RESOURCE_THRESHOLD_CONFIG_KEY, clone_json(DEFAULT_RESOURCE_THRESHOLD_STRATEGY)
        ),
        resource_qos=ScopedStrategy(RESOURCE_QOS_CONFIG_KEY, clone_json(DEFAULT_RESOURCE_QOS_STRATEGY)),
        cpu_burst=ScopedStrategy(CPU_BURST_CONFIG_KEY, clone_json(DEFAULT_CPU_BURST_STRATEGY)),
        system=ScopedStrategy(SYSTEM_CONFIG_KEY, clone_json(DEFAULT_SYSTEM_STRATEGY)),
    )


# --- parsing --------------------------------------------------------------------------
def overlay_of(model: BaseModel, drop: frozenset[str] = frozenset()) -> JSONDict:
    """The JSON Go's MergeCfg would marshal from a parsed struct (omitempty applied)."""
    dumped = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    trimmed = omit_empty({k: v for k, v in dumped.items() if k not in drop})
    assert isinstance(trimmed, dict)
    return trimmed


def _load_json(key: str, text: str) -> Any | ConfigError:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        return ConfigError(key, None, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}")
    except ValueError as exc:  # valid JSON Python will not convert, e.g. an integer of more than 4300 digits
        return ConfigError(key, None, f"unusable JSON: {exc}")
    except RecursionError:
        return ConfigError(key, None, "unusable JSON: nested too deeply")


def _never_raises(key: str, parse: Callable[[str | None], Any], text: str | None) -> Any:
    """A parser's result, or its failure as this key's ConfigError: whatever is wrong with a
    config (nesting that exhausts the stack further in, a number no bound caught), it is refused
    and reported, never an exception out of the handler that read it."""
    try:
        return parse(text)
    except RecursionError:
        return [ConfigError(key, None, "unusable: nested too deeply")]
    except Exception as exc:
        return [ConfigError(key, None, f"unusable: {type(exc).__name__}: {exc}")]


def _selector_of(entry: NodeProfile) -> LabelSelector | None:
    return entry.node_selector.compile() if entry.node_selector is not None else None


# Cross-field rules (Koordinator's gtfield/ltfield tags), checked on every merged strategy so
# that a node entry cannot combine with the cluster strategy into an inverted band.
_ORDERED_PAIRS: Final = {
    RESOURCE_THRESHOLD_CONFIG_KEY: (
        ("memoryEvictLowerPercent", "memoryEvictThresholdPercent"),
        ("cpuEvictBESatisfactionLowerPercent", "cpuEvictBESatisfactionUpperPercent"),
        ("cpuEvictLowerPercent", "cpuEvictThresholdPercent"),
        ("memoryAllocatableEvictLowerPercent", "memoryAllocatableEvictThresholdPercent"),
        ("cpuAllocatableEvictLowerPercent", "cpuAllocatableEvictThresholdPercent"),
    ),
}
_QOS_CLASSES: Final = ("lsrClass", "lsClass", "beClass", "systemClass", "cgroupRoot")


def _ordering_errors(key: str, where: str, merged: Mapping[str, Any]) -> list[ConfigError]:
    def path(name: str) -> str:
        return f"{where}.{name}" if where else name

    errors = []
    for lower, upper in _ORDERED_PAIRS.get(key, ()):
        low, high = merged.get(lower), merged.get(upper)
        if isinstance(low, int) and isinstance(high, int) and low >= high:
            errors.append(ConfigError(key, path(lower), f"must be less than {upper} ({high}), got {low}"))
    if key == RESOURCE_QOS_CONFIG_KEY:
        for qos in _QOS_CLASSES:
            resctrl = (merged.get(qos) or {}).get("resctrlQOS") or {}
            start, end = resctrl.get("catRangeStartPercent"), resctrl.get("catRangeEndPercent")
            if isinstance(start, int) and isinstance(end, int) and start >= end:
                errors.append(
                    ConfigError(
                        key,
                        path(f"{qos}.resctrlQOS.catRangeStartPercent"),
                        f"must be less than catRangeEndPercent ({end}), got {start}",
                    )
                )
    return errors


def _scoped_strategy(
    key: str,
    defaults: Mapping[str, Any],
    cluster_overlay: JSONDict,
    entries: Sequence[tuple[str, NodeProfile, JSONDict]],
    *,
    where_cluster: str,
    where_nodes: str,
) -> ScopedStrategy | list[ConfigError]:
    cluster = merge_cfg(defaults, cluster_overlay)
    errors = _ordering_errors(key, where_cluster, cluster)
    nodes = []
    for index, (name, profile, overlay) in enumerate(entries):
        merged = merge_cfg(cluster, overlay)
        errors += _ordering_errors(key, f"{where_nodes}[{index}]", merged)
        nodes.append(NodeScopedEntry(name, _selector_of(profile), merged))
    return errors if errors else ScopedStrategy(key, cluster, tuple(nodes))


def parse_colocation_config(text: str | None) -> ScopedStrategy | list[ConfigError]:
    key = COLOCATION_CONFIG_KEY
    if not text:
        return ScopedStrategy(key, clone_json(DEFAULT_COLOCATION_STRATEGY))
    doc = _load_json(key, text)
    if isinstance(doc, ConfigError):
        return [doc]
    try:
        parsed = ColocationConfig.model_validate(doc)
    except ValidationError as exc:
        return _validation_errors(key, exc)
    entries = [
        (entry.name or "", entry, overlay_of(entry, drop=NodeProfile.PROFILE_KEYS))
        for entry in parsed.node_configs or ()
    ]
    cluster_overlay = overlay_of(parsed, drop=frozenset({"nodeConfigs"}))
    return _scoped_strategy(
        key, DEFAULT_COLOCATION_STRATEGY, cluster_overlay, entries, where_cluster="", where_nodes="nodeConfigs"
    )


_ScopedParser = Callable[[str | None], "ScopedStrategy | list[ConfigError]"]


def _scoped_parser(key: str, model: type[ScopedConfigModel], defaults: Mapping[str, Any]) -> _ScopedParser:
    def parse(text: str | None) -> ScopedStrategy | list[ConfigError]:
        if not text:
            return ScopedStrategy(key, clone_json(dict(defaults)))
        doc = _load_json(key, text)
        if isinstance(doc, ConfigError):
            return [doc]
        try:
            parsed = model.model_validate(doc)
        except ValidationError as exc:
            return _validation_errors(key, exc)
        cluster_overlay = overlay_of(parsed.cluster_strategy) if parsed.cluster_strategy is not None else {}
        entries = [
            (entry.name or "", entry, overlay_of(entry, drop=NodeProfile.PROFILE_KEYS))
            for entry in parsed.node_strategies or ()
        ]
        return _scoped_strategy(
            key, defaults, cluster_overlay, entries, where_cluster="clusterStrategy", where_nodes="nodeStrategies"
        )

    parse.__name__ = f"parse_{key.replace('-', '_')}"
    return parse


parse_resource_threshold_config = _scoped_parser(
    RESOURCE_THRESHOLD_CONFIG_KEY, ResourceThresholdConfig, DEFAULT_RESOURCE_THRESHOLD_STRATEGY
)
parse_resource_qos_config = _scoped_parser(RESOURCE_QOS_CONFIG_KEY, ResourceQOSConfig, DEFAULT_RESOURCE_QOS_STRATEGY)
parse_cpu_burst_config = _scoped_parser(CPU_BURST_CONFIG_KEY, CPUBurstConfig, DEFAULT_CPU_BURST_STRATEGY)
parse_system_config = _scoped_parser(SYSTEM_CONFIG_KEY, SystemConfig, DEFAULT_SYSTEM_STRATEGY)


def parse_host_application_config(text: str | None) -> HostApplications | list[ConfigError]:
    key = HOST_APPLICATION_CONFIG_KEY
    if not text:
        return HostApplications()
    doc = _load_json(key, text)
    if isinstance(doc, ConfigError):
        return [doc]
    try:
        parsed = HostApplicationConfig.model_validate(doc)
    except ValidationError as exc:
        return _validation_errors(key, exc)

    def apps(items: Sequence[BaseModel] | None) -> tuple[JSONDict, ...]:
        return tuple(overlay_of(app) for app in items or ())

    return HostApplications(
        cluster=apps(parsed.applications),
        nodes=tuple((_selector_of(entry), apps(entry.applications)) for entry in parsed.node_configs or ()),
    )


def parse_slo_controller_config(data: Mapping[str, str] | None) -> SLOControllerConfig | list[ConfigError]:
    """The whole ConfigMap `data`; None (ConfigMap absent) gives Koordinator's defaults.

    Every key is checked even after an error, so one event can list all problems at once.
    """
    data = data or {}
    errors: list[ConfigError] = []

    def take(result: Any) -> Any:
        if isinstance(result, list):
            errors.extend(result)
            return None
        return result

    def parse(key: str, parser: Callable[[str | None], Any]) -> Any:
        return take(_never_raises(key, parser, data.get(key)))

    colocation = parse(COLOCATION_CONFIG_KEY, parse_colocation_config)
    threshold = parse(RESOURCE_THRESHOLD_CONFIG_KEY, parse_resource_threshold_config)
    qos = parse(RESOURCE_QOS_CONFIG_KEY, parse_resource_qos_config)
    burst = parse(CPU_BURST_CONFIG_KEY, parse_cpu_burst_config)
    system = parse(SYSTEM_CONFIG_KEY, parse_system_config)
    host_apps = parse(HOST_APPLICATION_CONFIG_KEY, parse_host_application_config)
    if errors:
        return errors
    return SLOControllerConfig(colocation, threshold, qos, burst, system, host_apps)


def parse_colocation_annotation(text: str) -> JSONDict | ConfigError:
    """A node's `node.koordinator.sh/colocation-strategy` annotation as a merge overlay.

    Koordinator ignores an annotation it cannot decode; we also ignore one with out-of-range
    values rather than let a single node's annotation push it past the validated bounds.
    """
    key = "node.koordinator.sh/colocation-strategy"
    doc = _load_json(key, text)
    if isinstance(doc, ConfigError):
        return doc
    try:
        parsed = ColocationStrategy.model_validate(doc)
        return overlay_of(parsed)
    except ValidationError as exc:
        return _validation_errors(key, exc)[0]
    except RecursionError:
        return ConfigError(key, None, "unusable: nested too deeply")
    except Exception as exc:
        return ConfigError(key, None, f"unusable: {type(exc).__name__}: {exc}")
