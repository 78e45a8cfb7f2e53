"""Every tool refuses arguments it does not take, naming them and the ones it accepts.

Issue 15, part 7: an unknown argument (``owner``, a misspelt ``top_k``) was dropped without a word, so
a client never learnt its call did not do what it meant.
"""

from __future__ import annotations

import pytest
from mcp import Client

pytestmark = pytest.mark.anyio

SITUATION = {"context_snapshot": {"goal": "import 300 products"}, "available_actions": ["bulk_import", "add_item"]}


async def test_an_unknown_argument_is_refused_naming_it_and_what_the_tool_accepts(client: Client) -> None:
    result = await client.call_tool("query_experience", {**SITUATION, "owner": "bob", "topk": 3})
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert "unknown arguments owner, topk (accepted: available_actions, context, context_snapshot, decision," in text


async def test_every_tool_publishes_a_schema_that_forbids_other_arguments(client: Client) -> None:
    tools = (await client.list_tools()).tools
    assert len(tools) >= 9
    for tool in tools:
        assert tool.input_schema["additionalProperties"] is False, tool.name
        # Every argument refused is refused the same way, whatever the tool.
        result = await client.call_tool(tool.name, {"not_an_argument": 1})
        assert result.is_error, tool.name
        assert "unknown argument not_an_argument" in result.content[0].text, tool.name  # type: ignore[union-attr]


async def test_known_arguments_still_work(client: Client) -> None:
    result = await client.call_tool("query_experience", SITUATION)
    assert not result.is_error
