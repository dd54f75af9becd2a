"""Node agent core: aggregation time, collect-cycle CPU cost and resident memory.

    .venv/bin/python bench/agent_store_bench.py [--pods 10,100,300] [--cycles 40] [--real] [--repeat 7]
    .venv/bin/python bench/agent_store_bench.py --daemon 100,300 [--warmup 30] [--measure 120]
        [--variant '--container-interval-seconds 10'] [--against /tmp/before]

1. Aggregation: a full report (avg + p50/p90/p95/p99 over 5m/10m/30m, every window computed) of the series the
   agent's ring holds at that many pods x 3 containers (node and system series and 4 a pod, taken from a real
   sampler; containers are exported raw, not stored) with 1 s samples (ring full, 1892 slots), percentiles
   where the agent reads them, without and with gaps, and on 2 threads.
2. Collect cycle: CPU time (process_time) per cycle of the node collector on the real /proc plus the
   cgroup collector on fixture trees (v1 cgroupfs and v2 systemd on /dev/shm), through the sampler (rates,
   derivations, ring write), one event loop as in the agent, cgroup PSI as the agent's default. Each shape runs
   twice: as the agent's default (pods every cycle; containers only when /metrics is scraped, here every 15 cycles,
   their reads counted in) and reading containers every cycle.
   --real adds the same pod shapes as empty cgroups in this machine's v1 hierarchy (kernfs generates
   memory.stat for real; removed afterwards).
3. The steady state in-process (--rss-pods, alone with --rss-only): a ring filled through the real sampler as the
   agent fills it, then one aggregation of every (full) window and the window series' render (what the agent's
   aggregation loop pays when every window is due, at most every 90 s), and the loop's mean over 12 aggregations
   15 s apart (each window computed and rendered again only once 1/20 of it is new); and RSS of that process.
4. --daemon: the real `loadline agent --standalone` process with every default over fixture pod trees: CPU
   share (collect, aggregation, scrapes) and RSS, as a user would see them in `top`; then the import floor (RSS of
   a fresh interpreter after `import agent.main` alone, and after only numpy, asyncio and one pydantic model: the
   libraries' part of it). RSS is anonymous memory (the process's own) plus file
   pages (the shared libraries' code: how much of it is resident depends on what the page cache holds; the same
   code had an import floor of 51.7 MiB from one venv and 59.1 MiB from a freshly installed one, all of it file pages).
   --variant and --against add agents (other args, another source tree) started and measured together with it,
   over the same window: each line then says its CPU as a multiple of the defaults'.
   The steady state needs --warmup 1920: a window has no percentiles (none computed, none rendered) until half of
   it is covered (5m after 150 s, 10m after 300 s, 30m after 900 s), and the 30m window sorts its whole length only
   once the ring is full (31.5 min). A shorter warm-up measures a cheaper, younger agent (at 300 pods
   986467b used 1.19 % of a core over 120 s after 20 s and 1.79 % over 150 s after 900 s).
Targets (issue 14, default intervals): <= 1 % of one core at 300 pods x 3, <= 60 MB RSS at 100 pods x 3.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil

from common.api.pod import KubeQoSClass

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.collectors.cgroup_layout import CgroupDriver, CgroupVersion
from agent.collectors.cgroups import CgroupCollector
from agent.collectors.node import NodeCollector
from agent.collectors.pods import ContainerRef, PodRef
from agent.config import AgentSettings
from agent.report import wants_window_quantiles
from agent.sampler import Sampler
from agent.store import SampleRing, build_report
from tests.fakes.cgroup_trees import FakeCgroupTree, make_pod

WINDOWS = (300.0, 600.0, 1800.0)
FULL_RING_SECONDS = 1890  # the agent's ring holds the longest window + 5 %: every window full and warm after it
PSI = AgentSettings.model_fields["psi"].default  # cgroup PSI as the agent's default (off, as koordlet's)


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median wall and CPU milliseconds."""
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return statistics.median(walls) * 1e3, statistics.median(cpus) * 1e3


class StepClock:
    """Monotonic time advancing exactly one interval per cycle, so back-to-back cycles look like 1 s ones."""

    def __init__(self) -> None:
        self.t = 10_000.0

    def __call__(self) -> float:
        return self.t


