"""A real Prometheus server scraping Loadline's components, for tests of the rules and dashboards and for `make demo`.

Debian's `prometheus` binary (tests/harness/promtool.py), on loopback, with its data directory in a temporary
directory that goes with it; scrape and rule evaluation every second (tests) so a test sees data within seconds.
Targets are fixed ports on loopback, or (`file_sd_jobs`) whatever the caller writes with `set_targets`: Debian's
build has no Kubernetes service discovery, so tests/harness/demo_monitoring.py writes the chart's Services'
endpoints there, as a ServiceMonitor would find them.
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
from tests.harness.promtool import ensure_prometheus, ensure_web_assets

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
                 interval: str = "1s", file_sd_jobs: Sequence[str] = (),
                 job_options: Mapping[str, Mapping[str, Any]] | None = None, port: int = 0) -> None:  # fmt: skip
        """`file_sd_jobs`: jobs whose targets `set_targets` writes (besides any in `targets`); `job_options`: more
        keys of a job's scrape config (`honor_labels`); `port`: where to listen on loopback (0: a free port)."""
        self.targets = targets
        self.rule_files = list(rule_files)
        self.interval = interval
        self.file_sd_jobs = list(file_sd_jobs)
        self.job_options = job_options or {}
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._dir: Path | None = None
        self._process: Component | None = None

    def _scrape_config(self, job: str) -> dict[str, Any]:
        config: dict[str, Any] = {"job_name": job, **self.job_options.get(job, {})}
        if self.targets.get(job):
            config["static_configs"] = _static_configs(self.targets[job])
        if job in self.file_sd_jobs:
            config["file_sd_configs"] = [{"files": [str(self._targets_file(job))], "refresh_interval": "30s"}]
        return config

    def _targets_file(self, job: str) -> Path:
        assert self._dir is not None, "the server is not running"
        return self._dir / "targets" / f"{job}.json"

    def set_targets(self, job: str, groups: Sequence[Mapping[str, Any]]) -> None:
        """A file_sd job's targets: `[{"targets": ["10.0.0.5:8080"], "labels": {...}}]`, replaced atomically
        (Prometheus watches the directory and reloads within seconds)."""
        path = self._targets_file(job)
        path.parent.mkdir(exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(list(groups), sort_keys=True))
        partial.replace(path)

    def __enter__(self) -> PrometheusServer:
        binary = ensure_prometheus()
        self._dir = Path(tempfile.mkdtemp(prefix="loadline-prometheus-"))
        for job in self.file_sd_jobs:
            self.set_targets(job, [])
        jobs = list(dict.fromkeys([*self.targets, *self.file_sd_jobs]))
        config = {
            "global": {"scrape_interval": self.interval, "evaluation_interval": self.interval},
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": [self._scrape_config(job) for job in jobs],
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
                f"--web.local-assets={ensure_web_assets(binary)}/",  # Debian's UI is on disk (promtool.py)
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
