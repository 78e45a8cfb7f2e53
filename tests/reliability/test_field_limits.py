"""Every stored or queried field has a limit, and going over it is refused in one short line that
names the field, the limit and its setting (docs/reliability.md, "Limits on every field")."""

from __future__ import annotations

import uuid

import pytest
from mcp import Client
from mcp_types import TextContent

from cluster.core.errors import NotFound
from cluster.services import Services

pytestmark = pytest.mark.anyio

MB = 1_000_000
NODE = {
    "context_snapshot": {"goal": "import 300 products"},
    "available_actions": ["bulk_import", "add_item"],
    "chosen_action": "bulk_import",
    "execution_result": {"status": "success"},
}


def first_node(**node: object) -> dict[str, object]:
    return {"trajectory_id": str(uuid.uuid4()), "task": "t", "agent_id": "a", "node": {**NODE, **node}}


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"),
    [
        (
            "record_trajectory_node",
            first_node(action_params={"rows": "x" * MB}),
            "action_params is 1000011 bytes, over the limit of 8192 "
            "(setting max_node_field_bytes, HINDSIGHT_MAX_NODE_FIELD_BYTES)",
        ),
        (
            "record_trajectory_node",
            first_node(execution_result={"status": "failure", "output": "x" * MB}),
            "execution_result is 1000056 bytes, over the limit of 8192 (setting max_node_field_bytes",
        ),
        (
            "record_trajectory_node",
            first_node(context_snapshot={"goal": "x" * MB}),
            "context_snapshot is 1000011 bytes, over the limit of 2048 (setting max_context_bytes",
        ),
        (
            "query_experience",
            {"context": "x" * 1_600_000},
            "context is 1600000 bytes, over the limit of 8192 (setting max_query_bytes, HINDSIGHT_MAX_QUERY_BYTES)",
        ),
        (
            "query_experience",
            {"context_snapshot": {"goal": "x" * MB}, "available_actions": ["a"]},
            "context_snapshot is 1000011 bytes, over the limit of 2048 (setting max_context_bytes",
        ),
        ("query_experience", {"context": "c", "role": "r" * MB}, "role: String should have at most 200 characters"),
        ("query_experience", {"context": "c", "task_type": "t" * MB}, "task_type: String should have at most 200"),
        ("memory_write", {"key": "k" * MB, "value": "v"}, "key: String should have at most 200 characters"),
        ("memory_write", {"key": "k", "value": "v" * MB}, "memory value is 1000000 bytes; the limit is 16384"),
        ("memory_write", {"key": "k", "value": "v", "metadata": {"m": "x" * MB}}, "memory metadata is 1000008 bytes"),
        ("memory_query", {"query": "q" * MB}, "query: String should have at most 4000 characters"),
        ("memory_observe", {"session_id": "s", "text": "t" * MB}, "text: String should have at most 20000 characters"),
        (
            "finalize_trajectory",
            {
                "trajectory_id": str(uuid.uuid4()),
                "outcome": "success",
                "served_template_ids": [str(uuid.uuid4())] * 1001,
            },
            "served_template_ids: List should have at most 1000 items",
        ),
    ],
)
async def test_a_field_over_its_limit_is_refused_in_one_short_line(
    client: Client, services: Services, tool: str, arguments: dict[str, object], expected: str
) -> None:
    result = await client.call_tool(tool, arguments)
    assert result.is_error
    block = result.content[0]
    assert isinstance(block, TextContent)
    assert expected in block.text, block.text
    assert len(block.text) < 400, block.text
    if tool == "record_trajectory_node":
        # Refused whole: the first node's trajectory was not even opened.
        with pytest.raises(NotFound):
            services.capture.load("local", uuid.UUID(str(arguments["trajectory_id"])))


async def test_values_within_the_limits_pass(client: Client) -> None:
    for tool, arguments in [
        ("record_trajectory_node", first_node(action_params={"rows": "x" * 8000})),
        ("query_experience", {"context": "x" * 8000, "role": "r" * 200, "task_type": "t" * 200}),
    ]:
        result = await client.call_tool(tool, arguments)
        assert not result.is_error, (tool, result.content)
