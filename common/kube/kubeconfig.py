"""Where the API server is and how to authenticate to it: a kubeconfig, or the in-cluster service account.

Read here, without the official client, for the cases that make up nearly every deployment (client
certificates, bearer tokens and token files, basic auth, the service account): importing
`kubernetes.aio` costs 0.3-0.5 CPU-seconds and most of a second of start-up, which every component
paid only to read a YAML file. A kubeconfig whose user runs an `exec` plugin or names an
`auth-provider` (cloud logins, OIDC refresh) is still handed to `kubernetes.aio.config`, which knows
those protocols; the result is the same `ClusterAccess`.

The rules are client-go's: `$KUBECONFIG` may list several files (`os.pathsep`), the first file that
names a cluster, user or context wins it, and so does the first `current-context`; relative paths are
relative to the file that holds them; `*-data` fields win over their file fields. The service
account's token is read again every minute (bound tokens rotate), as client-go and the official
client do.
"""

from __future__ import annotations

import base64
import contextlib
import os
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REFRESH_SECONDS = 60.0  # client-go's cached token file source re-reads after a minute

# One remedy, said the same by every component that cannot find its cluster.
MISSING_CONFIGURATION_HINT = (
    "pass --kubeconfig FILE or set $KUBECONFIG; in a pod the service account is used (the agent also runs without a "
    "cluster: --standalone)"
)


class KubeConfigError(ValueError):
    """Neither a usable kubeconfig nor an in-cluster service account: the message says which file and why."""


Authorization = Callable[[], Awaitable[str | None]]


async def _no_authorization() -> str | None:
    return None


@dataclass(frozen=True)
class ClusterAccess:
    """The API server's URL, the TLS context to reach it and the `Authorization` header value to send.

    `ssl_context` None: plain http, or https verified against the system's CAs."""

    host: str
    ssl_context: ssl.SSLContext | None = None
    authorization: Authorization = field(default=_no_authorization)


class _StaticAuthorization:
    def __init__(self, value: str) -> None:
        self.value = value

    async def __call__(self) -> str | None:
        return self.value


class _TokenFile:
    """A bearer token read from a file, re-read when older than `TOKEN_REFRESH_SECONDS`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.value = ""
        self.read_at = -float("inf")
        self._read()  # at load time: a missing or empty file is a configuration error, said at start

    def _read(self) -> None:
        token = self.path.read_text().strip()
        if not token:
            raise KubeConfigError(f"token file {self.path} is empty")
        self.value, self.read_at = f"Bearer {token}", time.monotonic()

    async def __call__(self) -> str | None:
        if time.monotonic() - self.read_at >= TOKEN_REFRESH_SECONDS:
            # Mid-rotation (a missing or empty file): the last token is still the best guess; the next call reads again.
            with contextlib.suppress(OSError, KubeConfigError):
                self._read()
        return self.value


def tls_context(
    *,
    ca_file: str | None = None,
    ca_data: str | bytes | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    verify: bool = True,
) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca_file, cadata=ca_data)
    if cert_file:
        context.load_cert_chain(cert_file, keyfile=key_file)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _pem_files_context(*, ca: str | None, cert: bytes | None, key: bytes | None, verify: bool) -> ssl.SSLContext:
    """`load_cert_chain` reads only files: client certificate and key given as data are written to a private
    temporary directory for the call and removed right after, so no key material stays on disk."""
    if cert is None:
        return tls_context(ca_data=ca, verify=verify)
    with tempfile.TemporaryDirectory(prefix="loadline-kubeconfig-") as scratch:
        cert_path, key_path = Path(scratch) / "client.crt", Path(scratch) / "client.key"
        cert_path.write_bytes(cert)
        if key is not None:
            key_path.write_bytes(key)
        return tls_context(ca_data=ca, cert_file=str(cert_path), key_file=str(key_path) if key else None, verify=verify)


# --------------------------------------------------------------------------- kubeconfig files
@dataclass
class _Named:
    value: Mapping[str, Any]
    base: Path  # directory of the file that named it: relative paths start here


def _read_files(paths: list[Path]) -> tuple[dict[str, dict[str, _Named]], str | None]:
    """Merge kubeconfig files as client-go does: the first file naming an entry wins it."""
    import yaml  # here: an agent in a pod reads only its service account, and yaml is ~1 MiB of resident memory

    merged: dict[str, dict[str, _Named]] = {"clusters": {}, "users": {}, "contexts": {}}
    current: str | None = None
    for path in paths:
        loaded = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        if loaded is None:
            continue  # an empty file adds nothing
        if not isinstance(loaded, Mapping):
            raise KubeConfigError(f"{path} is not a kubeconfig (a YAML mapping)")
        for section, inner in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for entry in loaded.get(section) or []:
                if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
                    raise KubeConfigError(f"{path}: an entry of {section} without a name")
                body = entry.get(inner) or {}
                if not isinstance(body, Mapping):
                    raise KubeConfigError(f"{path}: {section} {entry['name']} is not a mapping")
                merged[section].setdefault(entry["name"], _Named(body, path.resolve().parent))
        if current is None and loaded.get("current-context"):
            current = str(loaded["current-context"])
    return merged, current


def _file_or_data(entry: _Named, file_key: str, data_key: str, *, decode: bool = True) -> bytes | None:
    """A `*-data` field (base64) if set, else the file named by `file_key` (relative to its kubeconfig)."""
    data = entry.value.get(data_key)
    if data:
        return base64.b64decode(data) if decode else str(data).encode()
    name = entry.value.get(file_key)
    if name:
        return (entry.base / Path(str(name)).expanduser()).read_bytes()
    return None


def _needs_official_client(user: Mapping[str, Any]) -> bool:
    return bool(user.get("exec") or user.get("auth-provider"))


def _from_kubeconfig(paths: list[Path], context: str | None) -> ClusterAccess | None:
    """None when the user section needs the official client's exec/auth-provider support."""
    merged, current = _read_files(paths)
    name = context or current
    if not name:
        raise KubeConfigError("no context named and no current-context set")
    ctx = merged["contexts"].get(name)
    if ctx is None:
        raise KubeConfigError(f"context {name!r} not found")
    cluster = merged["clusters"].get(str(ctx.value.get("cluster") or ""))
    if cluster is None:
        raise KubeConfigError(f"cluster {ctx.value.get('cluster')!r} of context {name!r} not found")
    user = merged["users"].get(str(ctx.value.get("user") or ""), _Named({}, cluster.base))
    if _needs_official_client(user.value):
        return None
    server = str(cluster.value.get("server") or "").rstrip("/")
    if not server:
        raise KubeConfigError(f"cluster {ctx.value.get('cluster')!r} has no server")
    authorization: Authorization = _no_authorization
    token = user.value.get("token")
    if token:
        authorization = _StaticAuthorization(f"Bearer {str(token).strip()}")
    elif user.value.get("tokenFile"):
        authorization = _TokenFile(user.base / Path(str(user.value["tokenFile"])).expanduser())
    elif user.value.get("username") and user.value.get("password"):
        pair = f"{user.value['username']}:{user.value['password']}".encode()
        authorization = _StaticAuthorization("Basic " + base64.b64encode(pair).decode())
    if not server.startswith("https"):
        return ClusterAccess(server, None, authorization)
    ca = _file_or_data(cluster, "certificate-authority", "certificate-authority-data")
    context_ = _pem_files_context(
        ca=ca.decode() if ca else None,
        cert=_file_or_data(user, "client-certificate", "client-certificate-data"),
        key=_file_or_data(user, "client-key", "client-key-data"),
        verify=not cluster.value.get("insecure-skip-tls-verify", False),
    )
    return ClusterAccess(server, context_, authorization)


