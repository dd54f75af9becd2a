"""kube-scheduler's extender wire format (`k8s.io/kube-scheduler/extender/v1/types.go`).

The Go types carry no `json:` tags, so the keys are the Go field names: kube-scheduler sends
`{"Pod": {...}, "Nodes": {"items": [...]} | null, "NodeNames": [...] | null}` and decodes our
answers with `encoding/json`, which matches keys case-insensitively. We accept the request keys
the same way (Go's rule, so a hand-written client in camelCase works too) and always answer with
the exact Go names.

Everything here validates its input and raises `BadRequest` naming the offending field; the
server turns that into HTTP 400 with the reason.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

JSON = dict[str, Any]
ScoreScaling = Literal["relative", "absolute"]

MIN_EXTENDER_PRIORITY = 0
MAX_EXTENDER_PRIORITY = 10  # extenderv1.MaxExtenderPriority; kube-scheduler multiplies by weight × 10


class BadRequest(ValueError):
    """The request body is not a valid ExtenderArgs; the message says why (sent back with a 400)."""


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """One filter/prioritize request.

    Exactly one of `nodes` (full Node objects: `nodeCacheCapable: false`) and `node_names`
    (`nodeCacheCapable: true`) is set.
    """

    pod: Mapping[str, Any]
    nodes: tuple[Mapping[str, Any], ...] | None
    node_names: tuple[str, ...] | None

    @property
    def cache_mode(self) -> bool:
        return self.node_names is not None

    def candidate_names(self) -> list[str]:
        """Node names in request order, duplicates dropped (kube-scheduler never sends any)."""
        if self.node_names is not None:
            names: Sequence[str] = self.node_names
        else:
            names = [node_name(n) for n in self.nodes or ()]
        return list(dict.fromkeys(names))


def node_name(node: Mapping[str, Any]) -> str:
    meta = node.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""


def _field(body: Mapping[str, Any], name: str) -> Any:
    """A top-level field matched like Go's encoding/json: exact name first, then case-insensitively."""
    if name in body:
        return body[name]
    lowered = name.lower()
    for key, value in body.items():
        if isinstance(key, str) and key.lower() == lowered:
            return value
    return None


