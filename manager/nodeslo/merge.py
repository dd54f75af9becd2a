"""Koordinator's MergeCfg on JSON, and the per-node overrides of the colocation strategy.

MergeCfg marshals the overlay struct to JSON (`omitempty`: nil pointers, empty strings,
empty slices and maps vanish) and unmarshals it onto a deep copy of the base. On JSON that
means: a non-null overlay field wins, nested objects merge field by field, Go maps gain or
replace keys (their values are replaced whole), lists replace.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Final

from common.api.constants import (
    ANNOTATION_COLOCATION_STRATEGY,
    LABEL_CPU_RECLAIM_RATIO,
    LABEL_MEMORY_RECLAIM_RATIO,
    LABEL_MID_STATIC_CPU_RESERVED_RATIO,
    LABEL_MID_STATIC_MEMORY_RESERVED_RATIO,
)

JSONDict = dict[str, Any]

# Fields of Go map type: merged key-wise without recursing into their values.
GO_MAP_FIELDS: Final = frozenset({"extensions"})


# Node label -> colocation field it overrides (ratio label, stored as int(ratio * 100) percent).
RATIO_LABEL_FIELDS: Final = (
    (LABEL_CPU_RECLAIM_RATIO, "cpuReclaimThresholdPercent"),
    (LABEL_MEMORY_RECLAIM_RATIO, "memoryReclaimThresholdPercent"),
    (LABEL_MID_STATIC_CPU_RESERVED_RATIO, "midStaticCPUReservedPercent"),
    (LABEL_MID_STATIC_MEMORY_RESERVED_RATIO, "midStaticMemoryReservedPercent"),
)


def clone_json(value: Any) -> Any:
    """Deep copy of a JSON value; much cheaper than copy.deepcopy on the hot render path."""
    if isinstance(value, dict):
        return {k: clone_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone_json(v) for v in value]
    return value


def omit_empty(value: Any, key: str | None = None) -> Any:
    """What Go's `omitempty` marshalling keeps: drops None, "", [] and empty Go maps, recursively."""
    if isinstance(value, dict):
        out: JSONDict = {}
        for k, v in value.items():
            kept = omit_empty(v, k)
            if kept is None or kept in ("", []):
                continue
            if kept == {} and k in GO_MAP_FIELDS:
                continue
            out[k] = kept
        return out
    if isinstance(value, list):
        return [omit_empty(v) for v in value]
    return value


def merge_cfg(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> JSONDict:
    """`base ⊕ overlay` with MergeCfg semantics; neither input is modified or aliased."""
    out: JSONDict = {k: clone_json(v) for k, v in base.items()}
    for key, value in overlay.items():
        if value is None:
            continue
        current = out.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            if key in GO_MAP_FIELDS:
                current.update(clone_json(value))
            else:
                out[key] = merge_cfg(current, value)
        else:
            out[key] = clone_json(value)
    return out


def ratio_label_percent(text: str) -> int | None:
    """A `*-ratio` node label as a percent: int(ratio * 100), truncated like Go; None if unusable."""
    try:
        ratio = float(text)
    except ValueError:
        return None
    if not math.isfinite(ratio) or ratio < 0:
        return None
    return int(ratio * 100)


def apply_node_colocation_overrides(
    merged: Mapping[str, Any],
    labels: Mapping[str, str],
    annotation_overlay: JSONDict | None,
) -> JSONDict:
    """The node's own say over its colocation strategy, applied after the nodeConfigs match.

    `annotation_overlay` is the already validated `node.koordinator.sh/colocation-strategy`
    annotation (see config.parse_colocation_annotation); the ratio labels then override the
    percent fields.
    """
    result = merge_cfg(merged, annotation_overlay) if annotation_overlay else dict(merged)
    for label, field in RATIO_LABEL_FIELDS:
        text = labels.get(label)
        if text is None:
            continue
        percent = ratio_label_percent(text)
        if percent is not None:
            result[field] = percent
    return result


def has_node_colocation_overrides(labels: Mapping[str, str], annotations: Mapping[str, str]) -> bool:
    return ANNOTATION_COLOCATION_STRATEGY in annotations or any(label in labels for label, _ in RATIO_LABEL_FIELDS)


def canonical_json(value: Any) -> str:
    """Stable text of a JSON value, for cache keys and equality checks."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
