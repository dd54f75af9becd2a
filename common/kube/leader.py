"""Leader election with a coordination.k8s.io Lease, following client-go's rules.

Expiry is judged by *our* clock from when we last saw the Lease change (client-go's
observedTime), so clock skew between replicas does not matter. The holder renews every
`retry_period`; if it cannot renew for `renew_deadline` it stops leading. A standby takes
over once the holder has not renewed for `lease_seconds`.

(kubernetes.aio ships a LeaseLock, but in client 37.0.2 its create call fails argument
validation and the exception escapes the elector, so it never acquires; this module is
the client-go algorithm on our raw-JSON client instead.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

from prometheus_client import Gauge

from common.api.wire import format_time
from common.kube.http import KubeError, KubeHTTP

log = logging.getLogger("loadline.leader")
# The one leadership metric of every component (manager, scheduler, descheduler): label lease names the Lease.
IS_LEADER = Gauge("loadline_leader", "1 while this process holds its Lease", ["lease"])


def default_identity() -> str:
    """Pod name in a cluster (POD_NAME or the hostname) plus a random suffix, so a restart is a new identity."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class LeaderElector:
    def __init__(
        self,
        http: KubeHTTP,
        *,
        name: str,
        namespace: str,
        identity: str | None = None,
        lease_seconds: float = 15,
        renew_deadline_seconds: float = 10,
        retry_period_seconds: float = 2,
        release_on_cancel: bool = True,
    ) -> None:
        if not lease_seconds > renew_deadline_seconds > retry_period_seconds > 0:
            raise ValueError("leader election needs lease_seconds > renew_deadline_seconds > retry_period_seconds > 0")
        self.http = http
        self.name = name
        self.namespace = namespace
        self.identity = identity or default_identity()
        self.lease_seconds = lease_seconds
        self.renew_deadline_seconds = renew_deadline_seconds
        self.retry_period_seconds = retry_period_seconds
        self.release_on_cancel = release_on_cancel
        self.is_leader = False
        self.became_leader = asyncio.Event()
        self._observed: tuple[Any, ...] | None = None
        self._failing: str | None = None  # last failure logged, so each state change is logged once
        self._observed_at = 0.0
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        IS_LEADER.labels(name).set(0)  # a standby shows 0 from the start, not "no data"

    async def _try_acquire_or_renew(self) -> bool:
        now = format_time(datetime.now(UTC), micro=True)
        try:
            lease = await self.http.get(self._path)
        except KubeError as exc:
            if not exc.is_not_found:
                self._note_failure(f"reading the Lease failed: {exc}")
                return False
            spec: dict[str, Any] = {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_seconds),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            }
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": spec,
            }
            try:
                await self.http.create(self._path.rsplit("/", 1)[0], body)
            except KubeError as create_error:
                if not create_error.is_conflict:  # a conflict is a rival winning the race: normal
                    self._note_failure(f"creating the Lease failed: {create_error}")
                return False
            self._note_failure(None)
            self._observe(spec)
            return True

        spec = lease.get("spec") or {}
        self._observe(spec)
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.lease_seconds)
        if holder and holder != self.identity and time.monotonic() < self._observed_at + duration:
            return False  # someone else holds an unexpired lease
        if holder != self.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec.update(
            {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.lease_seconds), "renewTime": now}
        )
        lease["spec"] = spec
        try:
            await self.http.replace(self._path, lease)  # resourceVersion in the body: a lost race is a 409
        except KubeError as exc:
            if not exc.is_conflict:
                self._note_failure(f"updating the Lease failed: {exc}")
            return False
        self._note_failure(None)
        self._observe(spec)
        return True

    def _note_failure(self, problem: str | None) -> None:
        """Warn once when Lease calls start failing (e.g. a missing namespace), once when they work again."""
        if problem is not None and self._failing is None:
            log.warning("leader election %s/%s: %s; retrying", self.namespace, self.name, problem)
        elif problem is None and self._failing is not None:
            log.info("leader election %s/%s: Lease calls work again", self.namespace, self.name)
        self._failing = problem

    def _observe(self, spec: dict[str, Any]) -> None:
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseDurationSeconds"))
        if record != self._observed:
            self._observed = record
            self._observed_at = time.monotonic()

    async def _release(self) -> None:
        with contextlib.suppress(KubeError):
            lease = await self.http.get(self._path)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                renew = format_time(datetime.now(UTC), micro=True)
                lease["spec"].update({"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": renew})
                await self.http.replace(self._path, lease)

    def _set_leader(self, value: bool) -> None:
        self.is_leader = value
        IS_LEADER.labels(self.name).set(1 if value else 0)
        if value:
            self.became_leader.set()
        else:
            self.became_leader.clear()

    async def _sleep(self) -> None:
        await asyncio.sleep(self.retry_period_seconds * (1 + 0.2 * random.random()))

    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Stand for election forever; run `lead()` while leading, cancel it when the Lease is lost."""
        try:
            while True:
                while not await self._try_acquire_or_renew():
                    await self._sleep()
                self._set_leader(True)
                log.info("became leader of %s/%s as %s", self.namespace, self.name, self.identity)
                work = asyncio.create_task(lead())
                try:
                    last_renewed = time.monotonic()
                    while not work.done():
                        await asyncio.sleep(self.retry_period_seconds)
                        if await self._try_acquire_or_renew():
                            last_renewed = time.monotonic()
                        elif time.monotonic() - last_renewed > self.renew_deadline_seconds:
                            break
                finally:
                    work.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await work
                    self._set_leader(False)
                if work.done() and not work.cancelled():
                    if (error := work.exception()) is not None:
                        log.error("leader work for %s crashed; standing again", self.name, exc_info=error)
                        await self._sleep()  # a lead that crashes at once must not spin
                    else:
                        log.info("leader work for %s finished", self.name)
                log.warning("stopped leading %s/%s; standing again", self.namespace, self.name)
        except asyncio.CancelledError:
            if self.release_on_cancel:
                await self._release()  # only clears the Lease if we are still its holder
            raise
