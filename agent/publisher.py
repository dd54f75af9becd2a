"""Writing one NodeMetric per node, the way koordlet does, and surviving an API server that goes away.

- The object is named after the node. If it does not exist it is created (on by default; off when
  Koordinator's manager owns creation, as koordlet expects) with an empty spec, so the manager's
  policy, or our configuration, decides the collect policy.
- The status is written through the status subresource (PUT `/status`) on the last copy we saw (from the
  NodeMetric watch or our previous write), wrapped in a conflict retry that re-reads the object, as
  koordlet's `RetryOnConflict` does. Status fields we do not build (e.g. `prodReclaimableMetric` from
  another writer) are kept.
- Writes pass a client-side token bucket like koordlet's (0.1 QPS, burst 2 by default).
- When the API server is unreachable or rejects the write, the publisher retries with exponential backoff
  and jitter, rebuilding the status on every attempt so that the first write after recovery carries the
  current aggregates. Sampling runs on its own task and never waits for this one. One log line per state
  change (first publish, failing, recovered, waiting for the object), never one per attempt.
- `NodeMetricCache` is the watch of our own NodeMetric(s): it feeds `spec.metricCollectPolicy` changes to the
  reporter and gives the publisher a current resourceVersion without a GET per write.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from common.api.constants import NODEMETRIC_PLURAL, SLO_API_VERSION, SLO_GROUP, SLO_VERSION
from common.kube.http import JSON, KubeError, KubeHTTP, resource_path
from common.kube.reflector import Reflector
from common.ratelimit import TokenBucket, exponential_backoff

log = logging.getLogger("loadline.agent.publisher")

NODEMETRICS_PATH = resource_path(SLO_GROUP, SLO_VERSION, NODEMETRIC_PLURAL)
OWNED_STATUS_FIELDS = frozenset({"updateTime", "nodeMetric", "podsMetric"})
CONFLICT_ATTEMPTS = 5


# ------------------------------------------------------------------------------------------------ cache
class NodeMetricCache:
    """A watch of NodeMetrics (ours only, or every one for the simulator), with per-name listeners."""

    def __init__(self, http: KubeHTTP, *, name: str | None = None, max_backoff_seconds: float = 30.0) -> None:
        self.reflector = Reflector(
            http,
            NODEMETRICS_PATH,
            name="nodemetrics",
            field_selector=f"metadata.name={name}" if name else None,
            max_backoff_seconds=max_backoff_seconds,
        )
        self._listeners: dict[str, list[Callable[[JSON | None], None]]] = {}
        self.reflector.add_handler(self._on_event)

    def get(self, name: str) -> JSON | None:
        return self.reflector.store.get(name)

    @property
    def synced(self) -> bool:
        return self.reflector.synced.is_set()

    def listen(self, name: str, callback: Callable[[JSON | None], None]) -> None:
        """`callback(obj)` on every change of NodeMetric `name` (None when deleted)."""
        self._listeners.setdefault(name, []).append(callback)

    def forget(self, name: str) -> None:
        self._listeners.pop(name, None)

    def _on_event(self, kind: str, obj: JSON, old: JSON | None) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        for callback in self._listeners.get(name, ()):
            callback(None if kind == "DELETED" else obj)

    async def run(self) -> None:
        await self.reflector.run()


def spec_listener(apply_spec: Callable[[Mapping[str, Any] | None], Any]) -> Callable[[JSON | None], None]:
    """Adapt `NodeReporter.apply_spec` to cache events: only the spec matters, and only when it changes."""
    last: list[Any] = [object()]

    def on_change(obj: JSON | None) -> None:
        spec = None if obj is None else obj.get("spec")
        if spec != last[0]:
            last[0] = spec
            apply_spec(spec)

    return on_change


# ------------------------------------------------------------------------------------------------ publisher
@dataclass
class PublishStats:
    """Self-metrics of one node's publisher."""

    node: str
    attempts: int = 0
    successes: int = 0
    errors: dict[str, int] = field(default_factory=dict)  # reason -> count
    last_success_unix: float | None = None
    last_error: str | None = None
    healthy: bool = True
    created: int = 0


# The `reason` label of publish errors; every one is exported from the start (at 0), so a dashboard shows 0,
# not "No data", and rate() works from the first error on.
PUBLISH_ERROR_REASONS = (
    "unreachable",
    "conflict",
    "not_found",
    "forbidden",
    "throttled",
    "rejected",
    "server_error",
    "other",
)


