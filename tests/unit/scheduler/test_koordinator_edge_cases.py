"""Koordinator's edge cases found reading its source (issue 13 §4), one test each, named after the case.

Units and fixtures as in test_loadaware_plugin: nodes 4 cpu / 8Gi; `pod(cpu="1", memory="1Gi")`
is estimated at 850m cpu and 751619277 bytes.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from common.api.pod import PriorityClass, priority_class_of, priority_class_raw
from scheduler_plugin.plugins.loadaware import LoadAwareSchedulingArgs
from tests.objects import T0, node, node_metric, pod
from tests.unit.descheduler.builders import rs_pod
from tests.unit.descheduler.test_sorting import is_prod, priority_class, priority_class_with_default
from tests.unit.scheduler.builders import pod_metric
from tests.unit.scheduler.test_loadaware_plugin import EST_MEM, NOW, scores, setup, verdicts

GI = 1024**3


def test_node_metric_with_empty_node_usage_counts_zero_plus_recent_estimates() -> None:
    # status.nodeMetric is there but nodeUsage is {}: Koordinator reads it as a usage of 0 and adds
    # only the pods its NodeMetric has not reflected yet ("recent"), not every pod on the node.
    metrics = [node_metric("n1", updated=T0, pods=[pod_metric("old", cpu="300m"), pod_metric("recent", cpu="300m")])]
    pods = [pod("old", node_name="n1", scheduled_at=T0 - 200), pod("recent", node_name="n1", scheduled_at=T0 - 30)]
    plugin, snap, _ = setup([node("n1")], metrics, pods)
    # cpu: 0 + (850 − 300) + 850 = 1400 → (4000 − 1400) × 100 / 4000 = 65
    # memory: 0 + 751619277 + 751619277 → (8Gi − 1503238554) × 100 / 8Gi = 82 → (65 + 82) / 2 = 73
    # (adding up every pod's estimate instead gives cpu 2550 → 36, memory 3 × 751619277 → 73: 54)
    assert scores(plugin, snap, pod("p")) == {"n1": 73}
    row = snap.node_by_name("n1").index  # type: ignore[union-attr]
    assert plugin.table.base_usage[plugin.table.position["memory"], row] == EST_MEM
    assert verdicts(plugin, snap, pod("p")) == {"n1": "ok"}


def test_all_usage_thresholds_zero_skips_the_expiry_check() -> None:
    stale = [node_metric("n1", cpu="100m", memory="1Gi", updated=NOW - 1000)]
    plugin, snap, _ = setup([node("n1")], stale)
    assert verdicts(plugin, snap, pod("p")) == {"n1": "node(s) nodeMetric expired"}
    # Thresholds off: Koordinator's filter returns before it looks at the NodeMetric at all.
    plugin, snap, _ = setup([node("n1")], stale, usageThresholds={"cpu": 0, "memory": 0})
    assert verdicts(plugin, snap, pod("p")) == {"n1": "ok"}
    # Prod thresholds that are all 0 do not select the prod path: the (stale) plain thresholds apply.
    prod = pod("web", labels={"koordinator.sh/priority-class": "koord-prod"})
    plugin, snap, _ = setup([node("n1")], stale, prodUsageThresholds={"cpu": 0})
    assert verdicts(plugin, snap, prod) == {"n1": "node(s) nodeMetric expired"}
    # One threshold not 0 is enough to keep the filter (and so the expiry check) on.
    plugin, snap, _ = setup([node("n1")], stale, usageThresholds={"cpu": 0, "memory": 90})
    assert verdicts(plugin, snap, pod("p")) == {"n1": "node(s) nodeMetric expired"}


def test_resource_weight_zero_is_rejected() -> None:
    with pytest.raises(ValidationError, match=r"memory: weight 0 is not in 1\.\.100"):
        LoadAwareSchedulingArgs.model_validate({"resourceWeights": {"cpu": 1, "memory": 0}})
    with pytest.raises(ValidationError, match="weight 101"):
        LoadAwareSchedulingArgs.model_validate({"resourceWeights": {"cpu": 101}})
    assert LoadAwareSchedulingArgs.model_validate({"resourceWeights": {"cpu": 1}}).resource_weights == {"cpu": 1}


def test_unknown_priority_class_label_means_no_class() -> None:
    # Koordinator's GetPodPriorityClassRaw: a present label decides, an unknown value is "none" and
    # spec.priority is not consulted; the QoS default then applies (BestEffort → koord-batch).
    gold = {"koordinator.sh/priority-class": "koord-gold"}
    best_effort = pod("x", cpu=None, memory=None, labels=gold, priority=9500)
    assert priority_class_raw(best_effort) is PriorityClass.NONE
    assert priority_class_of(best_effort) is PriorityClass.BATCH
    assert priority_class_raw(pod("y", priority=9500)) is PriorityClass.PROD  # no label: by value
    # The descheduler resolves the same way.
    evictable = rs_pod("x", "n", priority=9500, k8s_qos="BestEffort", labels=gold)
    assert priority_class(evictable) == ""
    assert priority_class_with_default(evictable) == "koord-batch"
    assert not is_prod(evictable)