@dataclass
class AgentSampling:
    """The agent's sampling over a fixture tree of pods x 3 containers (v2, systemd), as the agent samples: node and
    cgroup collectors through the sampler, containers not stored, on an event loop of its own and a stepped clock."""

    refs: list[PodRef]
    sampler: Sampler
    cgroups: CgroupCollector
    clock: StepClock
    loop: asyncio.AbstractEventLoop

    def sample(self, cycles: int) -> None:
        """`cycles` collect cycles 1 s apart; containers read every 15th, as a scrape every 15 s would read them."""
        for _ in range(cycles):
            self.loop.run_until_complete(self.sampler.cycle())
            if self.sampler.cycles % 15 == 0:
                self.cgroups.read_on_scrape(self.clock.t)
            self.clock.t += 1.0


@contextmanager
def agent_sampling(pods: int, retention: float) -> Iterator[AgentSampling]:
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        refs = [make_pod(i, KubeQoSClass.BURSTABLE, containers=3) for i in range(pods)]
        tree = FakeCgroupTree(Path(tmp), CgroupVersion.V2, CgroupDriver.SYSTEMD)
        for p in refs:
            tree.add_pod(p)
        clock = StepClock()
        cgroups = CgroupCollector(lambda: refs, tmp, interval=1.0, container_interval=0, psi=PSI)
        sampler = Sampler([NodeCollector("/proc"), cgroups], windows=(retention,), clock=clock, store_containers=False)
        loop = asyncio.new_event_loop()
        try:
            yield AgentSampling(refs, sampler, cgroups, clock, loop)
        finally:
            loop.close()
            cgroups.close()


def stored_series(pods: int) -> list[Hashable]:
    """The series the agent's ring holds at `pods` x 3 containers: what a real sampler stores after a few cycles over
    a fixture tree (node and system series, 4 per pod; containers are not stored, only exported raw)."""
    with agent_sampling(pods, WINDOWS[-1]) as sampling:
        sampling.sample(3)
        return sampling.sampler.ring.keys()


def bench_aggregation(pods: int, repeat: int) -> None:
    keys = stored_series(pods)
    slots = int(WINDOWS[-1] * 1.05) + 2
    print(
        f"aggregation  {pods} pods x 3 containers: the {len(keys)} series the agent stores (node, system, 4 a pod), "
        f"{slots} slots of 1 s, windows 5m/10m/30m, every window computed, median of {repeat}"
    )
    for gaps, label in ((0.0, "no gaps (steady state)"), (0.002, "0.2 % random gaps (every row gappy)")):
        ring = SampleRing(slots, initial_rows=len(keys), max_rows=len(keys))
        rng = np.random.default_rng(0)
        for t in range(slots + 10):
            values = rng.gamma(2.0, 1.0, len(keys))
            values[rng.random(len(keys)) < gaps] = np.nan
            ring.append_column(1000.0 + t, keys, values)
        now = float(ring.times[ring.head])
        print(f"  {label}, ring {ring.nbytes() / 2**20:.1f} MiB")
        wall, cpu = timed(lambda: build_report(ring, now, WINDOWS, wants_quantiles=wants_window_quantiles), repeat)  # noqa: B023
        print(f"    as the agent (percentiles where read) wall {wall:6.1f} ms   cpu {cpu:6.1f} ms")
        with ThreadPoolExecutor(2) as pool:
            wall, cpu = timed(
                lambda: build_report(ring, now, WINDOWS, wants_quantiles=wants_window_quantiles, executor=pool),  # noqa: B023
                repeat,
            )
        print(f"    the same on 2 threads                 wall {wall:6.1f} ms   cpu {cpu:6.1f} ms (both threads)")


