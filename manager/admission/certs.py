"""The webhook's certificates: a CA, the serving certificate it signs, and when to renew which (pure).

Kept in one Secret of the manager's namespace, under the names cert-manager uses (`tls.crt`, `tls.key`, `ca.crt`,
plus `ca.key` for the self-made CA), so the same code serves a certificate cert-manager issued. Like koord-manager
(pkg/webhook/util/controller/webhook_controller.go, writer/certwriter.go) every replica checks the Secret and
renews what is due; unlike it, a renewal never leaves the API server with a certificate it does not trust yet:

* a certificate is due once two thirds of its validity have passed (cert-manager's default renewBefore);
* a CA that is due is not replaced at once: a new CA is put in front of the old one in `ca.crt`, and the manager
  writes that bundle into its webhook configurations; the serving certificate still comes from the old CA;
* a serving certificate is issued from the front CA only once the configurations have carried a bundle with that
  CA for `SETTLE_SECONDS` (the API server's watch of them has caught up), unless the old one is no longer usable;
* an old CA leaves the bundle once no serving certificate it signed is in use: `SETTLE_SECONDS` after the new one
  was issued (every replica reloads it from the Secret's watch within that time) or when it expires.

Keys are ECDSA P-256 (fast to make and to handshake with; the API server's Go client takes them).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CERT, CA_KEY, TLS_CERT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"
SETTLE_SECONDS = 5.0
BACKDATE_SECONDS = 60.0  # notBefore this far back: a node whose clock is a little behind still accepts it
RENEW_FRACTION = 2 / 3


@dataclass(frozen=True)
class CertPolicy:
    hosts: tuple[str, ...]  # the serving certificate's DNS names and IP addresses
    cert_validity_seconds: float = 365 * 86400
    ca_validity_seconds: float = 10 * 365 * 86400


@dataclass
class Parsed:
    cas: list[x509.Certificate] = field(default_factory=list)  # ca.crt: the signing CA first
    ca_key: ec.EllipticCurvePrivateKey | None = None
    cert: x509.Certificate | None = None
    key: ec.EllipticCurvePrivateKey | None = None
    problem: str = ""  # why the data cannot be used as it is


@dataclass
class Plan:
    data: dict[str, bytes] | None  # the Secret's new data; None: keep it
    reasons: list[str]  # what changed and why, for the log and the rotation metric
    next_check: float  # epoch seconds: when something becomes due (or settles)
    renewed: list[str] = field(default_factory=list)  # "ca", "serving"


def _epoch(when: dt.datetime) -> float:
    return when.timestamp()


def not_before(cert: x509.Certificate) -> float:
    return _epoch(cert.not_valid_before_utc)


def not_after(cert: x509.Certificate) -> float:
    return _epoch(cert.not_valid_after_utc)


def renew_at(cert: x509.Certificate) -> float:
    start = not_before(cert) + BACKDATE_SECONDS
    return start + RENEW_FRACTION * (not_after(cert) - start)


def _key(raw: bytes) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(raw, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("not an ECDSA key")
    return key


def _same_key(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> bool:
    return cert.public_key() == key.public_key()


def signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    if cert.issuer != ca.subject:
        return False
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def parse(data: Mapping[str, bytes]) -> Parsed:
    """The Secret's data (decoded bytes); `problem` says what is missing or broken."""
    parsed = Parsed()
    try:
        if data.get(CA_CERT):
            parsed.cas = x509.load_pem_x509_certificates(data[CA_CERT])
        if data.get(CA_KEY):
            parsed.ca_key = _key(data[CA_KEY])
        if data.get(TLS_CERT):
            parsed.cert = x509.load_pem_x509_certificates(data[TLS_CERT])[0]
        if data.get(TLS_KEY):
            parsed.key = _key(data[TLS_KEY])
    except ValueError as exc:
        parsed.problem = f"unreadable: {exc}"
        return parsed
    missing = [name for name in (CA_CERT, CA_KEY, TLS_CERT, TLS_KEY) if not data.get(name)]
    if missing:
        parsed.problem = f"no {', '.join(missing)}"
    elif parsed.cert is not None and parsed.key is not None and not _same_key(parsed.cert, parsed.key):
        parsed.problem = f"{TLS_KEY} is not the key of {TLS_CERT}"
    elif parsed.cas and parsed.ca_key is not None and not _same_key(parsed.cas[0], parsed.ca_key):
        parsed.problem = f"{CA_KEY} is not the key of the first certificate of {CA_CERT}"
    elif parsed.cert is not None and not any(signed_by(parsed.cert, ca) for ca in parsed.cas):
        parsed.problem = f"{TLS_CERT} is signed by no CA of {CA_CERT}"
    return parsed


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())  # fmt: skip


def _serial() -> int:
    return x509.random_serial_number()


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True, key_cert_sign=ca, crl_sign=ca, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, encipher_only=False, decipher_only=False,
    )  # fmt: skip


