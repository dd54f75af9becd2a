"""What bench/cluster_scale_bench.py measures of each process, and of the API server on behalf of each client.

- CPU seconds (utime + stime from /proc/<pid>/stat) and RSS (VmRSS now, VmHWM the peak since the start) per process;
- API requests per client, verb and resource from the API server's audit log (Metadata level, one line per
  request: `ResponseComplete`, or `ResponseStarted` for a watch, which completes only when it ends), the client
  told apart by its User-Agent (`component_of`);
- requests the API server served, by verb and resource, whoever sent them: its own `apiserver_request_total`
  (`served`, scraped at each snapshot), the count the audit log's per-client split is checked against;
- bytes each process sent to and received from the API server: the kernel's per-socket counters (`ss -ti`:
  bytes_acked, bytes_received) of its connections to the API server's port, sampled every SAMPLE_SECONDS, so a
  connection closed between two samples loses at most that much of its count.

`Meter.snapshot()` reads every counter at once; `window(a, b)` is what happened between two snapshots. The audit
log and the sockets are read on a thread of their own (they are the same files and commands whoever asks).
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bench.scheduler_e2e_bench import process_cpu_seconds

SAMPLE_SECONDS = 2.0

# First token of the User-Agent (up to "/" or " ") -> component. client-go sends "<binary>/<version> (...)".
USER_AGENTS: Mapping[str, str] = {
    "loadline-manager": "manager",
    "loadline-scheduler": "scheduler",
    "loadline-descheduler": "descheduler",
    "loadline-extender": "extender",
    "loadline-agent": "agents",
    "koord-manager": "manager",
    "koordinator-manager": "manager",  # koord-manager's own (cmd/koord-manager/main.go sets cfg.UserAgent)
    "koord-scheduler": "scheduler",
    "koord-descheduler": "descheduler",
    "kube-scheduler": "scheduler",
    "cluster-scale-bench": "bench",
    "kubectl": "bench",
    "kwok": "kwok",
    "kube-apiserver": "apiserver",
}


def component_of(user_agent: str) -> str:
    head = re.split(r"[/ ]", user_agent or "", maxsplit=1)[0]
    return USER_AGENTS.get(head, "other")


def request_key(event: Mapping[str, object]) -> str | None:
    """"VERB resource[/subresource]" of one audit event that counts as one request, else None."""
    verb = str(event.get("verb", ""))
    stage = event.get("stage")
    if stage != ("ResponseStarted" if verb == "watch" else "ResponseComplete"):
        return None
    ref = event.get("objectRef")
    if not isinstance(ref, dict) or not ref.get("resource"):
        return None  # /healthz, /version, discovery
    resource = str(ref["resource"])
    if ref.get("subresource"):
        resource += "/" + str(ref["subresource"])
    return f"{verb} {resource}"


def rss_bytes(pid: int | None) -> tuple[int, int]:
    """(VmRSS, VmHWM) in bytes; (0, 0) for a process that is gone."""
    if pid is None:
        return 0, 0
    now = peak = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                now = int(line.split()[1]) * 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) * 1024
    except OSError:
        pass
    return now, peak


_SS_PID = re.compile(r"pid=(\d+)")
_SS_SENT = re.compile(r"bytes_acked:(\d+)")
_SS_RECEIVED = re.compile(r"bytes_received:(\d+)")


def parse_ss(text: str) -> dict[str, tuple[int, int, int]]:
    """`ss -tinpH` output -> local address -> (pid, bytes sent and acknowledged, bytes received)."""
    sockets: dict[str, tuple[int, int, int]] = {}
    current: tuple[str, int] | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            parts = line.split()
            pid = _SS_PID.search(line)
            # columns: Recv-Q Send-Q Local:Port Peer:Port Process (state filtered, so no State column)
            current = (parts[2], int(pid.group(1))) if pid and len(parts) >= 4 else None
            continue
        if current is None:
            continue
        sent, received = _SS_SENT.search(line), _SS_RECEIVED.search(line)
        sockets[current[0]] = (current[1], int(sent.group(1)) if sent else 0, int(received.group(1)) if received else 0)
        current = None
    return sockets


@dataclass
class SocketTally:
    """Bytes per pid over sockets that come and go (a socket's counters only grow while it lives)."""

    live: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    retired: Counter[tuple[int, str]] = field(default_factory=Counter)  # (pid, "sent"|"received") -> bytes

    def update(self, sockets: Mapping[str, tuple[int, int, int]]) -> None:
        for key, (pid, sent, received) in sockets.items():
            old = self.live.get(key)
            if old is not None and (old[0] != pid or sent < old[1] or received < old[2]):
                self._retire(old)  # the local port was reused by a new connection
        for key in list(self.live):
            if key not in sockets:
                self._retire(self.live.pop(key))
        self.live.update(sockets)

    def _retire(self, old: tuple[int, int, int]) -> None:
        self.retired[(old[0], "sent")] += old[1]
        self.retired[(old[0], "received")] += old[2]

    def totals(self) -> Counter[tuple[int, str]]:
        out = Counter(self.retired)
        for pid, sent, received in self.live.values():
            out[(pid, "sent")] += sent
            out[(pid, "received")] += received
        return out


@dataclass
class Snapshot:
    at: float
    cpu: dict[str, float]  # process name -> CPU seconds
    rss: dict[str, tuple[int, int]]  # process name -> (VmRSS, VmHWM)
    requests: Counter[tuple[str, str]]  # (component, "VERB resource") -> requests since the start
    bytes: Counter[tuple[str, str]]  # (process name, "sent"|"received") -> bytes since the start
    served: Counter[str]  # "VERB resource" -> the API server's apiserver_request_total


@dataclass
class Window:
    seconds: float
    cpu: dict[str, float]
    rss: dict[str, tuple[int, int]]  # at the window's end
    requests: Counter[tuple[str, str]]
    bytes: Counter[tuple[str, str]]
    served: Counter[str]  # the API server's apiserver_request_total over the window, every client

    def requests_of(self, component: str) -> Counter[str]:
        return Counter({k: v for (c, k), v in self.requests.items() if c == component and v > 0})

    def rate(self, component: str) -> float:
        return sum(self.requests_of(component).values()) / self.seconds if self.seconds > 0 else 0.0


def window(a: Snapshot, b: Snapshot) -> Window:
    requests = Counter(b.requests)
    requests.subtract(a.requests)
    sent = Counter(b.bytes)
    sent.subtract(a.bytes)
    served = Counter(b.served)
    served.subtract(a.served)
    return Window(
        seconds=b.at - a.at,
        cpu={name: b.cpu[name] - a.cpu.get(name, 0.0) for name in b.cpu},
        rss=dict(b.rss),
        requests=requests,
        bytes=sent,
        served=+served,
    )


class Meter:
    """Processes by name (`watch(name, pid)`), the audit log and the sockets to the API server's `port`."""

    def __init__(self, audit_log: Path, port: int, served: Callable[[], Counter[str]]) -> None:
        self.audit_log = audit_log
        self.served = served
        self.port = port
        self.pids: dict[str, int] = {}
        self.names: dict[int, str] = {}  # every pid ever watched: the bytes of a stopped process stay its own
        self.cpu_at_exit: dict[str, float] = {}  # a stopped process keeps its last reading
        self.rss_at_exit: dict[str, tuple[int, int]] = {}
        self._requests: Counter[tuple[str, str]] = Counter()
        self._sockets = SocketTally()
        self._offset = 0
        self._partial = b""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="meter", daemon=True)
        self.audit_lines = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def watch(self, name: str, pid: int) -> None:
        self.pids[name] = pid
        self.names[pid] = name

    def forget(self, name: str) -> None:
        """Stop reading a process that is about to exit; its CPU and RSS stay at their last value."""
        pid = self.pids.pop(name, None)
        if pid is not None:
            self.cpu_at_exit[name] = process_cpu_seconds(pid)
            self.rss_at_exit[name] = rss_bytes(pid)

    # -- the thread: audit log and sockets ---------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.poll()

    def poll(self) -> None:
        with self._lock:
            self._read_audit()
            self._read_sockets()

    def _read_audit(self) -> None:
        try:
            with self.audit_log.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            if not line.strip():
                continue
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                self.audit_lines += 1
                key = request_key(event)
                if key is not None:
                    self._requests[(component_of(str(event.get("userAgent", ""))), key)] += 1

    def _read_sockets(self) -> None:
        argv = ["ss", "-tinpH", "state", "established", f"( dport = :{self.port} )"]
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False).stdout
            self._sockets.update(parse_ss(out))

    # -- readings --------------------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        self.poll()
        served = self.served()
        with self._lock:
            requests = Counter(self._requests)
            per_pid = self._sockets.totals()
        names = self.names
        by_name: Counter[tuple[str, str]] = Counter()
        for (pid, direction), value in per_pid.items():
            by_name[(names.get(pid, f"pid {pid}"), direction)] += value
        cpu = dict(self.cpu_at_exit)
        rss = dict(self.rss_at_exit)
        for name, pid in self.pids.items():
            cpu[name] = process_cpu_seconds(pid)
            rss[name] = rss_bytes(pid)
        return Snapshot(time.monotonic(), cpu, rss, requests, by_name, served)