async def _from_official_client(path: str, context: str | None) -> ClusterAccess:
    """exec plugins and auth-providers: the official client runs them (and refreshes what they return)."""
    from kubernetes.aio import config as kconfig
    from kubernetes.aio.client import Configuration

    configuration = Configuration()
    await kconfig.load_kube_config(config_file=path, context=context, client_configuration=configuration)  # type: ignore[no-untyped-call]

    async def authorization() -> str | None:
        value = await configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
        return str(value) if value else None

    host = str(configuration.host).rstrip("/")
    if not host.startswith("https"):
        return ClusterAccess(host, None, authorization)
    tls = tls_context(
        ca_file=configuration.ssl_ca_cert,
        ca_data=configuration.ca_cert_data,
        cert_file=configuration.cert_file,
        key_file=configuration.key_file,
        verify=configuration.verify_ssl,
    )
    return ClusterAccess(host, tls, authorization)


def in_cluster(environ: Mapping[str, str], directory: Path = SERVICE_ACCOUNT_DIR) -> ClusterAccess:
    """The pod's service account: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, its CA and token."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise KubeConfigError("KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not set")
    hostport = f"[{host}]:{port}" if ":" in host or "%" in host else f"{host}:{port}"  # net.JoinHostPort
    ca = directory / "ca.crt"
    if not ca.is_file() or not ca.read_bytes().strip():
        raise KubeConfigError(f"{ca} is missing or empty")
    return ClusterAccess(f"https://{hostport}", tls_context(ca_file=str(ca)), _TokenFile(directory / "token"))


def _configuration_error(path: str | None, exc: Exception) -> KubeConfigError:
    where = f"kubeconfig {path}" if path else "in-cluster service account"
    return KubeConfigError(f"{where}: {exc} ({MISSING_CONFIGURATION_HINT})")


def _load_native(
    kubeconfig: str | Path | None, context: str | None, env: Mapping[str, str]
) -> tuple[str | None, ClusterAccess | None]:
    """The kubeconfig path(s) used, and the access read from them (None: the official client must read them)."""
    path = str(kubeconfig) if kubeconfig else env.get("KUBECONFIG")
    if not path:
        default = Path.home() / ".kube" / "config"
        path = str(default) if default.is_file() else None
    try:
        if not path:
            return None, in_cluster(env)
        files = [Path(p).expanduser() for p in path.split(os.pathsep) if p]
        existing = [f for f in files if f.exists()]
        if not existing:
            raise KubeConfigError(f"no such file: {path}")
        return path, _from_kubeconfig(existing, context)
    except Exception as exc:  # OSError, YAML and TLS errors: each means "no usable configuration"
        raise _configuration_error(path, exc) from exc


async def load_configuration(
    kubeconfig: str | Path | None = None,
    context: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> ClusterAccess:
    """kubeconfig path, else $KUBECONFIG / ~/.kube/config, else the in-cluster service account."""
    path, access = _load_native(kubeconfig, context, os.environ if environ is None else environ)
    if access is not None:
        return access
    assert path is not None  # (only a kubeconfig's user can need the official client)
    try:
        return await _from_official_client(path, context)
    except Exception as exc:  # the official client's ConfigException, a failing exec plugin
        raise _configuration_error(path, exc) from exc
