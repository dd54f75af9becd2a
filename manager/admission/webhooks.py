"""The three admission webhooks, from an AdmissionReview body to the answer (status code, body).

- `mutate-pod` (Pod CREATE): ClusterColocationProfiles (manager/admission/mutate.py), then Koordinator's
  extended-resource-spec annotation; answers with a JSON Patch.
- `validate-pod` (Pod CREATE, UPDATE): Koordinator's pod rules (manager/admission/podrules.py).
- `validate-profile` (ClusterColocationProfile CREATE, UPDATE): common/api/colocation.py's rules.

Pods in the skipped namespaces (kube-system and Loadline's own) are let through unchanged, also when a webhook
configuration sends them. A body that is no AdmissionReview gets 400, an unexpected failure 500 (the API server then
applies the configuration's failurePolicy); both are logged and counted, never raised out of the server.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from common.api import constants as c
from common.api.colocation import check_profile
from common.api.quantity import QuantityError
from common.api.validation import aggregate
from common.kube.http import KubeError
from manager.admission import metrics, review
from manager.admission.caches import AdmissionCaches
from manager.admission.mutate import copy_json, extended_resource_spec, mutate_pod
from manager.admission.podrules import pod_errors

log = logging.getLogger("loadline.manager.webhook")

Answer = tuple[int, bytes]
LOG_EVERY_SECONDS = 60.0  # the same problem is logged at most this often (it is counted every time)
# Distinct problems remembered for that: their keys carry request text (a bad request's error), so they are bounded.
MAX_LOG_KEYS = 1024


class Webhooks:
    def __init__(self, caches: AdmissionCaches, skip_namespaces: Iterable[str]) -> None:
        self.caches = caches
        self.skip_namespaces = frozenset(skip_namespaces)
        self._logged: dict[str, float] = {}

    def _log(self, level: int, key: str, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._logged.get(key, -LOG_EVERY_SECONDS) >= LOG_EVERY_SECONDS:
            if len(self._logged) >= MAX_LOG_KEYS:  # keys carry request text: forget the quiet ones, else all
                quiet = [k for k, at in self._logged.items() if now - at >= LOG_EVERY_SECONDS]
                for k in quiet or list(self._logged):
                    del self._logged[k]
            self._logged[key] = now
            log.log(level, message, *args)

    async def handle(self, webhook: str, body: bytes) -> Answer:
        """Answer one request of `webhook` (metrics.WEBHOOKS); never raises."""
        handlers: dict[str, Callable[[review.Request], Awaitable[Answer]]] = {
            "mutate-pod": self._mutate_pod,
            "validate-pod": self._validate_pod,
            "validate-profile": self._validate_profile,
        }
        handler = handlers[webhook]
        started = time.perf_counter()
        try:
            request = review.parse_review(body)
            if request.resource == "pods" and not request.sub_resource:
                for obj in (request.object, request.old_object):
                    if obj is not None and (problem := review.pod_shape_problem(obj)):
                        raise review.BadReview(f"request object is no Pod: {problem}")
        except review.BadReview as exc:
            metrics.ADMISSIONS.labels(webhook, "", "bad_request").inc()
            self._log(logging.WARNING, f"bad:{webhook}:{exc}", "%s: refused a malformed request (400): %s",
                      webhook, exc)  # fmt: skip
            return 400, f"bad AdmissionReview: {exc}\n".encode()
        try:
            return await handler(request)
        except Exception as exc:  # a bug or an API server that went away: the failurePolicy decides
            metrics.ADMISSIONS.labels(webhook, "", "error").inc()
            self._log(logging.ERROR, f"error:{webhook}:{type(exc).__name__}", "%s: failed on %s %s/%s: %r", webhook,
                      request.operation, request.namespace, request.name, exc)  # fmt: skip
            return 500, f"{webhook}: {type(exc).__name__}: {exc}\n".encode()
        finally:
            metrics.DURATION.labels(webhook).observe(time.perf_counter() - started)

    def _skipped(self, webhook: str, request: review.Request) -> bool:
        if request.namespace in self.skip_namespaces:
            metrics.ADMISSIONS.labels(webhook, "", "skipped_namespace").inc()
            return True
        return False

    def _not_ready(self, webhook: str) -> Answer | None:
        if self.caches.synced:
            return None
        metrics.ADMISSIONS.labels(webhook, "", "not_ready").inc()
        return 503, b"the webhook's caches are not synced yet\n"

    # --- mutate-pod -------------------------------------------------------------------------------------------
    async def _mutate_pod(self, request: review.Request) -> Answer:
        webhook = "mutate-pod"
        pod = request.object
        if request.resource != "pods" or request.sub_resource or request.operation != "CREATE" or pod is None:
            metrics.ADMISSIONS.labels(webhook, "", "ignored").inc()
            return 200, review.allowed(request.uid)
        if self._skipped(webhook, request):
            return 200, review.allowed(request.uid)
        if (answer := self._not_ready(webhook)) is not None:
            return answer
        namespace = request.namespace or str((pod.get("metadata") or {}).get("namespace") or "")
        try:
            labels = await self.caches.namespace_labels(namespace)
        except KubeError as exc:
            raise RuntimeError(f"cannot read namespace {namespace}: {exc}") from exc
        mutation = mutate_pod(pod, labels or {}, self.caches.profiles, self.caches.priority_classes)
        warnings = []
        for name, outcome, detail in mutation.skipped:
            metrics.ADMISSIONS.labels(webhook, name, outcome).inc()
            if outcome != "skipped_probability":
                warnings.append(f"ClusterColocationProfile {name} not applied: {detail}")
                self._log(logging.WARNING, f"skip:{name}:{outcome}", "profile %s not applied to a pod in %s: %s",
                          name, namespace, detail)  # fmt: skip
        for name in mutation.applied:
            metrics.ADMISSIONS.labels(webhook, name, "applied").inc()
        if not mutation.matched:
            metrics.ADMISSIONS.labels(webhook, "", "not_matched").inc()
        mutated = mutation.pod
        spec_annotation = extended_resource_spec(mutated)
        if spec_annotation is not None:
            if mutated is pod:
                mutated = copy_json(pod)
            meta = mutated.setdefault("metadata", {})
            if not isinstance(meta.get("annotations"), dict):
                meta["annotations"] = {}
            meta["annotations"][c.ANNOTATION_EXTENDED_RESOURCE_SPEC] = spec_annotation
        ops = review.json_patch(pod, mutated) if mutated is not pod else []
        return 200, review.allowed(request.uid, ops, warnings)

    # --- validate-pod -----------------------------------------------------------------------------------------
    async def _validate_pod(self, request: review.Request) -> Answer:
        webhook = "validate-pod"
        pod = request.object
        if (request.resource != "pods" or request.sub_resource or request.operation not in ("CREATE", "UPDATE")
                or pod is None):  # fmt: skip
            metrics.ADMISSIONS.labels(webhook, "", "ignored").inc()
            return 200, review.allowed(request.uid)
        if self._skipped(webhook, request):
            return 200, review.allowed(request.uid)
        old = request.old_object if request.operation == "UPDATE" else None
        try:
            errors = pod_errors(pod, old)
        except QuantityError:  # the API server validates quantities itself; nothing for these rules to add
            errors = []
        if errors:
            message = aggregate(errors)
            metrics.ADMISSIONS.labels(webhook, "", "refused").inc()
            log.info("refused pod %s %s/%s: %s", request.operation, request.namespace,
                     request.name or (pod.get("metadata") or {}).get("generateName", ""), message)  # fmt: skip
            return 200, review.denied(request.uid, message)
        metrics.ADMISSIONS.labels(webhook, "", "allowed").inc()
        return 200, review.allowed(request.uid)

    # --- validate-profile -------------------------------------------------------------------------------------
    async def _validate_profile(self, request: review.Request) -> Answer:
        webhook = "validate-profile"
        obj = request.object
        if (request.resource != c.COLOCATION_PROFILE_PLURAL or request.operation not in ("CREATE", "UPDATE")
                or obj is None):  # fmt: skip
            metrics.ADMISSIONS.labels(webhook, "", "ignored").inc()
            return 200, review.allowed(request.uid)
        if (answer := self._not_ready(webhook)) is not None:
            return answer
        profile, errors = check_profile(obj, self.caches.priority_value)
        if profile is None:
            message = aggregate(errors)
            metrics.ADMISSIONS.labels(webhook, "", "refused").inc()
            log.info("refused ClusterColocationProfile %s: %s", request.name, message)
            return 200, review.denied(request.uid, message)
        warnings = []
        if profile.priority_class_name and profile.priority_class_name not in self.caches.priority_classes:
            warnings.append(f"PriorityClass {profile.priority_class_name} does not exist: pods stay unmutated by "
                            "this profile until it does")  # fmt: skip
        if profile.namespace_selector is not None and not any(
            profile.namespace_selector.matches((ns.get("metadata") or {}).get("labels") or {})
            for name, ns in self.caches.namespaces.store.items() if name not in self.skip_namespaces
        ):  # fmt: skip
            warnings.append("namespaceSelector matches no namespace (yet)")
        metrics.ADMISSIONS.labels(webhook, "", "allowed").inc()
        return 200, review.allowed(request.uid, warnings=warnings)
