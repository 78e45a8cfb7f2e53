"""The raw log over MCP, driven by the official client: explicit remembers, state changes that
supersede, delayed promotion by maintenance, and session ends. In process first, then on Ray Serve
with the maintenance actor doing the promotion."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from ray import serve

from cluster.client import http_client
from cluster.core.types import utcnow
from cluster.memory.maintenance import run_maintenance
from cluster.net import free_port
from cluster.runner import start_service
from cluster.serve_config import AttributionConfig, HttpConfig, MaintenanceConfig, ServeConfig
from cluster.services import Services
from cluster.settings import Settings
from tests.e2e.loop import call

pytestmark = [pytest.mark.anyio, pytest.mark.milvus]

HOME = "where does the user live"


async def observe(client: Client, session_id: str, text: str, **extra: Any) -> tuple[dict[str, Any], str]:
    """``memory_observe``: the structured answer and the text a model reads."""
    result = await client.call_tool("memory_observe", {"session_id": session_id, "text": text, **extra})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content, result.content[0].text


async def values(client: Client, query: str, **extra: Any) -> list[str]:
    found = (await call(client, "memory_query", {"query": query, "top_k": 10, **extra}))["memories"]
    return [m["value"] for m in found]


async def test_an_explicit_remember_is_stored_at_once_for_good(client: Client) -> None:
    logged, text = await observe(client, "s1", "Please remember that I am allergic to peanuts")
    assert logged["reason"] == "explicit"
    assert logged["promoted"]["version"] == 1
    # Issue 48: the key was turn:<uuid>, 41 characters shown in every query line.
    assert re.fullmatch(r"allergic_peanuts-[0-9a-f]{8}", logged["key"]), logged["key"]
    short = logged["promoted"]["memory_id"].replace("-", "")[:8]
    assert text == f"Stored as [{logged['key']}] (explicit; id {short}, v1)."
    ended = await call(client, "memory_end_session", {"session_id": "s1"})
    assert ended == {"session_id": "s1", "expired": 0}
    assert await values(client, "allergies") == ["user: Please remember that I am allergic to peanuts"]


async def test_the_second_state_change_of_the_same_thing_supersedes_the_first(client: Client) -> None:
    berlin, _ = await observe(client, "s1", "I moved to Berlin")
    paris, text = await observe(client, "s1", "We moved to Paris last week")
    assert berlin["reason"] == paris["reason"] == "state_change"
    assert berlin["key"] == paris["key"] == "state:user:moved"
    assert paris["promoted"]["version"] == 2
    assert paris["promoted"]["superseded_id"] == berlin["promoted"]["memory_id"]
    assert f"replaces {berlin['promoted']['memory_id'][:8]})." in text
    assert await values(client, HOME) == ["user: We moved to Paris last week"]
    history = (await call(client, "memory_query", {"query": HOME, "include_history": True, "detail": True}))["hits"]
    states = {h["memory"]["value"]: (h["memory"]["state"], h["memory"]["version"]) for h in history}
    assert states == {"user: I moved to Berlin": ("superseded", 1), "user: We moved to Paris last week": ("current", 2)}


async def test_ending_a_session_expires_its_state_and_nothing_else(client: Client) -> None:
    await observe(client, "s1", "The build is now green")
    await observe(client, "s2", "The build is now red")
    await observe(client, "s1", "Remember that the build server is in Porto")
    ended = await client.call_tool("memory_end_session", {"session_id": "s1"})
    assert not ended.is_error
    assert ended.structured_content == {"session_id": "s1", "expired": 1}
    assert ended.content[0].text == "Session s1 ended; 1 memory expired."
    left = sorted(await values(client, "build"))
    assert left == ["user: Remember that the build server is in Porto", "user: The build is now red"]
    again = await call(client, "memory_end_session", {"session_id": "s1"})
    assert again["expired"] == 0


async def test_a_turn_a_later_session_refers_back_to_is_promoted_by_maintenance(
    client: Client, services: Services
) -> None:
    first, text = await observe(client, "s1", "My daughter Alma starts violin lessons in Porto")
    assert first["promoted"] is None
    assert text == "Logged; it stays raw until a later turn refers back to it."
    assert await values(client, "Alma violin") == []
    await observe(client, "s2", "How did Alma like her violin lessons?")
    # What the maintenance actor runs every maintenance.interval_s; here once, in process.
    summary = run_maintenance(services.memory)
    assert summary.promoted == 1
    hits = (await call(client, "memory_query", {"query": "Alma violin lessons", "detail": True}))["hits"]
    promoted = [h["memory"] for h in hits if h["memory"]["metadata"].get("promoted") == "referenced_later"]
    assert [m["value"] for m in promoted] == ["user: My daughter Alma starts violin lessons in Porto"]
    assert promoted[0]["scope"]["kind"] == "user"
    assert promoted[0]["source_ids"][0] == first["log_id"]
    # Promoted turns are long-term: closing their session keeps them.
    await call(client, "memory_end_session", {"session_id": "s1"})
    assert "user: My daughter Alma starts violin lessons in Porto" in await values(client, "Alma violin lessons")


async def test_a_retried_observe_is_logged_and_stored_once(client: Client) -> None:
    at = "2026-01-05T09:00:00Z"
    first, _ = await observe(client, "s1", "I moved to Berlin", at=at)
    again, text = await observe(client, "s1", "I moved to Berlin", at=at)
    assert again["repeated"] is True
    assert again["log_id"] == first["log_id"]
    assert again["promoted"]["memory_id"] == first["promoted"]["memory_id"]
    assert text.startswith("Already logged; nothing written again. Stored as [state:user:moved]")
    history = await values(client, "Berlin", include_history=True)
    assert history == ["user: I moved to Berlin"]


async def test_the_tools_say_their_defaults(client: Client, services: Services) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    observe_tool = tools["memory_observe"]
    assert observe_tool.description is not None
    assert "1 hour later" in observe_tool.description
    assert f"at most {services.settings.memory.max_value_bytes} bytes" in observe_tool.description
    assert observe_tool.input_schema["properties"]["speaker"]["default"] == "user"
    assert set(observe_tool.input_schema["required"]) == {"session_id", "text"}
    assert tools["memory_end_session"].input_schema["required"] == ["session_id"]


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("memory_observe", {"session_id": "", "text": "hi"}, "session_id"),
        ("memory_observe", {"session_id": "s" * 201, "text": "hi"}, "session_id"),
        ("memory_observe", {"session_id": "s1", "text": ""}, "text"),
        ("memory_observe", {"session_id": "s1", "text": "x" * 17_000}, "max_value_bytes"),
        ("memory_observe", {"session_id": "s1", "text": "hi", "speaker": "x" * 201}, "speaker"),
        ("memory_observe", {"session_id": "s1", "text": "hi\x00"}, "NUL"),
        ("memory_end_session", {"session_id": ""}, "session_id"),
        ("memory_query", {"query": "what did I buy?", "now": "last tuesday"}, "now"),
        ("memory_query", {"query": "what did I buy?", "now": "2023-13-01"}, "now"),
    ],
)
async def test_bad_calls_say_what_was_wrong(
    client: Client, tool: str, arguments: dict[str, object], message: str
) -> None:
    result = await client.call_tool(tool, arguments)
    assert result.is_error
    assert message in result.content[0].text, result.content[0].text


@pytest.mark.ray
@pytest.mark.slow
async def test_the_running_service_promotes_observed_turns_and_ends_sessions(ray_session: None, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, auth_tokens={"token-alice": "alice", "token-bob": "bob"})
    serve.shutdown()  # a Serve instance keeps its first port; this test takes a free one
    service = start_service(
        settings,
        ServeConfig(
            http=HttpConfig(port=free_port()),
            attribution=AttributionConfig(workers=0),
            maintenance=MaintenanceConfig(interval_s=0.2),
        ),
    )
    try:
        async with http_client(service.mcp_url, "token-alice") as alice:
            await observe(alice, "s1", "I moved to Berlin")
            await observe(alice, "s1", "I moved to Paris")
            assert await values(alice, HOME) == ["user: I moved to Paris"]
            earlier = (utcnow() - timedelta(days=1)).isoformat()
            await observe(alice, "s0", "My daughter Alma starts violin lessons in Porto", at=earlier)
            await observe(alice, "s1", "How did Alma like her violin lessons?")
            # The maintenance actor promotes the referenced turn on one of its next passes.
            with anyio.fail_after(60):
                while "user: My daughter Alma starts violin lessons in Porto" not in await values(alice, "Alma violin"):
                    await anyio.sleep(0.2)
            ended = await call(alice, "memory_end_session", {"session_id": "s1"})
            assert ended["expired"] == 1
            assert "user: I moved to Paris" not in await values(alice, HOME)
        async with http_client(service.mcp_url, "token-bob") as bob:
            assert await values(bob, "Alma violin") == []
    finally:
        service.stop()
        serve.shutdown()
