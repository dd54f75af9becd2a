"""The one NodeMetric digest every component reads: values, and what was wrong with the object."""

from __future__ import annotations

from typing import Any

import pytest

from common.api.malformed import MalformedReason
from common.api.nodemetric_digest import HostAppUsage, PodUsage, digest_node_metric
from tests import objects

GI = 1024**3


def metric(**status: Any) -> dict[str, Any]:
    """A NodeMetric reported every 30 s, with the status given as is."""
    return objects.MakeNodeMetric("n1").report_interval(30).obj() | {"status": status}


def test_digest_reads_every_part_in_vector_units() -> None:
    digest = digest_node_metric(metric(
        updateTime="2026-07-24T06:52:45Z",
        nodeMetric={"nodeUsage": {"resources": {"cpu": "1500m", "memory": "2Gi"}},
                    "systemUsage": {"resources": {"cpu": "0.5"}},
                    "aggregatedNodeUsages": [{"duration": "5m0s", "usage": {"p95": {"resources": {"cpu": "2"}}}}]},
        podsMetric=[{"namespace": "ns", "name": "a", "priority": "koord-prod", "qos": "LS",
                     "podUsage": {"resources": {"cpu": "300m"}}}],
        hostApplicationMetric=[{"name": "nginx", "priority": "koord-prod", "usage": {"resources": {"memory": "1Gi"}}}],
    ))
    assert digest.problem is None and digest.has_status and digest.has_node_metric
    assert digest.update_time == 1784875965.0 and digest.report_interval == 30
    assert digest.node_usage == {"cpu": 1500, "memory": 2 * GI} and digest.system_usage == {"cpu": 500}
    assert digest.aggregated == ((300.0, {"p95": {"cpu": 2000}}),)
    assert digest.pod_usages == {"ns/a": PodUsage("ns", "a", {"cpu": 300}, "koord-prod", "LS")}
    assert digest.host_apps == (HostAppUsage("nginx", {"memory": GI}, "koord-prod"),)


def test_never_reported_is_not_malformed() -> None:
    digest = digest_node_metric({"metadata": {"name": "n1"}})
    assert digest.problem is None and not digest.has_status and not digest.has_node_metric


@pytest.mark.parametrize(("status", "field", "reason", "detail"), [
    ({"updateTime": "yesterday"}, "status.updateTime", MalformedReason.INVALID_TIME,
     "'yesterday' is not an RFC 3339 time"),
    ({"nodeMetric": {"systemUsage": {"resources": {"cpu": "-1"}}}}, "status.nodeMetric.systemUsage.resources.cpu",
     MalformedReason.NEGATIVE_QUANTITY, "'-1' is not a valid usage quantity"),
    ({"nodeMetric": {"nodeUsage": {"resources": {"memory": "lots"}}}}, "status.nodeMetric.nodeUsage.resources.memory",
     MalformedReason.INVALID_QUANTITY, "'lots' is not a valid usage quantity"),
    ({"nodeMetric": {"nodeUsage": {"resources": {"cpu": "1e16"}}}}, "status.nodeMetric.nodeUsage.resources",
     MalformedReason.OUT_OF_RANGE,
     "quantity '1e16' for cpu is out of range: 10000000000000000000 milli-units is beyond ±2^53, more than any node "
     "has and more than the scheduler's arrays can hold"),
    ({"podsMetric": {"a": 1}}, "status.podsMetric", MalformedReason.WRONG_TYPE, "must be a list"),
    ({"podsMetric": [{"name": "a"}]}, "status.podsMetric[0]", MalformedReason.MISSING_FIELD,
     "needs a namespace and a name"),
    ({"nodeMetric": 3}, "status.nodeMetric", MalformedReason.WRONG_TYPE, "must be an object"),
])
def test_what_was_wrong_names_the_field_and_the_reason(
    status: dict[str, Any], field: str, reason: MalformedReason, detail: str
) -> None:
    problem = digest_node_metric(metric(**status)).problem
    assert problem is not None
    assert (problem.kind, problem.name, problem.field, problem.reason, problem.detail) == (
        "NodeMetric", "n1", field, reason, detail
    )
    assert str(problem) == f"NodeMetric n1 {field}: {detail}"


def test_a_nameless_metric_is_malformed() -> None:
    problem = digest_node_metric({"metadata": {}, "status": {}}).problem
    assert problem is not None and problem.field == "metadata.name" and problem.reason is MalformedReason.MISSING_FIELD
