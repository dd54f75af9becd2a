"""The webhook's certificates (renewal plan on a simulated clock) and its HTTPS server on loopback, over real TLS."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import time
from typing import Any

import aiohttp
import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from common.api.scheduling import PriorityClassInfo
from manager.admission import certs, metrics
from manager.admission.caches import AdmissionCaches
from manager.admission.server import load_serving, server_context, start_webhook_server
from manager.admission.webhooks import Webhooks
from tests.unit.manager.test_admission_rules import koord_pod, koord_profile

POLICY = certs.CertPolicy(hosts=("loadline-webhook.loadline-system.svc", "127.0.0.1"), cert_validity_seconds=300,
                          ca_validity_seconds=900)  # fmt: skip
T0 = 1_900_000_000.0


def cas(data: dict[str, bytes]) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(data[certs.CA_CERT])


def serving(data: dict[str, bytes]) -> x509.Certificate:
    return x509.load_pem_x509_certificates(data[certs.TLS_CERT])[0]


def test_renewals_never_serve_a_certificate_the_api_server_does_not_trust_yet() -> None:
    """Three CA lifetimes on a simulated clock, the controller's loop: plan, write, publish the bundle, sleep until
    `next_check`. Every serving certificate verifies against the bundle the configurations carry, and was issued
    only once a bundle with its CA had been published for SETTLE_SECONDS; a CA leaves the bundle only when no
    serving certificate of it is in use."""
    now = T0
    data = certs.plan({}, now, POLICY).data or {}
    published, since = data[certs.CA_CERT], now
    trusted_since = {ca.fingerprint(hashes.SHA256()): now for ca in cas(data)}
    served, renewals = serving(data), {"ca": 0, "serving": 0}
    while now < T0 + 3 * POLICY.ca_validity_seconds:
        step = certs.plan(data, now, POLICY, published=published, published_since=since)
        if step.data is not None:
            data = step.data
            for what in step.renewed:
                renewals[what] += 1
        if data[certs.CA_CERT] != published:  # the controller writes the Secret's bundle into the configurations
            published, since = data[certs.CA_CERT], now
            for ca in cas(data):
                trusted_since.setdefault(ca.fingerprint(hashes.SHA256()), now)
        cert = serving(data)
        issuer = next(ca for ca in x509.load_pem_x509_certificates(published) if certs.signed_by(cert, ca))
        assert certs.not_after(cert) > now, "an expired serving certificate"
        if cert != served:
            assert now - trusted_since[issuer.fingerprint(hashes.SHA256())] >= certs.SETTLE_SECONDS
            served = cert
        assert step.next_check > now
        now = step.next_check
    assert renewals["ca"] >= 3 and renewals["serving"] >= 9, renewals
    assert certs.hosts_of(served) == set(POLICY.hosts)


@pytest.mark.parametrize("damage", ["empty", "garbage", "mismatched key"])
def test_broken_secret_data_gets_fresh_certificates(damage: str) -> None:
    data = dict(certs.plan({}, T0, POLICY).data or {})
    if damage == "empty":
        data = {}
    elif damage == "garbage":
        data[certs.TLS_CERT] = b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"
    else:
        data[certs.TLS_KEY] = (certs.plan({}, T0, POLICY).data or {})[certs.TLS_KEY]
    fresh = certs.plan(data, T0 + 1, POLICY)
    assert fresh.data is not None and certs.parse(fresh.data).problem == ""


# ----------------------------------------------------------------------------- the HTTPS server
class _NoHTTP:
    async def request(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the test's namespaces are all in the cache")


def caches_with(profiles: list[dict[str, Any]], namespaces: dict[str, dict[str, str]]) -> AdmissionCaches:
    caches = AdmissionCaches(_NoHTTP())  # type: ignore[arg-type]
    caches.priority_classes = {"koordinator-batch": PriorityClassInfo("koordinator-batch", 5999, "PreemptLowerPriority")}
    for name, labels in namespaces.items():
        caches.namespaces.store[name] = {"metadata": {"name": name, "labels": labels}}
    for profile in profiles:
        caches.profile_objects.store[profile["metadata"]["name"]] = profile
    caches._digest_all()
    for reflector in caches.reflectors:
        reflector.synced.set()
    return caches


def review(obj: dict[str, Any], namespace: str, *, operation: str = "CREATE", resource: str = "pods") -> bytes:
    request = {"uid": "u-1", "operation": operation, "resource": {"group": "", "version": "v1", "resource": resource},
               "namespace": namespace, "object": obj}  # fmt: skip
    return orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})


def test_https_server_mutates_refuses_and_takes_a_new_certificate_without_restarting() -> None:
    asyncio.run(_serve_and_call())


async def _serve_and_call() -> None:
    first = certs.plan({}, time.time(), POLICY).data or {}
    context = server_context()
    load_serving(context, first[certs.TLS_CERT], first[certs.TLS_KEY])
    caches = caches_with([koord_profile()], {"colocated": {"enable-koordinator-colocation": "true"},
                                             "kube-system": {"enable-koordinator-colocation": "true"}})  # fmt: skip
    runner, address = await start_webhook_server(Webhooks(caches, ["kube-system"]), "127.0.0.1", 0, context)
    url = f"https://{address}"
    try:
        client = ssl.create_default_context(cadata=first[certs.CA_CERT].decode())
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client, force_close=True)) as session:

            async def post(path: str, body: bytes) -> tuple[int, Any]:
                async with session.post(url + path, data=body) as response:
                    text = await response.read()
                    return response.status, orjson.loads(text) if response.status == 200 else text

            status, answer = await post("/mutate-pod", review(koord_pod(), "colocated"))
            assert status == 200 and answer["response"]["allowed"] is True
            ops = orjson.loads(base64.b64decode(answer["response"]["patch"]))
            assert {"op": "add", "path": "/metadata/labels/koordinator.sh~1qosClass", "value": "BE"} in ops
            # kube-system is skipped even with a matching profile
            status, answer = await post("/mutate-pod", review(koord_pod(), "kube-system"))
            assert "patch" not in answer["response"]
            # a BE pod with a prod priority is refused with the rule
            bad = koord_pod(labels={"koordinator.sh/qosClass": "BE"})
            bad["spec"]["priority"] = 9000
            status, answer = await post("/validate-pod", review(bad, "colocated"))
            assert answer["response"]["allowed"] is False
            assert "koordinator.sh/qosClass=BE and priorityClass=koord-prod" in answer["response"]["status"]["message"]
            # bad input: 400 (counted), never a crash; too large: 413 before it is read
            before = metrics.ADMISSIONS.labels("mutate-pod", "", "bad_request")._value.get()
            for body in (b"", b"{not json", b'{"kind": "AdmissionReview"}', b"\xff" * 100):
                status, _ = await post("/mutate-pod", body)
                assert status == 400
            assert metrics.ADMISSIONS.labels("mutate-pod", "", "bad_request")._value.get() == before + 4
            status, _ = await post("/mutate-pod", b" " * (9 * 1024 * 1024))
            assert status == 413

            # a new CA and certificate are loaded in place: new connections get them
            second = certs.plan({}, time.time(), POLICY).data or {}
            load_serving(context, second[certs.TLS_CERT], second[certs.TLS_KEY])
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await post("/mutate-pod", review(koord_pod(), "colocated"))
        trusting_new = ssl.create_default_context(cadata=second[certs.CA_CERT].decode())
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trusting_new)) as session, \
                session.post(url + "/validate-pod", data=review(koord_pod(), "colocated")) as response:  # fmt: skip
            assert response.status == 200
    finally:
        await runner.cleanup()


# ----------------------------------------------------------------------------- hostile input
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from common.api.colocation import check_profile  # noqa: E402

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=30,
)
KEYS = st.sampled_from(["metadata", "spec", "labels", "containers", "resources", "requests", "limits", "cpu", "memory",
                        "kubernetes.io/batch-cpu", "priority", "koordinator.sh/qosClass", "patch", "selector",
                        "matchExpressions", "probability", "namespaceSelector", "name"])  # fmt: skip
SHAPED = st.recursive(JSON_VALUES, lambda inner: st.dictionaries(KEYS, inner, max_size=5), max_leaves=40)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(obj={"spec": {"resources": 1}}, webhook="validate-pod", operation="CREATE")  # PodLevelResources not an object
@given(obj=SHAPED, webhook=st.sampled_from(["mutate-pod", "validate-pod", "validate-profile"]),
       operation=st.sampled_from(["CREATE", "UPDATE"]))  # fmt: skip
def test_any_object_gets_an_answer_never_an_exception(obj: Any, webhook: str, operation: str) -> None:
    caches = caches_with([koord_profile()], {"colocated": {"enable-koordinator-colocation": "true"}})
    resource = "clustercolocationprofiles" if webhook == "validate-profile" else "pods"
    request = {"uid": "u", "operation": operation, "resource": {"resource": resource}, "namespace": "colocated",
               "object": obj, "oldObject": obj}  # fmt: skip
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()
    status, answer = asyncio.run(Webhooks(caches, []).handle(webhook, body))
    assert status in (200, 400)
    if status == 200:
        assert orjson.loads(answer)["response"]["uid"] == "u"


@settings(max_examples=200, deadline=None)
@given(spec=SHAPED)
def test_any_profile_is_digested_or_refused_with_reasons(spec: Any) -> None:
    profile, errors = check_profile({"metadata": {"name": "p"}, "spec": spec})
    assert (profile is None) == bool(errors)


def test_distinct_bad_requests_do_not_grow_the_log_limiter_without_bound() -> None:
    # Issue 29: the limiter's keys carry the error text of each bad request; a flood of distinct ones is bounded.
    from manager.admission.webhooks import MAX_LOG_KEYS

    hooks = Webhooks(caches_with([], {}), [])

    async def flood() -> None:
        for i in range(MAX_LOG_KEYS + 50):
            status, _ = await hooks.handle("mutate-pod", json.dumps({"kind": f"Review{i}"}).encode())
            assert status == 400

    asyncio.run(flood())
    assert 0 < len(hooks._logged) <= MAX_LOG_KEYS
