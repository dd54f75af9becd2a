"""A real Prometheus server scraping Loadline's components, for tests of the rules and dashboards.

Debian's `prometheus` binary (tests/harness/promtool.py), on loopback, with its data directory in a temporary
directory that goes with it; scrape and rule evaluation every second so a test sees data within seconds.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from tests.harness.processes import Component, free_port
from tests.harness.promtool import ensure_prometheus

# A target: a port on loopback, or a port and the labels Prometheus adds to its series (as a ServiceMonitor's
# relabelling adds `node` to an agent's).
Target = int | tuple[int, Mapping[str, str]]


def _static_configs(targets: Sequence[Target]) -> list[dict[str, Any]]:
    plain = [f"127.0.0.1:{t}" for t in targets if isinstance(t, int)]
    labelled = [{"targets": [f"127.0.0.1:{t[0]}"], "labels": dict(t[1])} for t in targets if not isinstance(t, int)]
    return ([{"targets": plain}] if plain else []) + labelled


class PrometheusServer:
    """`with PrometheusServer({"loadline-agent": [port]}, rule_files=[...]) as prom: prom.query(expr)`."""

    def __init__(self, targets: Mapping[str, Sequence[Target]], *, rule_files: Sequence[Path] = (),
                 interval: str = "1s") -> None:  # fmt: skip
        self.targets = targets
        self.rule_files = list(rule_files)
        self.interval = interval
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._dir: Path | None = None
        self._process: Component | None = None

    def __enter__(self) -> PrometheusServer:
        binary = ensure_prometheus()
        self._dir = Path(tempfile.mkdtemp(prefix="loadline-prometheus-"))
        config = {
            "global": {"scrape_interval": self.interval, "evaluation_interval": self.interval},
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": [
                {"job_name": job, "static_configs": _static_configs(targets)} for job, targets in self.targets.items()
            ],
        }
        config_file = self._dir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config))
        self._process = Component(
            "prometheus",
            [
                str(binary),
                f"--config.file={config_file}",
                f"--storage.tsdb.path={self._dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            self._dir / "prometheus.log",
        )
        try:
            self._process.start()
            self._wait_ready(60)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._process is not None:
            self._process.stop()
            self._process = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def log(self) -> str:
        path = self._dir / "prometheus.log" if self._dir else None
        return path.read_text(errors="replace")[-4000:] if path and path.exists() else ""

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if self._process is not None and not self._process.alive():
                break
            time.sleep(0.3)
        raise RuntimeError(f"prometheus did not become ready:\n{self.log()}")

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>; the `data` of a success, else RuntimeError with Prometheus' error."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; the result vector (a scalar comes back as one sample)."""
        data = self.api("query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result
