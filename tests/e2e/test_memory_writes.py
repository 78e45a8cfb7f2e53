"""memory_write with memories, through the official MCP client: several memories in one call, all stored or none,
answered before they are indexed, and queries that say what they could not see yet."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client

from cluster.services import Services

pytestmark = [pytest.mark.anyio, pytest.mark.milvus]

TURNS = [
    {"key": "s1:0", "value": "I adopted a grey cat called Miso last spring", "metadata": {"session_id": "s1"}},
    {"key": "s1:1", "value": "My sister lives in Porto and teaches violin", "metadata": {"session_id": "s1"}},
    {"key": "s2:0", "value": "I switched from running to swimming for my knees", "metadata": {"session_id": "s2"}},
]


async def call(client: Client, tool: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.content[0].text, result.structured_content  # type: ignore[union-attr]


async def refused(client: Client, memories: list[Any]) -> str:
    result = await client.call_tool("memory_write", {"memories": memories})
    assert result.is_error
    return result.content[0].text  # type: ignore[union-attr]


async def test_a_batch_is_found_by_words_at_once_and_by_meaning_once_indexed(
    client: Client, services: Services
) -> None:
    memory = services.memory
    text, written = await call(client, "memory_write", {"memories": TURNS})
    assert [w["version"] for w in written["written"]] == [1, 1, 1]
    # Answered before the vectors are made, saying so; or, on a fast box, after the thread did them.
    waiting = written["unindexed"]
    assert waiting == 0 or text.endswith(
        f"{waiting} still being indexed: found by their words now, by meaning in seconds."
    )
    memory.indexing.wait()
    assert memory.unindexed("local") == 0
    text, found = await call(client, "memory_query", {"query": "which pet did I get", "top_k": 1})
    assert found["unindexed"] == 0
    assert text.startswith("1. [s1:0] I adopted a grey cat")


async def test_a_query_before_indexing_says_what_it_could_not_see(client: Client, services: Services) -> None:
    memory = services.memory
    # Hold the indexing thread: the batch stays queued as a slow or stopped process would leave it.
    block = memory.indexing
    held = memory.indexing = type(block)(lambda owner, seqs: None)
    await call(client, "memory_write", {"memories": TURNS})
    text, found = await call(client, "memory_query", {"query": "violin Porto"})
    assert found["unindexed"] == 3
    lines = text.splitlines()
    assert lines[0] == "3 memories written lately are still being indexed: found by their words only."
    assert lines[1].startswith("1. [s1:1] My sister lives in Porto")
    held.wait()
    # Whoever does the queued work next (here maintenance) makes them searchable by meaning.
    assert memory.sync_index("local") == 3
    text, found = await call(client, "memory_query", {"query": "violin Porto"})
    assert found["unindexed"] == 0
    assert text.splitlines()[0].startswith("1. [s1:1]")


async def test_sending_a_batch_again_changes_nothing(client: Client, services: Services) -> None:
    _, first = await call(client, "memory_write", {"memories": TURNS})
    _, again = await call(client, "memory_write", {"memories": TURNS})
    assert again["written"] == first["written"]
    services.memory.indexing.wait()


async def test_bad_items_are_named_and_nothing_is_stored(client: Client, services: Services) -> None:
    bad = [
        TURNS[0],
        {"key": "x", "value": "fine", "owner": "someone else"},
        {"value": "no key"},
        {"key": "s1:0", "value": "the same key again"},
    ]
    text = await refused(client, bad)
    assert "InvalidInput: 3 of 4 memories refused, none stored: memories[1]: unknown argument owner" in text
    assert "memories[2]: key" in text
    assert "memories[3]: the key 's1:0' of memories[0] again; send one per key" in text
    assert "memories[1]: Input should be a valid dictionary" in await refused(client, [TURNS[0], "not an object"])
    assert services.memory.unindexed("local") == 0
    _, found = await call(client, "memory_query", {"query": "grey cat Miso"})
    assert found["memories"] == []
    assert "at least 1" in await refused(client, [])
    both = await client.call_tool("memory_write", {"key": "k", "memories": TURNS})
    assert both.is_error
    assert "InvalidInput: key with memories: each memory carries its own" in both.content[0].text  # type: ignore[union-attr]
    neither = await client.call_tool("memory_write", {"metadata": {"speaker": "user"}})
    assert neither.is_error
    assert "key and value are required (or memories, several at once)" in neither.content[0].text  # type: ignore[union-attr]
