"""Every tool refuses arguments it does not take, naming them and the ones it accepts.

Issue 15, part 7: an unknown argument (``owner``, a misspelt ``top_k``) was dropped without a word, so
a client never learnt its call did not do what it meant.
"""

from __future__ import annotations

import uuid

import pytest
from mcp import Client
from mcp_types import CallToolResult, TextContent

from cluster.tools.errors import MAX_TEXT_CHARS

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


def _text(result: CallToolResult) -> str:
    assert result.is_error
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


NODE = {
    "context_snapshot": {"goal": "import 300 products"},
    "available_actions": ["bulk_import", "add_item"],
    "chosen_action": "bulk_import",
    "execution_result": {"status": "success"},
}


async def test_many_unknown_keys_in_an_object_answer_one_short_line(client: Client) -> None:
    # 40,000 unknown keys (about 0.8 MB of arguments) answered one error per key before: about 9 MB.
    unknown = {f"extra_key_{i:05d}": i for i in range(40_000)}
    result = await client.call_tool(
        "record_trajectory_node",
        {"trajectory_id": str(uuid.uuid4()), "task": "t", "agent_id": "a", "node": {**NODE, **unknown}},
    )
    text = _text(result)
    assert len(text) <= MAX_TEXT_CHARS + 100, len(text)
    lines = text.removeprefix("Error executing tool record_trajectory_node: ").splitlines()
    assert lines == [
        "node: unknown keys extra_key_00000, extra_key_00001, extra_key_00002 and 39997 more (accepted: "
        "action_params, available_actions, chosen_action, context_snapshot, execution_result, llm_reasoning, "
        "node_id, parent_id, timestamp)"
    ]


async def test_many_unknown_arguments_are_counted_not_listed(client: Client) -> None:
    result = await client.call_tool("memory_query", {"query": "q", **{f"arg{i}": 1 for i in range(5000)}})
    text = _text(result)
    assert "unknown arguments arg0, arg1, arg10 and 4997 more (accepted: as_of, detail, entity," in text
    assert len(text) < 400, len(text)


async def test_each_argument_gets_at_most_one_line_without_values_or_links(client: Client) -> None:
    nodes = [{**NODE, "chosen_action": 7, "available_actions": [1, 2], "timestamp": "x" * 10_000} for _ in range(50)]
    result = await client.call_tool(
        "record_trajectory_nodes",
        # Any short printable name is a trajectory id (issue 48); 65 characters are one too many.
        {"trajectory_id": "t" * 65, "nodes": nodes, "task": ["a list"], "agent_id": "a"},
    )
    text = _text(result)
    lines = text.removeprefix("Error executing tool record_trajectory_nodes: ").splitlines()
    assert [line.split(":")[0] for line in lines] == ["trajectory_id", "nodes[0].timestamp", "task"], lines
    assert lines[0].startswith("trajectory_id: String should have at most 64 characters"), lines
    assert "more problems in nodes" in lines[1], lines
    assert lines[2] == "task: Input should be a valid string, got a list", lines
    assert "pydantic" not in text
    assert "xxxxxxxx" not in text  # the refused values stay with the caller
    assert len(text) <= MAX_TEXT_CHARS + 100


async def test_a_tool_body_refusal_is_one_line_too(client: Client) -> None:
    # Validated inside the tool (the memory models), not by the SDK's argument model.
    result = await client.call_tool("memory_write", {"key": "k", "value": "v", "scope": {"kind": "nowhere"}})
    text = _text(result)
    assert "pydantic" not in text
    assert text.count("\n") == 0, text
    assert "scope.kind: Input should be 'user', 'session' or 'task'" in text, text


def _first_node(**node: object) -> dict[str, object]:
    return {"trajectory_id": str(uuid.uuid4()), "task": "t", "agent_id": "a", "node": {**NODE, **node}}


@pytest.mark.parametrize(
    ("tool", "arguments", "line"),
    [
        ("memory_query", {"query": "q", "top_k": True}, "top_k: Input should be a valid integer, got a boolean"),
        ("memory_query", {"query": "q", "include_history": 1}, "include_history: Input should be a valid boolean"),
        ("memory_query", {"query": "q", "as_of": 1_700_000_000}, "as_of: Input should be an ISO 8601 date-time"),
        ("memory_query", {"query": "q", "as_of": "1700000000"}, "as_of: Input should be an ISO 8601 date-time"),
        ("memory_observe", {"session_id": "s", "text": "hi", "at": 0}, "at: Input should be an ISO 8601 date-time"),
        (
            "memory_write",
            {"key": "k", "value": "v", "ttl": {"kind": "window", "seconds": True}},
            "ttl.seconds: Input should be a valid integer, got a boolean",
        ),
        (
            "memory_write",
            {"key": "k", "value": "v", "ttl": {"kind": "window", "valid_until": 2_000_000_000}},
            "ttl.valid_until: Input should be an ISO 8601 date-time",
        ),
        ("record_trajectory_node", _first_node(timestamp=True), "node.timestamp: Input should be a valid integer"),
        ("query_experience", {"context": "c", "top_k": True}, "top_k: Input should be a valid integer"),
        ("query_experience", {"context": "c", "min_confidence": True}, "min_confidence: Input should be a valid"),
        ("query_experience", {"context": "c", "detail": "yes"}, "detail: Input should be a valid boolean"),
    ],
)
async def test_a_boolean_or_number_where_the_schema_says_otherwise_is_refused(
    client: Client, tool: str, arguments: dict[str, object], line: str
) -> None:
    text = _text(await client.call_tool(tool, arguments))
    assert line in text, text


async def test_values_of_the_declared_types_still_pass(client: Client) -> None:
    for tool, arguments in [
        ("memory_query", {"query": "q", "top_k": 3, "include_history": True, "as_of": "2026-01-05T09:00:00Z"}),
        ("memory_write", {"key": "k", "value": "v", "ttl": {"kind": "window", "seconds": 60}}),
        ("record_trajectory_node", _first_node(timestamp=1_767_600_000_000)),
        ("query_experience", {"context": "c", "top_k": 2, "min_confidence": 1, "detail": True}),
    ]:
        result = await client.call_tool(tool, arguments)
        assert not result.is_error, (tool, result.content)
