"""The HTTP face of the service: MCP over Streamable HTTP at ``/mcp/``, ``/health``, ``/metrics`` and the
read-only console at ``/ui/``."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext

import anyio.to_thread
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecuritySettings
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.types import ASGIApp, Receive, Scope, Send

from cluster.auth import OwnerResolver
from cluster.console.routes import console_routes
from cluster.core.errors import Unauthorized
from cluster.services import Services
from cluster.tool_calls import ToolCalls
from cluster.tools import build_server

logger = logging.getLogger(__name__)


class BearerAuth:
    """Rejects MCP requests without a valid bearer token before any tool runs (401, JSON detail)."""

    def __init__(self, app: ASGIApp, owners: OwnerResolver) -> None:
        self.app = app
        self.owners = owners

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self.owners.development_mode:
            try:
                self.owners.owner_for(Request(scope))
            except Unauthorized as exc:
                response = JSONResponse(
                    {"error": "unauthorized", "detail": str(exc)},
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class McpFirst:
    """Hands ``/mcp/`` requests straight to the MCP app and everything else (lifespan included) to
    FastAPI. Tool calls are the hot path: FastAPI's middleware and routing would add ~10% to each."""

    def __init__(self, app: ASGIApp, mcp: ASGIApp) -> None:
        self.app = app
        self.mcp = mcp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            root = scope.get("root_path", "")
            path: str = scope["path"]
            if path.removeprefix(root).startswith("/mcp/"):
                # What a mount at /mcp would pass on: the app routes on the path below its root.
                await self.mcp({**scope, "root_path": root + "/mcp"}, receive, send)
                return
        await self.app(scope, receive, send)


def build_http_app(services: Services, owners: OwnerResolver, *, direct_tool_calls: bool = True) -> ASGIApp:
    """The HTTP app: MCP at ``/mcp/``, ``/health``, ``/metrics`` and the console at ``/ui/``; its lifespan runs the MCP
    session manager. ``direct_tool_calls`` answers plain tool calls without the SDK's per-request
    session (:mod:`cluster.tool_calls`); off, every request takes the SDK's path."""
    server = build_server(services, owners)
    # Stateless mode ends a "session" on every request and the SDK logs each one at INFO.
    logging.getLogger("mcp.server.streamable_http").setLevel(logging.WARNING)
    # Stateless JSON responses: any replica can answer any request, so replicas scale freely.
    mcp_app: ASGIApp = server.streamable_http_app(
        streamable_http_path="/",
        max_request_body_size=DEFAULT_MAX_REQUEST_BODY_SIZE,
        stateless_http=True,
        json_response=True,
        # Behind Ray Serve's proxy the Host header is whatever the client dialled; owners are
        # authenticated by bearer token, not by origin.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )

    tool_calls = ToolCalls(mcp_app, server, max_body_bytes=DEFAULT_MAX_REQUEST_BODY_SIZE) if direct_tool_calls else None

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with server.session_manager.run(), tool_calls.running() if tool_calls else nullcontext():
            yield

    app = FastAPI(title="hindsight", lifespan=lifespan, docs_url=None, redoc_url=None)

    @app.get("/health")
    async def health() -> JSONResponse:
        """200 when every store answers, 503 otherwise."""
        checks = await anyio.to_thread.run_sync(services.health)
        status = 200 if all(checks.values()) else 503
        return JSONResponse({"status": "ok" if status == 200 else "unavailable", "checks": checks}, status)

    @app.get("/metrics")
    async def metrics() -> Response:
        body = await anyio.to_thread.run_sync(services.metrics.render)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    # Each of its JSON calls resolves the owner from its own bearer token (cluster/console/routes.py).
    app.include_router(console_routes(services, owners))

    mcp = BearerAuth(mcp_app if tool_calls is None else tool_calls, owners)
    # Mounted too, so that ``/mcp`` still redirects to ``/mcp/`` as before.
    app.mount("/mcp", mcp)
    if owners.development_mode:
        logger.warning("no auth tokens configured: development mode, every caller is owner %r", owners.local_owner)
    return McpFirst(app, mcp)
