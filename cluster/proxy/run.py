"""Running the proxy: over stdio or Streamable HTTP, recording to a hindsight service or in process."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import anyio
import uvicorn
from mcp import Client
from mcp.server import Server
from mcp.server.stdio import stdio_server

from cluster.auth import OwnerResolver
from cluster.client import http_client
from cluster.local import BackgroundAnalysis
from cluster.proxy.config import ProxyConfig
from cluster.proxy.server import Proxy, build_proxy_server
from cluster.services import analysis_for, build_services
from cluster.settings import Settings


@contextlib.contextmanager
def recording_client(config: ProxyConfig, settings: Settings) -> Iterator[Callable[[], Client]]:
    """How the proxy reaches hindsight: the configured service URL, else hindsight's own tools in this
    process on the settings' stores (with the analysis on a background thread, as ``hindsight stdio``)."""
    spec = config.hindsight
    if spec.url is not None:
        url = spec.url
        yield lambda: http_client(url, spec.token, timeout=spec.call_timeout_s)
        return
    from cluster.tools import build_server

    services = build_services(settings)
    background = BackgroundAnalysis(analysis_for(services))
    background.start()
    server = build_server(services, OwnerResolver({}, settings.local_owner))
    try:
        yield lambda: Client(server)
    finally:
        background.stop()
        services.close()


async def serve_stdio(server: Server[Proxy]) -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def serve_http(server: Server[Proxy], host: str, port: int) -> None:
    app = server.streamable_http_app(host=host)
    await uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).serve()


def run(config: ProxyConfig, settings: Settings, http: tuple[str, int] | None) -> None:
    with recording_client(config, settings) as connect:
        server = build_proxy_server(config, connect)
        if http is None:
            anyio.run(serve_stdio, server)
        else:
            anyio.run(serve_http, server, *http)
