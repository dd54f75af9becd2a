"""What a real node changes on the host, recorded before it starts and put back when it stops.

kubelet, containerd and the CNI bridge change host-wide state that outlives their processes: sysctls,
iptables chains, network links and namespaces, mounts, kubepods cgroups, directories under /var/lib and
/run, and container shims that run in sessions of their own. `HostSnapshot.take()` records what is there
before; `restore()` removes whatever appeared since and resets the sysctls, and is safe to call twice.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_MOUNT = Path("/sys/fs/cgroup")
KUBEPODS = "kubepods"
# kubelet sets these at start (vm.overcommit_memory=1, kernel.panic=10, ...); the bridge plugin enables forwarding.
SYSCTLS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.ipv4.ip_forward",
    "net.ipv6.conf.all.forwarding",
)
# Host paths kubelet, containerd and the CNI plugins create whatever their configured roots.
HOST_PATHS = tuple(
    Path(p)
    for p in (
        "/var/lib/kubelet",  # pki/, device-plugins/ whatever --root-dir says
        "/var/log/containers",  # kubelet's container log symlinks (a fixed path)
        "/var/log/pods",
        "/run/containerd",  # shim sockets (/run/containerd/s) whatever containerd's state dir
        "/run/netns",  # CNI network namespaces
        "/var/lib/cni",  # libcni's result cache
        "/etc/cni",
        "/opt/cni",
        "/etc/kubernetes",
        "/var/lib/loadline",  # the chart's default hostPath of the agent's peak-model checkpoint
    )
)
IPTABLES = ("iptables", "ip6tables")
TABLES = ("filter", "nat", "mangle")


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _mount_points() -> list[str]:
    points = []
    for line in Path("/proc/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) > 1:
            points.append(parts[1].replace("\\040", " "))
    return points


def _links() -> set[str]:
    return set(os.listdir("/sys/class/net"))


def _chains(tool: str, table: str) -> set[str]:
    if shutil.which(tool) is None:
        return set()
    out = subprocess.run([tool, "-w", "-t", table, "-S"], capture_output=True, text=True, check=False).stdout
    return {line.split()[1] for line in out.splitlines() if line.startswith(("-N ", "-P "))}


def cgroup_controllers() -> list[Path]:
    """Every cgroup v1 hierarchy (and the unified one) mounted under /sys/fs/cgroup."""
    return sorted(p for p in CGROUP_MOUNT.iterdir() if p.is_dir() and (p / "cgroup.procs").exists())


def kubepods_trees() -> list[Path]:
    return [tree for c in cgroup_controllers() if (tree := c / KUBEPODS).is_dir()]


@dataclass
class HostSnapshot:
    sysctls: dict[str, str]
    chains: dict[tuple[str, str], set[str]]
    links: set[str]
    mounts: set[str]
    paths: dict[Path, bool]
    netns: set[str]
    notes: list[str] = field(default_factory=list)

    @classmethod
    def take(cls) -> HostSnapshot:
        leftover = kubepods_trees()
        if leftover:
            raise RuntimeError(
                f"{leftover[0]} exists: another kubelet runs on this machine (or a previous run left it behind); "
                "a real test node needs the kubepods cgroups to itself"
            )
        sysctls = {name: value for name in SYSCTLS if (value := _read(_sysctl_path(name))) is not None}
        netns_dir = Path("/run/netns")
        return cls(
            sysctls=sysctls,
            chains={(tool, table): _chains(tool, table) for tool in IPTABLES for table in TABLES},
            links=_links(),
            mounts=set(_mount_points()),
            paths={p: p.exists() for p in HOST_PATHS},
            netns=set(os.listdir(netns_dir)) if netns_dir.is_dir() else set(),
        )

    # --- restore -------------------------------------------------------------------------------
    def restore(self, *, roots: list[Path], shim_marker: str) -> list[str]:
        """Undo what appeared since `take()`. `roots`: the node's own directories (their mounts go too);
        `shim_marker`: a string in the command line of this node's containerd shims. Returns what it did."""
        done: list[str] = []
        done += kill_shims(shim_marker)
        done += kill_cgroup_tasks()
        done += self._unmount(roots)
        done += self._remove_netns()
        done += self._remove_links()
        done += self._remove_chains()
        done += self._restore_sysctls()
        done += remove_kubepods_cgroups()
        done += self._remove_paths()
        return done

    def leftovers(self, *, roots: list[Path], shim_marker: str) -> list[str]:
        """What is still different from the snapshot (empty after a complete `restore()`)."""
        watched = [str(r) for r in [*roots, *HOST_PATHS]]
        left = [f"process {pid}" for pid in _pids_with(shim_marker)]
        left += [f"mount {m}" for m in _mount_points() if m not in self.mounts and any(
            m == w or m.startswith(w + "/") for w in watched)]  # fmt: skip
        left += [f"link {name}" for name in sorted(_links() - self.links)]
        for (tool, table), before in self.chains.items():
            left += [f"{tool} -t {table} chain {c}" for c in sorted(_chains(tool, table) - before)]
        left += [f"sysctl {n}={_read(_sysctl_path(n))} (was {v})" for n, v in self.sysctls.items()
                 if _read(_sysctl_path(n)) != v]  # fmt: skip
        left += [f"cgroup {t}" for t in kubepods_trees()]
        left += [f"path {p}" for p, existed in self.paths.items() if not existed and p.exists()]
        return left

    def _unmount(self, roots: list[Path]) -> list[str]:
        watched = [str(r) for r in [*roots, *HOST_PATHS]]
        done = []
        for point in reversed(_mount_points()):
            if point in self.mounts or not any(point == w or point.startswith(w + "/") for w in watched):
                continue
            proc = subprocess.run(["umount", "-l", point], capture_output=True, text=True, check=False)
            done.append(f"umount {point}" + ("" if proc.returncode == 0 else f" failed: {proc.stderr.strip()}"))
        return done

    def _remove_netns(self) -> list[str]:
        netns_dir = Path("/run/netns")
        if not netns_dir.is_dir():
            return []
        done = []
        for name in sorted(set(os.listdir(netns_dir)) - self.netns):
            subprocess.run(["umount", "-l", str(netns_dir / name)], capture_output=True, check=False)
            with contextlib.suppress(OSError):
                (netns_dir / name).unlink()
                done.append(f"netns {name}")
        return done

    def _remove_links(self) -> list[str]:
        done = []
        for name in sorted(_links() - self.links):
            proc = subprocess.run(["ip", "link", "del", name], capture_output=True, text=True, check=False)
            if proc.returncode == 0:
                done.append(f"link {name}")
        return done

    def _remove_chains(self) -> list[str]:
        done = []
        for (tool, table), before in self.chains.items():
            new = _chains(tool, table) - before
            if not new:
                continue
            rules = subprocess.run([tool, "-w", "-t", table, "-S"], capture_output=True, text=True, check=False)
            for line in rules.stdout.splitlines():
                parts = shlex.split(line)  # rules carry quoted comments
                if (
                    parts[:1] == ["-A"]
                    and parts[1] not in new
                    and "-j" in parts
                    and parts[parts.index("-j") + 1] in new
                ):
                    subprocess.run([tool, "-w", "-t", table, "-D", *parts[1:]], capture_output=True, check=False)
            for chain in new:
                subprocess.run([tool, "-w", "-t", table, "-F", chain], capture_output=True, check=False)
            for chain in sorted(new):
                proc = subprocess.run(
                    [tool, "-w", "-t", table, "-X", chain], capture_output=True, text=True, check=False
                )
                done.append(
                    f"{tool} -t {table} -X {chain}"
                    + ("" if proc.returncode == 0 else f" failed: {proc.stderr.strip()}")
                )
        return done

    def _restore_sysctls(self) -> list[str]:
        done = []
        for name, value in self.sysctls.items():
            path = _sysctl_path(name)
            if _read(path) != value:
                try:
                    path.write_text(value + "\n")
                    done.append(f"sysctl {name}={value}")
                except OSError as exc:
                    done.append(f"sysctl {name}={value} failed: {exc}")
        return done

    def _remove_paths(self) -> list[str]:
        done = []
        for path, existed in self.paths.items():
            if not existed and path.exists():
                shutil.rmtree(path, ignore_errors=True)
                done.append(f"rm -r {path}" + (" (incomplete)" if path.exists() else ""))
        return done


