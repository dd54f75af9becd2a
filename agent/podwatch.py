"""Where the agent's pods come from.

- `PodWatch`: a list-watch (`common.kube.reflector.Reflector`) of the pods bound to this node
  (`fieldSelector=spec.nodeName=<node>`), turned into the cgroup collector's `PodRef` tuples and the report's
  `PodIdentity`. The tuple is rebuilt only when something the collector uses changes (UID, QoS tier, container
  IDs), so the collector's fast path (`pods is self._pods_seen`) holds between changes. Pods in a terminal
  phase are left out: their cgroups are gone.
- `PodIndex`: the same for many nodes at once (the simulator watches every bound pod and groups by node).
- `CgroupPodDiscovery`: no API server at all (`--once`, standalone): pods found in this machine's kubepods
  cgroup tree (watched with inotify, else listed every few seconds), named by the kubelet's pod log directories
  (`<namespace>_<name>_<uid>`), else by their UID.
- `LocalPods`: the standalone agent's pods: the cgroup tree's, named by the kubelet's pod list when it answers.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.collectors.cgroup_layout import CgroupDriver, CgroupLayout, detect_layout
from agent.collectors.pods import ContainerRef, PodRef, valid_pod_uid
from agent.inotify import DirectoryWatch
from agent.report import PodIdentity
from common.api.pod import KubeQoSClass
from common.api.poddigest import KIND, PodDigest, digest_pod
from common.kube.kubeconfig import SERVICE_ACCOUNT_DIR

if TYPE_CHECKING:
    from common.kube.http import JSON, KubeHTTP
    from common.kube.malformed import MalformedObjects

log = logging.getLogger("loadline.agent.pods")

PODS_PATH = "/api/v1/pods"
MAX_POD_LOG_DIRS = 4096  # entries read from the pod logs directory: ~10x kubelet's largest maxPods (the rest: UIDs)
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

def pod_ref(pod: Mapping[str, Any], digest: PodDigest | None = None) -> PodRef | None:
    """The collector's view of a pod JSON object; None for pods without a UID or in a terminal phase.

    The agent's policy for a malformed pod (its digest has a `problem`): it runs on this node all the same,
    so it is measured: its cgroup tier is the kubelet's `status.qosClass`, else Burstable's, and the report
    names it without classes (`PodIdentity.from_digest`). `PodIndex` counts it."""
    meta = pod.get("metadata") or {}
    uid = meta.get("uid")
    if not uid or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return None
    status = pod.get("status") or {}
    containers: list[ContainerRef] = []
    # Running sidecars (restartable init containers) have cgroups too; finished init containers are gone and
    # would only be counted as vanished.
    for field in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(field) or []:
            cid = cs.get("containerID") or ""
            if field == "initContainerStatuses" and "running" not in (cs.get("state") or {}):
                continue
            containers.append(ContainerRef(str(cs.get("name", "")), str(cid)))
    digest = digest if digest is not None else digest_pod(pod)
    if digest.problem is None:
        qos = digest.kube_qos
    else:
        reported = status.get("qosClass")
        qos = KubeQoSClass(reported) if reported in _KUBE_QOS_CLASSES else KubeQoSClass.BURSTABLE
    return PodRef(
        uid=str(uid),
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        qos=qos,
        containers=tuple(containers),
    )


_KUBE_QOS_CLASSES = frozenset(KubeQoSClass)


class PodIndex:
    """Pods by node, maintained from reflector events; per node a stable `PodRef` tuple and `PodIdentity` map.

    Each pod version is digested once (`common/api/poddigest.py`); one that cannot be read is reported to
    `malformed` (logged and counted once per version) and still measured (see `pod_ref`)."""

    def __init__(self, malformed: MalformedObjects | None = None) -> None:
        self._pods: dict[str, dict[str, tuple[JSON, PodDigest]]] = {}  # node -> uid -> (pod, its digest)
        self._refs: dict[str, tuple[PodRef, ...]] = {}
        self._infos: dict[str, dict[str, PodIdentity]] = {}
        self._dirty: set[str] = set()
        self.malformed = malformed
        self.listeners: list[Callable[[str], None]] = []  # called with the node whose pods changed

    def handle(self, kind: str, obj: JSON, old: JSON | None) -> None:
        uid = (obj.get("metadata") or {}).get("uid")
        if not uid:
            return
        node = (obj.get("spec") or {}).get("nodeName") or ""
        old_node = ((old or {}).get("spec") or {}).get("nodeName") or ""
        if old_node and old_node != node:
            self._remove(old_node, uid)
        if kind == "DELETED" or not node:
            self._remove(node, uid)
            return
        digest = digest_pod(obj)
        if self.malformed is not None:
            self.malformed.account(KIND, digest.key, obj, digest.problem, digest.part_problem)
        pods = self._pods.setdefault(node, {})
        previous = pods.get(uid)
        pods[uid] = (obj, digest)
        if previous is None or _relevant(*previous) != _relevant(obj, digest):
            self._changed(node)

    def _remove(self, node: str, uid: str) -> None:
        pods = self._pods.get(node)
        gone = pods.pop(uid, None) if pods is not None else None
        if gone is not None:
            if not pods:
                del self._pods[node]
            if self.malformed is not None:
                self.malformed.clear(KIND, gone[1].key)
            self._changed(node)

    def _changed(self, node: str) -> None:
        self._dirty.add(node)
        for listener in self.listeners:
            listener(node)

    def _rebuild(self, node: str) -> None:
        if node in self._dirty or node not in self._refs:
            pods = self._pods.get(node, {})
            refs = [r for r in (pod_ref(obj, digest) for obj, digest in pods.values()) if r is not None]
            self._refs[node] = tuple(refs)
            self._infos[node] = {r.uid: PodIdentity.from_digest(pods[r.uid][1]) for r in refs}
            self._dirty.discard(node)

    def refs(self, node: str) -> tuple[PodRef, ...]:
        self._rebuild(node)
        return self._refs[node]

    def infos(self, node: str) -> dict[str, PodIdentity]:
        self._rebuild(node)
        return self._infos[node]

    def objects(self, node: str) -> list[JSON]:
        return [obj for obj, _ in self._pods.get(node, {}).values()]

    def nodes(self) -> list[str]:
        return list(self._pods)


def _relevant(pod: JSON, digest: PodDigest) -> tuple[Any, ...]:
    """What the collector and the report read; other changes (conditions, IPs) do not rebuild anything."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return (
        pod_ref(pod, digest),
        digest.name,
        digest.namespace,
        digest.koord_qos,
        digest.priority_class,
        annotations.get("loadline.io/simulated-cpu"),
        annotations.get("loadline.io/simulated-memory"),
        annotations.get("loadline.io/simulated-burstiness"),
        digest.phase,
    )


