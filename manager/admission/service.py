"""The admission webhooks as one piece of the manager process: caches, certificates, HTTPS server, profile Events.

Every replica serves (no leadership); only the profile Events are the leader's (`checker`).
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from common.kube.events import EventRecorder
from common.kube.http import KubeHTTP
from manager.admission import certs
from manager.admission.caches import AdmissionCaches
from manager.admission.certcontroller import CertController
from manager.admission.profilecheck import ProfileChecker
from manager.admission.server import load_serving, server_context, start_webhook_server
from manager.admission.webhooks import Webhooks
from manager.settings import ManagerSettings

log = logging.getLogger("loadline.manager.webhook")


class AdmissionService:
    def __init__(self, http: KubeHTTP, settings: ManagerSettings, recorder: EventRecorder) -> None:
        self.settings = settings
        skip = [*settings.webhook_skip_namespaces, settings.namespace]
        self.caches = AdmissionCaches(http)
        self.webhooks = Webhooks(self.caches, skip)
        self.checker = ProfileChecker(self.caches, recorder, skip)
        self.context = server_context()
        self.certs = CertController(
            http,
            namespace=settings.namespace,
            secret=settings.webhook_secret,
            configuration=settings.webhook_configuration,
            policy=certs.CertPolicy(
                hosts=settings.webhook_names(),
                cert_validity_seconds=settings.webhook_cert_validity_seconds,
                ca_validity_seconds=settings.webhook_ca_validity_seconds,
            ),
            mode=settings.webhook_certs,
            on_serving=lambda cert, key: load_serving(self.context, cert, key),
        )
        self.runner: web.BaseRunner | None = None
        self.address = ""

    def tasks(self) -> list[asyncio.Task[None]]:
        """The watches, the certificate keeper and the server's start; each must run for the process' life."""
        tasks = [asyncio.create_task(r.run(), name=f"watch {r.name}") for r in self.caches.reflectors]
        tasks.append(asyncio.create_task(self.certs.run(), name="webhook certificates"))
        tasks.append(asyncio.create_task(self._serve(), name="webhook server"))
        return tasks

    async def _serve(self) -> None:
        await self.certs.first_served.wait()  # the HTTPS port opens with a certificate, never without
        self.runner, self.address = await start_webhook_server(
            self.webhooks, self.settings.bind_address, self.settings.webhook_port, self.context
        )
        log.info("admission webhooks served", extra={"ctx": {"address": f"https://{self.address}"}})
        try:
            await asyncio.Event().wait()
        finally:
            await self.runner.cleanup()

    def ready(self) -> str | None:
        if not self.caches.synced:
            return "webhook caches not synced yet"
        if self.runner is None:
            return self.certs.problem or "webhook server not started yet"
        return None