def _pids_with(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            pids.append(int(entry.name))
    return pids


def kill_shims(marker: str) -> list[str]:
    """containerd-shim-runc-v2 daemonizes out of containerd's session: find ours by our socket path."""
    pids = [pid for pid in _pids_with(marker) if "containerd-shim" in (_read(Path(f"/proc/{pid}/comm")) or "")]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return [f"kill shim {pid}" for pid in pids]


def tree_pids(tree: Path) -> set[int]:
    pids: set[int] = set()
    for procs in tree.rglob("cgroup.procs"):
        text = _read(procs) or ""
        pids.update(int(p) for p in text.split() if p.isdigit())
    return pids


def kill_cgroup_tasks(timeout: float = 10) -> list[str]:
    """SIGKILL every process left in a kubepods cgroup (containers whose shim is gone)."""
    deadline = time.monotonic() + timeout
    killed: set[int] = set()
    while True:
        pids = set().union(*(tree_pids(t) for t in kubepods_trees())) if kubepods_trees() else set()
        if not pids or time.monotonic() > deadline:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed |= pids
        time.sleep(0.1)
    return [f"kill {len(killed)} container processes"] if killed else []


def remove_kubepods_cgroups(timeout: float = 10) -> list[str]:
    """rmdir the kubepods tree under every controller, deepest first (a cgroup goes once it has no tasks)."""
    deadline = time.monotonic() + timeout
    while True:
        trees = kubepods_trees()
        for tree in trees:
            dirs = sorted((p for p in tree.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
            for d in [*dirs, tree]:
                with contextlib.suppress(OSError):
                    d.rmdir()
        left = kubepods_trees()
        if not left:
            return [f"rmdir {t}" for t in trees]
        if time.monotonic() > deadline:
            return [f"rmdir {t} failed (busy)" for t in left]
        time.sleep(0.2)
