"""Child processes with logs on disk, reliable teardown and readiness polling."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Component:
    """A real upstream binary we started; its output goes to `log_path`."""

    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            # A new session so that a kill reaches every child the component may fork.
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
        finally:
            log.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)

    def kill(self) -> None:
        """Abrupt death (SIGKILL), as when a node or leader disappears."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def wait_until(
    what: str, check: Callable[[], bool], timeout: float, interval: float = 0.1, *, alive: Sequence[Component] = ()
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        for comp in alive:
            if not comp.alive():
                raise RuntimeError(f"{comp.name} exited while waiting for {what}:\n{comp.log_tail()}")
        try:
            if check():
                return
        except Exception:
            pass
        if time.monotonic() > deadline:
            details = "\n".join(f"--- {c.name} ---\n{c.log_tail()}" for c in alive)
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}\n{details}")
        time.sleep(interval)


def http_ok(
    url: str,
    *,
    token: str | None = None,
    ca_file: Path | None = None,
    expect: bytes | None = None,
    insecure: bool = False,
) -> bool:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    context = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None
    if insecure:  # components serving a self-signed cert we never see (kube-scheduler's /healthz)
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as response:
            body: bytes = response.read()
            return response.status == 200 and (expect is None or expect in body)
    except (urllib.error.URLError, OSError):
        return False