def measure_cycles(
    pods: list[PodRef], cgroup_root: Path, parent: str, cycles: int, container_every: float, *, scrape_every: int = 15
) -> tuple[float, float, int]:
    """Mean CPU ms per cycle (with container_every 0, the scrape-time container reads of a scrape every
    `scrape_every` cycles included), the cgroup collector's median ms, values stored per cycle."""
    clock = StepClock()
    cg = CgroupCollector(
        lambda: pods, cgroup_root, cgroup_parent=parent, interval=1.0, container_interval=container_every, psi=PSI
    )
    sampler = Sampler([NodeCollector("/proc"), cg], interval=1.0, windows=WINDOWS, clock=clock)
    loop = asyncio.new_event_loop()  # one loop for all cycles, as in the agent
    loop.run_until_complete(sampler.cycle())  # first cycle opens files and builds targets
    clock.t += 1.0
    per_cycle = []
    cg_seconds = []
    stored = 0
    for n in range(cycles):
        c = time.process_time()
        result = loop.run_until_complete(sampler.cycle())
        if container_every == 0 and n % scrape_every == 0:
            cg.read_on_scrape(clock.t)
        per_cycle.append(time.process_time() - c)
        cg_seconds.append(sampler.stats["cgroups"].last_duration_seconds)
        stored = result.stored
        clock.t += 1.0
    loop.close()
    cg_ms = statistics.median(cg_seconds) * 1e3
    cg.close()
    return statistics.mean(per_cycle) * 1e3, cg_ms, stored


@contextmanager
def real_v1_tree(pods: list[PodRef]) -> Iterator[str]:
    """Empty pod/container cgroups in the real v1 hierarchy (cgroupfs layout); removed on exit."""
    parent = f"loadline-bench-{secrets.token_hex(4)}"
    created: list[Path] = []
    try:
        for ctrl in ("cpu", "cpuacct", "memory"):
            base = Path("/sys/fs/cgroup") / ctrl / parent
            for d in (base, base / "kubepods", base / "kubepods" / "burstable"):
                d.mkdir()
                created.append(d)
            for pod in pods:
                pd = base / "kubepods" / "burstable" / f"pod{pod.uid}"
                pd.mkdir()
                created.append(pd)
                for c in pod.containers:
                    cd = pd / c.container_id.split("://")[1]
                    cd.mkdir()
                    created.append(cd)
        yield parent
    finally:
        for d in reversed(created):
            d.rmdir()


def bench_cycles(pod_counts: list[int], cycles: int, real: bool) -> None:
    default = AgentSettings.model_fields["container_interval_seconds"].default
    print(
        f"collect cycle (node on real /proc + cgroups + sampler), mean CPU per cycle over {cycles} cycles; "
        f"containers read {f'every {default:g} s' if default else 'when scraped, every 15 s'} (agent default) / "
        "every cycle"
    )
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        for n in pod_counts:
            pods = [make_pod(i, KubeQoSClass.BURSTABLE, containers=3) for i in range(n)]
            for version, driver in (
                (CgroupVersion.V1, CgroupDriver.CGROUPFS),
                (CgroupVersion.V2, CgroupDriver.SYSTEMD),
            ):
                root = Path(tmp) / f"{n}-{version}-{driver}"
                tree = FakeCgroupTree(root, version, driver)
                for p in pods:
                    tree.add_pod(p)
                for every, label in ((default, ""), (1.0, "  [containers every cycle]")):
                    ms, cg_ms, stored = measure_cycles(pods, root, "", cycles, every)
                    print(
                        f"  {n:4d} pods x 3  fixture v{int(version)} {driver:8s}  {ms:6.2f} ms/cycle "
                        f"= {ms / 10:5.2f} % of a core at 1 s  (cgroups {cg_ms:5.2f} ms, {stored} values/cycle){label}"
                    )
            if real:
                real_pods = [
                    PodRef(
                        str(uuid.uuid4()),
                        "default",
                        f"p{i}",
                        KubeQoSClass.BURSTABLE,
                        tuple(ContainerRef(f"c{j}", f"containerd://{secrets.token_hex(32)}") for j in range(3)),
                    )
                    for i in range(n)
                ]
                with real_v1_tree(real_pods) as parent:
                    for every, label in ((default, ""), (1.0, "  [containers every cycle]")):
                        ms, cg_ms, stored = measure_cycles(real_pods, Path("/sys/fs/cgroup"), parent, cycles, every)
                        print(
                            f"  {n:4d} pods x 3  REAL v1 cgroupfs      {ms:6.2f} ms/cycle "
                            f"= {ms / 10:5.2f} % of a core at 1 s  (cgroups {cg_ms:5.2f} ms, {stored} values/cycle)"
                            f"{label}"
                        )


