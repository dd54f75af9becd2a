"""`loadline scheduler` with malformed objects in the cluster (issue 4, test f).

Each of these passes the API server's validation but not the scheduler's: a NodeMetric
with a negative CPU usage, a PodGroup with a negative minResources and a pod whose node
affinity compares with `Gt` against "abc". Some exist before the scheduler starts (they
come with the initial LIST), some arrive while it runs (WATCH). Each is logged once per
object version, counted, and skipped, while every other pod is scheduled.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from tests.harness.controlplane import ControlPlane
from tests.integration.scheduler_support import (
    NM_PATH,
    PG_LABEL,
    SUITE,
    Api,
    bound_count,
    create_pods,
    events_for,
    placements,
    pod,
    pod_group,
    running_scheduler,
    unique,
    wait_for,
    write_node_metric,
)

pytestmark = pytest.mark.integration

PG_PATH = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{}/podgroups"
BAD_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "loadline.test/rank", "operator": "Gt", "values": ["abc"]}]}
]}}}  # fmt: skip


def metric_value(text: str, sample: str) -> float:
    """The sum of every series of ``sample`` (name and leading labels), whatever its further labels."""
    head = re.escape(sample.rstrip("}"))
    return sum(float(v) for v in re.findall(rf"^{head}[,}}].* (\S+)$", text, re.MULTILINE))


def test_malformed_objects_are_logged_once_counted_and_skipped(
    cluster: ControlPlane, namespace: str, kwok_nodes: object
) -> None:
    suite = unique("bad")
    nodes = kwok_nodes(2, cpu="8", memory="32Gi", labels={SUITE: suite})  # type: ignore[operator]
    api = Api(cluster)
    selector = {SUITE: suite}
    try:
        # Before the scheduler starts: delivered by the initial LIST.
        write_node_metric(api, nodes[0], cpu="-1", memory="1Gi")
        api.create(PG_PATH.format(namespace), pod_group("broken", namespace, 2, minResources={"cpu": "-2"}))
        create_pods(api, [pod("bad-affinity", namespace, node_selector=selector, affinity=BAD_AFFINITY)])
        with running_scheduler(cluster) as scheduler:
            # While it runs: delivered by WATCH.
            write_node_metric(api, nodes[1], cpu="500m", memory="2Gi")
            create_pods(api, [pod("bad-affinity-2", namespace, node_selector=selector, affinity=BAD_AFFINITY)])
            api.create(PG_PATH.format(namespace), pod_group("fine", namespace, 2))
            good = [pod(f"good-{i}", namespace, node_selector=selector) for i in range(8)]
            good += [pod(f"fine-{i}", namespace, node_selector=selector, labels={PG_LABEL: "fine"}) for i in range(2)]
            broken = [pod(f"broken-{i}", namespace, node_selector=selector, labels={PG_LABEL: "broken"}) for i in range(2)]
            create_pods(api, good + broken)

            wait_for("every readable pod to be bound", lambda: bound_count(api, namespace) == len(good), timeout=90)
            where = placements(api, namespace)
            assert not where["bad-affinity"] and not where["bad-affinity-2"]
            assert not where["broken-0"] and not where["broken-1"]
            assert set(where.values()) - {""} <= set(nodes)

            # The gang whose PodGroup is unreadable is told why it waits.
            wait_for("a FailedScheduling event for the broken gang",
                     lambda: bool(events_for(api, namespace, "broken-0", "FailedScheduling")))
            note = events_for(api, namespace, "broken-0", "FailedScheduling")[0]["note"]
            assert f"PodGroup {namespace}/broken not found" in note, note

            log = scheduler.log()
            assert log.count(f"skipping malformed Pod {namespace}/bad-affinity:") == 1
            assert log.count(f"skipping malformed Pod {namespace}/bad-affinity-2:") == 1
            assert log.count(f"skipping malformed NodeMetric {nodes[0]}:") == 1
            assert log.count(f"skipping malformed PodGroup {namespace}/broken ") == 1
            assert "matchExpressions[0].values[0]: 'abc' is not an integer" in log  # the log names what is wrong

            metrics = scheduler.metrics()
            assert metric_value(metrics, 'loadline_malformed_objects_total{kind="Pod"}') == 2
            assert metric_value(metrics, 'loadline_malformed_objects_total{kind="NodeMetric"}') == 1
            assert metric_value(metrics, 'loadline_malformed_objects_total{kind="NodeMetric",reason="negative_quantity"}') == 1
            assert metric_value(metrics, 'loadline_malformed_objects_total{kind="PodGroup"}') == 1

            # A new version of a malformed object is reported again; the same version never twice.
            api.merge_patch(f"/api/v1/namespaces/{namespace}/pods/bad-affinity", {"metadata": {"labels": {"v": "2"}}})
            wait_for("the new version to be logged",
                     lambda: scheduler.log().count(f"skipping malformed Pod {namespace}/bad-affinity:") == 2)
            time.sleep(1)
            assert scheduler.log().count(f"skipping malformed Pod {namespace}/bad-affinity:") == 2

            # Fixing the PodGroup lets its gang in.
            api.merge_patch(f"{PG_PATH.format(namespace)}/broken", {"spec": {"minResources": {"cpu": "2"}}})
            wait_for("the repaired gang to be bound", lambda: bound_count(api, namespace) == len(good) + 2, timeout=60)
            assert scheduler.component.alive()
    finally:
        for node in nodes:
            api.delete(f"{NM_PATH}/{node}")


def with_requests(obj: dict[str, Any], resources: dict[str, Any]) -> dict[str, Any]:
    obj["spec"]["containers"][0]["resources"] = resources
    return obj


@pytest.mark.parametrize(
    "case",
    [
        # Issue 29, example 5: sane requests but a `memory: 9Pi` limit (beyond the range rule); the pod was dropped
        # whole, so its 1.5 cpu were free for others. Now the limit is held: 400m fits beside it, 1 cpu does not.
        (
            {"requests": {"cpu": "1500m", "memory": "1Gi"}, "limits": {"memory": "9Pi"}},
            {"requests": {"cpu": "400m", "memory": "128Mi"}},
            {"requests": {"cpu": "1", "memory": "128Mi"}},
        ),
        # Issue 29, "a bad part never hides the rest": a `memory: 8Ei` request (the API server takes it) dropped the
        # pod whole, so its node looked free. Now the request is held at the range rule: the node is full of memory
        # (1Mi does not fit) and still takes a pod asking for cpu only.
        (
            {"requests": {"cpu": "100m", "memory": "8Ei"}},
            {"requests": {"cpu": "100m"}},
            {"requests": {"cpu": "100m", "memory": "1Mi"}},
        ),
    ],
    ids=["limit-9Pi", "request-8Ei"],
)
def test_a_pod_with_an_unusable_part_still_counts_its_requests_on_its_node(
    cluster: ControlPlane,
    namespace: str,
    kwok_nodes: object,
    case: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
) -> None:
    """The bound pod's unusable part is counted once (logged as a part), and its node is accounted as above."""
    bound, fits, too_big = case
    suite = unique("part")
    (node,) = kwok_nodes(1, cpu="2", memory="8Gi", labels={SUITE: suite})  # type: ignore[operator]
    api = Api(cluster)
    selector = {SUITE: suite}
    big = with_requests(pod("big", namespace), bound)
    big["spec"]["nodeName"] = node
    create_pods(api, [big])
    # kwok's status update is a second version, logged once more if the scheduler saw the first: wait for it.
    wait_for("kwok to run the bound pod",
             lambda: api.get(f"/api/v1/namespaces/{namespace}/pods/big").get("status", {}).get("phase") == "Running",
             timeout=60)  # fmt: skip
    with running_scheduler(cluster) as scheduler:
        create_pods(api, [with_requests(pod("fits", namespace, node_selector=selector), fits)])
        wait_for("the fitting pod to be bound", lambda: placements(api, namespace).get("fits") == node, timeout=60)
        create_pods(api, [with_requests(pod("too-big", namespace, node_selector=selector), too_big)])
        wait_for("a FailedScheduling event for the pod that does not fit",
                 lambda: bool(events_for(api, namespace, "too-big", "FailedScheduling")), timeout=60)  # fmt: skip
        assert placements(api, namespace)["too-big"] == ""
        log = scheduler.log()
        assert log.count(f"malformed part of Pod {namespace}/big, the rest is used:") == 1, log[-2000:]
        # The session's control plane may still hold another test's such pod (its namespace being deleted).
        logged = len(re.findall(r"malformed part of Pod \S+, the rest is used: .* out of range", log))
        metrics = scheduler.metrics()
        assert metric_value(metrics, 'loadline_malformed_objects_total{kind="Pod",reason="out_of_range"}') == logged
        assert scheduler.component.alive()
