"""What memory_query serves, through the official MCP client (issue 48): nothing unrelated to fill
top_k, and with include_history a superseded version after the current one, marked as such."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client

pytestmark = [pytest.mark.anyio, pytest.mark.milvus]

FACTS = {
    "theme": "I prefer dark mode in every editor",
    "flight": "My flight to Lisbon leaves at 9am on Friday",
    "pet": "Our dog Rex is allergic to chicken",
}


async def query(client: Client, text: str, **extra: Any) -> str:
    result = await client.call_tool("memory_query", {"query": text, **extra})
    assert not result.is_error, result.content
    return result.content[0].text  # type: ignore[union-attr]


async def test_an_unrelated_query_gets_no_memory_instead_of_the_nearest_ones(client: Client) -> None:
    for key, value in FACTS.items():
        assert not (await client.call_tool("memory_write", {"key": key, "value": value})).is_error
    assert await query(client, "quantum chromodynamics lecture notes") == "No memory matches."
    related = (await query(client, "which colour scheme does the user like")).splitlines()
    assert related[0].startswith("1. [theme] I prefer dark mode")


async def test_history_puts_the_current_version_first_and_marks_the_superseded_one(client: Client) -> None:
    first = await client.call_tool("memory_write", {"key": "home", "value": "I live in Berlin near the Spree"})
    assert not first.is_error
    again = await client.call_tool("memory_write", {"key": "home", "value": "I live in Paris now"})
    assert not again.is_error
    lines = (await query(client, "Berlin Spree", include_history=True)).splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("1. [home] I live in Paris now")
    assert lines[0].endswith(", v2)")
    assert lines[1].startswith("2. [home] I live in Berlin near the Spree")
    assert lines[1].endswith(", v1, superseded)")