def bench_full_ring(pods: int, repeat: int = 5) -> None:
    """The agent's steady state in this process: `pods` x 3 containers (v2, systemd) sampled as the agent does
    (containers stored raw only and read when scraped, here every 15 cycles) until the ring is full; then what the
    aggregation loop does every `--aggregation-interval-seconds` (15 s): an aggregation with the agent's default
    policy (5m/10m/30m windows, every window full) and the window series' render. Two figures: every window
    computed and rendered (median of `repeat`), what the loop pays when all are due (at most every 90 s); and the
    mean over 12 aggregations 15 s apart with the sampling in between, as the agent carries the windows that are
    not due (`agent.report.window_due`) and renders only what changed (`agent.exporter.WindowText`). And RSS."""
    from agent.exporter import ExportInput, WindowText
    from agent.report import Aggregates, PodIdentity, ReportPolicy, aggregate

    policy = ReportPolicy()
    with agent_sampling(pods, policy.retention_seconds) as sampling:
        sampler, clock, sample = sampling.sampler, sampling.clock, sampling.sample
        sample(sampler.ring.slots + 5)
        infos = {p.uid: PodIdentity(p.uid, p.namespace, p.name, "", "LS") for p in sampling.refs}

        def aggregation_loop(steps: int, previous: bool) -> tuple[list[float], list[float], int]:
            text, last = WindowText(), None
            aggregations, renders, size = [], [], 0
            for _ in range(steps):
                if previous:
                    sample(15)
                started = time.process_time()
                agg: Aggregates = aggregate(sampler.ring, clock.t - 1.0, policy, previous=last)
                aggregations.append(time.process_time() - started)
                started = time.process_time()
                parts = (text if previous else WindowText()).render([ExportInput([], agg, infos)])
                renders.append(time.process_time() - started)
                last, size = (agg if previous else None), sum(map(len, parts))
            return aggregations, renders, size

        whole_agg, whole_render, size = aggregation_loop(repeat, previous=False)
        a_ms, r_ms = statistics.median(whole_agg) * 1e3, statistics.median(whole_render) * 1e3
        loop_agg, loop_render, _ = aggregation_loop(12, previous=True)
        la_ms, lr_ms = statistics.mean(loop_agg) * 1e3, statistics.mean(loop_render) * 1e3
        rss = psutil.Process().memory_info().rss
        print(
            f"ring full, {pods} pods x 3 containers ({len(sampler.ring)} stored series, {sampler.ring.slots} slots, "
            f"{sampler.ring.nbytes() / 2**20:.1f} MiB): every window: aggregation {a_ms:.1f} ms CPU, window render "
            f"{r_ms:.1f} ms ({size / 1024:.0f} KiB); the loop every 15 s, mean of 12: aggregation {la_ms:.1f} ms, "
            f"render {lr_ms:.1f} ms = {(la_ms + lr_ms) / 150:.2f} % of a core. RSS {rss / 2**20:.1f} MiB"
        )


@dataclass(frozen=True)
class DaemonRun:
    """One agent of a side-by-side daemon measurement: its label, the source tree it runs from, its extra args."""

    label: str
    tree: Path
    args: tuple[str, ...] = ()


