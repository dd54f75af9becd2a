"""Starting a component's HTTP port, and the address it really got."""

from __future__ import annotations

import ssl

from aiohttp import web


async def start_site(
    app: web.Application, host: str, port: int, *, ssl_context: ssl.SSLContext | None = None
) -> tuple[web.AppRunner, str]:
    """Serve `app` until the returned runner is cleaned up.

    Returns the runner and the address the socket is bound to as "host:port": with `port=0` the kernel picks the
    port, and that port (not 0) is what a user must be told to connect to.
    """
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host or None, port, ssl_context=ssl_context).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, bound_address(runner, host, port)


def bound_address(runner: web.BaseRunner, host: str, port: int) -> str:
    if not runner.addresses:
        return f"{host}:{port}"
    bound_host, bound_port = runner.addresses[0][:2]
    shown = f"[{bound_host}]" if ":" in str(bound_host) else str(bound_host)
    return f"{shown}:{bound_port}"


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])