class PodWatch:
    """The pods of one node, from the API server."""

    def __init__(self, http: KubeHTTP, node_name: str, *, max_backoff_seconds: float = 30.0) -> None:
        # Here, not at the top: the API client (aiohttp, ~10 MiB resident) is for the agent with a cluster only.
        from common.kube.malformed import MalformedObjects
        from common.kube.reflector import Reflector

        self.node_name = node_name
        self.index = PodIndex(MalformedObjects((KIND,)))
        self.reflector = Reflector(
            http,
            PODS_PATH,
            name="pods",
            field_selector=f"spec.nodeName={node_name}",
            max_backoff_seconds=max_backoff_seconds,
        )
        self.reflector.add_handler(self.index.handle)

    @property
    def synced(self) -> bool:
        return self.reflector.synced.is_set()

    def pods(self) -> tuple[PodRef, ...]:
        return self.index.refs(self.node_name)

    def infos(self) -> dict[str, PodIdentity]:
        return self.index.infos(self.node_name)

    async def run(self) -> None:
        await self.reflector.run()


# ------------------------------------------------------------------------------------------------ no cluster
_UID = r"([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12}|[0-9a-f]{32})"
_CGROUPFS_POD = re.compile(rf"pod{_UID}")
_SYSTEMD_POD = re.compile(rf"kubepods(?:-burstable|-besteffort)?-pod{_UID}\.slice")
_SCOPE = re.compile(r"(cri-containerd|crio|docker|pouch)-([0-9a-f]{64})\.scope")
_BARE = re.compile(r"(crio-)?([0-9a-f]{64})")
_SCOPE_RUNTIME = {"cri-containerd": "containerd", "crio": "cri-o", "docker": "docker", "pouch": "pouch"}
_TIERS = (
    ("", KubeQoSClass.GUARANTEED),
    ("burstable", KubeQoSClass.BURSTABLE),
    ("besteffort", KubeQoSClass.BEST_EFFORT),
)