def bench_daemon(pods: int, warmup: float, measure: float, scrape_every: float, runs: list[DaemonRun]) -> None:
    """The real `loadline agent --standalone` processes of `runs`, started together, each over its own fixture tree
    of `pods` x 3 containers (v2, systemd) with this machine's /proc and /sys and every default (collectors, 1 s
    collect, 15 s aggregation, 5m/10m/30m windows) plus the run's args: CPU share over the same `measure` seconds
    after `warmup`, each scraped every `scrape_every` seconds as Prometheus would, and RSS at the end (VmRSS and
    VmHWM). Side by side, because one agent measured twice in a row on this shared VM differed by 0.1 % of a core
    (1.41 and 1.53 %), as much as most changes make. The ring's rows are allocated (NaN-filled) as series appear,
    so its memory is resident from the first cycles on, as with full rings."""
    import os
    import re
    import urllib.request

    if warmup < FULL_RING_SECONDS:
        print(
            f"note: --warmup {warmup:g} < {FULL_RING_SECONDS} s: the windows are not all full yet (aggregation and "
            "window rendering cost less than in the steady state)"
        )

    with ExitStack() as stack:
        agents: list[tuple[DaemonRun, subprocess.Popen[str], int]] = []
        for run in runs:
            tmp = stack.enter_context(
                tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None)
            )
            tree = FakeCgroupTree(Path(tmp), CgroupVersion.V2, CgroupDriver.SYSTEMD)
            for p in [make_pod(i, KubeQoSClass.BURSTABLE, containers=3) for i in range(pods)]:
                tree.add_pod(p)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("LOADLINE_AGENT_", "KUBERNETES_"))}
            env.update(PYTHONPATH=str(run.tree), HOME=tmp)
            env.pop("KUBECONFIG", None)
            args = [sys.executable, "-m", "common", "agent", "--standalone", f"--cgroup-root={tmp}", "--port=0"]
            agent = subprocess.Popen(
                [*args, "--kubelet-url=", *run.args], env=env, cwd=run.tree, stderr=subprocess.PIPE, text=True
            )
            stack.callback(_stop, agent)
            assert agent.stderr is not None
            port = None
            while port is None:
                line = agent.stderr.readline()
                if not line:
                    raise SystemExit(f"the agent {run.label!r} exited before it listened")
                if match := re.search(r"serving /metrics.* on 127\.0\.0\.1:(\d+)", line):
                    port = int(match.group(1))
            agents.append((run, agent, port))

        def scrape(port: int) -> int:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
                return len(response.read())

        time.sleep(warmup)
        procs = [psutil.Process(agent.pid) for _, agent, _ in agents]
        cpu0, wall0 = [sum(p.cpu_times()[:2]) for p in procs], time.monotonic()
        sizes = [0] * len(agents)
        next_scrape = wall0
        while (now := time.monotonic()) < wall0 + measure:
            if now >= next_scrape:
                sizes = [scrape(port) for _, _, port in agents]
                next_scrape += scrape_every
            time.sleep(0.2)
        cpus = [sum(p.cpu_times()[:2]) - c for p, c in zip(procs, cpu0, strict=True)]
        wall = time.monotonic() - wall0
        for (run, agent, _), cpu, size in zip(agents, cpus, sizes, strict=True):
            status = Path(f"/proc/{agent.pid}/status").read_text()
            kib = {k: int(v) for k, v in re.findall(r"(VmRSS|VmHWM|RssAnon|RssFile):\s+(\d+)", status)}
            ratio = f"  CPU x{cpu / cpus[0]:.2f} of {runs[0].label}" if len(runs) > 1 and cpus[0] else ""
            print(
                f"daemon  {pods:4d} pods x 3 ({run.label})  CPU {100 * cpu / wall:5.2f} % of a core over "
                f"{wall:.0f} s after {warmup:.0f} s, scraped every {scrape_every:g} s ({size / 1024:.0f} KiB); "
                f"RSS {kib['VmRSS'] / 1024:.1f} MiB = {kib['VmRSS'] * 1024 / 1e6:.1f} MB "
                f"(peak {kib['VmHWM'] / 1024:.1f} MiB; anonymous {kib['RssAnon'] / 1024:.1f}, "
                f"file {kib['RssFile'] / 1024:.1f}){ratio}"
            )


def _stop(agent: subprocess.Popen[str]) -> None:
    import signal

    agent.send_signal(signal.SIGTERM)
    try:
        agent.wait(20)
    except subprocess.TimeoutExpired:
        agent.kill()
        agent.wait()


