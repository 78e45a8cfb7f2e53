"""Connect an agent to a running hindsight over Streamable HTTP with its bearer token."""

from __future__ import annotations

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def http_client(mcp_url: str, token: str | None = None, *, timeout: float = 60.0) -> Client:
    """An official MCP client for ``mcp_url`` (e.g. ``http://127.0.0.1:8000/mcp/``); enter it with ``async with``."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Client(streamable_http_client(mcp_url, http_client=httpx2.AsyncClient(headers=headers, timeout=timeout)))
