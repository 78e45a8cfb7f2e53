"""Plain tool calls relayed as JSON-RPC on stdio, beside the SDK's server.

Through the SDK a forwarded call is parsed into models by the proxy's server, dispatched through its
runner and middleware, turned into a request by its client, the upstream's answer parsed into
models, checked against the tool's output schema and serialised again: most of the proxy's CPU per
call. The agent's own client does the same checks on the answer anyway. So a plain ``tools/call``
(name, arguments, ``_meta``; valid as the SDK checks it, :func:`cluster.tool_calls.plain_call`) of a
routed tool on a stdio upstream speaking a handshake-era protocol is taken off the agent's stdin
here: its params go to the upstream's client session as they are, the upstream's result comes back
as JSON (checked against the protocol by the SDK's session, shaped for the agent's protocol version
when the two differ) and is written to the agent's stdout under the agent's request id. It is
recorded as any call is. Everything else (initialize, listings, the proxy's own tools, malformed
or unusual requests, calls to HTTP upstreams) goes to the SDK's server unchanged, so every error
answer for a request the relay does not take is the SDK's.

The result is shaped for the agent's protocol version as the SDK's runner shapes it: unchanged when
the agent and the upstream speak the same version, else through that version's result schema, and
on a 2026-07-28 connection stamped with the proxy's ``serverInfo``. The era is the SDK's choice
too: a connection whose first request carries the 2026-07-28 envelope is modern (each call says its
version, checked by :func:`mcp.shared.inbound.classify_inbound_request`); else the agent's
``initialize`` answer, read as it is written, says the version, and calls are relayed only after
the agent's ``notifications/initialized``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import anyio.abc
import pydantic_core
from mcp.server import Server
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import InboundModernRoute, classify_inbound_request
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data
from mcp_types import PROTOCOL_VERSION_META_KEY, SERVER_INFO_META_KEY, CallToolRequestParams, ErrorData
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from cluster.proxy.server import Proxy, forwarded_meta, refused, session_key
from cluster.proxy.upstream import Upstream
from cluster.tool_calls import METHOD, plain_call, wire_result

logger = logging.getLogger(__name__)

_MESSAGE_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_ENVELOPE = PROTOCOL_VERSION_META_KEY
"""The ``_meta`` key only a 2026-07-28 request carries (how the SDK's runner tells the era)."""


@dataclass(frozen=True)
class _Call:
    """A call taken off the agent's stdin."""

    request_id: str | int
    params: CallToolRequestParams
    meta: Mapping[str, Any]
    """Its ``_meta`` as the agent sent it."""
    upstream: Upstream
    name: str
    """The tool's name at the upstream."""
    shape: str | None
    """The agent's protocol version when the upstream's differs (the result is reshaped), else None."""


class Writer(Protocol):
    """The agent's stdout as the SDK's stdio server writes it: whole lines."""

    async def write(self, text: str) -> None: ...

    async def flush(self) -> None: ...


class Relay:
    """Takes plain tool calls off the agent's stdin while a proxy is attached (:meth:`attach`)."""

    def __init__(self, out: Writer) -> None:
        self._out = out
        self.server: Server[Proxy] | None = None
        self.proxy: Proxy | None = None
        self.modern: bool | None = None
        """Whether the agent's connection is 2026-07-28 era; None until its first request."""
        self.version: str | None = None
        """The handshake version the agent negotiated; None until its initialize is answered."""
        self.relayed = 0
        """Calls relayed so far (the rest went through the SDK)."""
        self._initialize_id: object = None
        self._initialized = False
        self._calls: dict[str | int, anyio.CancelScope] = {}
        self._done = anyio.Event()
        self._done.set()

    def serve(self, server: Server[Proxy]) -> None:
        """The server the relay answers beside; a server with cache hints for tool calls is left
        to answer every call itself (the relay does not apply them)."""
        self.server = server if server.cache_hints.get(METHOD) is None else None

    def attach(self, proxy: Proxy | None) -> None:
        self.proxy = proxy

    async def write(self, text: str) -> None:
        """The SDK's writes to the agent, read for the answer to its initialize on the way."""
        if self.version is None and self._initialize_id is not None and '"protocolVersion"' in text:
            message = _json(text)
            result = message.get("result") if message is not None else None
            if message is not None and message.get("id") == self._initialize_id and isinstance(result, dict):
                version = result.get("protocolVersion")
                self.version = version if isinstance(version, str) else None
        await self._out.write(text)

    async def flush(self) -> None:
        await self._out.flush()

    async def lines(self, source: AsyncIterator[str], tg: anyio.abc.TaskGroup) -> AsyncIterator[str]:
        """``source`` without the lines relayed (their calls run in ``tg``). At its end, waits for
        the calls in flight, so the SDK sees the agent leave only after they are answered and recorded."""
        async for line in source:
            if not self._take(line, tg):
                yield line
        await self._done.wait()

    def _take(self, line: str, tg: anyio.abc.TaskGroup) -> bool:
        if self.modern is None or (not self.modern and not self._initialized):
            self._handshake(line)
            return False
        if '"notifications/cancelled"' in line and self._calls:
            self._cancel(line)
            return False
        proxy = self.proxy
        if proxy is None or self.server is None or f'"{METHOD}"' not in line:
            return False
        message = _json(line)
        if message is None or message.get("jsonrpc") != "2.0" or not set(message) <= _MESSAGE_KEYS:
            return False
        request_id = message.get("id")
        raw = message.get("params")
        if isinstance(request_id, bool) or not isinstance(request_id, str | int) or request_id in self._calls:
            return False
        if not isinstance(raw, dict):
            return False
        version = self._version(message)
        if version is None or (params := plain_call(message.get("method", ""), raw, version)) is None:
            return False
        route = proxy.routes.get(params.name)
        upstream_version = route[0].relay_version() if route is not None else None
        if route is None or upstream_version is None:
            return False
        meta = raw.get("_meta")
        call = _Call(
            request_id,
            params,
            meta if isinstance(meta, dict) else {},
            *route,
            None if version == upstream_version else version,
        )
        self._calls[request_id] = anyio.CancelScope()
        self._done = anyio.Event() if self._done.is_set() else self._done
        tg.start_soon(self._call, proxy, call)
        self.relayed += 1
        return True

    def _version(self, message: Mapping[str, Any]) -> str | None:
        """The protocol version this request is served under, if the relay may answer it."""
        if not self.modern:
            return self.version if self.version in HANDSHAKE_PROTOCOL_VERSIONS else None
        route = classify_inbound_request(message)
        return route.protocol_version if isinstance(route, InboundModernRoute) else None

    def _handshake(self, line: str) -> None:
        """Follow the agent's opening as the SDK's runner decides the era (its first request)."""
        message = _json(line)
        if message is None:
            return
        method = message.get("method")
        if self.modern is None and "id" in message and isinstance(method, str):
            params = message.get("params")
            meta = params.get("_meta") if isinstance(params, dict) else None
            self.modern = method != "initialize" and isinstance(meta, dict) and _ENVELOPE in meta
        if method == "initialize" and "id" in message:
            self._initialize_id = message["id"]
        elif method == "notifications/initialized":
            self._initialized = True

    def _cancel(self, line: str) -> None:
        """The agent gave up on a relayed call: stop waiting for it (its answer is never written);
        the SDK's session tells the upstream. The notification still goes to the SDK, which ignores
        ids it does not know."""
        message = _json(line)
        params = message.get("params") if message is not None else None
        request_id = params.get("requestId") if isinstance(params, dict) else None
        scope = self._calls.get(request_id) if isinstance(request_id, str | int) else None
        if scope is not None:
            scope.cancel()

    async def _call(self, proxy: Proxy, call: _Call) -> None:
        try:
            with self._calls[call.request_id]:
                reply = await self._forward(proxy, call)
                await self._out.write(pydantic_core.to_json(reply).decode() + "\n")
                await self._out.flush()
        finally:
            del self._calls[call.request_id]
            if not self._calls:
                self._done.set()

    async def _forward(self, proxy: Proxy, call: _Call) -> dict[str, Any]:
        """The JSON-RPC answer for the agent, the call recorded."""
        params, meta = call.params, call.meta
        key = session_key(meta)
        forwarded = params.model_copy(update={"name": call.name, "meta": forwarded_meta(meta) or None})
        start = time.perf_counter()
        try:
            result = await call.upstream.call_tool_json(forwarded)
            if call.shape is not None:
                result = self._shaped(call.shape, result)
        except MCPError as exc:
            # Refused by the upstream: its error as it came, recorded as the failure it was.
            proxy.record(key, params.name, params.arguments, refused(exc), start, meta)
            return _error(call.request_id, exc.error)
        except Exception as exc:  # as the SDK's server answers a handler that raised
            logger.exception("relaying %s to %s", params.name, call.upstream.name)
            error = handler_exception_to_error_data(exc) or ErrorData(code=0, message=str(exc))
            return _error(call.request_id, error)
        proxy.record(key, params.name, params.arguments, result, start, meta)
        return {"jsonrpc": "2.0", "id": call.request_id, "result": result}

    def _shaped(self, version: str, result: Mapping[str, Any]) -> dict[str, Any]:
        """``result`` as the SDK's runner answers under ``version`` (its ``_serialize``): a result
        from an older upstream is a complete one, as the SDK's model reads it."""
        if version not in MODERN_PROTOCOL_VERSIONS:
            return wire_result(version, result)
        shaped = wire_result(version, {"resultType": "complete", **result})
        if self.server is not None:
            meta = shaped.get("_meta")
            if meta is None or (isinstance(meta, dict) and meta.get(SERVER_INFO_META_KEY) is None):
                shaped["_meta"] = {**(meta or {}), SERVER_INFO_META_KEY: self.server.server_info_stamp}
        return shaped


def _error(request_id: str | int, error: ErrorData) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.model_dump(by_alias=True, exclude_none=True)}


def _json(text: str) -> dict[str, Any] | None:
    try:
        value = pydantic_core.from_json(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