SAFETY_RESCAN_SECONDS = 60.0
"""With the tree watched, the tiers are listed anyway this often, and the containers of every
`container_rescan_rounds`-th pod (staggered, as when polled): whatever the watch did not report (an event lost
without the queue's overflow notice, a kernel whose cgroup filesystem raises none) is then found at most this late
(a pod) or `container_rescan_rounds` times as late (a container). At 300 pods such a round is ~3 ms of CPU, ~0.006 %
of a core at this period; a full listing would be ~13 ms."""


class CgroupPodDiscovery:
    """Pods and containers found in the kubepods cgroup tree (for the agent without an API server).

    The tree holds no names: a pod is named by its directory under the kubelet's pod logs directory when there is
    one (`<namespace>_<name>_<uid>`, kubelet's pkg/kubelet/kuberuntime/helpers.go BuildPodLogsDirectory; none of
    the three parts can hold an `_`), else by its UID with no namespace; a container by the first 12 digits of its ID.

    The tier directories and each pod's directory are watched with inotify (`DirectoryWatch`), so the tree is
    listed again only where a cgroup came or went (at most once per call), and in a staggered round every
    `SAFETY_RESCAN_SECONDS`. Where inotify is not available or a directory cannot be watched, the tree is listed
    every `refresh_seconds` instead (also while there is no kubepods directory yet: nothing to watch).
    """

    def __init__(
        self,
        cgroup_root: str | Path,
        cgroup_parent: str = "",
        *,
        refresh_seconds: float = 5.0,
        container_rescan_rounds: int = 6,
        watch_factory: Callable[[], DirectoryWatch] | None = DirectoryWatch,
        pod_logs_dir: Path | None = None,
    ) -> None:
        """Polled, pods are looked for every `refresh_seconds`; the containers of a known pod every
        `container_rescan_rounds` refreshes (staggered), those of a new pod at once. `watch_factory` None: polled.
        `pod_logs_dir` None: pods are named by their UID only."""
        self.root = Path(cgroup_root)
        self.pod_logs_dir = pod_logs_dir
        self.parent = cgroup_parent
        self.refresh_seconds = refresh_seconds
        self.container_rescan_rounds = container_rescan_rounds
        self.scans = 0  # listings of the tree: the cost the watch saves
        self._pods: tuple[PodRef, ...] = ()
        self._dirs: dict[str, str] = {}  # uid -> pod directory, of the pods in `_pods`
        self._at = -float("inf")  # the last listing
        self._safety_at = -float("inf")  # the last round of `SAFETY_RESCAN_SECONDS` while watched
        self._round = 0
        self._infos: tuple[tuple[PodRef, ...], dict[str, PodIdentity]] | None = None
        self._watch_factory = watch_factory  # None once the watch failed or was closed: polled for good
        self._watch: DirectoryWatch | None = None  # made at the first `pods()`: no descriptor for an unused object
        self._tiers: tuple[str, ...] = ()  # the watched tier directories
        self._watching = False  # the last listing's tier and pod directories are all watched
        self._relist: frozenset[str] = frozenset()  # pod directories to list again at the next call

    @property
    def watched(self) -> bool:
        """The tree is watched, not polled."""
        return self._watching

    def pods(self) -> tuple[PodRef, ...]:
        now = time.monotonic()
        changed = self._changes()
        if changed is None:
            if now - self._at >= self.refresh_seconds:
                self._rescan(now, None)
        elif changed or now - self._safety_at >= SAFETY_RESCAN_SECONDS:
            self._rescan(now, changed)
        return self._pods

    def close(self) -> None:
        """Release the inotify descriptor; the tree is polled from here on."""
        self._stop_watching(None)

    def _changes(self) -> frozenset[str] | None:
        """The watched directories that changed since the last call and those to list again; None: polled."""
        if self._watch is None and self._watch_factory is not None:
            self._watch = self._watch_factory()
            if not self._watch.available:
                self._stop_watching(self._watch.error or "inotify not available")
        if self._watch is None or not self._watching:
            return None
        changed = self._watch.changed()
        if changed is None:
            self._stop_watching(self._watch.error or "reading inotify failed")
            return None
        return changed | self._relist

    def _rescan(self, now: float, changed: frozenset[str] | None) -> None:
        """List the tree: all of it when the watch is new; watched (`changed` given), the tiers and the changed pod
        directories, and a staggered round `SAFETY_RESCAN_SECONDS` after the last; polled, staggered rounds."""
        self._at = now
        self.scans += 1
        try:
            layout = detect_layout(self.root, self.parent)
        except (OSError, ValueError):
            layout = None
        # The tiers are watched before they are listed: a pod made after the listing is an event for the next call.
        tiers = tuple(d for d, _, _ in tier_dirs(layout)) if layout is not None else ()
        watched = bool(tiers) and self._watch_tiers(tiers)
        known = {p.uid: p for p in self._pods if changed is None or self._dirs.get(p.uid) not in changed}
        if watched and changed is None:  # the watch is new: what it has not seen is listed
            known, rounds = {}, 1
            self._safety_at = now
        elif not watched or now - self._safety_at >= SAFETY_RESCAN_SECONDS:
            self._round += 1
            rounds = self.container_rescan_rounds
            self._safety_at = now
        else:
            rounds = 0  # the pods whose directory changed (left out of `known`) only
        dirs: dict[str, str] = {}
        found = scan_pods(layout, known, self._round, rounds, dirs=dirs) if layout is not None else ()
        if found != self._pods:
            self._pods = found  # a new tuple only on change: the collector's fast path is `pods is` the last one
        self._dirs = dirs
        self._watching = watched and self._watch_pods(dirs)

    def _watch_tiers(self, tiers: tuple[str, ...]) -> bool:
        """Watch the tier directories; False (polled) without a watch, or if the kubepods directory (the first
        tier, whose events tell when the others appear) cannot be watched."""
        watch = self._watch
        if watch is None:
            return False
        for path in set(self._tiers) - set(tiers):  # another layout than at the last listing
            watch.unwatch(path)
        self._tiers = tiers
        for i, path in enumerate(tiers):
            if not watch.watch(path) and (watch.error is not None or i == 0):
                if watch.error is not None:
                    self._stop_watching(watch.error)
                return False
        return True

    def _watch_pods(self, dirs: Mapping[str, str]) -> bool:
        """Watch the pod directories of the listing, and no others. A new one was listed before it was watched: a
        container made in between raised no event, so it is listed again at the next call."""
        watch = self._watch
        if watch is None:
            return False
        watched = watch.watched
        for path in watched.difference(dirs.values(), self._tiers):  # gone (if deleted, the kernel dropped the watch)
            watch.unwatch(path)
        new = [path for path in dirs.values() if path not in watched]
        for path in new:
            if not watch.watch(path) and watch.error is not None:
                self._stop_watching(watch.error)
                return False
        self._relist = frozenset(new)
        return True

    def _stop_watching(self, reason: str | None) -> None:
        """Poll from here on, for good: a watch that failed once (e.g. at fs.inotify.max_user_watches) would fail
        again, and polling is what the agent did before it had the watch."""
        if reason is not None:
            log.info("cgroup pod discovery: %s; listing the kubepods tree every %gs", reason, self.refresh_seconds)
        if self._watch is not None:
            self._watch.close()
        self._watch = self._watch_factory = None
        self._watching = False
        self._tiers = ()
        self._relist = frozenset()

    def infos(self) -> dict[str, PodIdentity]:
        """Built once per pod list (asked for at every scrape)."""
        pods = self.pods()
        if self._infos is not None and self._infos[0] is pods:
            return self._infos[1]
        names = pod_log_names(self.pod_logs_dir) if self.pod_logs_dir is not None and pods else {}
        out = {}
        for ref in pods:
            namespace, name = names.get(ref.uid, ("", ref.name))
            meta = {"uid": ref.uid, "name": name} | ({"namespace": namespace} if namespace else {})
            out[ref.uid] = PodIdentity.from_pod({"metadata": meta, "status": {"qosClass": str(ref.qos)}})
        self._infos = (pods, out)
        return out


