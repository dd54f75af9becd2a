"""NodeSLO objects written by Koordinator validate on Loadline's CRD, and the other way round (issue 13 §4).

Koordinator's CRD is not vendored here; `KOORDINATOR_SUBSET` states, as facts read from its
`slo.koordinator.sh_nodeslos.yaml`, the type and bounds of the fields both sides write. Where a
field is missing from it Koordinator's API server would prune the field, not reject the object,
so only rejections count in that direction.
"""

from __future__ import annotations

from typing import Any

import yaml

from common.api.nodeslo import CPUEvictPolicy, CPUSuppressPolicy, NodeSLO
from manager.nodeslo.config import default_slo_controller_config
from manager.nodeslo.render import render_node_slo_spec
from tests.examples import KOORDINATOR_NODESLO, NODESLO
from tests.unit.test_crds import NODESLO as NODESLO_CRD
from tests.unit.test_crds import _load_committed, _schema, undeclared_or_invalid

Schema = dict[str, Any]


def _int(minimum: int | None = None, maximum: int | None = None) -> Schema:
    s: Schema = {"type": "integer"}
    if minimum is not None:
        s["minimum"] = minimum
    if maximum is not None:
        s["maximum"] = maximum
    return s


def _obj(**props: Schema) -> Schema:
    return {"type": "object", "properties": props}


STR, BOOL, INT, PCT = {"type": "string"}, {"type": "boolean"}, _int(), _int(0, 100)
_MEMORY_QOS = _obj(
    enable=BOOL, minLimitPercent=_int(0), lowLimitPercent=_int(0), throttlingPercent=_int(0), wmarkRatio=PCT,
    wmarkScalePermill=_int(1, 1000), wmarkMinAdj=_int(-25, 50), priorityEnable=INT, priority=INT, oomKillGroup=INT,
    pageCacheLimitEnable=INT, pageCacheLimitSize=INT, pageCacheLimitSync=INT,
)  # fmt: skip
_QOS_CLASS = _obj(
    cpuQOS=_obj(enable=BOOL, groupIdentity=INT, schedIdle=INT, coreExpeller=BOOL),
    memoryQOS=_MEMORY_QOS,
    resctrlQOS=_obj(enable=BOOL, catRangeStartPercent=PCT, catRangeEndPercent=PCT, mbaPercent=PCT),
)
KOORDINATOR_SUBSET = _obj(
    apiVersion=STR, kind=STR, metadata={"type": "object"},
    spec=_obj(
        resourceUsedThresholdWithBE=_obj(
            enable=BOOL, cpuSuppressThresholdPercent=PCT, cpuSuppressMinPercent=PCT, cpuSuppressPolicy=STR,
            memoryEvictThresholdPercent=PCT, memoryEvictLowerPercent=PCT, cpuEvictPolicy=STR,
            cpuEvictTimeWindowSeconds=INT, cpuEvictBESatisfactionLowerPercent=INT,
            cpuEvictBESatisfactionUpperPercent=INT, cpuEvictBEUsageThresholdPercent=INT,
        ),
        resourceQOSStrategy=_obj(
            lsrClass=_QOS_CLASS, lsClass=_QOS_CLASS, beClass=_QOS_CLASS, systemClass=_QOS_CLASS, cgroupRoot=_QOS_CLASS
        ),
        cpuBurstStrategy=_obj(
            policy=STR, cpuBurstPercent=_int(0, 10000), cfsQuotaBurstPercent=INT, cfsQuotaBurstPeriodSeconds=INT,
            sharePoolThresholdPercent=INT,
        ),
        systemStrategy=_obj(minFreeKbytesFactor=INT, watermarkScaleFactor=INT, memcgReapBackGround=INT,
                            pageCacheLimitEnabled=INT),
    ),
)  # fmt: skip


def rejections(schema: Schema, obj: Any) -> list[str]:
    """What an API server would refuse (pruning of undeclared fields is not a refusal), incl. bounds."""
    errors = [e for e in undeclared_or_invalid(schema, obj) if not e.endswith("(would be pruned)")]
    return errors + _out_of_bounds(schema, obj, "")


def _out_of_bounds(schema: Schema, value: Any, path: str) -> list[str]:
    if isinstance(value, dict):
        props = schema.get("properties", {})
        return [e for k, v in value.items() if k in props for e in _out_of_bounds(props[k], v, f"{path}.{k}")]
    bounded = isinstance(value, int) and not isinstance(value, bool)
    if bounded and not schema.get("minimum", value) <= value <= schema.get("maximum", value):
        return [f"{path}: {value} out of bounds"]
    return []


def test_nodeslo_written_by_koordinator_validates_on_loadline_crd() -> None:
    root = _schema(_load_committed()[NODESLO_CRD])
    example = yaml.safe_load(KOORDINATOR_NODESLO)
    # Nothing pruned (the page-cache fields are declared) and nothing refused (no enum on the policies).
    assert undeclared_or_invalid(root, example) == []
    assert rejections(root, example) == []
    assert rejections(KOORDINATOR_SUBSET, example) == []  # the example itself is valid Koordinator


def test_nodeslo_written_by_loadline_validates_on_koordinator_crd() -> None:
    rendered = {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "n"},
                "spec": render_node_slo_spec(default_slo_controller_config(), {})}  # fmt: skip
    for obj in (rendered, yaml.safe_load(NODESLO)):
        assert rejections(KOORDINATOR_SUBSET, obj) == []
    # The check really looks: a value out of Koordinator's bounds is refused.
    rendered["spec"]["resourceQOSStrategy"]["beClass"]["memoryQOS"]["wmarkMinAdj"] = 51
    assert rejections(KOORDINATOR_SUBSET, rendered) == [
        ".spec.resourceQOSStrategy.beClass.memoryQOS.wmarkMinAdj: 51 out of bounds"
    ]


def test_nodeslo_with_unknown_policies_reads_as_the_default_policies() -> None:
    thresholds = NodeSLO.from_wire(yaml.safe_load(KOORDINATOR_NODESLO)).thresholds()
    assert thresholds.cpu_suppress_policy is CPUSuppressPolicy.CPUSET
    assert thresholds.cpu_evict_policy is CPUEvictPolicy.EVICT_BY_REAL_LIMIT
    assert thresholds.cpu_suppress_threshold_percent == 65  # the rest of the object is read
