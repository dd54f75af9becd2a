"""Extension points of the scheduling framework as typing.Protocols.

Differences from kube-scheduler's Go interfaces, all for speed in Python:
* Filter and Score take the whole candidate set (an array of snapshot rows) and answer
  with arrays, instead of one call per node.
* A Filter answers with a `FilterResult`: a feasibility mask over the candidates plus,
  per reason, the mask of the nodes rejected for it.
* PreBind and Bind are coroutines (they talk to the API server); everything in the
  scheduling cycle is synchronous and runs serially.

A plugin implements any subset; the framework finds them with isinstance checks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from scheduler_plugin.framework.clock import Clock
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.filterresult import FilterResult
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import IndexArray, IntArray, Snapshot
from scheduler_plugin.framework.status import Status
from scheduler_plugin.framework.stores import ObjectStore

if TYPE_CHECKING:
    from scheduler_plugin.framework.diagnosis import Diagnosis
    from scheduler_plugin.framework.waiting_pods import WaitingPod

MAX_NODE_SCORE = 100
MIN_NODE_SCORE = 0
MAX_PERMIT_TIMEOUT_SECONDS = 15 * 60  # kube-scheduler's maxTimeout for Permit waits


# --------------------------------------------------------------------------- results
@dataclass(frozen=True, slots=True)
class PreFilterResult:
    """Nodes a PreFilter allows; None means all nodes. Results of several plugins are intersected."""

    node_names: frozenset[str] | None = None

    def merge(self, other: PreFilterResult | None) -> PreFilterResult:
        if other is None or other.node_names is None:
            return self
        if self.node_names is None:
            return other
        return PreFilterResult(self.node_names & other.node_names)


@dataclass(frozen=True, slots=True)
class PostFilterResult:
    nominated_node_name: str = ""


@dataclass(slots=True)
class QueuedPodInfo:
    """A pod as the scheduling queue holds it."""

    pod: PodInfo
    timestamp: float  # when it (re-)entered the queue
    initial_attempt_timestamp: float | None = None
    attempts: int = 0
    unschedulable_plugins: set[str] = field(default_factory=set)


# --------------------------------------------------------------------------- handle
class WaitingPods(Protocol):
    """Pods parked in Permit; plugins allow or reject them by pod key."""

    def get(self, key: str) -> WaitingPod | None: ...

    def allow(self, key: str, plugin: str) -> bool: ...

    def reject(self, key: str, plugin: str, message: str) -> bool: ...

    def __iter__(self) -> Iterator[WaitingPod]: ...

    def __len__(self) -> int: ...


class Binder(Protocol):
    """Binds a pod to a node (the API server's pods/binding in the scheduler process)."""

    async def bind(self, pod: PodInfo, node_name: str) -> Status: ...


class ObjectAPI(Protocol):
    """The API server as a plugin that writes objects sees it (VolumeBinding's PreBind writes PV claimRefs and
    claims' selected-node). The scheduler gives its client (`common.kube.http.KubeHTTP`); failures raise
    `common.kube.http.KubeError`."""

    async def get(self, path: str) -> dict[str, Any]: ...

    async def replace(self, path: str, body: Any) -> dict[str, Any]: ...


class FrameworkHandle(Protocol):
    """What plugins get at construction: the cluster view, time, waiting pods, the binder, the API."""

    @property
    def profile_name(self) -> str: ...

    @property
    def snapshot(self) -> Snapshot: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def waiting_pods(self) -> WaitingPods: ...

    @property
    def binder(self) -> Binder: ...

    @property
    def api(self) -> ObjectAPI | None:
        """The API server for plugins that write objects (None in process: tests, benchmarks, the simulator)."""
        ...

    def run_filter_plugins_except(
        self, plugin_name: str, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray
    ) -> IndexArray:
        """Candidates that pass every other Filter plugin (for decisions about a whole gang)."""
        ...

    def run_filters(
        self,
        state: CycleState,
        pod: PodInfo,
        snap: Snapshot,
        candidates: IndexArray,
        diagnosis: Diagnosis | None = None,
        *,
        excluding: str = "",
    ) -> tuple[IndexArray, Status]:
        """The candidates every Filter plugin passes (Error status: a plugin failed)."""
        ...

    def run_pre_filter_extension_add_pods(
        self, state: CycleState, pod: PodInfo, snap: Snapshot, rows: IndexArray, pods: Sequence[PodInfo]
    ) -> Status:
        """Simulate `pods[i]` running on node row `rows[i]` in the PreFilter plugins' cycle state."""
        ...

    def run_pre_filter_extension_remove_pods(
        self, state: CycleState, pod: PodInfo, snap: Snapshot, rows: IndexArray, pods: Sequence[PodInfo]
    ) -> Status:
        """Simulate `pods[i]` leaving node row `rows[i]` (preemption removing victims)."""
        ...


# --------------------------------------------------------------------------- plugins
@runtime_checkable
class Plugin(Protocol):
    @property
    def name(self) -> str: ...


@runtime_checkable
class QueueSortPlugin(Plugin, Protocol):
    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool: ...


@runtime_checkable
class QueueSortKeyPlugin(QueueSortPlugin, Protocol):
    def sort_key(self, queued: QueuedPodInfo) -> tuple[Any, ...]:
        """A key ordered exactly like `less`; lets the queue's heap compare tuples in C."""
        ...


@runtime_checkable
class PreEnqueuePlugin(Plugin, Protocol):
    def pre_enqueue(self, pod: PodInfo) -> Status: ...


@runtime_checkable
class PreFilterPlugin(Plugin, Protocol):
    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        """Return Skip to skip this plugin's Filter for the cycle; a rejection fails the pod for the cycle."""
        ...


@runtime_checkable
class PreFilterExtensions(PreFilterPlugin, Protocol):
    """A PreFilter whose Filter depends on the pods on nodes (kube-scheduler's AddPod/RemovePod),
    vectorised: `pods[i]` is added to (removed from) node row `rows[i]`; a row may repeat.

    Preemption and nominated pods simulate a changed cluster through these; the plugin keeps
    the change in its cycle state (as a `StateData`, so a cloned state carries its own copy)
    and its Filter applies it, without a new PreFilter. The snapshot itself never changes.
    """

    def add_pods(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: IndexArray,
                 pods: Sequence[PodInfo]) -> Status: ...

    def remove_pods(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: IndexArray,
                    pods: Sequence[PodInfo]) -> Status: ...


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> FilterResult: ...


@runtime_checkable
class PostFilterPlugin(Plugin, Protocol):
    def post_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, diagnosis: Diagnosis
    ) -> tuple[PostFilterResult | None, Status]: ...