def pod_log_names(pod_logs_dir: Path) -> dict[str, tuple[str, str]]:
    """UID -> (namespace, name) from the kubelet's pod log directories; {} when there are none or they cannot be
    read (the pods keep their UIDs). Entries that are not `<namespace>_<name>_<uid>` are passed over."""
    out: dict[str, tuple[str, str]] = {}
    try:
        with os.scandir(pod_logs_dir) as entries:
            for i, entry in enumerate(entries):
                if i >= MAX_POD_LOG_DIRS:
                    break
                parts = entry.name.split("_")
                if len(parts) == 3 and all(parts) and valid_pod_uid(parts[2]):
                    out[parts[2]] = (parts[0], parts[1])
    except OSError:
        return {}
    return out


def _listdir(path: str) -> list[str]:
    """The names in `path`, files too: the patterns they are matched with (pod slices, container scopes, 64 hex
    digits) match no cgroup interface file, and a cgroup directory holds ~60 of those."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def tier_dirs(layout: CgroupLayout) -> tuple[tuple[str, KubeQoSClass, re.Pattern[str]], ...]:
    """The directories each QoS tier's pods are in, the kubepods directory itself (the guaranteed tier's) first,
    with the pattern of a pod directory's name there."""
    base = layout.cpuacct
    if layout.driver is CgroupDriver.CGROUPFS:
        return tuple((os.path.join(base, tier) if tier else base, qos, _CGROUPFS_POD) for tier, qos in _TIERS)
    return tuple(
        (os.path.join(base, f"kubepods-{tier}.slice") if tier else base, qos, _SYSTEMD_POD) for tier, qos in _TIERS
    )


