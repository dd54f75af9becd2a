"""common.kube.kubeconfig against a real TLS server that asks for client certificates (certificates made by
the harness's openssl PKI): what each kind of kubeconfig sends, and where it looks for files."""

from __future__ import annotations

import asyncio
import base64
import ssl
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from common.kube import kubeconfig
from common.kube.http import KubeHTTP
from common.kube.kubeconfig import KubeConfigError, load_configuration
from tests.harness.pki import Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@asynccontextmanager
async def tls_server(pki: Pki) -> AsyncIterator[str]:
    """https://127.0.0.1:PORT answering /whoami with the Authorization header and the client certificate's CN."""

    async def whoami(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(item[0] for item in (peer or {}).get("subject", ()))
        return web.json_response(
            {"authorization": request.headers.get("Authorization"), "cn": subject.get("commonName")}
        )

    app = web.Application()
    app.router.add_get("/whoami", whoami)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca_cert))
    context.load_cert_chain(pki.serving_cert, pki.serving_key)
    context.verify_mode = ssl.CERT_OPTIONAL  # a client certificate is checked against the CA when one is sent
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"https://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_config(path: Path, *, clusters: dict[str, Any], users: dict[str, Any], contexts: dict[str, Any],
                 current: str | None = None) -> Path:  # fmt: skip
    doc: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": k, "cluster": v} for k, v in clusters.items()],
        "users": [{"name": k, "user": v} for k, v in users.items()],
        "contexts": [{"name": k, "context": v} for k, v in contexts.items()],
    }  # fmt: skip
    if current:
        doc["current-context"] = current
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def whoami(pki: Pki, load: Callable[[str], Awaitable[kubeconfig.ClusterAccess]]) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        async with tls_server(pki) as server:
            http = KubeHTTP(await load(server))
            try:
                return await http.get("/whoami")
            finally:
                await http.close()

    return asyncio.run(run())


def test_certificate_data_and_token_reach_a_tls_server(pki: Pki, tmp_path: Path) -> None:
    async def load(server: str) -> kubeconfig.ClusterAccess:
        path = write_config(
            tmp_path / "config",
            clusters={"c": {"server": server + "/", "certificate-authority-data": b64(pki.ca_cert)}},
            users={"u": {"token": "s3cret\n", "client-certificate-data": b64(pki.kubelet_client_cert),
                         "client-key-data": b64(pki.kubelet_client_key)}},
            contexts={"ctx": {"cluster": "c", "user": "u"}}, current="ctx",
        )  # fmt: skip
        return await load_configuration(path)

    answer = whoami(pki, load)
    assert answer == {"authorization": "Bearer s3cret", "cn": "kube-apiserver-kubelet-client"}
    assert not list(tmp_path.glob("**/client.key"))  # the key written for load_cert_chain is gone


def test_merged_kubeconfig_files_first_wins_and_paths_are_relative_to_their_file(pki: Pki, tmp_path: Path) -> None:
    (tmp_path / "a" / "pki").mkdir(parents=True)
    (tmp_path / "a" / "pki" / "ca.crt").write_bytes(pki.ca_cert.read_bytes())
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "token").write_text("from-b\n")

    async def load(server: str) -> kubeconfig.ClusterAccess:
        first = write_config(tmp_path / "a" / "config", clusters={"c": {"server": server,
                             "certificate-authority": "pki/ca.crt"}}, users={},
                             contexts={"ctx": {"cluster": "c", "user": "u"}}, current="ctx")  # fmt: skip
        second = write_config(tmp_path / "b" / "config", clusters={"c": {"server": "https://127.0.0.1:1"}},
                              users={"u": {"tokenFile": "token"}},
                              contexts={"other": {"cluster": "c", "user": "u"}}, current="other")  # fmt: skip
        return await load_configuration(environ={"KUBECONFIG": f"{first}:{tmp_path / 'missing'}:{second}"})

    assert whoami(pki, load) == {"authorization": "Bearer from-b", "cn": None}


