"""One upstream MCP server behind the proxy: kept connected, restarted when it dies or hangs.

The official client owns the connection (a child process over stdio, or Streamable HTTP). Its
context lives in one task of its own (:meth:`Upstream.run`), because the SDK's transports hold task
groups that must be left by the task that entered them; a restart asks that task to leave and enter
again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar, cast

import anyio
import anyio.abc
import httpx2
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import (
    CONNECTION_CLOSED,
    CallToolRequest,
    CallToolRequestParams,
    CallToolResult,
    GetPromptResult,
    Prompt,
    ReadResourceResult,
    RequestParamsMeta,
    Resource,
    ServerCapabilities,
    TextContent,
    Tool,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import TypeAdapter

from cluster.proxy.config import UpstreamSpec

logger = logging.getLogger(__name__)

_MAX_PAGES = 100
"""Listing pages read from one upstream: a server whose cursor never ends cannot hang the proxy."""
_BACKOFF_S = (0.1, 0.5, 2.0, 5.0)
"""Pauses between failed starts in a row, then the last one again."""
_JSON_RESULT = TypeAdapter(dict[str, Any])
"""A result taken as the JSON object it is (the SDK has checked it against the protocol)."""
_R = TypeVar("_R")


def error_result(message: str) -> CallToolResult:
    """A tool result the model reads as a failure (``isError``), as servers report tool errors."""
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


def _client(spec: UpstreamSpec, timeout_s: float) -> Client:
    if spec.command is not None:
        params = StdioServerParameters(command=spec.command, args=spec.args, env=spec.env, cwd=spec.cwd)
        return Client(params, read_timeout_seconds=timeout_s)
    assert spec.url is not None
    http = httpx2.AsyncClient(headers=spec.headers, timeout=timeout_s)
    return Client(streamable_http_client(spec.url, http_client=http), read_timeout_seconds=timeout_s)


class Upstream:
    """A named upstream server and the tools, resources and prompts it listed when it (re)started."""

    def __init__(self, name: str, spec: UpstreamSpec, timeout_s: float) -> None:
        self.name = name
        self.spec = spec
        self.timeout_s = timeout_s
        self.tools: list[Tool] = []
        self.resources: list[Resource] = []
        self.prompts: list[Prompt] = []
        self.capabilities = ServerCapabilities()
        self.starts = 0
        self.last_error: str | None = None
        self._client: Client | None = None
        self._ready = anyio.Event()
        self._restart = anyio.Event()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Keep the upstream connected until cancelled. Reports started after the first attempt,
        whether it worked or not: a server that cannot start answers each call with why."""
        failures = 0
        reported = False
        while True:
            try:
                async with _client(self.spec, self.timeout_s) as client:
                    with anyio.fail_after(self.timeout_s):
                        await self._read_listings(client)
                    self._client = client
                    self.starts += 1
                    self.last_error = None
                    failures = 0
                    self._ready.set()
                    if not reported:
                        task_status.started()
                        reported = True
                    await self._restart.wait()
            except Exception as exc:  # the server would not start, or its connection broke on the way out
                self.last_error = _describe(exc)
                logger.warning("upstream %s: %s", self.name, self.last_error)
                failures += 1
            finally:
                self._client = None
                self._ready = anyio.Event()
                self._restart = anyio.Event()
            if not reported:
                task_status.started()
                reported = True
            if failures:
                await anyio.sleep(_BACKOFF_S[min(failures, len(_BACKOFF_S)) - 1])

    def restart(self, reason: str) -> None:
        """Drop the connection (ending a stdio server's process) and start again."""
        if self._client is not None:
            logger.warning("upstream %s: restarting (%s)", self.name, reason)
            self.last_error = reason
            self._restart.set()

    async def _read_listings(self, client: Client) -> None:
        self.capabilities = client.server_capabilities
        self.tools = await _all_pages(lambda cursor: client.list_tools(cursor=cursor, cache_mode="bypass"), "tools")
        self.resources = (
            await _all_pages(lambda cursor: client.list_resources(cursor=cursor), "resources")
            if self.capabilities.resources is not None
            else []
        )
        self.prompts = (
            await _all_pages(lambda cursor: client.list_prompts(cursor=cursor), "prompts")
            if self.capabilities.prompts is not None
            else []
        )

    async def _connected(self) -> Client:
        """The live client, waiting up to the call timeout for a (re)start in progress."""
        if self._client is None:
            with anyio.move_on_after(self.timeout_s):
                await self._ready.wait()
        if self._client is None:
            raise _Unavailable(
                f"UpstreamUnavailable: server {self.name!r} is not running ({self.last_error or 'starting'}); "
                "it is restarted automatically, try again shortly"
            )
        return self._client

    async def refresh_tools(self) -> list[Tool]:
        """Ask the upstream again (the agent listed tools): its tools may have changed. One that is
        not running keeps its last listing: the agent's list never waits for a restart."""
        client = self._client
        if client is None:
            return self.tools
        try:
            with anyio.fail_after(self.timeout_s):
                self.tools = await _all_pages(
                    lambda cursor: client.list_tools(cursor=cursor, cache_mode="bypass"), "tools"
                )
        except Exception as exc:  # keep the last listing: a tool list is never worth failing over
            logger.warning("upstream %s: tools/list failed: %s", self.name, _describe(exc))
        return self.tools

    async def call_tool(self, name: str, arguments: dict[str, Any] | None, meta: Mapping[str, Any]) -> CallToolResult:
        """The upstream's answer; a dead or hung upstream answers an error result and is restarted.
        An error the upstream itself sends (a JSON-RPC error) is raised unchanged for the caller."""

        async def send(client: Client) -> CallToolResult:
            return await client.call_tool(name, arguments, meta=cast(RequestParamsMeta, dict(meta)) if meta else None)

        return await self._call(name, send, error_result)

    def relay_version(self) -> str | None:
        """The protocol version a call may be relayed to this upstream as JSON under (see
        :meth:`call_tool_json`); None while it is not connected or speaks a per-request-envelope
        version, whose calls take the SDK's path (header checks, retries)."""
        client = self._client
        if client is None or self.spec.command is None:
            return None
        version = client.protocol_version
        return version if version in HANDSHAKE_PROTOCOL_VERSIONS else None

    async def call_tool_json(self, params: CallToolRequestParams) -> dict[str, Any]:
        """:meth:`call_tool` for a relay: the result as the upstream sent it (JSON, checked against
        the protocol as the SDK checks any result), without turning it into models and back; the
        agent's own client checks it against the tool's output schema."""

        async def send(client: Client) -> dict[str, Any]:
            # The SDK types the result adapter as a model's; at run time any adapter reads the JSON.
            result = await client.session.send_request(CallToolRequest(params=params), cast(Any, _JSON_RESULT))
            return cast(dict[str, Any], result)

        return await self._call(
            params.name, send, lambda text: error_result(text).model_dump(by_alias=True, mode="json", exclude_none=True)
        )

    async def _call(self, name: str, send: Callable[[Client], Awaitable[_R]], failed: Callable[[str], _R]) -> _R:
        try:
            client = await self._connected()
        except _Unavailable as exc:
            return failed(str(exc))
        try:
            with anyio.fail_after(self.timeout_s):
                return await send(client)
        except TimeoutError:
            self.restart(f"{name} did not answer within {self.timeout_s:g} s")
            return failed(
                f"UpstreamTimeout: server {self.name!r} did not answer {name} within {self.timeout_s:g} s; "
                "it is being restarted, so the call may be tried again"
            )
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise
            return failed(self._broken(name, exc))
        except _BROKEN as exc:
            return failed(self._broken(name, exc))

    def _broken(self, name: str, exc: BaseException) -> str:
        self.restart(f"connection lost during {name}: {_describe(exc)}")
        return (
            f"UpstreamUnavailable: server {self.name!r} stopped while running {name} ({_describe(exc)}); "
            "it is being restarted, so the call may be tried again"
        )

    async def read_resource(self, uri: str) -> ReadResourceResult:
        client = await self._connected()
        with anyio.fail_after(self.timeout_s):
            return await client.read_resource(uri)

    async def get_prompt(self, name: str, arguments: dict[str, str] | None) -> GetPromptResult:
        client = await self._connected()
        with anyio.fail_after(self.timeout_s):
            return await client.get_prompt(name, arguments)


_BROKEN = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError, httpx2.HTTPError)
"""What a call raises when the connection to the upstream is gone."""


class _Unavailable(Exception):
    pass


async def _all_pages(fetch: Any, field: str) -> list[Any]:
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await fetch(cursor)
        items.extend(getattr(page, field))
        cursor = page.next_cursor
        if cursor is None:
            break
    return items


def _describe(exc: BaseException) -> str:
    """One line for a failure, the innermost cause of an exception group included."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 300 else text[:300] + "..."