def scan_pods(
    layout: CgroupLayout,
    known: Mapping[str, PodRef] | None = None,
    round_: int = 0,
    rescan_rounds: int = 1,
    *,
    dirs: dict[str, str] | None = None,
) -> tuple[PodRef, ...]:
    """The pods under the kubepods tree. With the pods `known` from an earlier scan, a pod's container
    directories are listed again only every `rescan_rounds` rounds (staggered by position): listing them is
    most of a scan's cost, and a restarted container is found at the latest that much later. `rescan_rounds` 0:
    never (the caller knows which pods changed and left them out of `known`). `dirs` gets each pod's directory."""
    pods: list[PodRef] = []
    for tier_dir, qos, pattern in tier_dirs(layout):
        for name in _listdir(tier_dir):
            match = pattern.fullmatch(name)
            if match is None:
                continue
            uid = match.group(1).replace("_", "-")
            pod_dir = os.path.join(tier_dir, name)
            if dirs is not None:
                dirs[uid] = pod_dir
            seen = known.get(uid) if known else None
            if seen is not None and seen.qos is qos and (not rescan_rounds or (len(pods) + round_) % rescan_rounds):
                pods.append(seen)
                continue
            containers = []
            for child in _listdir(pod_dir):
                scope = _SCOPE.fullmatch(child)
                if scope is not None:
                    runtime, digest = _SCOPE_RUNTIME[scope.group(1)], scope.group(2)
                else:
                    bare = _BARE.fullmatch(child)
                    if bare is None:
                        continue
                    runtime, digest = ("cri-o" if bare.group(1) else "containerd"), bare.group(2)
                containers.append(ContainerRef(digest[:12], f"{runtime}://{digest}"))
            pods.append(PodRef(uid=uid, namespace="", name=uid, qos=qos, containers=tuple(containers)))
    return tuple(pods)


