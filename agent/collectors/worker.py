"""One daemon thread that runs a collector's blocking calls (NVML, netlink dumps) off the event loop.

Why not `asyncio.to_thread` or a ThreadPoolExecutor: their threads are joined at interpreter exit, so one
NVML call stuck on a GPU that fell off the bus would keep the agent from exiting. A daemon thread is not
waited for. One thread per collector also serialises its calls (NVML handles are used from one thread)
and keeps a slow source from occupying the loop's shared default executor.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

_STOP = object()


class BlockingWorker:
    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._busy: Future[Any] | None = None

    @property
    def busy(self) -> bool:
        """True while an earlier call has not finished (e.g. it outlived the caller's timeout)."""
        return self._busy is not None and not self._busy.done()

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
        self._busy = future
        self._queue.put((future, fn, args))
        return future

    async def run(self, fn: Callable[..., T], *args: Any, wait_seconds: float) -> T:
        """Run `fn(*args)` on the worker thread and await it for at most `wait_seconds`.

        If the wait ends first, the call keeps running (a thread cannot be interrupted): `busy` stays True
        until it returns, and callers should skip work rather than queue more behind it.
        """
        future = self.submit(fn, *args)
        wrapped = asyncio.wrap_future(future)
        done, _ = await asyncio.wait((wrapped,), timeout=wait_seconds)
        if not done:
            wrapped.add_done_callback(_consume)  # a late failure must not be logged as "never retrieved"
            raise TimeoutError(f"{self._name}: blocking call still running after {wait_seconds:g} s")
        return wrapped.result()

    def close(self) -> None:
        self._queue.put(_STOP)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args)
            except BaseException as exc:  # handed to the awaiting side, which decides
                future.set_exception(exc)
            else:
                future.set_result(result)


def _consume(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
