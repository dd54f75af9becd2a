"""LIST + WATCH of one resource into an in-memory store of plain dicts.

Paginated LIST, then WATCH from the list's resourceVersion with bookmarks; a 410
(resourceVersion too old) or a broken stream re-lists and emits the difference as
events, so consumers see every change exactly once per state. When the API server
goes away the reflector keeps its store, backs off with jitter and logs once per state
change, not once per attempt.

One object never stops the watch: a document nested too deep to decode arrives with the deep part
cut (`common.kube.http.PrunedJSON`) and its object is reported as malformed; a handler that raises
on an object reports that object. A watch that cannot make progress (failing lists or watches for
`STALL_SECONDS`) shows in `loadline_kube_watch_failing_seconds` and in `stalled()`, which the
components' /readyz and /healthz read.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from prometheus_client import Counter, Gauge

from common.api.malformed import MalformedObjectError, MalformedReason
from common.kube.http import JSON, MAX_JSON_DEPTH, KubeError, KubeHTTP, PrunedJSON
from common.kube.malformed import MalformedObjects

log = logging.getLogger("loadline.reflector")

EventType = Literal["ADDED", "MODIFIED", "DELETED"]
Handler = Callable[[EventType, JSON, JSON | None], None]

WATCH_ERRORS = Counter("loadline_kube_watch_errors_total", "List/watch failures by resource", ["resource"])
RELISTS = Counter("loadline_kube_relists_total", "Full re-lists by resource", ["resource"])
HANDLER_ERRORS = Counter("loadline_kube_handler_errors_total", "Event handlers that raised, by resource", ["resource"])
OBJECTS = Gauge("loadline_kube_objects", "Objects held in the reflector's store", ["resource"])
FAILING_SECONDS = Gauge(
    "loadline_kube_watch_failing_seconds",
    "Seconds since the list/watch of a resource last made progress while it keeps failing (0: healthy)",
    ["resource"],
)

# Relists after a failure wait INITIAL_BACKOFF_SECONDS, doubling to the reflector's max, each times a jitter in
# [0.5, 1.5) so that every process of a cluster does not re-list together after an API server restart.
INITIAL_BACKOFF_SECONDS = 0.5
# A watch failing this long without progress is stalled: an API server restart or a leader change takes seconds,
# a minute of nothing is a component that serves stale state.
STALL_SECONDS = 60.0
# /readyz fails at STALL_SECONDS (stop routing to a component that serves stale state); /healthz later, so that a
# restart (a fresh connection, fresh caches) is the remedy only when waiting has not helped.
LIVENESS_STALL_SECONDS = 5 * STALL_SECONDS

# Objects reported by the reflectors of this process (decode failures, handlers that raised): one log line and one
# count per object version, whichever reflector sees it.
UNREADABLE = MalformedObjects()


# CPython's cyclic garbage collector runs its youngest generation every 700 allocations, and the older ones
# over everything that survived: an informer's cache is hundreds of thousands of decoded dicts and lists,
# scanned again and again although they hold no cycles (refcounting frees them). Decoding and storing a list
# of 3,000 kwok nodes spent about half its CPU in the collector at the default threshold and a fifth at 50,000;
# re-storing them (watch updates) half at the default, a tenth at 50,000 once they were frozen.
GC_YOUNG_THRESHOLD = 50_000


def relax_gc_for_caches() -> None:
    """Call at the start of a process whose informers will hold large caches."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(GC_YOUNG_THRESHOLD, young), middle, old)


# Even at that threshold, the initial lists of 5,000 nodes, 5,000 pods and 5,000 NodeMetrics took ~20 collections,
# the older generations' walking the growing caches again each time: 0.65 s of the scheduler's 3.6 CPU-seconds from
# start to its first binding. Objects made while the lists come in are almost all the caches themselves, about to be
# frozen anyway, so the collector waits for the freeze; `INITIAL_GC_PAUSE_SECONDS` bounds the wait for an API server
# that does not answer (a retrying reflector makes garbage cycles: exceptions and their tracebacks).
INITIAL_GC_PAUSE_SECONDS = 60.0


def pause_gc_until_frozen(loop: asyncio.AbstractEventLoop) -> None:
    """Call at the start of a process, before its informers list, and call `freeze_cache_objects` once they are
    synced: the cyclic collector is off until then, or for `INITIAL_GC_PAUSE_SECONDS` at most."""
    gc.disable()
    loop.call_later(INITIAL_GC_PAUSE_SECONDS, gc.enable)


