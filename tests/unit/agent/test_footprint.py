"""What the agent imports (issue 14): disabled collectors, heavy optional libraries and what only the agent with a
cluster uses (the API client: aiohttp) stay unloaded; each is resident memory the agent would carry for nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
HEAVY = ("pynvml", "pyroute2", "kubernetes", "agent.collectors.gpu", "agent.collectors.infiniband")
# The API client and what only it uses (aiohttp ~10 MiB resident, with yarl, multidict, attrs), and yaml (~1 MiB:
# a --config file or a kubeconfig file only), and prometheus_client (2.8 MiB with the http.server, wsgiref and email
# modules it loads: the API client's metrics; a standalone agent renders its process series itself).
CLUSTER_ONLY = (
    "aiohttp",
    "yarl",
    "multidict",
    "attr",
    "orjson",
    "common.kube.http",
    "common.kube.reflector",
    "yaml",
    "prometheus_client",
)


def imported_after(code: str, watched: tuple[str, ...] = HEAVY) -> list[str]:
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(m for m in {list(watched)!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_the_agent_module_imports_no_collector_library_no_http_client_and_no_yaml() -> None:
    assert imported_after("import agent.main", HEAVY + CLUSTER_ONLY) == []


STANDALONE_RUN = """
import asyncio, sys, tempfile, urllib.request
from pathlib import Path
from agent.collectors.cgroup_layout import CgroupDriver, CgroupVersion
from common.api.pod import KubeQoSClass
from agent.config import AgentSettings
from agent.main import NodeAgent
from tests.fakes.cgroup_trees import FakeCgroupTree, ProcValues, make_pod, write_proc

async def run(tmp: Path) -> None:
    write_proc(tmp / "proc", ProcValues())  # no driver/nvidia: the GPU collector stays off
    FakeCgroupTree(tmp / "cgroup", CgroupVersion.V2, CgroupDriver.SYSTEMD).add_pod(make_pod(1, KubeQoSClass.BURSTABLE))
    settings = AgentSettings.model_validate({
        "proc_root": tmp / "proc", "sys_root": tmp / "sys", "cgroup_root": tmp / "cgroup", "port": 0,
        "collect_interval_seconds": 0.1, "kubelet_url": "http://127.0.0.1:1",  # asked, and nobody answers
    })
    agent = NodeAgent(settings, standalone=True)
    await agent.start()
    try:
        await asyncio.sleep(0.5)
        url = f"http://127.0.0.1:{agent.exporter.port}"
        for path in ("/metrics", "/nodemetric"):
            body = await asyncio.to_thread(lambda: urllib.request.urlopen(url + path, timeout=10).read())
            assert body, path
            assert path != "/metrics" or b"process_resident_memory_bytes " in body
        assert not agent.local_pods.from_kubelet and agent.sampler.cycles >= 2
    finally:
        await agent.stop()

with tempfile.TemporaryDirectory() as tmp:
    asyncio.run(run(Path(tmp)))
"""


def test_a_standalone_agent_with_every_default_collector_runs_without_the_cluster_libraries() -> None:
    """Started, sampled, asked the kubelet, scraped (with its process series): still no aiohttp, yaml,
    prometheus_client or pynvml (no NVIDIA driver here)."""
    assert imported_after(STANDALONE_RUN, ("pynvml", "pyroute2", "kubernetes", *CLUSTER_ONLY)) == []


def test_the_api_models_are_built_on_first_use_not_at_import() -> None:
    """Their validators and serializers are most of what the models cost resident (common.api.wire's defer_build)."""
    probe = (
        "import agent.main\n"
        "from common.api.nodemetric import NodeMetric\n"
        "assert not NodeMetric.__pydantic_complete__\n"
        "assert NodeMetric.from_wire({'metadata': {'name': 'n'}}).to_wire()['metadata'] == {'name': 'n'}\n"
        "assert NodeMetric.__pydantic_complete__\n"
    )
    assert imported_after(probe, ()) == []


def test_the_cli_turns_created_series_off_without_importing_prometheus_client() -> None:
    probe = (
        "from common.cli import disable_created_series\n"
        "disable_created_series()\n"
        "assert 'prometheus_client' not in sys.modules\n"
        "from prometheus_client import CollectorRegistry, Counter, generate_latest\n"
        "registry = CollectorRegistry()\n"
        "Counter('probe_events_total', 'probe', registry=registry).inc()\n"
        "assert b'_created' not in generate_latest(registry)\n"
    )
    assert imported_after(probe, ("prometheus_client",)) == ["prometheus_client"]


def test_only_the_enabled_collectors_are_imported() -> None:
    built = "from agent.collectors.registry import CollectorContext, build_collectors\n"
    assert imported_after(built + "build_collectors(CollectorContext(), ['node', 'cgroups'])") == []
    assert imported_after(built + "build_collectors(CollectorContext(), ['node', 'infiniband'])") == [
        "agent.collectors.infiniband"
    ]


def test_the_malloc_settings_apply_on_glibc() -> None:
    # In a child: one arena for the rest of the process is not something to leave behind in the test runner.
    probe = "from agent import malloc\nassert malloc.limit_arenas(), 'mallopt refused'\nmalloc.trim()\nprint('ok')"
    out = subprocess.run([sys.executable, "-c", probe], check=False, cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
