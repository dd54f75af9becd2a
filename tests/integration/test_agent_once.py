"""`loadline agent --once`: no cluster at all, this machine sampled, what it measured (or the NodeMetric) printed.

No control plane is needed (hence no `integration` marker); it runs the real command in a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from agent.collectors.cgroup_layout import CgroupDriver, CgroupVersion
from common.api.nodemetric import NodeMetric
from common.api.nodemetric_digest import digest_node_metric
from common.api.pod import KubeQoSClass
from common.api.quantity import parse_quantity
from tests.fakes.cgroup_trees import CgroupValues, FakeCgroupTree, ProcValues, make_pod, write_proc

REPO = Path(__file__).resolve().parents[2]


def loadline(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADLINE_AGENT_") and k != "NODE_NAME"}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "common", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=env,
        check=False,
    )


def cores(text: str) -> float:
    """A core count as `--once` prints it: `1.25`, or millicores (`9m`) below 0.01 of a core, as kubectl does."""
    return parse_quantity(text).as_float()


def test_once_prints_a_table_in_human_units_with_windows_that_fit() -> None:
    result = loadline("agent", "--once", "--once-seconds", "4", "--collect-interval", "0.5")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    cpus = os.cpu_count()
    capacity = lines[1].split()
    assert capacity[0] == "capacity" and float(capacity[1]) == cpus and capacity[3] in ("GiB", "MiB")
    usage = next(line for line in lines if line.startswith("node usage")).split()
    assert 0 <= cores(usage[2]) <= cpus and usage[4] in ("GiB", "MiB")  # cores, then human memory, never bytes
    # the default windows fit the 4 s of sampling: 2s and 4s, both with percentiles, none above capacity
    windows = [line for line in lines if line.startswith("window ")]
    assert [w.split()[1] for w in windows] == ["2s", "4s"], result.stdout
    for w in windows:
        values = dict(zip(w.split()[3::2], w.split()[4::2], strict=True))
        assert set(values) == {"avg", "p50", "p90", "p95", "p99"}
        assert all(0 <= cores(v) <= cpus for v in values.values()), w
    progress = [line for line in result.stderr.splitlines() if line.startswith("sampling ")]
    assert len(progress) >= 3 and progress[-1].startswith("sampling 4.0/4s"), result.stderr


def test_once_yaml_is_a_valid_nodemetric_and_says_which_windows_are_cold() -> None:
    result = loadline("agent", "--once", "--once-seconds", "2", "--once-output", "yaml", "--windows", "5m,10m")
    assert result.returncode == 0, result.stderr
    obj = yaml.safe_load(result.stdout)
    model = NodeMetric.from_wire(obj)
    assert model.metadata.name and model.status is not None and model.status.node_metric is not None
    usage = model.status.node_metric.node_usage
    assert usage is not None and usage.resources is not None
    assert usage.resources["memory"].value() > 0 and "cpu" in usage.resources
    windows = model.status.node_metric.aggregated_node_usages or []
    assert [str(w.duration) for w in windows] == ["5m0s", "10m0s"]
    assert all(not r.resources for w in windows for r in (w.usage or {}).values())
    assert "are cold" in result.stdout.splitlines()[1]


def test_once_with_short_windows_reports_percentiles() -> None:
    result = loadline(
        "agent",
        "--once",
        "--once-seconds",
        "3",
        "--collect-interval",
        "0.25",
        "--windows",
        "2s",
        "--node-name",
        "laptop",
        "--once-output",
        "yaml",
    )
    assert result.returncode == 0, result.stderr
    wire = yaml.safe_load(result.stdout)
    assert NodeMetric.from_wire(wire).metadata.name == "laptop"
    # The node's windows as consumers read them, from the whole object: pods a real node beside this test runs
    # and that --once cannot name (no pod log directory) are left out of podsMetric, not published unnamed.
    p95 = digest_node_metric(wire).aggregated_usage("p95", None)
    assert p95 is not None and set(p95) == {"cpu", "memory"}


def test_once_reads_the_cgroup_root_it_is_given(tmp_path: Path) -> None:
    tree = FakeCgroupTree(tmp_path / "cgroup", CgroupVersion.V2, CgroupDriver.SYSTEMD)
    web, batch = make_pod(1, KubeQoSClass.GUARANTEED), make_pod(2, KubeQoSClass.BEST_EFFORT, containers=1)
    tree.add_pod(web, CgroupValues(inactive_anon=10 << 20, active_anon=20 << 20, unevictable=0))
    tree.add_pod(batch, CgroupValues(inactive_anon=5 << 20, active_anon=5 << 20, unevictable=0))
    write_proc(tmp_path / "proc", ProcValues())
    logs = tmp_path / "pod-logs"
    (logs / f"shop_web-0_{web.uid}").mkdir(parents=True)
    (logs / "not-a-pod-directory").mkdir()
    result = loadline(
        "agent",
        "--once",
        "--once-seconds=1",
        "--collect-interval=0.25",
        f"--cgroup-root={tmp_path / 'cgroup'}",
        f"--proc-root={tmp_path / 'proc'}",
        f"--pod-logs-dir={logs}",
        "--node-name=fixture",
        "--once-output=yaml",
    )
    assert result.returncode == 0, result.stderr
    model = NodeMetric.from_wire(yaml.safe_load(result.stdout))
    assert model.status is not None and model.status.pods_metric is not None
    # No API server: the web pod is named by its kubelet log directory; the batch pod has none, so it is listed
    # by UID in a comment and left out of podsMetric (an entry needs a namespace and a name).
    pods = {(p.namespace, p.name): p for p in model.status.pods_metric}
    assert set(pods) == {("shop", "web-0")}
    web_metric = pods["shop", "web-0"]
    assert web_metric.pod_usage.resources["memory"].value() == 30 << 20  # type: ignore[union-attr,index]
    assert (web_metric.qos, web_metric.priority) == ("LSR", "koord-prod")
    assert f"have no pod log directory under {logs} to name them, so podsMetric leaves them out: {batch.uid}" in (
        result.stdout
    )
    digest_node_metric(yaml.safe_load(result.stdout))  # a NodeMetric every consumer takes
    total = model.status.node_metric.node_usage.resources["memory"]  # type: ignore[union-attr,index]
    assert total.value() == (16 - 10) * 1024**3  # MemTotal - MemAvailable of the fixture


def test_once_exits_2_on_a_bad_setting() -> None:
    result = loadline("agent", "--once", "--windows", "5m,soon")
    assert result.returncode == 2
    assert "aggregate_windows" in result.stderr and not result.stdout
