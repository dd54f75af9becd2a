"""What the agent imports at start (issue 14): disabled collectors and heavy optional libraries stay unloaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
HEAVY = ("pynvml", "pyroute2", "kubernetes", "agent.collectors.gpu", "agent.collectors.infiniband")


def imported_after(code: str) -> list[str]:
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(m for m in {list(HEAVY)!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_the_agent_module_imports_no_collector_library_and_no_kubernetes_client() -> None:
    assert imported_after("import agent.main") == []


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