def parse_args(raw: bytes | str) -> ExtenderArgs:
    """Decode and validate an ExtenderArgs body. Raises BadRequest."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"body is not JSON: {exc}") from None
    except RecursionError:
        raise BadRequest("body is not JSON: nested too deeply") from None
    if not isinstance(body, dict):
        raise BadRequest(f"body: expected a JSON object (ExtenderArgs), got {_kind(body)}")
    pod = _field(body, "Pod")
    if pod is None:
        raise BadRequest("Pod: required")
    if not isinstance(pod, dict):
        raise BadRequest(f"Pod: expected an object, got {_kind(pod)}")
    nodes = _parse_nodes(_field(body, "Nodes"))
    names = _parse_node_names(_field(body, "NodeNames"))
    if nodes is None and names is None:
        raise BadRequest("Nodes or NodeNames: one is required (NodeNames when nodeCacheCapable is true)")
    if nodes is not None and names is not None:
        # kube-scheduler fills exactly one of them; both would leave it unclear which we should answer.
        raise BadRequest("Nodes and NodeNames: only one may be set")
    return ExtenderArgs(pod=pod, nodes=nodes, node_names=names)


def _parse_nodes(value: Any) -> tuple[Mapping[str, Any], ...] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest(f"Nodes: expected a NodeList object, got {_kind(value)}")
    items = value.get("items")
    if items is None:
        return ()
    if not isinstance(items, list):
        raise BadRequest(f"Nodes.items: expected a list, got {_kind(items)}")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise BadRequest(f"Nodes.items[{i}]: expected a Node object, got {_kind(item)}")
        if not node_name(item):
            raise BadRequest(f"Nodes.items[{i}].metadata.name: required")
    return tuple(items)


def _parse_node_names(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise BadRequest(f"NodeNames: expected a list of strings, got {_kind(value)}")
    for i, name in enumerate(value):
        if not isinstance(name, str) or not name:
            raise BadRequest(f"NodeNames[{i}]: expected a non-empty string, got {name!r}")
    return tuple(value)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


# --------------------------------------------------------------------------- responses
def filter_result(
    *,
    passed: Sequence[str],
    failed: Mapping[str, str],
    unresolvable: Mapping[str, str],
    cache_mode: bool,
    nodes_by_name: Mapping[str, Mapping[str, Any]] | None = None,
    error: str = "",
) -> JSON:
    """ExtenderFilterResult.

    With nodeCacheCapable kube-scheduler reads `NodeNames`; without it, it rebuilds its node
    list from `Nodes.items`, so those must be the full Node objects it sent. In full-Node mode we
    fill both (NodeNames is cheap and makes the answer readable in logs).
    """
    nodes: JSON | None = None
    if not cache_mode and not error:
        by_name = nodes_by_name or {}
        nodes = {"metadata": {}, "items": [by_name[n] for n in passed]}
    return {
        "Nodes": nodes,
        "NodeNames": None if error else list(passed),
        "FailedNodes": dict(failed),
        "FailedAndUnresolvableNodes": dict(unresolvable),
        "Error": error,
    }


def host_priority_list(scores: Mapping[str, int]) -> list[JSON]:
    """HostPriorityList: a bare JSON array of {"Host", "Score"}."""
    return [{"Host": host, "Score": int(score)} for host, score in scores.items()]


def to_extender_score(total: int, max_total: int) -> int:
    """A score out of `max_total` as an extender score 0..10, by integer division (rounding down,
    like kube-scheduler's DefaultNormalizeScore), so only a node at the maximum gets 10."""
    if max_total <= 0:
        return MIN_EXTENDER_PRIORITY
    scaled = total * MAX_EXTENDER_PRIORITY // max_total
    return max(MIN_EXTENDER_PRIORITY, min(MAX_EXTENDER_PRIORITY, int(scaled)))


def scale_scores(totals: NDArray[np.int64], max_total: int, scaling: ScoreScaling) -> list[int]:
    """Weighted framework totals (each out of `max_total` = 100 × Σ weights) as extender scores 0..10.

    absolute: total × 10 / max_total — a node's score says how good it is on its own, but 0..10
      is coarse: with LoadAware's cpu+memory score one level spans ~20 % cpu when memory use is
      flat, and kube-scheduler's own requests-based plugins decide among the nodes in a level.
    relative: (total − lowest) × 10 / (highest − lowest) over this request's nodes — the min–max
      normalisation kube-scheduler itself applies to preference plugins (InterPodAffinity,
      PodTopologySpread): the best candidate gets 10, the worst 0, so the 11 levels resolve the
      differences that exist among the nodes actually being compared. Equal totals fall back to
      absolute (no preference to express).
    Both divide as integers (rounding down, like kube-scheduler's DefaultNormalizeScore), so 10 goes
    only to the best node(s).
    """
    if totals.size == 0:
        return []
    low, high = int(totals.min()), int(totals.max())
    if scaling == "relative" and high > low:
        return [to_extender_score(int(t) - low, high - low) for t in totals.tolist()]
    return [to_extender_score(int(t), max_total) for t in totals.tolist()]


# ---------------------------------------------------------------------------- preempt verb
@dataclass(frozen=True, slots=True)
class NodeVictims:
    """One candidate node of kube-scheduler's preemption: its victims (by UID; the full Pod when sent) and
    how many of them violate a PodDisruptionBudget."""

    uids: tuple[str, ...]
    pods: tuple[Mapping[str, Any], ...] | None  # NodeNameToVictims (nodeCacheCapable: false) sends full Pods
    num_pdb_violations: int


@dataclass(frozen=True, slots=True)
class PreemptionArgs:
    """ExtenderPreemptionArgs: `{"Pod": ..., "NodeNameToVictims": ... | null, "NodeNameToMetaVictims": ... | null}`."""

    pod: Mapping[str, Any]
    victims: dict[str, NodeVictims]

    def candidate_names(self) -> list[str]:
        return list(self.victims)


def parse_preemption_args(raw: bytes | str) -> PreemptionArgs:
    """Decode and validate an ExtenderPreemptionArgs body. Raises BadRequest."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise BadRequest(f"body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest(f"body: expected a JSON object (ExtenderPreemptionArgs), got {_kind(body)}")
    pod = _field(body, "Pod")
    if not isinstance(pod, dict):
        raise BadRequest("Pod: required, an object")
    full = _field(body, "NodeNameToVictims")
    meta = _field(body, "NodeNameToMetaVictims")
    if full is not None and meta is not None:
        raise BadRequest("NodeNameToVictims and NodeNameToMetaVictims: only one may be set")
    field_name = "NodeNameToVictims" if full is not None else "NodeNameToMetaVictims"
    value = full if full is not None else meta
    if value is None:
        return PreemptionArgs(pod, {})
    if not isinstance(value, dict):
        raise BadRequest(f"{field_name}: expected an object, got {_kind(value)}")
    victims = {}
    for node, entry in value.items():
        where = f"{field_name}.{node}"
        if not isinstance(entry, dict):
            raise BadRequest(f"{where}: expected an object, got {_kind(entry)}")
        pods = _field(entry, "Pods") or []
        if not isinstance(pods, list):
            raise BadRequest(f"{where}.Pods: expected a list, got {_kind(pods)}")
        uids = []
        for i, item in enumerate(pods):
            if not isinstance(item, dict):
                raise BadRequest(f"{where}.Pods[{i}]: expected an object, got {_kind(item)}")
            uid = _field(item, "UID") if full is None else (item.get("metadata") or {}).get("uid")
            if not isinstance(uid, str) or not uid:
                raise BadRequest(f"{where}.Pods[{i}]: {'UID' if full is None else 'metadata.uid'} required")
            uids.append(uid)
        violations = _field(entry, "NumPDBViolations") or 0
        if not isinstance(violations, int) or violations < 0:
            raise BadRequest(f"{where}.NumPDBViolations: expected a non-negative integer")
        victims[str(node)] = NodeVictims(tuple(uids), tuple(pods) if full is not None else None, violations)
    return PreemptionArgs(pod, victims)


def preemption_result(kept: Mapping[str, NodeVictims]) -> JSON:
    """ExtenderPreemptionResult, always in the meta (UID) form kube-scheduler requires; nodes left out are
    no longer candidates."""
    return {"NodeNameToMetaVictims": {
        node: {"Pods": [{"UID": uid} for uid in v.uids], "NumPDBViolations": v.num_pdb_violations}
        for node, v in kept.items()
    }}
