"""Kubernetes client plumbing on `kubernetes.aio` (aiohttp, one event loop)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import cast

from kubernetes.aio import client as kclient
from kubernetes.aio import config as kconfig


async def api_client(kubeconfig: str | Path | None = None, *, context: str | None = None) -> kclient.ApiClient:
    """An ApiClient from an explicit kubeconfig, $KUBECONFIG, ~/.kube/config, or the in-cluster service account."""
    path = str(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG")
    if not path:
        default = Path.home() / ".kube" / "config"
        if default.is_file():
            path = str(default)
    if path:
        client = await kconfig.new_client_from_config(config_file=path, context=context)  # type: ignore[no-untyped-call]
        return cast(kclient.ApiClient, client)
    configuration = kclient.Configuration()
    kconfig.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return kclient.ApiClient(configuration)
