"""A component started with port 0 reports the port the kernel gave it, and that port answers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from common.http_server import port_of, start_site


def test_port_zero_reports_the_bound_port() -> None:
    async def scenario() -> tuple[str, str]:
        app = web.Application()

        async def hello(_request: web.Request) -> web.Response:
            return web.Response(text="hi")

        app.router.add_get("/", hello)
        runner, address = await start_site(app, "127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as session, session.get(f"http://{address}/") as response:
                return address, await response.text()
        finally:
            await runner.cleanup()

    address, body = asyncio.run(scenario())
    assert address.startswith("127.0.0.1:")
    assert port_of(address) > 0
    assert body == "hi"


def test_missing_cluster_configuration_says_what_to_pass(tmp_path: Path) -> None:
    from common.kube.kubeconfig import KubeConfigError, load_configuration

    broken = tmp_path / "kubeconfig"
    broken.write_text("clusters: [this is: not: yaml")
    with pytest.raises(KubeConfigError) as info:
        asyncio.run(load_configuration(broken))
    message = str(info.value)
    assert str(broken) in message
    assert "--kubeconfig" in message and "$KUBECONFIG" in message
