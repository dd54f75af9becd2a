"""The agent's QoS enforcer on this machine's real cgroup v1 hierarchy, driven by a real NodeSLO on the API server.

A kwok node of 2 CPUs / 8 GiB (this box has 2 cores) carries a best-effort pod; the pod's cgroup is built under a
random parent (`loadline-qos-<rand>/kubepods/besteffort/pod<uid>`, cpu and cpuacct hierarchies) and runs two
processes spinning flat out: two cores' worth of demand. The enforcer watches the node, its NodeSLO and its pods
through the API server and reads usage from a callable (here: the pod cgroup's own `cpuacct.usage`, node usage =
that pod's usage, so the system term is 0 and the suppress target is exactly capacity × threshold).

Everything created is removed in the fixture's finally, also on failure: the only cgroup files written are inside
the test's own tree (the quota, `cpu.shares` of the test parent), which goes with it.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from agent.qos.enforcer import QoSEnforcer
from agent.qos.usage import PodUsageSample, UsageSnapshot
from common.kube.http import KubeHTTP
from tests.cgroup_util import rmdir_cgroup
from tests.harness.controlplane import ControlPlane

pytestmark = pytest.mark.integration

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpu", "cpuacct")
GI = 1024**3
SPIN = r"""
import sys
print("started", flush=True)
sys.stdin.readline()
while True:
    pass