def error_reason(exc: KubeError) -> str:
    """A small fixed vocabulary (`PUBLISH_ERROR_REASONS`) for the `reason` label of publish errors."""
    if exc.status == 0:
        return "unreachable"
    if exc.status == 409:
        return "conflict"
    if exc.status == 404:
        return "not_found"
    if exc.status in (401, 403):
        return "forbidden"
    if exc.status == 429:
        return "throttled"
    if exc.status in (400, 422):
        return "rejected"
    if exc.status >= 500:
        return "server_error"
    return "other"


StatusBuilder = Callable[[], Awaitable[dict[str, Any]] | dict[str, Any]]


class NodeMetricPublisher:
    def __init__(
        self,
        http: KubeHTTP,
        node_name: str,
        build_status: StatusBuilder,
        *,
        interval: Callable[[], float],
        limiter: TokenBucket,
        cache: NodeMetricCache | None = None,
        create: bool = True,
        retry_initial_seconds: float = 1.0,
        retry_max_seconds: float = 10.0,
        request_timeout_seconds: float = 10.0,
        initial_delay_seconds: float | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.http = http
        self.node_name = node_name
        self.path = f"{NODEMETRICS_PATH}/{node_name}"
        self._build_status = build_status
        self.interval = interval
        self.limiter = limiter
        self.cache = cache
        self.create = create
        self.retry_initial_seconds = retry_initial_seconds
        self.retry_max_seconds = retry_max_seconds
        self.request_timeout_seconds = request_timeout_seconds
        self.initial_delay_seconds = initial_delay_seconds
        self.stats = PublishStats(node_name)
        self.last_published: JSON | None = None  # the object as the API server returned it after our write
        self._rng = rng or random.Random()
        self._object: JSON | None = None  # last copy we know (watch or our own write)
        self._state = "starting"  # starting | healthy | failing | missing
        self._failing_since: float | None = None
        self._failed_attempts = 0
        self._wake = asyncio.Event()
        self.published = asyncio.Event()  # set after every successful write (tests, `--simulate` progress)

    # -- state and logging ---------------------------------------------------------------------------
    @property
    def state(self) -> str:
        return self._state

    def _set_state(self, state: str, detail: str = "") -> None:
        previous, self._state = self._state, state
        if state == previous:
            return
        name = self.node_name
        if state == "healthy":
            if previous == "failing" and self._failing_since is not None:
                log.info(
                    "publishing NodeMetric %s recovered after %d failed attempts in %.1fs",
                    name,
                    self._failed_attempts,
                    time.monotonic() - self._failing_since,
                )
            else:
                log.info("published NodeMetric %s", name)
            self._failing_since = None
            self._failed_attempts = 0
        elif state == "failing":
            self._failing_since = time.monotonic()
            log.warning("publishing NodeMetric %s failing, sampling continues, retrying with backoff: %s", name, detail)
        elif state == "missing":
            log.info("NodeMetric %s does not exist and creation is off; waiting for it to be created", name)
        self.stats.healthy = state != "failing"

    def wake(self) -> None:
        """Publish now instead of at the end of the current wait (e.g. the object appeared)."""
        self._wake.set()

    def on_object(self, obj: JSON | None) -> None:
        """A NodeMetric cache event for our object."""
        if obj is None:
            self._object = None
            return
        self._object = obj
        if self._state == "missing":
            self.wake()

    # -- one publish ---------------------------------------------------------------------------------
    async def _current(self) -> JSON | None:
        cached = self.cache.get(self.node_name) if self.cache is not None and self.cache.synced else None
        if cached is not None and _newer(cached, self._object):
            self._object = cached
        if self._object is None:
            try:
                self._object = await self.http.request("GET", self.path, timeout_seconds=self.request_timeout_seconds)
            except KubeError as exc:
                if not exc.is_not_found:
                    raise
        return self._object

    async def _create(self) -> JSON:
        await self.limiter.acquire()
        body: JSON = {
            "apiVersion": SLO_API_VERSION,
            "kind": "NodeMetric",
            "metadata": {"name": self.node_name},
            "spec": {},
        }
        owner = await self._node_owner()
        if owner is not None:
            body["metadata"]["ownerReferences"] = [owner]
        try:
            created = await self.http.request(
                "POST", NODEMETRICS_PATH, body=body, timeout_seconds=self.request_timeout_seconds
            )
        except KubeError as exc:
            if exc.status != 409:  # AlreadyExists: someone else was faster; read theirs
                raise
            created = await self.http.request("GET", self.path, timeout_seconds=self.request_timeout_seconds)
        else:
            self.stats.created += 1
            log.info("created NodeMetric %s", self.node_name)
        return created

    async def _node_owner(self) -> JSON | None:
        """The Node as owner, so the NodeMetric goes when the node does; best effort (RBAC may forbid it)."""
        try:
            node = await self.http.request(
                "GET", f"/api/v1/nodes/{self.node_name}", timeout_seconds=self.request_timeout_seconds
            )
        except KubeError:
            return None
        uid = (node.get("metadata") or {}).get("uid")
        return {"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": uid} if uid else None

    async def publish(self) -> bool:
        """One publish: read (or create) the object, build the status, write it with conflict retries.

        Never raises for API trouble: returns False and leaves the state, stats and log to say why.
        """
        self.stats.attempts += 1
        try:
            obj = await self._current()
            if obj is None:
                if not self.create:
                    self._set_state("missing")
                    return False
                obj = self._object = await self._create()
            for attempt in range(CONFLICT_ATTEMPTS):
                built = self._build_status()
                status = await built if inspect.isawaitable(built) else built
                body = dict(obj)
                kept = {k: v for k, v in (obj.get("status") or {}).items() if k not in OWNED_STATUS_FIELDS}
                body["status"] = {**kept, **status}
                await self.limiter.acquire()
                try:
                    written = await self.http.request(
                        "PUT", f"{self.path}/status", body=body, timeout_seconds=self.request_timeout_seconds
                    )
                except KubeError as exc:
                    if exc.is_conflict and attempt + 1 < CONFLICT_ATTEMPTS:
                        self._count("conflict")
                        await asyncio.sleep(0.01 * (attempt + 1) * (0.5 + self._rng.random()))
                        obj = self._object = await self.http.request(
                            "GET", self.path, timeout_seconds=self.request_timeout_seconds
                        )
                        continue
                    if exc.is_not_found:
                        self._object = None  # deleted under us: next attempt re-creates (or waits)
                    raise
                self._object = written
                self.last_published = written
                self.stats.successes += 1
                self.stats.last_success_unix = time.time()
                self.stats.last_error = None
                self._set_state("healthy")
                self.published.set()
                return True
        except KubeError as exc:
            self._failure(error_reason(exc), exc.message if exc.status else exc.reason)
            return False
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as exc:  # a bug in building the status must not stop the loop
            log.exception("building the NodeMetric status of %s failed", self.node_name)
            self._failure("internal", f"{type(exc).__name__}: {exc}")
            return False
        return False

    def _count(self, reason: str) -> None:
        self.stats.errors[reason] = self.stats.errors.get(reason, 0) + 1

    def _failure(self, reason: str, detail: str) -> None:
        self._count(reason)
        self.stats.last_error = f"{reason}: {detail}"
        self._failed_attempts += 1
        self._set_state("failing", f"{reason}: {detail}")

    def retry_delay(self) -> float:
        """Exponential backoff from the first failure, capped at `retry_max_seconds`, jittered down to half, so
        that the agents of a whole cluster do not retry in step after an outage."""
        exponent = max(self._failed_attempts - 1, 0)
        base = exponential_backoff(self.retry_initial_seconds, exponent, self.retry_max_seconds)
        return base * (0.5 + 0.5 * self._rng.random())

    # -- loop ------------------------------------------------------------------------------------------
    async def _sleep(self, seconds: float) -> None:
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=max(seconds, 0.0))

    async def run(self) -> None:
        """Forever: wait one report interval (koordlet's first report comes after one), publish, repeat."""
        delay = self.interval() if self.initial_delay_seconds is None else self.initial_delay_seconds
        await self._sleep(delay)
        while True:
            started = time.monotonic()
            ok = await self.publish()
            if ok or self._state == "missing":
                delay = self.interval() - (time.monotonic() - started)
            else:
                delay = self.retry_delay()
            await self._sleep(delay)


def _newer(a: JSON, b: JSON | None) -> bool:
    """Is `a` a later version than `b`? resourceVersions are opaque, but etcd's are increasing integers."""
    if b is None:
        return True
    rv_a = (a.get("metadata") or {}).get("resourceVersion")
    rv_b = (b.get("metadata") or {}).get("resourceVersion")
    try:
        return int(str(rv_a)) > int(str(rv_b))
    except (TypeError, ValueError):
        return rv_a != rv_b
