"""Certificates and keys for a throw-away control plane, made with the openssl CLI.

EC P-256 keys: generated in milliseconds, accepted by kube-apiserver for serving and for
ServiceAccount token signing (ES256).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path
    kubelet_client_cert: Path  # kube-apiserver -> kubelet (logs, exec), trusted through ca_cert
    kubelet_client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(directory: Path) -> Pki:
    if shutil.which("openssl") is None:
        raise RuntimeError(
            "openssl is required to create the test control plane's certificates (apt-get install openssl)"
        )
    directory.mkdir(parents=True, exist_ok=True)
    ec = ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]
    _openssl("genpkey", *ec, "-out", "ca.key", cwd=directory)
    _openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        "ca.key",
        "-subj",
        "/CN=loadline-test-ca",
        "-days",
        "3",
        "-out",
        "ca.crt",
        cwd=directory,
    )
    _openssl("genpkey", *ec, "-out", "apiserver.key", cwd=directory)
    _openssl(
        "req", "-new", "-key", "apiserver.key", "-subj", "/CN=kube-apiserver", "-out", "apiserver.csr", cwd=directory
    )
    (directory / "san.ext").write_text(
        # 10.0.0.1: the `kubernetes` Service (first address of --service-cluster-ip-range), which pods on a
        # real node reach through the harness's DNAT.
        "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc\n"
        "extendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "3", "-extfile", "san.ext", "-out", "apiserver.crt", cwd=directory,
    )  # fmt: skip
    _openssl("genpkey", *ec, "-out", "kubelet-client.key", cwd=directory)
    _openssl("req", "-new", "-key", "kubelet-client.key", "-subj", "/O=system:masters/CN=kube-apiserver-kubelet-client",
             "-out", "kubelet-client.csr", cwd=directory)  # fmt: skip
    (directory / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    _openssl(
        "x509", "-req", "-in", "kubelet-client.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "3", "-extfile", "client.ext", "-out", "kubelet-client.crt", cwd=directory,
    )  # fmt: skip
    _openssl("genpkey", *ec, "-out", "sa.key", cwd=directory)
    _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)
    return Pki(
        ca_cert=directory / "ca.crt",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        sa_key=directory / "sa.key",
        sa_pub=directory / "sa.pub",
        kubelet_client_cert=directory / "kubelet-client.crt",
        kubelet_client_key=directory / "kubelet-client.key",
    )
