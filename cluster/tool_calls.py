"""One stateless ``tools/call`` answered without the MCP SDK's per-request session.

The service speaks MCP over Streamable HTTP in stateless JSON mode: each POST carries one JSON-RPC
request and gets one JSON answer. For that the SDK still builds a transport, a session, a task
group, memory streams, a dispatcher and its middleware chain per request: measured under load,
about a third of a replica's CPU for a memory call. :class:`ToolCalls` answers the common request
(one ``tools/call`` of a registered tool under a handshake-era protocol version, with headers the
SDK accepts) from the SDK's own pieces: its message and request validation, its tool handler
(argument validation, error mapping, result conversion) and its result serialisation. Every other
request (initialize, tools/list, notifications, batches, anything malformed or unusual) goes to the
SDK app with its body replayed, so every error answer is the SDK's.

What it leaves out is what a stateless JSON answer cannot carry anyway: a tool here cannot send the
client requests, notifications or progress (no session; this project's tools read only the HTTP
request and the server's lifespan state from their context), and the SDK's tracing spans are not
opened (no tracer is configured). tests/reliability/test_tool_calls.py checks that both paths
answer alike.

Everything it uses of the SDK is public: the low-level server behind the Streamable HTTP app
(``server.session_manager.app``), its registered ``tools/call`` handler and its lifespan, and the
server's tool list. It answers while :meth:`ToolCalls.running` is entered, beside the SDK's
``session_manager.run()``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

import pydantic_core
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import RequestHandler
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http import check_accept_headers
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import (
    DEFAULT_NEGOTIATED_VERSION,
    INTERNAL_ERROR,
    CallToolRequestParams,
    JSONRPCError,
    JSONRPCRequest,
    JSONRPCResponse,
    jsonrpc_message_adapter,
)
from mcp_types import methods as spec_methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)

METHOD = "tools/call"
# Params a plain call carries; anything else (a 2026-era ``requestState``, say) is the SDK's to read.
_PLAIN_PARAMS = frozenset({"name", "arguments", "_meta"})
# The middleware MCPServer installs itself; with any other, every request takes the SDK's path.
_SDK_MIDDLEWARE = frozenset({"OpenTelemetryMiddleware", "RequestStateBoundary"})


@dataclass(frozen=True)
class _Serving:
    """What the direct path answers with while the app runs."""

    lifespan_state: Any  # what the server's lifespan yielded: what its tools read from their context
    tools: frozenset[str]  # the tools the server lists; a call of any other goes to the SDK


class ToolCalls:
    """ASGI app in front of the SDK's Streamable HTTP app (stateless, JSON responses).

    ``server.streamable_http_app()`` must have been called: this answers with the low-level server
    behind it.
    """

    def __init__(self, app: ASGIApp, server: MCPServer[Any], *, max_body_bytes: int) -> None:
        self.app = app
        self.server = server
        self.max_body_bytes = max_body_bytes
        self._lowlevel = server.session_manager.app
        entry = self._lowlevel.get_request_handler(METHOD)
        self._handler: RequestHandler[Any, Any] | None = None if entry is None else entry.handler
        self.enabled = self._handler is not None and {type(m).__name__ for m in server.middleware} <= _SDK_MIDDLEWARE
        self._serving: _Serving | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Answer plain tool calls while entered; before and after, every request goes to the SDK.

        Enters the server's lifespan as the SDK's session manager does, for the state its tools
        read; this project's lifespan yields the one toolbox built with the server, so both paths
        serve the same one.
        """
        async with self._lowlevel.lifespan(self._lowlevel) as state:
            tools = frozenset(tool.name for tool in await self.server.list_tools())
            self._serving = _Serving(lifespan_state=state, tools=tools)
            try:
                yield
            finally:
                self._serving = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        serving = self._serving
        version = self._version(scope) if self.enabled and serving is not None else None
        if version is None or serving is None or self._handler is None:
            await self.app(scope, receive, send)
            return
        body, rest = await _read_body(receive, self.max_body_bytes)
        call = self._parse(body, version) if rest is None else None
        if call is None:
            await self.app(scope, _replay(body, rest, receive), send)
            return
        request_id, raw, params = call
        ctx: ServerRequestContext[Any, Request] = ServerRequestContext(
            # No session: a stateless JSON answer has no channel back to the client.
            session=cast(Any, None),
            lifespan_context=serving.lifespan_state,
            protocol_version=version,
            method=METHOD,
            params=raw,
            request_id=request_id,
            meta=params.meta,
            request=Request(scope),
        )
        reply: JSONRPCResponse | JSONRPCError
        try:
            result = await self._handler(ctx, params)
            reply = JSONRPCResponse(jsonrpc="2.0", id=request_id, result=self._wire(version, result))
        except MCPError as exc:
            reply = JSONRPCError(jsonrpc="2.0", id=request_id, error=exc.error)
        response = Response(
            reply.model_dump_json(by_alias=True, exclude_unset=True), headers={"Content-Type": "application/json"}
        )
        await response(scope, receive, send)

    def _version(self, scope: Scope) -> str | None:
        """The protocol version of a POST this path may answer, from its headers; else None."""
        if scope["type"] != "http" or scope["method"] != "POST":
            return None
        if scope["path"].removeprefix(scope.get("root_path", "")) != "/":
            return None
        request = Request(scope)
        headers = request.headers
        version: str = headers.get(MCP_PROTOCOL_VERSION_HEADER, DEFAULT_NEGOTIATED_VERSION)
        if version not in HANDSHAKE_PROTOCOL_VERSIONS:
            return None
        media = headers.get("content-type", "").split(";")[0].split(",")
        if not any(part.strip() == "application/json" for part in media):
            return None
        if not check_accept_headers(request)[0]:
            return None
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body_bytes):
            return None
        return version

    def _parse(self, body: bytes, version: str) -> tuple[str | int, dict[str, Any], CallToolRequestParams] | None:
        """The id and params of a valid call of a registered tool, checked as the SDK checks them."""
        try:
            message = jsonrpc_message_adapter.validate_python(pydantic_core.from_json(body), by_name=False)
        except ValueError:  # pydantic's ValidationError is one
            return None
        if not isinstance(message, JSONRPCRequest):
            return None
        params = plain_call(message.method, message.params, version)
        serving = self._serving
        if params is None or message.params is None or serving is None or params.name not in serving.tools:
            return None
        return message.id, message.params, params

    @staticmethod
    def _wire(version: str, result: Any) -> dict[str, Any]:
        """The result as the SDK's runner shapes it for a handshake-era connection."""
        return wire_result(version, result.model_dump(by_alias=True, mode="json", exclude_none=True))


