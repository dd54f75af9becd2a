"""`loadline agent` on a machine with no cluster configuration at all: it runs standalone and serves /metrics.

No control plane is needed (hence no `integration` marker); it runs the real command in a subprocess with an empty
HOME, no $KUBECONFIG and no in-cluster service account, over fixture /proc and cgroup trees.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from agent.collectors.cgroup_layout import CgroupDriver, CgroupVersion
from common.api.pod import KubeQoSClass
from tests.fakes.cgroup_trees import CgroupValues, FakeCgroupTree, ProcValues, make_pod, write_proc

REPO = Path(__file__).resolve().parents[2]
LISTENING = re.compile(r"serving /metrics.* on 127\.0\.0\.1:(\d+)")


def test_agent_without_any_cluster_configuration_serves_metrics_standalone(tmp_path: Path) -> None:
    write_proc(tmp_path / "proc", ProcValues())
    tree = FakeCgroupTree(tmp_path / "cgroup", CgroupVersion.V2, CgroupDriver.SYSTEMD)
    pod = make_pod(1, KubeQoSClass.GUARANTEED, containers=1)
    tree.add_pod(pod, CgroupValues())
    (tmp_path / "home").mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LOADLINE_AGENT_", "KUBERNETES_")) and k not in ("KUBECONFIG", "NODE_NAME")
    }
    env.update(PYTHONPATH=str(REPO), HOME=str(tmp_path / "home"))
    args = [
        sys.executable,
        "-m",
        "common",
        "agent",
        "--port=0",
        "--collect-interval=0.25",
        f"--proc-root={tmp_path / 'proc'}",
        f"--cgroup-root={tmp_path / 'cgroup'}",
        f"--sys-root={tmp_path / 'sys'}",
        "--kubelet-url=",
    ]
    agent = subprocess.Popen(args, env=env, cwd=REPO, stderr=subprocess.PIPE, text=True)
    log: list[str] = []
    try:
        assert agent.stderr is not None
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            line = agent.stderr.readline()
            if not line:
                break
            log.append(line)
            if match := LISTENING.search(line):
                port = int(match.group(1))
        assert port is not None, "".join(log)
        assert any("standalone agent" in line for line in log), "".join(log)
        body = ""
        while time.monotonic() < deadline and f'pod="{pod.uid}"' not in body:
            time.sleep(0.25)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                body = response.read().decode()
        assert "loadline_node_memory_usage_bytes " in body
        assert f'loadline_container_memory_working_set_bytes{{namespace="",pod="{pod.uid}"' in body
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            assert response.status == 200
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(20)
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
    assert agent.returncode == 0, "".join(log)


def test_a_broken_kubeconfig_names_the_file_and_what_to_pass(tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("clusters: [oops\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADLINE_AGENT_", "KUBERNETES_"))}
    env.update(PYTHONPATH=str(REPO), HOME=str(tmp_path), KUBECONFIG=str(broken))
    result = subprocess.run(
        [sys.executable, "-m", "common", "agent", "--node-name=n1", "--port=0"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert str(broken) in result.stderr and "--kubeconfig" in result.stderr and "$KUBECONFIG" in result.stderr
    assert "--standalone" in result.stderr