"""


@dataclass
class BETree:
    parent: str
    pod_dirs: dict[str, Path]  # controller -> pod cgroup
    be_cpu_dir: Path
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def quota(self) -> int:
        return int((self.be_cpu_dir / "cpu.cfs_quota_us").read_text())

    def cpu_seconds(self) -> float:
        return int((self.pod_dirs["cpuacct"] / "cpuacct.usage").read_text()) / 1e9



@pytest.fixture
def be_tree_factory() -> Iterator[Callable[[str], BETree]]:
    created: list[Path] = []
    trees: list[BETree] = []

    def build(pod_uid: str) -> BETree:
        parent = f"loadline-qos-{secrets.token_hex(4)}"
        pod_dirs = {}
        for ctrl in CONTROLLERS:
            path = CGROUP_ROOT / ctrl
            for part in (parent, "kubepods", "besteffort", f"pod{pod_uid}"):
                path = path / part
                path.mkdir()
                created.append(path)
            pod_dirs[ctrl] = path
        # The box is shared: a large CFS weight for the test tree so the burners get the CPU they ask for,
        # and what limits them is the quota under test, not other load.
        (CGROUP_ROOT / "cpu" / parent / "cpu.shares").write_text("102400\n")
        tree = BETree(parent, pod_dirs, CGROUP_ROOT / "cpu" / parent / "kubepods" / "besteffort")
        trees.append(tree)
        for _ in range(2):  # two cores' worth of demand
            proc = subprocess.Popen(
                [sys.executable, "-c", SPIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
            tree.procs.append(proc)
            assert proc.stdin is not None and proc.stdout is not None
            assert proc.stdout.readline().strip() == "started"
            for ctrl in CONTROLLERS:
                (pod_dirs[ctrl] / "cgroup.procs").write_text(f"{proc.pid}\n")
            proc.stdin.write("go\n")
            proc.stdin.flush()
        return tree

    try:
        yield build
    finally:
        for tree in trees:
            for proc in tree.procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=10)
                for stream in (proc.stdin, proc.stdout):
                    if stream is not None:
                        stream.close()
        for path in reversed(created):
            rmdir_cgroup(path)
        for tree in trees:
            assert not any((CGROUP_ROOT / c / tree.parent).exists() for c in CONTROLLERS)


class CpuMeter:
    """Cores the pod cgroup used since the previous call (what the agent's collector would report)."""

    def __init__(self, tree: BETree) -> None:
        self.tree = tree
        self.last = (time.monotonic(), tree.cpu_seconds())

    def rate(self) -> float:
        now, used = time.monotonic(), self.tree.cpu_seconds()
        t0, u0 = self.last
        self.last = (now, used)
        return (used - u0) / (now - t0) if now > t0 else 0.0


def measure(tree: BETree, seconds: float) -> float:
    t0, u0 = time.monotonic(), tree.cpu_seconds()
    time.sleep(seconds)
    return (tree.cpu_seconds() - u0) / (time.monotonic() - t0)


def thresholds(**fields: Any) -> dict[str, Any]:
    return {"spec": {"resourceUsedThresholdWithBE": fields}}


def test_enforcer_throttles_a_real_besteffort_cgroup_lifts_it_and_evicts_under_memory_pressure(
    cluster: ControlPlane,
    namespace: str,
    kwok_nodes: Callable[..., list[str]],
    be_tree_factory: Callable[[str], BETree],
) -> None:
    [node] = kwok_nodes(1, cpu="2", memory="8Gi")
    cluster.apply({
        "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": node},
        **thresholds(enable=True, cpuSuppressPolicy="cfsQuota", cpuSuppressThresholdPercent=25),
    })  # fmt: skip
    cluster.apply({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "be-burner", "namespace": namespace, "labels": {"koordinator.sh/qosClass": "BE"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "fake"}]},
    })  # fmt: skip
    uid = json.loads(cluster.kubectl("get", "pod", "be-burner", "-n", namespace, "-o", "json").stdout)["metadata"][
        "uid"
    ]
    tree = be_tree_factory(uid)
    assert tree.quota() == -1

    def set_slo(**fields: Any) -> None:
        cluster.kubectl("patch", "nodeslo", node, "--type=merge", "-p", json.dumps(thresholds(**fields)))

    async def scenario() -> None:
        http = await KubeHTTP.connect(cluster.kubeconfig)
        meter = CpuMeter(tree)
        memory = {"node": 1 * GI}

        def usage() -> UsageSnapshot:
            rate = meter.rate()
            return UsageSnapshot(time.monotonic(), rate, memory["node"], {uid: PodUsageSample(rate, 2 * GI)})

        enforcer = QoSEnforcer(node, http, CGROUP_ROOT, usage, cgroup_parent=tree.parent, interval_seconds=0.5)

        async def until(what: str, check: Callable[[], bool], within: float = 60) -> None:
            deadline = time.monotonic() + within
            while not check():
                assert time.monotonic() < deadline, f"timed out waiting for {what}"
                await asyncio.sleep(0.2)

        unthrottled = await asyncio.to_thread(measure, tree, 3.0)
        assert unthrottled > 1.0, f"the burners should take well over the 0.5-core quota unthrottled: {unthrottled:.2f}"

        task = asyncio.create_task(enforcer.run())
        try:
            # suppress = 2000m x 25% - non-BE pods 0 - max(system 0, reserved 0) = 500m -> quota 50000 us per 100 ms
            await until("quota 50000", lambda: tree.quota() == 50_000)
            assert enforcer.last_breakdown is not None and enforcer.last_breakdown.suppress_milli == 500
            await asyncio.sleep(1.0)  # let the throttling settle into whole periods
            throttled = await asyncio.to_thread(measure, tree, 5.0)
            assert tree.quota() == 50_000  # unchanged while measuring
            print(f"\nunthrottled {unthrottled:.3f} cores; under quota 50000/100000 us: {throttled:.3f} cores")
            assert throttled == pytest.approx(0.5, rel=0.15), f"measured {throttled:.3f} cores under a 0.5-core quota"

            # Threshold raised to 100 %: the target is the whole node, so the quota ramps (+0.2 cores per round)
            # and is then lifted altogether.
            await asyncio.to_thread(set_slo, cpuSuppressThresholdPercent=100)
            seen: set[int] = set()

            def lifted() -> bool:
                seen.add(tree.quota())
                return tree.quota() == -1

            await until("quota lifted to -1", lifted)
            assert any(50_000 < q < 200_000 for q in seen), f"no ramp observed: {sorted(seen)}"
            free = await asyncio.to_thread(measure, tree, 3.0)
            print(f"ramp {sorted(seen)}; lifted: {free:.3f} cores")
            assert free > 1.0, f"lifted, the burners should run free again: {free:.2f}"

            # Suppressed again, then enforcement turned off: restored at once.
            await asyncio.to_thread(set_slo, cpuSuppressThresholdPercent=25)
            await until("quota 50000 again", lambda: tree.quota() == 50_000)
            await asyncio.to_thread(set_slo, enable=False)
            await until("quota restored when enforcement is off", lambda: tree.quota() == -1, 30)

            # Memory: node at 96.875 % of 8 GiB (koordlet truncates: 96 %) >= memoryEvictThresholdPercent 70 -> release
            # 8 GiB x (96 - 68) / 100 = 2405181685 bytes: the BE pod (2 GiB, the only candidate) is evicted via the API.
            await asyncio.to_thread(set_slo, enable=True)
            await until("suppressed once more", lambda: tree.quota() == 50_000)
            memory["node"] = int(7.75 * GI)

            def evicted_event() -> list[dict[str, Any]]:
                out = cluster.kubectl("get", "events.events.k8s.io", "-n", namespace, "-o", "json").stdout
                return [
                    e for e in json.loads(out)["items"]
                    if e.get("regarding", {}).get("name") == "be-burner" and e.get("reason") == "evictPodSuccess"
                ]  # fmt: skip

            await until("evictPodSuccess event on the pod", lambda: bool(evicted_event()), 60)
            note = evicted_event()[0]["note"]
            assert (
                "BEMemoryEvict" in note
                and "usage 96% >= threshold 70%" in note
                and "releasing 2405181685 bytes" in note
            )
            pod = json.loads(
                cluster.kubectl("get", "pod", "be-burner", "-n", namespace, "-o", "json", "--ignore-not-found").stdout
                or "{}"
            )
            assert not pod or pod["metadata"].get("deletionTimestamp"), "evicted pod neither gone nor terminating"
            assert (REGISTRY.get_sample_value("loadline_agent_qos_actions_total", {"action": "evicted"}) or 0) >= 1
            assert (
                REGISTRY.get_sample_value("loadline_agent_qos_actions_total", {"action": "cfs_quota_set"}) or 0
            ) >= 3
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await http.close()

    asyncio.run(scenario())
