"""Running the proxy: over stdio or Streamable HTTP, recording to a hindsight service or in process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
from collections.abc import Callable, Iterator
from typing import Any, cast

import anyio
import uvicorn
from mcp import Client
from mcp.server import Server
from mcp.server.stdio import stdio_server

from cluster.auth import OwnerResolver
from cluster.client import http_client
from cluster.local import BackgroundAnalysis
from cluster.proxy.config import ProxyConfig
from cluster.proxy.relay import Relay
from cluster.proxy.server import Proxy, build_proxy_server
from cluster.services import analysis_for, build_services
from cluster.settings import Settings

logger = logging.getLogger(__name__)

_MAX_LINE = 64 * 1024 * 1024
"""Longest message line read from the agent."""


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


class _Lines:
    """Lines of the agent's stdin as the SDK's stdio server iterates them, read on the event loop."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class _Out:
    """The agent's stdout as the SDK's stdio server writes it, written on the event loop."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode())

    async def flush(self) -> None:
        await self._writer.drain()


async def _pipes() -> tuple[_Lines, _Out] | None:
    """stdin and stdout as event-loop streams when both are pipes (as an MCP client starts the proxy).

    The SDK's default reads and writes them through worker threads: three thread hand-offs per
    message, each a wait for a CPU on a busy machine, where a tool call should cost the proxy
    well under 2 ms. Anything else (a terminal, a file) keeps the default.
    """
    if not all(stat.S_ISFIFO(os.fstat(fd).st_mode) or stat.S_ISSOCK(os.fstat(fd).st_mode) for fd in (0, 1)):
        return None
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_MAX_LINE)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(os.dup(0), "rb", 0))
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, os.fdopen(os.dup(1), "wb", 0))
    writer = asyncio.StreamWriter(transport, protocol, reader, loop)
    return _Lines(reader), _Out(writer)


async def serve_stdio(config: ProxyConfig, connect: Callable[[], Client]) -> None:
    """The proxy on stdin/stdout; on pipes with plain tool calls relayed beside the SDK (relay.py)."""
    pipes = await _pipes()
    if pipes is None or not config.hindsight.relay:
        server = build_proxy_server(config, connect)
        streams = stdio_server(*cast(tuple[Any, Any], pipes)) if pipes is not None else stdio_server()
        async with streams as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return
    lines, out = pipes
    relay = Relay(out)
    server = build_proxy_server(config, connect, relay.attach)
    relay.serve(server)
    async with anyio.create_task_group() as tg:
        relayed = relay.lines(lines, tg)
        async with stdio_server(cast(Any, relayed), cast(Any, relay)) as (read, write):
            await server.run(read, write, server.create_initialization_options())
    logger.info("proxy stopped: %d tool call(s) relayed as JSON-RPC, the rest served through the SDK", relay.relayed)


async def serve_http(server: Server[Proxy], host: str, port: int) -> None:
    app = server.streamable_http_app(host=host)
    await uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).serve()


def run(config: ProxyConfig, settings: Settings, http: tuple[str, int] | None) -> None:
    with recording_client(config, settings) as connect:
        if http is None:
            anyio.run(serve_stdio, config, connect)
        else:
            anyio.run(serve_http, build_proxy_server(config, connect), *http)