def freeze_cache_objects() -> None:
    """Call once the caches are synced: what exists then (modules, the initial lists) moves to the collector's
    permanent generation and is not scanned again. It is still freed by refcounting when replaced; only a
    cycle among these objects would stay (the caches' JSON holds none). A collector paused by
    `pause_gc_until_frozen` runs again from here."""
    gc.freeze()
    gc.enable()


def stalled_watch(reflectors: Iterable[Reflector], after_seconds: float = STALL_SECONDS) -> str | None:
    """The first of `reflectors` failing for `after_seconds` without progress, as a probe's answer; or None."""
    return next((problem for r in reflectors if (problem := r.stalled(after_seconds)) is not None), None)


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


class Reflector:
    def __init__(
        self,
        http: KubeHTTP,
        path: str,
        *,
        name: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        page_size: int = 500,
        watch_timeout_seconds: int = 300,
        max_backoff_seconds: float = 30.0,
    ) -> None:
        self.http = http
        self.path = path
        self.name = name or path.rsplit("/", 1)[-1]
        WATCH_ERRORS.labels(self.name)  # 0 from the start: a panel or rate() shows 0 rather than no data
        self.selectors: dict[str, str] = {}
        if field_selector:
            self.selectors["fieldSelector"] = field_selector
        if label_selector:
            self.selectors["labelSelector"] = label_selector
        self.page_size = page_size
        self.watch_timeout_seconds = watch_timeout_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self.store: dict[str, JSON] = {}
        self.synced = asyncio.Event()
        self.resource_version = ""
        self._handlers: list[Handler] = []
        self._healthy = True
        self.kind = self.name  # the object kind for malformed-object reports, from the first list's answer
        self._backoff = INITIAL_BACKOFF_SECONDS
        self._failing_since: float | None = None
        self._last_error = ""
        self._running = False

    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def _emit(self, kind: EventType, obj: JSON, old: JSON | None, *, pruned: bool = False) -> None:
        """Hand the event to every handler; `pruned`: this version was reported as too deep already."""
        failed = pruned
        for handler in self._handlers:
            try:
                handler(kind, obj, old)
            except Exception as exc:  # this object's problem (or a consumer's bug): never the watch's
                HANDLER_ERRORS.labels(self.name).inc()
                failed = True
                if UNREADABLE.report(self._kind_of(obj), object_key(obj), obj, exc):
                    log.exception("handler failed for %s %s", kind, object_key(obj))
        if kind == "DELETED" or not failed:
            UNREADABLE.clear(self._kind_of(obj), object_key(obj))  # (forgets a deleted or fixed object)

    def _kind_of(self, obj: JSON) -> str:
        kind = obj.get("kind")
        return kind if isinstance(kind, str) and kind else self.kind

    def _report_pruned(self, obj: JSON) -> None:
        depth = MalformedObjectError(
            f"nested deeper than {MAX_JSON_DEPTH} levels: the deeper part is ignored",
            reason=MalformedReason.TOO_DEEP,
        )
        UNREADABLE.report(self._kind_of(obj), object_key(obj), obj, depth)

    async def _list(self) -> None:
        items: dict[str, JSON] = {}
        pruned: set[str] = set()
        params: dict[str, str | int] = {**self.selectors, "limit": self.page_size}
        while True:
            page = await self.http.get(self.path, **params)
            listed = page.get("kind")
            if isinstance(listed, str) and listed.endswith("List") and self.kind == self.name:
                self.kind = listed[: -len("List")]
            for item in page.get("items") or []:
                items[object_key(item)] = item
            if isinstance(page, PrunedJSON):
                for index in sorted({path[1] for path in page.pruned if len(path) > 1 and path[0] == "items"}):
                    self._report_pruned(page["items"][index])
                    pruned.add(object_key(page["items"][index]))
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                self.resource_version = str(meta.get("resourceVersion", ""))
                break
            params["continue"] = meta["continue"]
        previous, self.store = self.store, items
        for key, obj in items.items():
            old = previous.get(key)
            if old is None:
                self._emit("ADDED", obj, None, pruned=key in pruned)
            elif (old.get("metadata") or {}).get("resourceVersion") != (obj.get("metadata") or {}).get(
                "resourceVersion"
            ):
                self._emit("MODIFIED", obj, old, pruned=key in pruned)
        for key in previous.keys() - items.keys():
            self._emit("DELETED", previous[key], None)
        OBJECTS.labels(self.name).set(len(self.store))
        self.synced.set()

    async def _watch(self) -> None:
        params: dict[str, str | int] = {
            **self.selectors,
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": self.watch_timeout_seconds,
        }
        async for event in self.http.watch_lines(
            self.path, params, read_timeout_seconds=self.watch_timeout_seconds + 30
        ):
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                code = obj.get("code")
                raise KubeError(int(code) if isinstance(code, int) else 500, str(obj.get("reason")), obj)
            self._progress()  # (an ERROR, a 410 above all, is none: re-lists after one back off until an event)
            pruned = isinstance(event, PrunedJSON) and any(path[0] == "object" for path in event.pruned)
            if pruned:
                self._report_pruned(obj)
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:
                self.resource_version = str(rv)
            if kind == "BOOKMARK":
                continue
            key = object_key(obj)
            old = self.store.get(key)
            if kind == "DELETED":
                self.store.pop(key, None)
                self._emit("DELETED", obj, None)
            elif kind in ("ADDED", "MODIFIED"):
                self.store[key] = obj
                self._emit("MODIFIED" if old is not None else "ADDED", obj, old, pruned=pruned)
            OBJECTS.labels(self.name).set(len(self.store))

    def _progress(self) -> None:
        """The API server answered with data: the watch is alive and the next failure backs off afresh."""
        self._failing_since = None
        self._backoff = INITIAL_BACKOFF_SECONDS

    def failing_seconds(self) -> float:
        """Seconds since the last progress while the watch keeps failing; 0 when it works."""
        if self._failing_since is None:
            return 0.0
        return max(0.0, asyncio.get_running_loop().time() - self._failing_since)

    def stalled(self, after_seconds: float = STALL_SECONDS) -> str | None:
        """Why this watch is not making progress, or None."""
        failing = self.failing_seconds()
        if self._failing_since is None or failing < after_seconds:
            return None
        return f"watch of {self.name} failing for {failing:.0f}s: {self._last_error}"

    def _state(self, healthy: bool, detail: str = "") -> None:
        if healthy != self._healthy:
            if healthy:
                log.info("watch of %s recovered", self.name)
            else:
                log.warning("watch of %s failing, retrying with backoff: %s", self.name, detail)
            self._healthy = healthy

    async def _failed(self, detail: str) -> None:
        """Count, log once per state change, wait the jittered backoff and double it (up to the maximum)."""
        WATCH_ERRORS.labels(self.name).inc()
        self._last_error = detail
        if self._failing_since is None:
            self._failing_since = asyncio.get_running_loop().time()
        self._state(False, detail)
        await asyncio.sleep(self._backoff * (0.5 + random.random()))
        self._backoff = min(self._backoff * 2, self.max_backoff_seconds)

    async def run(self) -> None:
        """Forever: list, then watch; re-list on 410 or after a failure (with jittered exponential backoff)."""
        FAILING_SECONDS.labels(self.name).set_function(lambda: self.failing_seconds() if self._running else 0.0)
        self._running = True
        need_list = True
        try:
            while True:
                try:
                    if need_list:
                        RELISTS.labels(self.name).inc()
                        await self._list()
                        need_list = False
                        self._failing_since = None  # fresh data; the backoff resets only once the watch delivers
                        self._state(True)  # the API server answers again: say so now, not when the watch ends
                    await self._watch()
                    self._failing_since = None  # the server ended the watch at its timeout: watch again from here
                except KubeError as exc:
                    need_list = True
                    if exc.is_gone:  # our resourceVersion is too old: the store is re-synced by a list
                        if self._backoff > INITIAL_BACKOFF_SECONDS:  # gone again before any progress
                            await asyncio.sleep(self._backoff * (0.5 + random.random()))
                        self._backoff = min(self._backoff * 2, self.max_backoff_seconds)
                        continue
                    await self._failed(str(exc))
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # a stream or an answer that cannot be read: count, back off, re-list
                    need_list = True
                    await self._failed(f"{type(exc).__name__}: {exc}")
        finally:
            self._running = False
            self._failing_since = None  # stopped (a CRD uninstalled, leadership lost): not failing