# ------------------------------------------------------------------------------------------------ standalone
SERVICE_ACCOUNT_TOKEN = SERVICE_ACCOUNT_DIR / "token"


def _service_account_token() -> str | None:
    try:
        return SERVICE_ACCOUNT_TOKEN.read_text().strip() or None  # a few bytes of tmpfs: not worth a thread
    except OSError:
        return None


class LocalPods:
    """Standalone (no API server): the pods of this machine's cgroup tree, named by the kubelet's pod list while
    it answers (`GET <kubelet_url>/pods`: namespace, name, QoS, container IDs), else by their UID.

    An https URL sends the service account token when there is one (the kubelet's authenticated port)."""

    def __init__(
        self,
        discovery: CgroupPodDiscovery,
        kubelet_url: str = "",
        *,
        refresh_seconds: float = 10.0,
        timeout_seconds: float = 2.0,
    ) -> None:
        self.discovery = discovery
        self.kubelet_url = kubelet_url.rstrip("/")
        self.refresh_seconds = refresh_seconds
        self.timeout_seconds = timeout_seconds
        self._refs: tuple[PodRef, ...] | None = None  # from the kubelet, while it answers
        self._infos: dict[str, PodIdentity] = {}
        self._state = ""  # "", "ok" or "failing": logged on change

    @property
    def from_kubelet(self) -> bool:
        return self._refs is not None

    def pods(self) -> tuple[PodRef, ...]:
        return self._refs if self._refs is not None else self.discovery.pods()

    def infos(self) -> dict[str, PodIdentity]:
        return self._infos if self._refs is not None else self.discovery.infos()

    def apply(self, pod_list: Mapping[str, Any]) -> None:
        """Take a kubelet `PodList`."""
        refs: list[PodRef] = []
        infos: dict[str, PodIdentity] = {}
        for pod in pod_list.get("items") or []:
            ref = pod_ref(pod)
            if ref is None:
                continue
            refs.append(ref)
            infos[ref.uid] = PodIdentity.from_pod(pod)
        refs.sort(key=lambda r: r.uid)
        if self._refs is None or tuple(refs) != self._refs:
            self._refs = tuple(refs)
        self._infos = infos

    async def fetch(self) -> None:
        import asyncio

        self.apply(await asyncio.to_thread(self._get_pod_list))

    def _get_pod_list(self) -> Any:
        """GET <kubelet>/pods (on a worker thread). urllib, not aiohttp: a standalone agent has no other HTTP
        client to share (aiohttp would be ~10 MiB resident), and urllib is imported only once a kubelet is asked."""
        import json
        import urllib.request

        if not self.kubelet_url.startswith(("http://", "https://")):
            raise ValueError(f"kubelet URL {self.kubelet_url!r} is not http(s)")  # urllib would also open file:
        request = urllib.request.Request(f"{self.kubelet_url}/pods", headers={"Accept": "application/json"})
        if self.kubelet_url.startswith("https:") and (token := _service_account_token()):
            request.add_header("Authorization", f"Bearer {token}")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the node's kubelet: no proxy
        with opener.open(request, timeout=self.timeout_seconds) as response:  # raises on non-2xx
            return json.load(response)

    async def run(self) -> None:
        import asyncio

        if not self.kubelet_url:
            await asyncio.Event().wait()  # nothing to ask: a task that ends would read as a crash
        while True:
            try:
                await self.fetch()
            except Exception as exc:  # no kubelet, read-only port off, not authorised: name pods by UID
                if self._state != "failing":
                    log.info(
                        "kubelet pod list at %s not available (%s); pods are named by their cgroup's UID",
                        self.kubelet_url,
                        exc,
                    )
                    self._state = "failing"
                self._refs = None
            else:
                if self._state != "ok":
                    log.info("pods named by the kubelet's pod list at %s", self.kubelet_url)
                    self._state = "ok"
            await asyncio.sleep(self.refresh_seconds)
