"""Keeps the webhook's certificate Secret, its webhook configurations' caBundle and the served certificate current.

Every replica runs it, with no leadership (as koord-manager's webhook controller): it watches its one Secret and
its Mutating/ValidatingWebhookConfiguration (by name), applies `certs.plan` when something changes or falls due,
writes the Secret with its resourceVersion (a replica that loses the race reads the winner's certificates from the
watch and goes on with them), puts the Secret's `ca.crt` into every webhook of both configurations, and hands the
serving certificate to the HTTPS server whenever it changes.

`mode="external"`: someone else (cert-manager) issues the Secret and injects the CA bundle; the manager only reads
the Secret and serves what is in it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from common.kube.http import JSON, KubeError, KubeHTTP
from common.kube.reflector import Reflector
from common.logging import ctx
from manager.admission import certs, metrics

log = logging.getLogger("loadline.manager.webhook.certs")

MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
RETRY_SECONDS = 5.0
CertMode = Literal["self-signed", "external"]


def decode_data(secret: Mapping[str, Any] | None) -> dict[str, bytes]:
    data = (secret or {}).get("data") or {}
    out: dict[str, bytes] = {}
    for key, value in data.items() if isinstance(data, dict) else ():
        with contextlib.suppress(ValueError, TypeError):
            out[str(key)] = base64.b64decode(value, validate=True)
    return out


def encode_data(data: Mapping[str, bytes]) -> dict[str, str]:
    return {key: base64.b64encode(value).decode() for key, value in data.items()}


def config_bundle(configs: list[JSON | None]) -> bytes | None:
    """The caBundle every webhook of every configuration carries, None when they differ or one is missing."""
    bundles = set()
    for config in configs:
        if config is None:
            return None
        for webhook in config.get("webhooks") or []:
            bundles.add((webhook.get("clientConfig") or {}).get("caBundle") or "")
    if len(bundles) != 1:
        return None
    (bundle,) = bundles
    try:
        return base64.b64decode(bundle) if bundle else None
    except ValueError:
        return None


class CertController:
    def __init__(
        self,
        http: KubeHTTP,
        *,
        namespace: str,
        secret: str,
        configuration: str,
        policy: certs.CertPolicy,
        mode: CertMode,
        on_serving: Callable[[bytes, bytes], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.http, self.namespace, self.secret_name, self.configuration = http, namespace, secret, configuration
        self._secret_key = f"{namespace}/{secret}"  # the reflector's store key of a namespaced object
        self.policy, self.mode, self.on_serving, self.clock = policy, mode, on_serving, clock
        self.secret = Reflector(http, f"/api/v1/namespaces/{namespace}/secrets", name="webhook-secret",
                                field_selector=f"metadata.name={secret}")  # fmt: skip
        self.reflectors = [self.secret]
        if mode == "self-signed":
            self.mutating = Reflector(http, MUTATING, name="mutatingwebhookconfiguration",
                                      field_selector=f"metadata.name={configuration}")  # fmt: skip
            self.validating = Reflector(http, VALIDATING, name="validatingwebhookconfiguration",
                                        field_selector=f"metadata.name={configuration}")  # fmt: skip
            self.reflectors += [self.mutating, self.validating]
        for reflector in self.reflectors:
            reflector.add_handler(lambda *_: self._wake.set())
        self._wake = asyncio.Event()
        self._served: tuple[bytes, bytes] | None = None
        self.first_served = asyncio.Event()
        self._published: bytes | None = None
        self._published_since: float | None = None
        self.problem = "no serving certificate yet"  # None once a certificate is served and the sync worked
        for step in ("secret", "configuration", "serving"):
            metrics.CERT_ERRORS.labels(step)

    @property
    def serving(self) -> bool:
        return self._served is not None

    def _configs(self) -> list[JSON | None]:
        return [self.mutating.store.get(self.configuration), self.validating.store.get(self.configuration)]

    async def run(self) -> None:
        tasks = [asyncio.create_task(r.run(), name=f"watch {r.name}") for r in self.reflectors]
        try:
            for reflector in self.reflectors:
                await reflector.synced.wait()
            while True:
                next_check = await self.sync()
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), max(0.1, next_check - self.clock()))
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def sync(self) -> float:
        """One round; returns when to look again (epoch seconds)."""
        now = self.clock()
        secret = self.secret.store.get(self._secret_key)
        data = decode_data(secret)
        next_check = now + 60
        if self.mode == "self-signed":
            published = config_bundle(self._configs())
            if published != self._published:
                self._published, self._published_since = published, now
            plan = certs.plan(data, now, self.policy, published=published, published_since=self._published_since)
            next_check = plan.next_check
            if plan.data is not None:
                written = await self._write_secret(secret, plan)
                if written is None:
                    return now + RETRY_SECONDS
                data = plan.data
            if not await self._publish(data.get(certs.CA_CERT, b"")):
                next_check = min(next_check, now + RETRY_SECONDS)
        self._serve(data)
        self._report(data)
        return next_check

    async def _write_secret(self, secret: JSON | None, plan: certs.Plan) -> JSON | None:
        body: JSON = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "data": encode_data(plan.data or {}),
                      "metadata": {"name": self.secret_name, "namespace": self.namespace}}  # fmt: skip
        path = f"/api/v1/namespaces/{self.namespace}/secrets"
        try:
            if secret is None:
                written = await self.http.create(path, body)
            else:
                meta = secret.get("metadata") or {}
                body["metadata"] = {**meta, "name": self.secret_name, "namespace": self.namespace}
                body["type"] = secret.get("type") or "Opaque"
                written = await self.http.replace(f"{path}/{self.secret_name}", body)
        except KubeError as exc:
            if exc.is_conflict:  # another replica wrote first (a stale resourceVersion, or it created the Secret)
                log.info("webhook Secret written by another replica meanwhile; taking its certificates")
            else:
                metrics.CERT_ERRORS.labels("secret").inc()
                log.error("cannot write the webhook Secret %s/%s: %s", self.namespace, self.secret_name, exc)
            return None
        self.secret.store[self._secret_key] = written  # ahead of our own watch event
        for what in plan.renewed:
            metrics.CERT_ROTATIONS.labels(what).inc()
        log.info("webhook certificates renewed: %s", "; ".join(plan.reasons),
                 extra=ctx(secret=f"{self.namespace}/{self.secret_name}"))  # fmt: skip
        return written

    async def _publish(self, bundle: bytes) -> bool:
        """caBundle = `bundle` in every webhook of both configurations; False when one could not be written."""
        encoded = base64.b64encode(bundle).decode()
        ok = True
        for path, config in ((MUTATING, self.mutating.store.get(self.configuration)),
                             (VALIDATING, self.validating.store.get(self.configuration))):  # fmt: skip
            if config is None:
                metrics.CERT_ERRORS.labels("configuration").inc()
                log.warning("webhook configuration %s %s not found: the API server cannot verify this webhook",
                            path.rsplit("/", 1)[1], self.configuration)  # fmt: skip
                ok = False
                continue
            webhooks = config.get("webhooks") or []
            if all((w.get("clientConfig") or {}).get("caBundle") == encoded for w in webhooks):
                continue
            for webhook in webhooks:
                webhook.setdefault("clientConfig", {})["caBundle"] = encoded
            try:
                written = await self.http.replace(f"{path}/{self.configuration}", config)
            except KubeError as exc:
                if not exc.is_conflict:
                    metrics.CERT_ERRORS.labels("configuration").inc()
                    log.error("cannot write the CA bundle into %s %s: %s", path.rsplit("/", 1)[1],
                              self.configuration, exc)  # fmt: skip
                ok = False
                continue
            store = self.mutating.store if path == MUTATING else self.validating.store
            store[self.configuration] = written
            log.info("CA bundle written into %s %s", path.rsplit("/", 1)[1], self.configuration)
        return ok

    def _serve(self, data: Mapping[str, bytes]) -> None:
        pair = certs.serving_pair(data)
        if pair is None:
            metrics.CERT_ERRORS.labels("serving").inc()
            self.problem = f"no usable serving certificate in Secret {self.namespace}/{self.secret_name}"
            log.warning("%s (yet)", self.problem)
            return
        if pair != self._served:
            try:
                self.on_serving(*pair)
            except (OSError, ValueError) as exc:
                metrics.CERT_ERRORS.labels("serving").inc()
                self.problem = f"cannot serve the certificate of {self.namespace}/{self.secret_name}: {exc}"
                log.error("%s", self.problem)
                return
            self._served = pair
            self.first_served.set()
            log.info("serving the certificate of Secret %s/%s", self.namespace, self.secret_name)
        self.problem = ""

    def _report(self, data: Mapping[str, bytes]) -> None:
        for name, key in (("serving", certs.TLS_CERT), ("ca", certs.CA_CERT)):
            when = certs.expiry(data.get(key, b""))
            if when is not None:
                metrics.CERT_EXPIRY.labels(name).set(when)