def plain_call(method: str, params: Mapping[str, Any] | None, version: str) -> CallToolRequestParams | None:
    """The params of a plain ``tools/call`` (name, arguments, _meta) valid under ``version`` as the
    SDK checks them; None for any other request, which is the SDK's to answer."""
    if method != METHOD or params is None or not set(params) <= _PLAIN_PARAMS:
        return None
    try:
        spec_methods.validate_client_request(METHOD, version, params)
        return CallToolRequestParams.model_validate(params, by_name=False)
    except (ValueError, KeyError):  # pydantic's ValidationError is a ValueError
        return None


def wire_result(version: str, dumped: Mapping[str, Any]) -> dict[str, Any]:
    """A ``tools/call`` result (JSON) as the SDK's runner shapes it for a handshake-era connection.

    Raises:
        MCPError: The result is not a valid ``tools/call`` result under ``version``.
    """
    try:
        return spec_methods.serialize_server_result(METHOD, version, dumped)
    except ValidationError:
        logger.exception("handler for %r returned an invalid result", METHOD)
        raise MCPError(code=INTERNAL_ERROR, message="Handler returned an invalid result") from None


async def _read_body(receive: Receive, limit: int) -> tuple[bytes, Message | None]:
    """The request body, or as much of it as was read before it passed ``limit`` or the client left
    (then the message that stopped the read comes back too, to be replayed)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), message
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), None
        if size > limit:
            return b"".join(chunks), {"type": "http.request", "body": b"", "more_body": True}


def _replay(body: bytes, rest: Message | None, receive: Receive) -> Receive:
    """A ``receive`` that gives the SDK app the body already read, then the rest of the stream."""
    pending: list[Message] = []
    if rest is not None and rest["type"] != "http.request":
        pending.append(rest)
    pending.append(
        {"type": "http.request", "body": body, "more_body": rest is not None and rest["type"] == "http.request"}
    )

    async def replayed() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replayed
