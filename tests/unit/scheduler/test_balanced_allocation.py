"""NodeResourcesBalancedAllocation against kube-scheduler's table (noderesources/balanced_allocation_test.go,
v1.36: the score rewards how much the pod improves the node's balance) and its args validation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from common.config import ConfigError
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.noderesources.balanced_allocation import (
    NodeResourcesBalancedAllocation,
    NodeResourcesBalancedAllocationArgs,
)
from scheduler_plugin.plugins.noderesources.formulas import balanced_resource_score
from scheduler_plugin.plugins.registry import frameworks_from_config
from tests.objects import node

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
CPU_MEM_GPU = {"resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}, {"name": GPU}]}


def multi(name: str, *containers: dict[str, str], node_name: str = "") -> Obj:
    """A pod with one container per request map (kube-scheduler's st.MakePod().Req(...).Req(...))."""
    spec: Obj = {"containers": [{"name": f"c{i}", "resources": {"requests": dict(c)}}
                                for i, c in enumerate(containers)]}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


def mnode(name: str, milli_cpu: int, memory: int, gpus: int = 0) -> Obj:
    return node(name, cpu=f"{milli_cpu}m", memory=str(memory), extra={GPU: str(gpus)} if gpus else None)


def scores(incoming: Obj, nodes: list[Obj], existing: list[Obj], args: Obj | None = None) -> list[int] | None:
    """Per node in order; None when PreScore skips."""
    snap = Snapshot.from_objects(nodes, existing)
    plugin = NodeResourcesBalancedAllocation(NodeResourcesBalancedAllocationArgs.model_validate(args or {}))
    pod = PodInfo.from_dict(incoming)
    rows = snap.node_indices()
    if plugin.pre_score(CycleState(), pod, snap, rows).is_skip():
        return None
    return [int(s) for s in plugin.score(CycleState(), pod, snap, rows)]


def cpu_mem(cpu: str, memory: str) -> dict[str, str]:
    return {"cpu": cpu, "memory": memory}


TWO_CONTAINERS = multi("p", cpu_mem("1000m", "2000"), cpu_mem("2000m", "3000"))


def existing_cpu_only(node_name: str) -> Obj:
    return multi(f"cpu-{node_name}", {"cpu": "1000m"}, {"cpu": "2000m"}, node_name=node_name)


def existing_cpu_mem(node_name: str) -> Obj:
    return multi(f"both-{node_name}", cpu_mem("1000m", "2000"), cpu_mem("2000m", "3000"), node_name=node_name)


def test_best_effort_pod_is_not_scored() -> None:
    assert scores(multi("p", {}), [mnode("n1", 4000, 10000), mnode("n2", 4000, 10000)], []) is None


@pytest.mark.parametrize(("incoming", "nodes", "existing", "args", "expected"), [
    pytest.param(  # nothing scheduled, differently sized nodes
     TWO_CONTAINERS,
     [mnode("node1", 4000, 10000), mnode("node2", 6000, 10000)], [], None, [68, 75]),
    pytest.param(  # pods scheduled with resources
     TWO_CONTAINERS,
     [mnode("node1", 10000, 20000), mnode("node2", 10000, 20000)],
     [existing_cpu_only("node1"), existing_cpu_mem("node2")], None, [73, 74]),
    pytest.param(  # pods scheduled, differently sized nodes
     TWO_CONTAINERS,
     [mnode("node1", 10000, 20000), mnode("node2", 10000, 50000)],
     [existing_cpu_only("node1"), existing_cpu_mem("node2")], None, [73, 70]),
    pytest.param(  # nodes to reach min/max score
     multi("p", {"memory": "2000"}, {"memory": "3000"}),
     [mnode("node1", 3000, 5000), mnode("node2", 3000, 5000)], [existing_cpu_only("node1")], None, [100, 50]),
    pytest.param(  # requested resources at node capacity
     multi("p", {"cpu": "1000m"}, {"cpu": "2000m"}),
     [mnode("node1", 6000, 10000), mnode("node2", 6000, 10000)],
     [existing_cpu_only("node1"), existing_cpu_mem("node2")], None, [62, 62]),
    pytest.param(  # scalar resource counted when requested
     multi("p", {"cpu": "0", "memory": "0", GPU: "1"}),
     [mnode("node1", 3500, 40000, 8), mnode("node2", 3500, 40000, 8)],
     [multi("e1", cpu_mem("1000m", "2000"), {"cpu": "2000m", "memory": "3000", GPU: "3"}, node_name="node1"),
      existing_cpu_mem("node2")], CPU_MEM_GPU, [75, 76]),
    pytest.param(  # scalar resource left out when not requested
     TWO_CONTAINERS,
     [mnode("node1", 3500, 40000, 8), mnode("node2", 3500, 40000)], [], CPU_MEM_GPU, [56, 56]),
])
def test_kube_scheduler_table(incoming: Obj, nodes: list[Obj], existing: list[Obj], args: Obj | None,
                              expected: list[int]) -> None:
    assert scores(incoming, nodes, existing, args) == expected


def test_three_resources_use_the_standard_deviation_and_one_resource_none() -> None:
    requested = np.array([[3.0, 1.0], [6.0, 0.0], [1.0, 0.0]])
    allocatable = np.array([[10.0, 4.0], [10.0, 0.0], [10.0, 0.0]])
    # Node 0: fractions 0.3, 0.6, 0.1: mean 1/3, std sqrt(((−1/30)² + (8/30)² + (−7/30)²) / 3) = 0.2055 → 79.
    # Node 1: only cpu has allocatable: one fraction, std 0 → 100.
    assert balanced_resource_score(requested, allocatable).tolist() == [79, 100]


def test_args_are_validated_as_kube_scheduler_does() -> None:
    assert [r.name for r in NodeResourcesBalancedAllocationArgs().resources] == ["cpu", "memory"]
    assert [r.name for r in NodeResourcesBalancedAllocationArgs.model_validate({"resources": []}).resources] == [
        "cpu", "memory"]
    assert NodeResourcesBalancedAllocationArgs.model_validate({"resources": [{"name": "cpu", "weight": 0}]}
                                                              ).resources[0].weight == 1
    with pytest.raises(ValidationError, match="must be 1"):
        NodeResourcesBalancedAllocationArgs.model_validate({"resources": [{"name": "cpu", "weight": 2}]})
    with pytest.raises(ValidationError, match="duplicate"):
        NodeResourcesBalancedAllocationArgs.model_validate({"resources": [{"name": "cpu"}, {"name": "cpu"}]})
    config = {"profiles": [{"schedulerName": "x", "pluginConfig": [
        {"name": "NodeResourcesBalancedAllocation", "args": {"resources": [{"name": "cpu", "weight": 3}]}}]}]}
    with pytest.raises(ConfigError, match=r"pluginConfig.*NodeResourcesBalancedAllocation|must be 1"):
        frameworks_from_config(config, snapshot=Snapshot())
