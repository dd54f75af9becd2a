"""Where the evicted pods' replacements go: the ping-pong and how Loadline's scheduler avoids it.

Run on the in-process scheduling framework (the same plugins `loadline scheduler` runs), with
hand-computed numbers. Three 10-core nodes:
- hot: its last NodeMetric says 8600m (86 %); its pods request far less than they use (100m each),
  so by requests it is the emptiest node of the three;
- idle-0, idle-1: 4100m (41 %) each, with a pod that reserves 6 cores it hardly uses.
The descheduler evicted web-a (requests 300m) and web-d (1500m); their replacements arrive before any
node has re-reported. LoadAware: threshold cpu 55 %, estimate = request × 85 % (255m, 1275m).
"""

from __future__ import annotations

import asyncio
from typing import Any

from scheduler_plugin.framework.explain import explain
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.runtime import Framework
from scheduler_plugin.framework.schedule_one import binding_cycle, scheduling_cycle
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.loadaware.nodeload import NodeLoads
from tests.objects import T0, node, node_metric, pod
from tests.unit.scheduler.builders import default_framework, pod_metric

PROFILE = "loadline-scheduler"
LOADAWARE = {"name": "LoadAwareScheduling", "args": {"usageThresholds": {"cpu": 55, "memory": 95}}}
WITH_LOADAWARE = {"profiles": [{"schedulerName": PROFILE, "pluginConfig": [LOADAWARE]}]}
REQUESTS_ONLY = {
    "profiles": [{"schedulerName": PROFILE, "plugins": {"multiPoint": {"disabled": [{"name": "LoadAwareScheduling"}]}}}]
}


def cluster() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [node(n, cpu="10", memory="40Gi") for n in ("hot", "idle-0", "idle-1")]
    hot_usage = {"web-b": "2000m", "web-c": "1000m", "web-e": "1600m", "web-f": "1600m", "web-x": "1900m"}
    pods = [pod(n, cpu="100m", memory="1Gi", node_name="hot", scheduled_at=T0 - 600, owner=("ReplicaSet", "o"))
            for n in hot_usage]  # fmt: skip
    pods += [pod(f"reserved-{i}", cpu="6", memory="1Gi", node_name=f"idle-{i}", scheduled_at=T0 - 600) for i in (0, 1)]
    metrics = [
        node_metric("hot", cpu="8600m", memory="8Gi", updated=T0,
                    pods=[pod_metric(n, cpu=u, memory="1Gi") for n, u in hot_usage.items()]),
        *(node_metric(f"idle-{i}", cpu="4100m", memory="3Gi", updated=T0,
                      pods=[pod_metric(f"reserved-{i}", cpu="3600m", memory="1Gi")]) for i in (0, 1)),
    ]  # fmt: skip
    return nodes, pods, metrics


def replacement(name: str, cpu: str) -> dict[str, Any]:
    return pod(name, cpu=cpu, memory="1Gi", owner=("ReplicaSet", "o"))


def place(config: dict[str, Any], replacements: list[dict[str, Any]]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """Schedule the replacements one by one, as they arrive; returns pod -> node and, per pod, node -> verdict."""
    nodes, pods, metrics = cluster()
    snapshot = Snapshot.from_objects(nodes=nodes, pods=pods, stores={NodeLoads: metrics})
    framework, _, binder = default_framework(snapshot, config)
    verdicts: dict[str, dict[str, str]] = {}
    for obj in replacements:
        info = PodInfo.from_dict(obj)
        snapshot.upsert_pod_info(info)
        result = scheduling_cycle(framework, info, record=True)
        assert result.status.is_success(), result.status.message
        verdicts[info.name] = {
            row.node: f"rejected: {'; '.join(row.reasons)}" if row.rejected_by else "feasible"
            for row in explain(result, snapshot)
        }
        assert asyncio.run(_bind(framework, result)).is_success()
    return {key.split("/")[1]: node_name for key, node_name in binder.bindings.items()}, verdicts


async def _bind(framework: Framework, result: Any) -> Any:
    return await binding_cycle(framework, result)


def test_by_requests_alone_the_replacements_go_back_to_the_hot_node() -> None:
    """What a requests-only scheduler does: hot has 500m requested, the idle nodes 6000m each."""
    placed, _ = place(REQUESTS_ONLY, [replacement("web-a2", "300m"), replacement("web-d2", "1500m")])
    assert placed == {"web-a2": "hot", "web-d2": "hot"}  # and the descheduler would evict them again


def test_loadaware_rejects_the_hot_node_and_the_assign_cache_spreads_the_replacements() -> None:
    placed, verdicts = place(WITH_LOADAWARE, [replacement("web-a2", "300m"), replacement("web-d2", "1500m")])
    first = placed["web-a2"]
    other = "idle-1" if first == "idle-0" else "idle-0"
    assert first in ("idle-0", "idle-1") and placed["web-d2"] == other
    exceeded = "rejected: node(s) cpu usage exceed threshold"
    # hot: 8600 + 255 = 8855 → 89 % > 55; 8600 + 1275 → 99 % > 55.
    assert verdicts["web-a2"] == {"hot": exceeded, "idle-0": "feasible", "idle-1": "feasible"}  # a tie: either
    # `first`: its NodeMetric (41 %) predates web-a2; the assign cache adds web-a2's 255m:
    # 4100 + 255 + 1275 = 5630 → 56 % > 55. The other: 4100 + 1275 = 5375 → 54 % ≤ 55.
    assert verdicts["web-d2"] == {"hot": exceeded, first: exceeded, other: "feasible"}


def test_without_the_earlier_placement_idle_0_would_have_taken_web_d2() -> None:
    """The rejection of idle-0 above comes from the assign cache alone: on its own, web-d2 fits there."""
    placed, verdicts = place(WITH_LOADAWARE, [replacement("web-d2", "1500m")])
    assert verdicts["web-d2"]["idle-0"] == verdicts["web-d2"]["idle-1"] == "feasible"
    assert placed["web-d2"] in ("idle-0", "idle-1")