def make_ca(now: float, validity: float) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    start = dt.datetime.fromtimestamp(now - BACKDATE_SECONDS, dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"loadline-webhook-ca@{int(now)}")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(_serial())
        .not_valid_before(start)
        .not_valid_after(dt.datetime.fromtimestamp(now + validity, dt.UTC))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _san(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def hosts_of(cert: x509.Certificate) -> set[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(v) for v in san.get_values_for_type(x509.DNSName)} | {
        str(v) for v in san.get_values_for_type(x509.IPAddress)
    }


def make_serving(
    now: float, validity: float, hosts: Sequence[str], ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    end = min(now + validity, not_after(ca))  # never beyond the CA: the chain would stop verifying first
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(_serial())
        .not_valid_before(dt.datetime.fromtimestamp(now - BACKDATE_SECONDS, dt.UTC))
        .not_valid_after(dt.datetime.fromtimestamp(end, dt.UTC))
        .add_extension(_san(hosts), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def _data(cas: Sequence[x509.Certificate], ca_key: ec.EllipticCurvePrivateKey, cert: x509.Certificate,
          key: ec.EllipticCurvePrivateKey) -> dict[str, bytes]:  # fmt: skip
    return {CA_CERT: b"".join(_pem(ca) for ca in cas), CA_KEY: _key_pem(ca_key), TLS_CERT: _pem(cert),
            TLS_KEY: _key_pem(key)}  # fmt: skip


def bundle_trusts(published: bytes | None, ca: x509.Certificate) -> bool:
    """Whether a caBundle (PEM) holds `ca`."""
    if not published:
        return False
    try:
        return ca in x509.load_pem_x509_certificates(published)
    except ValueError:
        return False


def plan(
    data: Mapping[str, bytes],
    now: float,
    policy: CertPolicy,
    *,
    published: bytes | None = None,
    published_since: float | None = None,
) -> Plan:
    """What the Secret should hold now. `published`: the caBundle the webhook configurations carry (None when they
    differ or are unknown), carried since `published_since`."""
    parsed = parse(data)
    hosts = tuple(policy.hosts)
    if parsed.problem or parsed.ca_key is None or parsed.cert is None or parsed.key is None:
        return _fresh(now, policy, parsed.problem or "incomplete")
    cas = [ca for ca in parsed.cas if not_after(ca) > now]
    if not cas or cas[0] is not parsed.cas[0]:
        return _fresh(now, policy, "the CA expired")
    ca_key, cert, key = parsed.ca_key, parsed.cert, parsed.key
    reasons: list[str] = []
    renewed: list[str] = []
    if len(cas) < len(parsed.cas):
        reasons.append("an expired old CA left the bundle")
    if now >= renew_at(cas[0]) and signed_by(cert, cas[0]):
        new_ca, ca_key = make_ca(now, policy.ca_validity_seconds)
        cas.insert(0, new_ca)
        reasons.append("the CA is due: a new CA joins the bundle ahead of it")
        renewed.append("ca")
    front = cas[0]
    trusted = (bundle_trusts(published, front) and published_since is not None
               and now - published_since >= SETTLE_SECONDS)  # fmt: skip
    usable = not_after(cert) > now + SETTLE_SECONDS and any(signed_by(cert, ca) for ca in cas)
    due = []
    if now >= renew_at(cert):
        due.append("the serving certificate is due")
    if not signed_by(cert, front):
        due.append("the serving certificate is not from the newest CA")
    if hosts_of(cert) != set(hosts):
        due.append(f"the serving certificate's names {sorted(hosts_of(cert))} are not {sorted(hosts)}")
    waits = []
    if due and (trusted or not usable):
        cert, key = make_serving(now, policy.cert_validity_seconds, hosts, front, ca_key)
        reasons += due
        renewed.append("serving")
    elif due:
        waits.append((published_since or now) + SETTLE_SECONDS if bundle_trusts(published, front) else now + 1.0)
    issued = not_before(cert) + BACKDATE_SECONDS
    if len(cas) > 1 and signed_by(cert, front) and now - issued >= SETTLE_SECONDS:
        cas = cas[:1]
        reasons.append("the old CA left the bundle: no serving certificate of it is in use")
    elif len(cas) > 1 and signed_by(cert, front):
        waits.append(issued + SETTLE_SECONDS)
    times = [renew_at(cas[0]), renew_at(cert), *(not_after(ca) for ca in cas[1:]), *waits]
    next_check = max(now + 0.5, min(times))
    if not reasons:
        return Plan(None, [], next_check)
    return Plan(_data(cas, ca_key, cert, key), reasons, next_check, renewed)


def _fresh(now: float, policy: CertPolicy, why: str) -> Plan:
    ca, ca_key = make_ca(now, policy.ca_validity_seconds)
    cert, key = make_serving(now, policy.cert_validity_seconds, policy.hosts, ca, ca_key)
    reasons = [f"new CA and serving certificate ({why})"]
    return Plan(_data([ca], ca_key, cert, key), reasons, min(renew_at(cert), now + 3600), ["ca", "serving"])


def serving_pair(data: Mapping[str, bytes]) -> tuple[bytes, bytes] | None:
    """(tls.crt, tls.key) when both are there and belong together, else None."""
    cert_pem, key_pem = data.get(TLS_CERT), data.get(TLS_KEY)
    if not cert_pem or not key_pem:
        return None
    try:
        cert = x509.load_pem_x509_certificates(cert_pem)[0]
        if not _same_key(cert, _key(key_pem)):
            return None
    except ValueError:
        return None
    return cert_pem, key_pem


def expiry(pem: bytes) -> float | None:
    """notAfter of the first certificate of a PEM, epoch seconds."""
    try:
        return not_after(x509.load_pem_x509_certificates(pem)[0])
    except (ValueError, IndexError):
        return None