def daemon_runs(variants: list[str], against: list[str]) -> list[DaemonRun]:
    """The agents to run side by side: this tree with every default first, then each variant's args (this tree),
    then each other source tree with every default."""
    here = Path(__file__).resolve().parent.parent
    runs = [DaemonRun("standalone, defaults", here)]
    runs += [DaemonRun(f"standalone, {v}", here, tuple(shlex.split(v))) for v in variants]
    for other in against:
        tree = Path(other).resolve()
        if not (tree / "agent" / "main.py").is_file():
            raise SystemExit(f"--against {other}: not a Loadline source tree (no agent/main.py)")
        runs.append(DaemonRun(f"standalone, defaults, {tree}", tree))
    return runs


def import_floor() -> None:
    """RSS of fresh interpreters: after `import agent.main` and nothing else (what the daemon cannot go below), and
    after only the libraries the standalone agent cannot run without (numpy, asyncio, one pydantic model for its
    configuration): the part of the floor that is not Loadline's code."""
    probe = (
        "import re, sys\n"
        "def rss():\n"
        "    kib = dict(re.findall(r'(VmRSS|RssAnon|RssFile):\\s+(\\d+)', open('/proc/self/status').read()))\n"
        "    return ' '.join(f'{int(kib[k]) / 1024:.1f}' for k in ('VmRSS', 'RssAnon', 'RssFile'))\n"
        "bare = rss().split()[0]\n"
        "if sys.argv[1] == 'agent':\n"
        "    import agent.main\n"
        "else:\n"
        "    import asyncio, numpy, pydantic\n"
        "    class Settings(pydantic.BaseModel):\n"
        "        interval: float = 1.0\n"
        "    Settings()\n"
        "print(bare, rss())"
    )
    repo = Path(__file__).resolve().parent.parent
    for what, label in (
        ("agent", "after `import agent.main` alone"),
        ("libraries", "after numpy, asyncio and one pydantic model alone"),
    ):
        run = subprocess.run([sys.executable, "-c", probe, what], cwd=repo, capture_output=True, text=True, check=True)
        bare, rss, anon, file = run.stdout.split()
        print(f"import floor: RSS {rss} MiB {label} (anonymous {anon}, file {file}; the interpreter {bare} MiB)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", default="10,100,300")
    ap.add_argument("--cycles", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--real", action="store_true", help="also measure on empty cgroups in the real v1 hierarchy")
    ap.add_argument("--rss-pods", type=int, default=100, help="pods of the full-ring run (3.)")
    ap.add_argument(
        "--rss-only", action="store_true", help="only the full-ring run (3.): the steady state's aggregation in-process"
    )
    ap.add_argument(
        "--daemon",
        metavar="PODS",
        help="measure the real standalone agent process instead, at these pod counts (e.g. 100,300)",
    )
    ap.add_argument(
        "--warmup",
        type=float,
        default=30.0,
        help="--daemon: seconds before measuring (1920 for the steady state: every window full)",
    )
    ap.add_argument("--measure", type=float, default=120.0, help="--daemon: seconds measured")
    ap.add_argument("--scrape-every", type=float, default=15.0, help="--daemon: seconds between /metrics scrapes")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="ARGS",
        help="--daemon: also run an agent with these extra args (e.g. '--container-interval-seconds 10'), side by "
        "side with the defaults over the same window; repeatable",
    )
    ap.add_argument(
        "--against",
        action="append",
        default=[],
        metavar="TREE",
        help="--daemon: also run an agent with every default from another source tree (a before/after pair: "
        "`git worktree add /tmp/before <rev>`), side by side; repeatable",
    )
    args = ap.parse_args()
    if args.daemon:
        runs = daemon_runs(args.variant, args.against)
        for n in (int(x) for x in args.daemon.split(",")):
            bench_daemon(n, args.warmup, args.measure, args.scrape_every, runs)
        import_floor()
        return
    if args.rss_only:
        bench_full_ring(args.rss_pods)
        return
    counts = [int(x) for x in args.pods.split(",")]
    bench_aggregation(max(counts), args.repeat)
    if 100 in counts and max(counts) != 100:
        bench_aggregation(100, args.repeat)
    bench_cycles(counts, args.cycles, args.real)
    # in a fresh process, so the aggregation runs above do not inflate it
    subprocess.run([sys.executable, __file__, "--rss-only", "--rss-pods", str(args.rss_pods)], check=True)


if __name__ == "__main__":
    main()