def test_basic_auth_and_insecure_skip_tls_verify(pki: Pki, tmp_path: Path) -> None:
    async def load(server: str) -> kubeconfig.ClusterAccess:
        path = write_config(tmp_path / "config", clusters={"c": {"server": server, "insecure-skip-tls-verify": True}},
                            users={"u": {"username": "ann", "password": "pw"}},
                            contexts={"ctx": {"cluster": "c", "user": "u"}})  # fmt: skip
        return await load_configuration(path, context="ctx")

    assert whoami(pki, load)["authorization"] == "Basic " + base64.b64encode(b"ann:pw").decode()


def test_without_the_ca_the_server_is_not_trusted(pki: Pki, tmp_path: Path) -> None:
    async def load(server: str) -> kubeconfig.ClusterAccess:
        path = write_config(tmp_path / "config", clusters={"c": {"server": server}}, users={},
                            contexts={"ctx": {"cluster": "c"}}, current="ctx")  # fmt: skip
        return await load_configuration(path)

    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        whoami(pki, load)


def test_in_cluster_service_account_rereads_a_rotated_token(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ca.crt").write_bytes(pki.ca_cert.read_bytes())
    (tmp_path / "token").write_text("first")
    seen: list[str | None] = []

    async def run() -> None:
        async with tls_server(pki) as server:
            port = server.rsplit(":", 1)[1]
            access = kubeconfig.in_cluster({"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port},
                                           directory=tmp_path)  # fmt: skip
            assert access.host == server
            http = KubeHTTP(access)
            try:
                seen.append((await http.get("/whoami"))["authorization"])
                (tmp_path / "token").write_text("second")
                seen.append((await http.get("/whoami"))["authorization"])  # within the minute: still the first
                monkeypatch.setattr(kubeconfig, "TOKEN_REFRESH_SECONDS", 0.0)
                seen.append((await http.get("/whoami"))["authorization"])
            finally:
                await http.close()

    asyncio.run(run())
    assert seen == ["Bearer first", "Bearer first", "Bearer second"]


def test_in_cluster_ipv6_host_is_bracketed_and_missing_environment_is_an_error(pki: Pki, tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_bytes(pki.ca_cert.read_bytes())
    (tmp_path / "token").write_text("t")
    access = kubeconfig.in_cluster({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"},
                                   directory=tmp_path)  # fmt: skip
    assert access.host == "https://[fd00::1]:443"
    with pytest.raises(KubeConfigError, match="KUBERNETES_SERVICE_HOST"):
        kubeconfig.in_cluster({}, directory=tmp_path)


def test_exec_plugin_users_go_through_the_official_client(pki: Pki, tmp_path: Path) -> None:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json\nprint(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',"
        " 'status': {'token': 'from-exec'}}))\n"
    )

    async def load(server: str) -> kubeconfig.ClusterAccess:
        exec_ = {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable, "args": [str(plugin)],
                 "interactiveMode": "Never"}  # fmt: skip
        path = write_config(tmp_path / "config",
                            clusters={"c": {"server": server, "certificate-authority-data": b64(pki.ca_cert)}},
                            users={"u": {"exec": exec_}}, contexts={"ctx": {"cluster": "c", "user": "u"}},
                            current="ctx")  # fmt: skip
        return await load_configuration(path)

    assert whoami(pki, load)["authorization"] == "Bearer from-exec"


@pytest.mark.parametrize(
    ("contexts", "current", "message"),
    [({}, None, "no context named"), ({"x": {"cluster": "c"}}, "y", "context 'y' not found"),
     ({"x": {"cluster": "nope"}}, "x", "cluster 'nope'")],
)  # fmt: skip
def test_an_unusable_kubeconfig_says_which_file_and_why(
    tmp_path: Path, contexts: dict[str, Any], current: str | None, message: str
) -> None:
    path = write_config(tmp_path / "config", clusters={"c": {"server": "https://127.0.0.1:1"}}, users={},
                        contexts=contexts, current=current)  # fmt: skip
    with pytest.raises(KubeConfigError) as info:
        asyncio.run(load_configuration(path))
    assert str(path) in str(info.value) and message in str(info.value) and "--kubeconfig" in str(info.value)
