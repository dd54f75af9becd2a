"""The Node digest every component reads (common/api/nodedigest.py)."""

from __future__ import annotations

from typing import Any

from common.api.malformed import MalformedReason
from common.api.nodedigest import digest_node
from common.api.scheduling import Taint
from tests import objects


def node(**status: Any) -> dict[str, Any]:
    """An unschedulable node of zone a with a gpu taint, and the status given."""
    return objects.node(rv="9", labels={"zone": "a"}, taints=[{"key": "gpu", "effect": "NoSchedule"}], unschedulable=True,
                        status=status)  # fmt: skip


def test_a_readable_node() -> None:
    d = digest_node(node(allocatable={"cpu": "15500m", "memory": "1Gi", "pods": 110}, capacity={"cpu": "16"}))
    assert d.problem is None and (d.name, d.resource_version, d.labels) == ("n1", "9", {"zone": "a"})
    assert d.allocatable == {"cpu": 15500, "memory": 1024**3, "pods": 110} and d.capacity == {"cpu": 16000}
    assert d.taints == (Taint("gpu", "", "NoSchedule"),) and d.unschedulable


def test_what_is_wrong_with_a_node_and_what_still_reads() -> None:
    d = digest_node(node(allocatable={"cpu": "ten", "memory": "1Gi", "kubernetes.io/batch-cpu": "-5"}))
    assert d.problem is not None and d.problem.field == "status.allocatable.cpu"
    assert d.problem.reason is MalformedReason.INVALID_QUANTITY and "Node n1" in str(d.problem)
    assert d.unparsed == ("status.allocatable.cpu",) and d.allocatable["memory"] == 1024**3
    bad_taint = node()
    bad_taint["spec"]["taints"] = [{"key": "k", "effect": "Sometimes"}]
    assert digest_node(bad_taint).problem is not None
    wrong = digest_node({"metadata": {"name": "n1", "labels": {"zone": 1}}})
    assert wrong.problem is not None and wrong.problem.field == "metadata.labels.zone"
    assert wrong.problem.reason is MalformedReason.WRONG_TYPE
    nameless = digest_node({"status": {"capacity": {"cpu": "4"}}})
    assert nameless.problem is not None and nameless.problem.reason is MalformedReason.MISSING_FIELD
    assert nameless.capacity == {"cpu": 4000}


def test_raw_allocatable_annotation_overrides_per_key_and_is_ignored_when_it_does_not_read() -> None:
    from common.api.nodedigest import allocatable_with_raw

    obj = node(allocatable={"cpu": "8", "memory": "16Gi", "pods": 110})
    obj["metadata"]["annotations"] = {"node.koordinator.sh/raw-allocatable": '{"cpu": "12", "memory": "20Gi"}'}
    d = digest_node(obj)
    assert d.raw_allocatable == {"cpu": 12000, "memory": 20 * 1024**3}
    assert allocatable_with_raw(d.allocatable, d.raw_allocatable) == {"cpu": 12000, "memory": 20 * 1024**3, "pods": 110}
    for text in ("{not json", '["cpu"]', '{"cpu": "lots"}'):  # Koordinator then uses status.allocatable
        obj["metadata"]["annotations"]["node.koordinator.sh/raw-allocatable"] = text
        unread = digest_node(obj)
        assert unread.problem is None and unread.raw_allocatable is None
        assert allocatable_with_raw(unread.allocatable, unread.raw_allocatable) == unread.allocatable
        assert unread.part_problem is not None and "raw-allocatable" in unread.part_problem.field


def test_an_unusable_reservation_annotation_is_absent_and_the_nodes_part_problem() -> None:
    # Issue 29, example 1 on a node: `reservedCPUs: 0-4294967295` expanded 4·10⁹ CPU ids in the manager and the agent.
    obj = node(allocatable={"cpu": "8"})
    obj["metadata"]["annotations"] = {"node.koordinator.sh/reservation": '{"reservedCPUs": "0-1"}'}
    d = digest_node(obj)
    assert d.reservation is not None and d.reservation.reserved_cpus == (0, 1) and d.part_problem is None
    for text in ('{"reservedCPUs": "0-4294967295"}', '{"resources": {"cpu": "lots"}}', "{"):
        obj["metadata"]["annotations"]["node.koordinator.sh/reservation"] = text
        unread = digest_node(obj)
        assert unread.problem is None and unread.reservation is None and unread.allocatable == {"cpu": 8000}
        assert unread.part_problem is not None and "reservation" in unread.part_problem.field
        assert unread.unschedulable and unread.taints  # the rest of the node is in force