@runtime_checkable
class PreScorePlugin(Plugin, Protocol):
    def pre_score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> Status: ...


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    def score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> IntArray:
        """One integer score per candidate; in 0..100 unless the plugin also normalises."""
        ...


@runtime_checkable
class NormalizeScorePlugin(Plugin, Protocol):
    def normalize_score(self, state: CycleState, pod: PodInfo, scores: IntArray) -> IntArray:
        """Map raw scores to 0..100 (kube-scheduler's ScoreExtensions)."""
        ...


@runtime_checkable
class ReservePlugin(Plugin, Protocol):
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status: ...

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """Must be idempotent; may be called without a prior Reserve."""
        ...


@runtime_checkable
class PermitPlugin(Plugin, Protocol):
    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        """(Success | rejection | Wait, timeout seconds when waiting)."""
        ...


@runtime_checkable
class PreBindPlugin(Plugin, Protocol):
    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status: ...


@runtime_checkable
class BindPlugin(Plugin, Protocol):
    async def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Skip lets the next Bind plugin try; the first non-Skip answer wins."""
        ...


@runtime_checkable
class PostBindPlugin(Plugin, Protocol):
    def post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None: ...


WakeScope = Literal["cluster", "gang"]


@dataclass(frozen=True, slots=True)
class WatchedResource:
    """An API resource a plugin reads besides nodes and pods (as Koordinator's LoadAware starts its
    NodeMetric informer). The scheduler and the extender list and watch every resource their
    enabled plugins declare, hand each object to the plugin's `store` (`Snapshot.store(store)`)
    and report a change as the cluster event `event`. A resource without a store is kept as it
    came, in `Snapshot.custom_objects[kind]` by "namespace/name" or name."""

    kind: str
    group: str
    version: str
    plural: str
    event: str
    store: Callable[[Snapshot], ObjectStore] | None = None
    # How a change of one object wakes pending pods. "cluster": `event` is reported as a cluster event
    # (the unschedulable pods a plugin registered for it are moved). "gang": only the pods of the gang
    # the object describes, by its "namespace/name" (`ClusterListener.gang_changed`: a PodGroup); its
    # store keeps the last readable version of a malformed object, so that version wakes nobody.
    wakes: WakeScope = "cluster"


@runtime_checkable
class WatchingPlugin(Plugin, Protocol):
    def watched_resources(self) -> Sequence[WatchedResource]: ...


def watched_by(plugins: Iterable[Plugin]) -> list[WatchedResource]:
    """The resources the plugins declare, each once, in the order first declared."""
    out: dict[tuple[str, str, str], WatchedResource] = {}
    for plugin in plugins:
        if isinstance(plugin, WatchingPlugin):
            for resource in plugin.watched_resources():
                out.setdefault((resource.group, resource.version, resource.plural), resource)
    return list(out.values())


@runtime_checkable
class EnqueueExtensions(Plugin, Protocol):
    def events_to_register(self) -> frozenset[str]:
        """The cluster events (`framework.events`) that can make a pod this plugin rejected schedulable
        (kube-scheduler's EventsToRegister). A plugin without it is woken by every event."""
        ...


@runtime_checkable
class QueueingHintPlugin(EnqueueExtensions, Protocol):
    def queueing_hint(self, event: str, pending: PodInfo, changed: PodInfo | None, old: PodInfo | None) -> bool:
        """Whether `event` about a pod (`changed`, `old` its previous version; one may be None) may make `pending`,
        which this plugin rejected, schedulable (kube-scheduler's QueueingHintFn; False is its QueueSkip). Asked
        only for the registered events that name a pod; without it every such event moves the pod."""
        ...


@runtime_checkable
class SnapshotSyncPlugin(Plugin, Protocol):
    def sync_snapshot(self, snapshot: Snapshot) -> None:
        """Bring the plugin's caches up to date with the snapshot (called by `Framework.warm_up`)."""
        ...


EXTENSION_POINTS: dict[str, object] = {  # config name -> runtime-checkable Protocol
    "queueSort": QueueSortPlugin,
    "preEnqueue": PreEnqueuePlugin,
    "preFilter": PreFilterPlugin,
    "filter": FilterPlugin,
    "postFilter": PostFilterPlugin,
    "preScore": PreScorePlugin,
    "score": ScorePlugin,
    "reserve": ReservePlugin,
    "permit": PermitPlugin,
    "preBind": PreBindPlugin,
    "bind": BindPlugin,
    "postBind": PostBindPlugin,
}


def default_normalize_score(scores: IntArray, reverse: bool = False) -> IntArray:
    """kube-scheduler's DefaultNormalizeScore: scale so the highest becomes 100 (integer division)."""
    top = int(scores.max()) if scores.size else 0
    if top == 0:
        return np.full_like(scores, MAX_NODE_SCORE) if reverse else scores
    out = MAX_NODE_SCORE * scores // top
    return MAX_NODE_SCORE - out if reverse else out


def as_int_array(values: NDArray[np.integer] | Sequence[int]) -> IntArray:
    return np.asarray(values, dtype=np.int64)
