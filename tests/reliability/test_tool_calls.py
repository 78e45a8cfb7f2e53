"""Plain tool calls answered without the SDK's per-request session answer what the SDK answers.

Two copies of the HTTP app over the same services run under uvicorn: one with the direct path for
tool calls (``cluster.tool_calls``, the default), one without it. Every request below is sent to
both, raw, as a client would put it on the wire, and both answers must agree: status, content type
and body. The cases cover what the direct path answers (calls that succeed, that the tool refuses,
with ``_meta``, string ids, no version header) and what it must hand to the SDK untouched (other
methods, unknown tools, notifications, batches, bad headers, bad JSON, an oversized body).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from cluster.auth import OwnerResolver
from cluster.http import build_http_app
from cluster.services import Services
from cluster.tool_calls import ToolCalls
from tests.reliability.service import uvicorn_app

pytestmark = [pytest.mark.reliability, pytest.mark.milvus]

HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": LATEST_HANDSHAKE_VERSION,
}


def call(name: str, arguments: dict[str, Any], request_id: int | str = 1, **params: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments, **params},
    }


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each request the direct path saw was answered by it (True) or handed on (False)."""
    seen: list[bool] = []
    parse = ToolCalls._parse

    def spy(self: ToolCalls, body: bytes, version: str) -> Any:
        found = parse(self, body, version)
        seen.append(found is not None)
        return found

    monkeypatch.setattr(ToolCalls, "_parse", spy)
    return seen


@pytest.fixture
def both(services: Services) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    owners = OwnerResolver({}, "local")
    with (
        uvicorn_app(build_http_app(services, owners)) as direct,
        uvicorn_app(build_http_app(services, owners, direct_tool_calls=False)) as sdk,
        httpx.Client(base_url=f"{direct}/mcp/", timeout=60) as first,
        httpx.Client(base_url=f"{sdk}/mcp/", timeout=60) as second,
    ):
        yield first, second


def answer(client: httpx.Client, body: bytes, headers: dict[str, str]) -> tuple[int, str, Any]:
    response = client.post("", content=body, headers=headers)
    kind = response.headers.get("content-type", "")
    try:
        parsed: Any = response.json()
    except ValueError:
        parsed = response.text
    return response.status_code, kind, parsed


def same(
    both: tuple[httpx.Client, httpx.Client], message: Any, headers: dict[str, str] = HEADERS, *, warm: bool = False
) -> Any:
    """Both answers to ``message``, which must agree. ``warm`` sends it once first: a query's answer
    says whether it came from the query cache, which the first one fills."""
    body = message if isinstance(message, bytes) else json.dumps(message).encode()
    if warm:
        answer(both[1], body, headers)
    direct, sdk = (answer(client, body, headers) for client in both)
    assert direct == sdk
    return direct[2]


def test_tool_calls_answer_what_the_sdk_answers(both: tuple[httpx.Client, httpx.Client], taken: list[bool]) -> None:
    write = call("memory_write", {"key": "city", "value": "Lives in Berlin", "entity": "Ana"})
    # A first write creates; sent again through either path it is a retry that changes nothing.
    first = both[0].post("", json=write, headers=HEADERS).json()
    assert first["result"]["structuredContent"]["version"] == 1
    assert same(both, write)["result"]["structuredContent"] == first["result"]["structuredContent"]
    hits = same(both, call("memory_query", {"query": "where does Ana live?", "top_k": 3}, request_id="q-1"), warm=True)
    assert hits["result"]["structuredContent"]["cached"] is True
    assert "Lives in Berlin" in hits["result"]["content"][0]["text"]
    same(both, call("memory_query", {"query": "Berlin"}, _meta={"progressToken": 7}), warm=True)
    same(both, call("memory_query", {"query": "Berlin", "owner": "someone else"}))
    same(both, call("memory_query", {"query": "Berlin", "top_k": 0}))
    same(both, call("memory_query", {}))
    refused = same(both, call("finalize_trajectory", {"trajectory_id": str(uuid.UUID(int=1)), "outcome": "success"}))
    assert refused["result"]["isError"] is True
    unversioned = {k: v for k, v in HEADERS.items() if k != "MCP-Protocol-Version"}
    same(both, call("memory_query", {"query": "Berlin"}), unversioned, warm=True)
    assert taken == [True] * 9


def test_other_requests_reach_the_sdk_untouched(both: tuple[httpx.Client, httpx.Client], taken: list[bool]) -> None:
    same(both, call("no_such_tool", {}))
    same(both, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"arguments": {}}})
    same(both, {"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
    same(both, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    same(both, [call("memory_query", {"query": "Berlin"})])
    same(both, call("memory_query", {"query": "Berlin"}, requestState="opaque"))
    same(both, b'{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": ')
    assert taken == [False] * 7
    # Headers the direct path does not take: the SDK's answers (unsupported version, media types).
    query = call("memory_query", {"query": "Berlin"})
    same(both, query, HEADERS | {"MCP-Protocol-Version": "1999-01-01"})
    same(both, query, HEADERS | {"Accept": "text/html"})
    same(both, query, HEADERS | {"Content-Type": "text/plain"})
    oversized = call("memory_write", {"key": "big", "value": "x" * (DEFAULT_MAX_REQUEST_BODY_SIZE + 1)})
    assert same(both, oversized) == "Request body too large"
    assert len(taken) == 7
