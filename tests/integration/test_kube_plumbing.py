"""Reflector, events and leader election against a real kube-apiserver."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from typing import Any

import pytest

from common.kube.events import EventRecorder
from common.kube.http import KubeError, KubeHTTP, resource_path
from common.kube.leader import LeaderElector
from common.kube.reflector import Reflector
from common.ratelimit import TokenBucket
from tests.examples import KOORDINATOR_NODEMETRIC
from tests.harness.controlplane import ControlPlane

pytestmark = pytest.mark.integration
NM_PATH = resource_path("slo.koordinator.sh", "v1alpha1", "nodemetrics")


def nodemetric(name: str, label: str = "a") -> dict[str, Any]:
    import yaml

    obj = yaml.safe_load(KOORDINATOR_NODEMETRIC)
    obj["metadata"] = {"name": name, "labels": {"suite": label}}
    obj.pop("status")
    return dict(obj)


async def wait_for(predicate: Any, within: float = 15) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


def test_reflector_follows_create_update_delete(cluster: ControlPlane) -> None:
    suite = uuid.uuid4().hex[:8]

    async def run() -> list[tuple[str, str]]:
        http = await KubeHTTP.connect(cluster.kubeconfig)
        seen: list[tuple[str, str]] = []
        for i in range(3):  # exist before the list: arrive as ADDED from the LIST
            await http.create(NM_PATH, nodemetric(f"r-{suite}-{i}", suite))
        reflector = Reflector(http, NM_PATH, label_selector=f"suite={suite}", page_size=2)
        reflector.add_handler(lambda kind, obj, old: seen.append((kind, obj["metadata"]["name"])))
        task = asyncio.create_task(reflector.run())
        try:
            await asyncio.wait_for(reflector.synced.wait(), 15)
            assert sorted(reflector.store) == [f"r-{suite}-{i}" for i in range(3)]
            await http.create(NM_PATH, nodemetric(f"r-{suite}-3", suite))
            await http.merge_patch(f"{NM_PATH}/r-{suite}-0", {"metadata": {"annotations": {"x": "1"}}})
            await http.delete(f"{NM_PATH}/r-{suite}-1")
            await wait_for(lambda: len(seen) == 6)
            assert reflector.store[f"r-{suite}-0"]["metadata"]["annotations"] == {"x": "1"}
            assert f"r-{suite}-1" not in reflector.store
            return seen
        finally:
            task.cancel()
            await http.close()

    seen = asyncio.run(run())
    assert sorted(seen[:3]) == [("ADDED", f"r-{suite}-{i}") for i in range(3)]
    assert seen[3:] == [("ADDED", f"r-{suite}-3"), ("MODIFIED", f"r-{suite}-0"), ("DELETED", f"r-{suite}-1")]


def test_reflector_survives_apiserver_restart_and_resyncs(fresh_control_plane: ControlPlane) -> None:
    plane = fresh_control_plane

    async def run() -> None:
        http = await KubeHTTP.connect(plane.kubeconfig)
        await http.create(NM_PATH, nodemetric("before"))
        reflector = Reflector(http, NM_PATH, max_backoff_seconds=1)
        events: list[tuple[str, str]] = []
        reflector.add_handler(lambda kind, obj, old: events.append((kind, obj["metadata"]["name"])))
        task = asyncio.create_task(reflector.run())
        try:
            await asyncio.wait_for(reflector.synced.wait(), 15)
            await asyncio.to_thread(plane.stop_apiserver)
            await asyncio.sleep(1.5)  # the watch breaks; the store is kept
            assert "before" in reflector.store
            with pytest.raises(KubeError) as err:
                await http.get(NM_PATH)
            assert err.value.status == 0  # unreachable is an error value, not a crash
            await asyncio.to_thread(plane.start_apiserver)
            await http.create(NM_PATH, nodemetric("after"))
            await wait_for(lambda: "after" in reflector.store, within=30)
            assert ("ADDED", "after") in events and "before" in reflector.store
        finally:
            task.cancel()
            await http.close()

    asyncio.run(run())


def test_a_nodemetric_nested_too_deep_is_malformed_and_the_watch_goes_on(cluster: ControlPlane) -> None:
    """Issue 29: podsMetric[].extensions (preserve-unknown-fields) 1,100 levels deep is refused by orjson and by
    `json` (RecursionError); the LIST page holding it failed, and the reflector re-listed every 0.5 s for ever."""
    from prometheus_client import REGISTRY

    suite = uuid.uuid4().hex[:8]
    deep, good, later = (f"deep-{suite}", f"good-{suite}", f"later-{suite}")
    extensions = '{"x":' * 1_100 + "1" + "}" * 1_100  # built as text: no encoder we use writes it
    for name in (deep, good):
        cluster.kubectl("create", "-f", "-", input=json.dumps(nodemetric(name, suite)))
    entry = '{"namespace":"d","name":"p","podUsage":{},"extensions":' + extensions + '}'
    status = '{"status":{"podsMetric":[' + entry + ']}}'
    cluster.kubectl("patch", "nodemetric", deep, "--subresource=status", "--type=merge", "-p", status)

    def too_deep() -> float:
        labels = {"kind": "NodeMetric", "reason": "too_deep"}
        return REGISTRY.get_sample_value("loadline_malformed_objects_total", labels) or 0.0

    async def run() -> tuple[int, float]:
        http = await KubeHTTP.connect(cluster.kubeconfig)
        before = too_deep()
        reflector = Reflector(http, NM_PATH, name=f"deep-{suite}", label_selector=f"suite={suite}")
        task = asyncio.create_task(reflector.run())
        try:
            await asyncio.wait_for(reflector.synced.wait(), 15)
            assert sorted(reflector.store) == sorted([deep, good])
            assert reflector.store[deep]["status"]["podsMetric"][0]["name"] == "p"  # the rest of the object is kept
            await http.create(NM_PATH, nodemetric(later, suite))
            await wait_for(lambda: later in reflector.store)
            relists = REGISTRY.get_sample_value("loadline_kube_relists_total", {"resource": reflector.name})
            assert reflector.stalled(0) is None
            return int(relists or 0), too_deep() - before
        finally:
            task.cancel()
            for name in (deep, good, later):  # the session's control plane is shared: other tests count NodeMetrics
                with contextlib.suppress(KubeError):
                    await http.delete(f"{NM_PATH}/{name}")
            await http.close()

    relists, counted = asyncio.run(run())
    assert relists == 1  # listed once, then watched: no relist loop
    assert counted == 1  # this version, once


def test_events_are_recorded_on_the_object(cluster: ControlPlane, namespace: str) -> None:
    cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "victim", "namespace": namespace},
                   "spec": {"containers": [{"name": "c", "image": "fake"}]}})  # fmt: skip
    pod = json.loads(cluster.kubectl("get", "pod", "victim", "-n", namespace, "-o", "json").stdout)

    async def run() -> bool:
        http = await KubeHTTP.connect(cluster.kubeconfig)
        try:
            recorder = EventRecorder(http, "loadline-test", "test-0")
            return await recorder.record(pod, reason="Descheduled", action="Evicting", note="x" * 2000, type="Warning")
        finally:
            await http.close()

    assert asyncio.run(run())
    events = json.loads(cluster.kubectl("get", "events.v1.events.k8s.io", "-n", namespace, "-o", "json").stdout)[
        "items"
    ]
    mine = [e for e in events if e["regarding"]["name"] == "victim"]
    assert len(mine) == 1 and mine[0]["reason"] == "Descheduled" and mine[0]["type"] == "Warning"
    assert mine[0]["regarding"]["uid"] == pod["metadata"]["uid"] and mine[0]["note"].endswith(" ...")


def test_leader_election_hands_over_when_the_leader_dies(cluster: ControlPlane, namespace: str) -> None:
    async def run() -> tuple[str, float, list[str]]:
        http = await KubeHTTP.connect(cluster.kubeconfig)
        working: list[str] = []

        async def lead_as(who: str) -> None:
            while True:
                working.append(who)
                await asyncio.sleep(0.2)

        timing = {
            "lease_seconds": 4,
            "renew_deadline_seconds": 3,
            "retry_period_seconds": 1,
            "release_on_cancel": False,
        }
        first = LeaderElector(http, name="lock", namespace=namespace, identity="first", **timing)  # type: ignore[arg-type]
        second = LeaderElector(http, name="lock", namespace=namespace, identity="second", **timing)  # type: ignore[arg-type]
        task1 = asyncio.create_task(first.run(lambda: lead_as("first")))
        await asyncio.wait_for(first.became_leader.wait(), 15)
        task2 = asyncio.create_task(second.run(lambda: lead_as("second")))
        await asyncio.sleep(3)
        assert not second.is_leader and set(working) == {"first"}  # only the holder works
        task1.cancel()  # the leader dies without releasing the Lease
        start = asyncio.get_running_loop().time()
        await asyncio.wait_for(second.became_leader.wait(), 20)
        took = asyncio.get_running_loop().time() - start
        await asyncio.sleep(0.5)
        lease = await http.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/lock")
        task2.cancel()
        await http.close()
        return lease["spec"]["holderIdentity"], took, working

    holder, took, working = asyncio.run(run())
    assert holder == "second" and working[-1] == "second"
    assert 2 <= took <= 4 + 2  # not before the lease could expire, and within its duration plus a retry


def test_graceful_shutdown_releases_the_lease(cluster: ControlPlane, namespace: str) -> None:
    async def run() -> float:
        http = await KubeHTTP.connect(cluster.kubeconfig)
        timing = {"lease_seconds": 10, "renew_deadline_seconds": 6, "retry_period_seconds": 1}
        first = LeaderElector(http, name="lock", namespace=namespace, identity="first", **timing)  # type: ignore[arg-type]
        second = LeaderElector(http, name="lock", namespace=namespace, identity="second", **timing)  # type: ignore[arg-type]
        task1 = asyncio.create_task(first.run(lambda: asyncio.sleep(3600)))
        await asyncio.wait_for(first.became_leader.wait(), 15)
        task2 = asyncio.create_task(second.run(lambda: asyncio.sleep(3600)))
        await asyncio.sleep(1)
        task1.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task1
        start = asyncio.get_running_loop().time()
        await asyncio.wait_for(second.became_leader.wait(), 20)
        took = asyncio.get_running_loop().time() - start
        task2.cancel()
        await http.close()
        return took

    assert asyncio.run(run()) < 5  # released: no need to wait out the 10 s lease


def test_client_side_rate_limit_spaces_requests_after_the_burst(cluster: ControlPlane) -> None:
    """Every request and watch start takes a token (client-go's QPS/Burst); the waits are read off a fake clock,
    so the test checks the spacing without timing anything, against the real API server."""
    now = [0.0]
    waits: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds

    async def main() -> int:
        limiter = TokenBucket(20.0, 5, clock=lambda: now[0], sleep=fake_sleep)
        http = await KubeHTTP.connect(cluster.kubeconfig, limiter=limiter)
        try:
            listed = [await http.get("/api/v1/namespaces") for _ in range(15)]
            async for _ in http.watch_lines("/api/v1/namespaces", {"timeoutSeconds": 1}, 5):
                break  # the first ADDED event: the watch got its token and started
            assert http.throttled_seconds == pytest.approx(sum(waits))
            return len(listed)
        finally:
            await http.close()

    assert asyncio.run(main()) == 15
    assert sum(waits) == pytest.approx((16 - 5) / 20.0)  # 16 requests, 5 from the burst, then 20 per second
